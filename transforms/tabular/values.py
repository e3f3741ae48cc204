"""Value rules of the tabular conversion, one value at a time (Beam-free): the definition of
how a source value becomes feature values. `columns` applies the same rules to whole Arrow
arrays, falling back to the functions here for the rows its fast path cannot decide; tests
hold the two to the same results.

* text (CSV/TSV cells): `None` is missing (an empty unquoted cell), as is one of the
  feature's `missing_tokens` (`NA`, ...); `""` is the empty string. Numbers are parsed from
  the text (ASCII whitespace around them ignored); `true`/`false` (any case) are 1/0; list
  cells are split on the feature's separator and an empty cell is the empty list.
* typed (JSON, Parquet values): `None` is missing. Types widen along bool -> int64 -> float
  -> bytes: an int64 feature takes ints and bools, a float feature also ints, a bytes/string
  feature strings and the canonical text of numbers and bools (`canonical_text`). Anything
  else (a string for a number, an object, a list for a scalar) is `wrong_type`; a scalar
  given to a list feature is a one-element list.

Floats are stored as float32; a finite value outside the float32 range is
`float_out_of_range`; NaN and infinities follow the feature's `nan` policy.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from transforms.format.example_codec import INT64_MAX, INT64_MIN
from transforms.input_formats import TABULAR_FORMATS
from transforms.records import DeadLetterError
from transforms.tabular.spec import ConversionSpec, CsvOptions, FeatureSpec
from transforms.tabular.temporal import TemporalText

__all__ = [
    "RowConverter",
    "RowError",
    "canonical_text",
    "convert_value",
    "has_escapes",
    "missing_tokens",
    "unescape",
]

_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: ASCII whitespace ignored around numbers (the same set as the vectorised path).
ASCII_WHITESPACE = " \t\n\r\f\v"
INT_PATTERN = r"[+-]?[0-9]+"
FLOAT_PATTERN = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_INT_RE = re.compile(INT_PATTERN)
_FLOAT_RE = re.compile(FLOAT_PATTERN)
BOOL_WORDS = {"true": 1, "false": 0}
NONFINITE_WORDS = {
    "nan": math.nan, "+nan": math.nan, "-nan": math.nan,
    "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
    "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
}

# Bytes that are invalid in the input encoding are carried through the CSV parser as
# the code points U+10FF00 + byte (private use, rare in real text), so a bad row reaches
# the converter (and the dead letters) instead of crashing the parser. Text is looked at
# for them only when its reader escaped some (`Chunk.escapes`): else they are characters.
# (In a work unit that also holds invalid bytes, such a character still passes for one.)
ESCAPE_BASE = 0x10FF00
ESCAPE_PATTERN = "[\U0010ff00-\U0010ffff]"
_ESCAPE_RE = re.compile(f"({ESCAPE_PATTERN}+)")


def has_escapes(text: str) -> bool:
    """Whether CSV text carries escaped invalid bytes."""
    return _ESCAPE_RE.search(text) is not None


def unescape(text: str, encoding: str) -> str | bytes:
    """The original input of escaped CSV text: the text itself when it had no invalid
    bytes, else the original bytes in `encoding`."""
    if not has_escapes(text):
        return text
    out = bytearray()
    for i, part in enumerate(_ESCAPE_RE.split(text)):
        if i % 2:
            out += bytes(ord(c) - ESCAPE_BASE for c in part)
        else:
            out += part.encode(encoding, errors="replace")
    return bytes(out)


class NumberBeyondFloat64(float):
    """A number written finite in the source but beyond float64 (a JSON `1e400`): it reads
    as infinity, yet it is `float_out_of_range` like `1e39`, never an infinity. `text` keeps
    what was written, for bytes features and split keys."""

    def __new__(cls, text: str):
        number = super().__new__(cls, float(text))
        number.text = text
        return number


class RowError(DeadLetterError):
    """A value that cannot be converted; `reason` is a stable dead-letter reason code."""

    def __init__(self, reason: str, column: str | None, message: str):
        super().__init__(reason, message, column)


# The texts of the rules that `columns` applies too (after the column's name).
INT_RANGE = "{} is outside the int64 range"
FLOAT_RANGE = "{} is outside the float32 range"
NAN_REJECTED = "{} rejected by nan: reject"
TOO_LONG = "value of {} bytes is longer than max_bytes_length {}"
NOT_IN_ENCODING = "bytes not valid in the input encoding"
NOT_UTF8 = "string value is not valid UTF-8"
NULL_ELEMENT = "null element at index {}"
NESTED = "nested {} at index {}"
MISSING_REQUIRED = "required feature {!r} is missing"


def row_error(reason: str, column: str, detail: str) -> RowError:
    """A RowError whose message names the column, then `detail`."""
    return RowError(reason, column, f"column {column!r}: {detail}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def canonical_text(value: Any) -> str | bytes:
    """The text of a typed (JSON/Parquet) value, used for split keys and for numbers in
    bytes features: strings as they are, bools as true/false, integral floats below 2**53
    without ".0" (JSON readers may widen 1 to 1.0), other floats as Python's repr (numpy
    float16/float32 values: the shortest digits of their precision, so float32 0.1 is "0.1"),
    non-finite floats as NaN/Infinity/-Infinity, None as "", date/time values (their
    `TemporalText`) in JSON quotes."""
    if value is None:
        return ""
    if isinstance(value, TemporalText):
        # Quoted, as the datetime objects they stand for were written (JSON, default=str):
        # the split keys of those values keep their split.
        return json.dumps(value)
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, NumberBeyondFloat64):
        return value.text
    if isinstance(value, np.floating):
        # The shortest text that reads back as the same number in its own precision (numpy's
        # str: float32 0.1 is "0.1"), then written as a float64 of that value is.
        value = float(str(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return repr(value)
    if isinstance(value, (list, tuple)):
        texts = [canonical_text(v) for v in value]
        return json.dumps([t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in texts],
                          ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


# ---------------------------------------------------------------------------------------
# Scalars from text (CSV cells).


def text_to_int(text: str, column: str) -> int:
    """An int64 from CSV text (see the module docstring)."""
    stripped = text.strip(ASCII_WHITESPACE)
    if _INT_RE.fullmatch(stripped):
        digits = stripped.lstrip("+-").lstrip("0") or "0"
        if len(digits) <= 19:
            value = int(stripped)
            if INT64_MIN <= value <= INT64_MAX:
                return value
        raise row_error("int_out_of_range", column, INT_RANGE.format(_show(text)))
    word = BOOL_WORDS.get(stripped.lower())
    if word is not None:
        return word
    raise row_error("invalid_int", column, f"{_show(text)} is not an integer")


def text_to_float(text: str, column: str) -> float:
    """A float64 from CSV text, before the float32 checks of `check_float`."""
    stripped = text.strip(ASCII_WHITESPACE)
    if _FLOAT_RE.fullmatch(stripped):
        value = float(stripped)
        if math.isinf(value):  # a finite number written beyond float64 (1e400): not infinity
            raise row_error("float_out_of_range", column, FLOAT_RANGE.format(_show(text)))
        return value
    lowered = stripped.lower()
    if lowered in NONFINITE_WORDS:
        return NONFINITE_WORDS[lowered]
    if lowered in BOOL_WORDS:
        return float(BOOL_WORDS[lowered])
    raise row_error("invalid_float", column, f"{_show(text)} is not a number")


def check_float(value: float, feature: FeatureSpec, column: str) -> float:
    """Applies the float32 range and NaN policy; returns the float32 value as a float."""
    if not math.isfinite(value):
        if feature.nan == "reject":
            raise row_error("nan_rejected", column, NAN_REJECTED.format(value))
        return value
    if abs(value) > _FLOAT32_MAX:
        # Values just above the largest float32 still round down to it.
        with np.errstate(over="ignore"):
            narrowed = np.float32(value)
        if not np.isfinite(narrowed):
            raise row_error("float_out_of_range", column, FLOAT_RANGE.format(repr(value)))
        return float(narrowed)
    return float(np.float32(value))


def check_bytes(value: bytes, max_length: int, column: str) -> bytes:
    if len(value) > max_length:
        raise row_error("value_too_long", column, TOO_LONG.format(len(value), max_length))
    return value


def _text_scalar(feature: FeatureSpec, text: str, column: str, max_length: int,
                 escapes: bool) -> Any:
    if escapes and has_escapes(text):
        raise row_error("invalid_encoding", column, NOT_IN_ENCODING)
    if feature.type == "int64":
        return text_to_int(text, column)
    if feature.type == "float":
        return check_float(text_to_float(text, column), feature, column)
    return check_bytes(text.encode("utf-8"), max_length, column)


# ---------------------------------------------------------------------------------------
# Scalars from typed values (JSON, Parquet).


def _wrong_type(feature: FeatureSpec, value: Any, column: str) -> RowError:
    return row_error("wrong_type", column,
                     f"{type(value).__name__} {_show(value)} cannot be a {feature.type} value")


def _typed_scalar(feature: FeatureSpec, value: Any, column: str, max_length: int) -> Any:
    kind = feature.type
    if kind == "int64":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, (int, np.integer)):
            value = int(value)
            if not INT64_MIN <= value <= INT64_MAX:
                raise row_error("int_out_of_range", column, INT_RANGE.format(value))
            return value
        raise _wrong_type(feature, value, column)
    if kind == "float":
        if isinstance(value, (bool, np.bool_)):
            return float(value)
        if isinstance(value, (int, np.integer)):
            try:
                value = float(value)
            except OverflowError:
                raise row_error("float_out_of_range", column, FLOAT_RANGE.format(value)) from None
        if isinstance(value, NumberBeyondFloat64):
            raise row_error("float_out_of_range", column, FLOAT_RANGE.format(value.text))
        if isinstance(value, (float, np.floating, decimal.Decimal)):  # Parquet decimals
            return check_float(float(value), feature, column)
        raise _wrong_type(feature, value, column)
    if isinstance(value, str):
        return check_bytes(value.encode("utf-8"), max_length, column)
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value)
        if kind == "string":
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise row_error("invalid_encoding", column, NOT_UTF8) from None
        return check_bytes(value, max_length, column)
    if isinstance(value, (bool, int, float, np.floating)):
        return check_bytes(canonical_text(value).encode("utf-8"), max_length, column)
    if isinstance(value, decimal.Decimal):  # Parquet decimals, as Arrow writes them
        return check_bytes(str(value).encode("utf-8"), max_length, column)
    raise _wrong_type(feature, value, column)


# ---------------------------------------------------------------------------------------
# Whole values.


def missing_tokens(feature: FeatureSpec, csv: CsvOptions) -> frozenset[str]:
    """The CSV cells that are missing values of `feature` (whole cells, as written): its own
    `missing_values`, else the spec's `csv: missing_values` if it holds numbers; a string
    column keeps `NA` as text (Namibia's code) unless its feature says otherwise. A quoted
    `""` holds no number: missing in a scalar int64/float feature, as an empty cell (for
    strings it is the empty string, for lists the empty list)."""
    number = feature.type in ("int64", "float")
    tokens = feature.missing_values
    if tokens is None:
        tokens = csv.missing_values if number else ()
    return frozenset(tokens) | ({""} if number and not feature.is_list else frozenset())


def convert_value(feature: FeatureSpec, value: Any, *, text: bool, max_length: int,
                  escapes: bool = False, missing: Collection[str] = frozenset()) -> list | None:
    """The feature values for one source value, or None when the value is missing.

    Applies neither `default` nor `required` (see `RowConverter`). Raises RowError.
    `escapes`: text may carry escaped invalid bytes (see `RowConverter`). `missing`: the
    feature's `missing_tokens`, for text.
    """
    column = feature.source_column
    if value is None:
        return None
    if text:
        if not isinstance(value, str):
            raise _wrong_type(feature, value, column)
        if value in missing:
            return None
        if not feature.is_list:
            return [_text_scalar(feature, value, column, max_length, escapes)]
        if value == "":
            return []
        if escapes and has_escapes(value):
            raise row_error("invalid_encoding", column, NOT_IN_ENCODING)
        return [_text_scalar(feature, part, column, max_length, escapes)
                for part in value.split(feature.separator)]
    if isinstance(value, (list, tuple, np.ndarray)):
        if not feature.is_list:
            raise _wrong_type(feature, value, column)
        out = []
        for position, item in enumerate(value):
            if item is None:
                raise row_error("wrong_type", column, NULL_ELEMENT.format(position))
            if isinstance(item, (list, tuple, dict, np.ndarray)):
                raise row_error("wrong_type", column, NESTED.format(type(item).__name__, position))
            out.append(_typed_scalar(feature, item, column, max_length))
        return out
    return [_typed_scalar(feature, value, column, max_length)]


class RowConverter:
    """Converts one row (a mapping of column name to value) to Example features.

    `source_format` says how values are read: "csv"/"tsv" rows hold text cells (str,
    None for missing), "jsonl"/"parquet" rows hold typed values (see the module
    docstring). The result feeds the Example encoders (`transforms.format.example_encoder`). The batch
    conversion (`transforms.tabular.transform.ConvertTabular`) applies exactly the same rules.
    `escapes`: the text cells come from a CSV reader that escaped invalid bytes
    (`Chunk.escapes`), so a value holding escapes is `invalid_encoding`.
    """

    def __init__(self, spec: ConversionSpec, source_format: str = "csv", *,
                 escapes: bool = False):
        if source_format not in TABULAR_FORMATS:
            raise ValueError(f"unknown source_format {source_format!r}")
        self.spec = spec
        self.text = source_format in ("csv", "tsv")
        self.escapes = escapes
        self.missing = [missing_tokens(f, spec.csv) if self.text else frozenset()
                        for f in spec.features]

    def convert(self, row: Mapping[str, Any]) -> dict[str, tuple[str, list]]:
        """{feature name: (kind, values)} for the row's present features.

        Raises RowError (reason, column, message) for the first failing feature.
        """
        out: dict[str, tuple[str, list]] = {}
        for feature, missing in zip(self.spec.features, self.missing, strict=True):
            values = convert_value(feature, row.get(feature.source_column), text=self.text,
                                   max_length=self.spec.max_bytes_length, escapes=self.escapes,
                                   missing=missing)
            if values is None and feature.default is not None:
                values = list(feature.default) if feature.is_list else [feature.default]
            elif values is None and feature.required:
                raise row_error("missing_required", feature.source_column,
                                MISSING_REQUIRED.format(feature.name))
            if values is not None:
                out[feature.name] = (feature.kind, values)
        return out
