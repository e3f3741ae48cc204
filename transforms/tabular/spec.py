"""The conversion spec: which columns become which Example features, and how.

A spec is YAML of a fixed shape (see the README, "The conversion spec"): a `features:` list
(name, column, type, list, separator, required, default, nan, unit, missing_values,
missing), `include_unlisted`, `splits`, `split_key`, `csv:` options, `max_bytes_length` and
an optional `sequence:` section. `load_spec` reads one (from a path on any Beam filesystem,
or from YAML text), `to_yaml` writes it back, and `ConversionSpec.to_feature_spec` describes
the output for consumers (`DIR/feature_spec.json`). Every validation error is a `SpecError`
naming the offending key and feature.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

import yaml

from transforms.format.example_codec import INT64_MAX, INT64_MIN
from transforms.reading.features import MASK_SUFFIX
from transforms.splits import check_split_name
from transforms.tabular.sequence_spec import (
    SequenceSpec,
    SpecError,
    check_bool,
    check_positive_int,
    reject_unknown_keys,
)

__all__ = [
    "DEFAULT_MAX_BYTES_LENGTH",
    "DEFAULT_MISSING_VALUES",
    "DURATION_UNITS",
    "FEATURE_SPEC_VERSION",
    "FEATURE_TYPES",
    "MISSING_MODES",
    "ConversionSpec",
    "CsvOptions",
    "FeatureSpec",
    "SpecError",
    "load_spec",
    "parse_spec",
]

#: The feature types a spec may name. `string` is `bytes` holding UTF-8 text.
FEATURE_TYPES = ("int64", "float", "bytes", "string")
NAN_POLICIES = ("allow", "reject")
#: How an optional scalar reads where its value is missing (the feature's `missing:` key).
MISSING_MODES = ("default", "mask")
#: The default a `missing: default` feature without one gets (written where a value is missing).
TYPE_DEFAULTS = {"int64": 0, "float": 0.0, "bytes": "", "string": ""}
#: Units of int64 features read from duration columns (Arrow's duration units).
DURATION_UNITS = ("s", "ms", "us", "ns")
DEFAULT_MAX_BYTES_LENGTH = 10 * 1024 * 1024
#: CSV cells that are missing in int64/float features unless the spec says otherwise: the
#: default missing-value markers of pandas (and R's NA), less its NaN spellings, which are
#: float NaN here. They are never numbers, so a number column holding them is still numeric.
DEFAULT_MISSING_VALUES = ("NA", "N/A", "n/a", "#N/A", "#N/A N/A", "#NA", "<NA>", "NULL", "null",
                          "None")
#: Version of the `feature_spec.json` layout written by `to_feature_spec`: 2 since shapes follow
#: from the spec alone (`missing`); readers shape version-1 outputs by their counted presence.
FEATURE_SPEC_VERSION = 2

# Example kind (the tf.train.Feature oneof) and TensorFlow dtype of each spec type.
_KIND = {"int64": "int64", "float": "float", "bytes": "bytes", "string": "bytes"}
_TF_DTYPE = {"int64": "int64", "float": "float32", "bytes": "string", "string": "string"}


def _single_char(where: str, key: str, value: Any, *, allow_none: bool = False) -> str | None:
    if value is None or value == "":
        if allow_none:
            return None
        raise SpecError(f"{where}: {key!r} must be a single character")
    if not isinstance(value, str) or len(value) != 1 or value in "\r\n":
        raise SpecError(f"{where}: {key!r} must be a single character other than a newline, "
                        f"got {value!r}")
    return value


def _missing_values(where: str, value: Any) -> tuple[str, ...]:
    """A `missing_values` list: its tokens as text (YAML reads -999 as a number)."""
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{where}: 'missing_values' must be a list of cell texts, got {value!r}")
    for token in value:
        if isinstance(token, bool) or not isinstance(token, (str, int)):
            raise SpecError(f"{where}: 'missing_values' holds {token!r}: give each token as the "
                            f"text of the cell, quoted in YAML where it reads as another value "
                            f"('null', 'true', '1.0')")
    return tuple(str(token) for token in value)


@dataclasses.dataclass(frozen=True)
class CsvOptions:
    """How CSV/TSV files are parsed (the spec's `csv:` mapping).

    Attributes:
      delimiter: field separator; None means the format's default ("," for csv, tab for tsv).
      quotechar: quote character; None disables quoting.
      header: whether the first row holds the column names.
      column_names: explicit column names. With `header: true` they replace the header
        row's names; with `header: false` they are required.
      encoding: the files' text encoding (any Python codec). Bytes invalid in it send the
        row to the dead letters (reason `invalid_encoding`).
      missing_values: cells (whole cells, as written) that are missing values in int64/float
        features; a feature's own `missing_values` replaces them.
    """

    delimiter: str | None = None
    quotechar: str | None = '"'
    header: bool = True
    column_names: tuple[str, ...] | None = None
    encoding: str = "utf-8"
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES

    _KEYS = ("delimiter", "quotechar", "header", "column_names", "encoding", "missing_values")

    def __post_init__(self):
        where = "spec: csv"
        _single_char(where, "delimiter", self.delimiter, allow_none=True)
        _single_char(where, "quotechar", self.quotechar, allow_none=True)
        if self.quotechar == "":
            object.__setattr__(self, "quotechar", None)
        if self.delimiter is not None and self.delimiter == self.quotechar:
            raise SpecError(f"{where}: delimiter and quotechar must differ")
        check_bool(where, "header", self.header)
        if self.column_names is not None:
            names = self.column_names
            if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
                raise SpecError(f"{where}: 'column_names' must be a list of non-empty strings")
            if len(set(names)) != len(names):
                raise SpecError(f"{where}: 'column_names' has duplicates: {list(names)}")
            object.__setattr__(self, "column_names", tuple(names))
        elif not self.header:
            raise SpecError(f"{where}: 'header: false' needs 'column_names'")
        if not isinstance(self.encoding, str):
            raise SpecError(f"{where}: 'encoding' must be a codec name, got {self.encoding!r}")
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise SpecError(f"{where}: unknown encoding {self.encoding!r}") from None
        object.__setattr__(self, "missing_values", _missing_values(where, self.missing_values))

    def delimiter_for(self, fmt: str) -> str:
        """The delimiter used for `fmt` ("csv" or "tsv")."""
        if self.delimiter is not None:
            return self.delimiter
        return "\t" if fmt == "tsv" else ","

    @classmethod
    def from_dict(cls, data: Any) -> CsvOptions:
        if not isinstance(data, Mapping):
            raise SpecError(f"spec: 'csv' must be a mapping, got {data!r}")
        reject_unknown_keys("spec: csv", data, cls._KEYS)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        out = {"delimiter": self.delimiter, "quotechar": self.quotechar, "header": self.header,
               "column_names": None if self.column_names is None else list(self.column_names),
               "encoding": self.encoding, "missing_values": list(self.missing_values)}
        return {key: value for key, value in out.items() if value is not None or key == "quotechar"}


# A number as YAML 1.2 (and JSON) write it. PyYAML reads YAML 1.1, whose floats need a dot, so
# `default: 1e-3` reaches the spec as the string "1e-3".
_YAML12_NUMBER = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")


def _check_default(where: str, type_: str, value: Any, nan: str) -> Any:
    """Validates a scalar default against the feature type; returns it normalised."""
    if type_ == "int64":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: 'default' must be an integer, got {value!r}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise SpecError(f"{where}: 'default' {value} is outside int64")
        return value
    if type_ == "float":
        if isinstance(value, str) and _YAML12_NUMBER.fullmatch(value):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{where}: 'default' must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value) and nan == "reject":
            raise SpecError(f"{where}: 'default' {value} contradicts 'nan: reject'")
        if math.isfinite(value):
            try:  # float32's rounding, as `values.check_float` narrows a cell's value
                struct.pack("<f", value)
            except OverflowError:
                raise SpecError(f"{where}: 'default' {value!r} is outside the float32 range "
                                f"(a cell holding it is float_out_of_range)") from None
        return value
    if not isinstance(value, str):
        raise SpecError(f"{where}: 'default' must be a string, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One output feature (an item of the spec's `features:` list).

    Attributes:
      name: the Example feature name.
      type: "int64", "float" (stored as float32), "bytes", or "string" (UTF-8 bytes).
      column: the source column; None means the same as `name`.
      is_list: the value is a list (YAML key `list`): a JSON array, a Parquet list, or a
        CSV cell split on `separator`.
      separator: splits CSV cells of list features.
      required: a missing value sends the row to the dead letters (`missing_required`).
      default: value written when the source value is missing (a list for list features);
        None means a missing value becomes an absent feature.
      nan: "allow" or "reject" NaN and infinities (float features only).
      unit: for an int64 feature read from a duration column (Parquet `duration[...]`):
        the unit its counts are in, one of `DURATION_UNITS`; a duration is never read
        without one, so `duration[ms]` 1 and `duration[s]` 1 cannot both become 1.
      missing_values: CSV cells that are missing values of this feature, whatever its type
        (replacing the spec's `csv: missing_values`); None: the csv ones for numbers only.
      missing: how an optional scalar reads where its value is missing, so its shape never
        depends on the data: "default" (its `default` is written; without one, the type's
        `TYPE_DEFAULTS` value) or "mask" (left absent; readers give the type's zero plus a
        boolean `<name>/present`). Unset, a scalar with a default is "default", any other
        optional scalar "mask"; None for required and list features (never missing / varlen).
    """

    name: str
    type: str
    column: str | None = None
    is_list: bool = False
    separator: str | None = None
    required: bool = False
    default: Any = None
    nan: str = "allow"
    unit: str | None = None
    missing_values: tuple[str, ...] | None = None
    missing: str | None = None

    _KEYS = ("name", "column", "type", "list", "separator", "required", "default", "nan", "unit",
             "missing_values", "missing")

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"spec: feature {self.name!r}: 'name' must be a non-empty string")
        where = f"spec: feature {self.name!r}"
        if self.type not in FEATURE_TYPES:
            raise SpecError(
                f"{where}: 'type' must be one of {', '.join(FEATURE_TYPES)}, got {self.type!r}"
            )
        if self.column is not None and (not isinstance(self.column, str) or not self.column):
            raise SpecError(f"{where}: 'column' must be a non-empty string")
        check_bool(where, "list", self.is_list)
        check_bool(where, "required", self.required)
        if self.separator is not None:
            if not self.is_list:
                raise SpecError(f"{where}: 'separator' is only valid with 'list: true'")
            if not isinstance(self.separator, str) or not self.separator:
                raise SpecError(f"{where}: 'separator' must be a non-empty string")
        if self.nan not in NAN_POLICIES:
            raise SpecError(f"{where}: 'nan' must be allow or reject, got {self.nan!r}")
        if self.nan != "allow" and self.type != "float":
            raise SpecError(f"{where}: 'nan' applies to float features only")
        if self.unit is not None:
            if self.unit not in DURATION_UNITS:
                raise SpecError(f"{where}: 'unit' must be one of {', '.join(DURATION_UNITS)}, "
                                f"got {self.unit!r}")
            if self.type != "int64":
                raise SpecError(f"{where}: 'unit' applies to int64 features only (durations)")
        if self.missing_values is not None:
            object.__setattr__(self, "missing_values", _missing_values(where, self.missing_values))
        if self.default is not None:
            if self.required:
                raise SpecError(f"{where}: 'required' and 'default' exclude each other")
            if self.is_list:
                if not isinstance(self.default, (list, tuple)):
                    raise SpecError(f"{where}: 'default' of a list feature must be a list")
                default = tuple(_check_default(where, self.type, v, self.nan)
                                for v in self.default)
            else:
                default = _check_default(where, self.type, self.default, self.nan)
            object.__setattr__(self, "default", default)
        self._resolve_missing(where)

    def _resolve_missing(self, where: str) -> None:
        if self.missing is not None and self.missing not in MISSING_MODES:
            raise SpecError(f"{where}: 'missing' must be default or mask, got {self.missing!r}")
        if self.is_list or self.required:
            if self.missing is not None:
                raise SpecError(f"{where}: 'missing' applies to optional scalar features only "
                                f"({'a list reads varlen' if self.is_list else 'required is never missing'})")
            return
        if self.missing == "mask" and self.default is not None:
            raise SpecError(f"{where}: 'default' and 'missing: mask' exclude each other")
        if self.missing == "default" and self.default is None:
            object.__setattr__(self, "default", TYPE_DEFAULTS[self.type])
        object.__setattr__(self, "missing", "default" if self.default is not None else "mask")

    @property
    def source_column(self) -> str:
        """The column the feature is read from."""
        return self.column if self.column is not None else self.name

    @property
    def kind(self) -> str:
        """The Example value kind: "int64", "float" or "bytes"."""
        return _KIND[self.type]

    @classmethod
    def from_dict(cls, data: Any, position: int) -> FeatureSpec:
        if not isinstance(data, Mapping):
            raise SpecError(f"spec: features[{position}] must be a mapping, got {data!r}")
        label = data.get("name", f"#{position}")
        reject_unknown_keys(f"spec: feature {label!r}", data, cls._KEYS)
        for key in ("name", "type"):
            if key not in data:
                raise SpecError(f"spec: feature {label!r} (features[{position}]): "
                                f"missing {key!r}")
        kwargs = {k: v for k, v in data.items() if k != "list"}
        kwargs["is_list"] = data.get("list", False)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.column is not None and self.column != self.name:
            out["column"] = self.column
        out["type"] = self.type
        written = {"list": self.is_list or None, "separator": self.separator,
                   "required": self.required or None,
                   "default": list(self.default) if self.is_list and self.default is not None
                   else self.default,
                   "nan": None if self.nan == "allow" else self.nan, "unit": self.unit,
                   "missing_values": None if self.missing_values is None else list(self.missing_values),
                   "missing": self.missing}
        return out | {key: value for key, value in written.items() if value is not None}

    def to_feature_spec(self) -> dict[str, Any]:
        """This feature's entry in `feature_spec.json` (see `ConversionSpec`)."""
        dtype = _TF_DTYPE[self.type]
        # Required scalars (missing -> dead letter) and `missing: default` ones (the default is
        # written) are in every Example; a `missing: mask` scalar may be absent, so it stays
        # var_len for readers that predate "missing"; lists are var_len.
        extra = {key: value for key, value in (("unit", self.unit), ("missing", self.missing))
                 if value is not None}
        if self.required or self.missing == "default":
            return {"dtype": dtype, "kind": "fixed", "shape": [], "default": self.default, **extra}
        default = list(self.default) if self.default is not None else None
        return {"dtype": dtype, "kind": "var_len", "default": default, "list": self.is_list, **extra}


@dataclasses.dataclass(frozen=True)
class ConversionSpec:
    """A whole conversion spec (see the module docstring for the YAML shape).

    Attributes:
      features: the output features, in spec order.
      include_unlisted: keep columns not named by a feature. They are added (with
        inferred types) when the job is planned, see `transforms.tabular.infer.resolve_spec`.
      splits: (name, weight) pairs, e.g. (("train", 80), ("test", 20)); empty means one
        split named "data".
      split_key: source columns whose values decide a row's split; empty means the whole row.
      csv: CSV/TSV parsing options.
      max_bytes_length: longer bytes/string values are dead-lettered (`value_too_long`).
      sequence: rows grouped into SequenceExamples instead of one Example per row (the
        `sequence:` mapping, see `transforms.tabular.sequence_spec`); None: Examples.
    """

    features: tuple[FeatureSpec, ...] = ()
    include_unlisted: bool = False
    splits: tuple[tuple[str, float], ...] = ()
    split_key: tuple[str, ...] = ()
    csv: CsvOptions = dataclasses.field(default_factory=CsvOptions)
    max_bytes_length: int = DEFAULT_MAX_BYTES_LENGTH
    sequence: SequenceSpec | None = None

    _KEYS = ("features", "include_unlisted", "splits", "split_key", "csv", "max_bytes_length",
             "sequence")

    def __post_init__(self):
        object.__setattr__(self, "features", tuple(self.features))
        names = [f.name for f in self.features]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SpecError(f"spec: features: duplicate feature names {duplicates}")
        masks = {f.name + MASK_SUFFIX for f in self.features if f.missing == "mask"}
        taken = sorted(masks & set(names))
        if taken:
            raise SpecError(f"spec: feature {taken[0]!r} is the name readers give the mask of "
                            f"'missing: mask' feature {taken[0][:-len(MASK_SUFFIX)]!r}; rename one")
        if not self.features and not self.include_unlisted:
            raise SpecError("spec: 'features' is empty and 'include_unlisted' is false: "
                            "nothing would be converted")
        check_bool("spec", "include_unlisted", self.include_unlisted)
        if isinstance(self.splits, Mapping):
            object.__setattr__(self, "splits", tuple(self.splits.items()))
        for name, weight in self.splits:
            try:
                check_split_name(name)
            except ValueError as error:
                raise SpecError(f"spec: splits: {error}") from None
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
                raise SpecError(f"spec: splits: split {name!r} needs a positive weight, "
                                f"got {weight!r}")
        if isinstance(self.split_key, str):
            object.__setattr__(self, "split_key", (self.split_key,))
        object.__setattr__(self, "split_key", tuple(self.split_key))
        if not all(isinstance(c, str) and c for c in self.split_key):
            raise SpecError(f"spec: 'split_key' must be a list of column names, "
                            f"got {list(self.split_key)}")
        if self.split_key and not self.splits:
            raise SpecError("spec: 'split_key' is given but 'splits' is not")
        check_positive_int("spec", "max_bytes_length", self.max_bytes_length)
        if self.sequence is not None:
            if self.split_key:
                raise SpecError("spec: 'split_key' does not apply with 'sequence': a sequence's "
                                "split is decided by its 'group_by' key")
            self.sequence.check_features(self.features, self.include_unlisted)

    @property
    def split_names(self) -> tuple[str, ...]:
        """The declared split names, in order; empty when there are no splits."""
        return tuple(name for name, _ in self.splits)

    @property
    def split_weights(self) -> dict[str, float]:
        return dict(self.splits)

    @property
    def source_columns(self) -> tuple[str, ...]:
        """Columns the features read, in first-use order, without duplicates."""
        return tuple(dict.fromkeys(f.source_column for f in self.features))

    def feature(self, name: str) -> FeatureSpec:
        for feature in self.features:
            if feature.name == name:
                return feature
        raise KeyError(name)

    @classmethod
    def from_dict(cls, data: Any) -> ConversionSpec:
        """Builds a spec from parsed YAML/JSON; raises SpecError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise SpecError(f"spec: expected a mapping at the top level, got {type(data).__name__}")
        reject_unknown_keys("spec", data, cls._KEYS)
        features = data.get("features") or []
        if not isinstance(features, list):
            raise SpecError("spec: 'features' must be a list of mappings")
        kwargs: dict[str, Any] = {
            "features": tuple(FeatureSpec.from_dict(f, i) for i, f in enumerate(features)),
        }
        kwargs.update((key, data[key]) for key in ("include_unlisted", "max_bytes_length") if key in data)
        splits = data.get("splits")
        if splits is not None:
            if not isinstance(splits, Mapping):
                raise SpecError("spec: 'splits' must be a mapping of split name to weight, "
                                "e.g. {train: 80, test: 20}")
            kwargs["splits"] = tuple(splits.items())
        split_key = data.get("split_key")
        if split_key is not None:
            if not isinstance(split_key, (str, list)):  # one column may be given as a string
                raise SpecError("spec: 'split_key' must be a list of column names")
            kwargs["split_key"] = split_key
        if data.get("csv") is not None:
            kwargs["csv"] = CsvOptions.from_dict(data["csv"])
        if data.get("sequence") is not None:
            kwargs["sequence"] = SequenceSpec.from_dict(data["sequence"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out = {"features": [f.to_dict() for f in self.features],
               "include_unlisted": self.include_unlisted, "splits": dict(self.splits) or None,
               "split_key": list(self.split_key) or None, "csv": self.csv.to_dict(),
               "max_bytes_length": self.max_bytes_length,
               "sequence": None if self.sequence is None else self.sequence.to_dict()}
        return {key: value for key, value in out.items() if value is not None}

    def to_yaml(self) -> str:
        """The spec as YAML of the documented shape; `parse_spec` reads it back equal."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True,
                              default_flow_style=False, width=100)

    def to_feature_spec(self) -> dict[str, Any]:
        """The content of `DIR/feature_spec.json`.

        {"version": 2, "features": {NAME: ENTRY, ...}} where ENTRY is either
          {"dtype": D, "kind": "fixed", "shape": [], "default": V}   # always present
          {"dtype": D, "kind": "var_len", "default": V-or-null}      # may be absent / a list
        D is "int64", "float32" or "string" (tf.as_dtype names). A fixed feature with
        "default": null is required (present in every Example). A var_len entry says whether
        the feature is a list ("list"). An optional scalar names its "missing": "default"
        (fixed, the default written) or "mask" (var_len on the wire; readers give a scalar and
        `<name>/present`, see `transforms.reading.features`). An
        int64 read from durations names its "unit". The commit adds to each
        entry the "presence" counted in the records written (see `transforms.stats.presence`):
        {"records": R, "of": N, "min_values": a, "max_values": b}: counts, not shapes.
        With a `sequence:` section it is `SequenceSpec.feature_spec` instead.
        """
        if self.sequence is not None:
            return self.sequence.feature_spec(self.features, FEATURE_SPEC_VERSION)
        return {
            "version": FEATURE_SPEC_VERSION,
            "features": {f.name: f.to_feature_spec() for f in self.features},
        }

    def feature_spec_json(self) -> bytes:
        """`to_feature_spec` serialized, as written to `DIR/feature_spec.json`."""
        return (json.dumps(self.to_feature_spec(), indent=2, sort_keys=True) + "\n").encode()


def _yaml_document(text: str, source: str | None = None) -> Any:
    """The YAML document in `text`. A syntax error is one line saying where and what
    (`spec.yaml:3:1: found character...`): PyYAML's own message runs on for lines, quoting
    the text and pointing at the column."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(str(error.problem or error.context or "syntax error").split())
        if mark is None:
            raise SpecError(f"{source or 'spec'}: not valid YAML: {problem}") from None
        if source:
            raise SpecError(f"{source}:{mark.line + 1}:{mark.column + 1}: {problem}") from None
        raise SpecError(f"spec: not valid YAML at line {mark.line + 1}, column {mark.column + 1}: "
                        f"{problem}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{source or 'spec'}: not valid YAML: {' '.join(str(error).split())}") from None


def parse_spec(text: str) -> ConversionSpec:
    """Parses spec YAML text."""
    return ConversionSpec.from_dict(_yaml_document(text))


def load_spec(path_or_text: str) -> ConversionSpec:
    """Loads a spec from a path on any Beam filesystem, or from YAML text.

    A string containing a newline or starting with "{" is taken as YAML text; anything
    else is a path.
    """
    text = path_or_text
    if "\n" not in text and not text.lstrip().startswith("{"):
        from apache_beam.io.filesystems import FileSystems

        try:
            with FileSystems.open(path_or_text) as f:
                text = f.read().decode("utf-8")
        except Exception as e:  # noqa: BLE001 - re-raised naming the file
            raise SpecError(f"cannot read spec {path_or_text!r}: {e}") from e
        data = _yaml_document(text, source=path_or_text)
        try:
            return ConversionSpec.from_dict(data)
        except SpecError as e:
            raise SpecError(f"{path_or_text}: {e}") from None
    return parse_spec(text)
