"""Type inference from a sample, spec resolution, and the --dry-run output estimate.

Inference reads the first `sample_rows` rows of the first work units and gives every column
the narrowest type that holds all its sampled values, along int64 -> float -> bytes as TFX
does: CSV/TSV from the text (by the value rules of `values`; integers beyond int64 are
string, and cells that are the csv `missing_values` are left out), JSON Lines from the
parsed values (a column holding arrays is a list of the widest element type; objects or
nested arrays are skipped, logged), Parquet from the schema. Every inferred scalar is
`missing: mask` (see `FeatureSpec.missing`). Beam-free apart from FileSystems.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import io
import logging
import math
import zlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, closing
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.format.compression import open_compressor, parse_compression
from transforms.format.example_codec import INT64_MAX, INT64_MIN
from transforms.format.tfrecord_format import frame_records, framed_size
from transforms.input_formats import TABULAR_FORMATS
from transforms.records import WorkUnit
from transforms.tabular.chunks import Chunk, open_input
from transforms.tabular.convert import convert_chunk, split_assigner
from transforms.tabular.json_reader import JsonLineError, parse_json_line
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import (
    DURATION_UNITS,
    ConversionSpec,
    CsvOptions,
    FeatureSpec,
    SpecError,
)
from transforms.tabular.values import RowError, has_escapes, text_to_float, text_to_int

__all__ = [
    "DEFAULT_SAMPLE_ROWS",
    "OutputEstimate",
    "estimate_output",
    "infer_spec",
    "resolve_spec",
]

_LOG = logging.getLogger("tfrecord_pipeline")
DEFAULT_SAMPLE_ROWS = 10_000
_DEFAULT_MAX_SHARD_BYTES = 200 * 2**20
_RANK = {"int64": 0, "float": 1, "bytes": 2, "string": 2}


# ---------------------------------------------------------------------------------------
# Samples.


@dataclasses.dataclass
class _Column:
    """What the sample says about one column."""

    name: str
    type: str | None = None  # None: no value seen yet
    is_list: bool = False
    unsupported: str | None = None  # why the column cannot be a feature
    unit: str | None = None  # a duration column's finest unit: its counts keep every value


def _widen(current: str | None, new: str) -> str:
    if current is None:
        return new
    if {current, new} == {"bytes", "string"}:
        return "bytes"
    return current if _RANK[current] >= _RANK[new] else new


def _text_type(value: str) -> str:
    try:
        text_to_int(value, "")
        return "int64"
    except RowError as error:
        if error.reason == "int_out_of_range":  # an id beyond int64: text keeps every digit
            return "string"
    try:
        text_to_float(value, "")
        return "float"
    except RowError:
        return "string"


def _python_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "int64"
    if isinstance(value, int):
        # Beyond int64 (ids such as 2**63): a string keeps every digit, as TFX infers.
        return "int64" if INT64_MIN <= value <= INT64_MAX else "string"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return None


#: The feature type of Arrow types, the first whose test holds.
_ARROW_TYPES = (
    ("int64", (pa.types.is_integer, pa.types.is_boolean)),
    ("float", (pa.types.is_floating, pa.types.is_decimal)),
    ("string", (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view,
                pa.types.is_temporal, pa.types.is_null)),
    ("bytes", (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view,
               pa.types.is_fixed_size_binary)),
)


def _arrow_type(t: pa.DataType) -> str | None:
    t = t.value_type if pa.types.is_dictionary(t) else t
    return next((kind for kind, tests in _ARROW_TYPES if any(test(t) for test in tests)), None)


class _Sample:
    """Columns in first-seen order and what their sampled values say."""

    def __init__(self):
        self.columns: dict[str, _Column] = {}
        self.rows = 0
        self.complete = False  # every row of every unit was read
        self.unreadable: list[str] = []  # why each unit that could not be read was not

    def column(self, name: str) -> _Column:
        if name not in self.columns:
            self.columns[name] = _Column(name)
        return self.columns[name]

    def add_text(self, name: str, values: Iterable[str | None], escapes: bool,
                 missing: Collection[str]) -> None:
        """`escapes`: the reader escaped invalid bytes (`Chunk.escapes`), whose cells say
        nothing of the column's type; nor do `missing` tokens (missing in number columns)."""
        column = self.column(name)
        for value in values:
            # "" (a quoted empty cell) fits every type: missing in a number column.
            if value and not (escapes and has_escapes(value)):
                kind = _text_type(value)
                if kind != "string" or value not in missing:
                    column.type = _widen(column.type, kind)

    def add_python(self, name: str, value: Any) -> None:
        column = self.column(name)
        if value is None or column.unsupported:
            return
        column.is_list |= isinstance(value, list)
        for item in value if isinstance(value, list) else [value]:
            if item is None:
                continue
            kind = _python_type(item)
            if kind is None:
                column.unsupported = f"holds {type(item).__name__} values"
                return
            column.type = _widen(column.type, kind)

    def add_arrow_field(self, field: pa.Field) -> None:
        column = self.column(field.name)
        t = field.type
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            column.is_list = True
            t = t.value_type
        if pa.types.is_duration(t):  # int64 counts in a named unit (recorded in the spec)
            column.type = "int64"
            units = [u for u in DURATION_UNITS if u in (column.unit, t.unit)]
            column.unit = units[-1]
            return
        kind = _arrow_type(t)
        if kind is None:
            column.unsupported = f"has Arrow type {field.type}"
        else:
            column.type = kind


def _csv_for(fmt: str, csv: CsvOptions) -> CsvOptions:
    """`csv` with TSV's tab as the delimiter where it names none."""
    return dataclasses.replace(csv, delimiter="\t") if fmt == "tsv" and csv.delimiter is None else csv


def _sample(units: Sequence[WorkUnit], fmt: str, csv: CsvOptions | None,
            sample_rows: int) -> _Sample:
    if fmt not in TABULAR_FORMATS:
        raise ValueError(f"unknown tabular format {fmt!r}")
    sample = _Sample()
    for unit in units:
        if sample.rows >= sample_rows:
            break
        try:
            _sample_unit(sample, unit, fmt, csv, sample_rows)
        except Exception as error:  # noqa: BLE001 - the conversion dead-letters the file
            sample.unreadable.append(_unreadable(unit.path, fmt, error))
    else:
        sample.complete = not sample.unreadable and sample.rows < sample_rows
    return sample


def _unreadable(path: str, fmt: str, error: Exception) -> str:
    """Why the file at `path` could not be sampled, in one line naming it."""
    text = " ".join(str(error).split())
    if fmt == "parquet":
        return f"{path} is not a readable Parquet file: {text}"
    return text if path in text else f"cannot read {path}: {type(error).__name__}: {text}"


def _warn_unreadable(reasons: list[str]) -> None:
    for reason in reasons:  # the conversion dead-letters these files
        _LOG.warning("not sampling: %s", reason)


def _sample_unit(sample: _Sample, unit: WorkUnit, fmt: str, csv: CsvOptions | None,
                 sample_rows: int) -> None:
    if fmt in ("csv", "tsv"):
        spec = ConversionSpec(features=(), include_unlisted=True, csv=csv or CsvOptions())
        # Closed on leaving, not whenever the garbage collector gets to it: the file with it.
        with closing(read_chunks(unit, fmt, spec, min(sample_rows, 65536))) as chunks:
            for chunk in chunks:
                take = min(chunk.num_rows, sample_rows - sample.rows)
                for name, values in chunk.columns.items():
                    sample.add_text(name, values.slice(0, take).to_pylist(), chunk.escapes,
                                    spec.csv.missing_values)
                sample.rows += take + len(chunk.failures)
                if sample.rows >= sample_rows:
                    return
    elif fmt == "jsonl":
        for obj in _json_objects(unit.path, sample_rows - sample.rows):
            for name, value in obj.items():
                sample.add_python(name, value)
            sample.rows += 1
    else:
        with FileSystems.open(unit.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            parquet = pq.ParquetFile(f)
            for field in parquet.schema_arrow:
                sample.add_arrow_field(field)
            sample.rows += (unit.extra or {}).get("rows", parquet.metadata.num_rows)


def _json_objects(path: str, limit: int) -> Iterator[dict]:
    with ExitStack() as stack:
        stream = open_input(path, stack)
        count = 0
        for line in stream:
            if count >= limit:
                return
            if not line.strip():
                continue
            try:
                obj = parse_json_line(line.strip())
            except JsonLineError:
                continue  # the conversion dead-letters the line
            count += 1
            yield obj


def _features(sample: _Sample, skip: Iterable[str] = ()) -> list[FeatureSpec]:
    skip = set(skip)
    features = []
    for column in sample.columns.values():
        if column.name in skip:
            continue
        if not column.name:
            _LOG.warning("skipping a column without a name")
            continue
        if column.unsupported:
            _LOG.warning("skipping column %r: it %s", column.name, column.unsupported)
            continue
        # A sampled column may hold a missing value anywhere: a scalar reads as a value plus
        # `<name>/present` in every reader, whatever the data, and spec.yaml says so.
        features.append(FeatureSpec(name=column.name, type=column.type or "string",
                                    is_list=column.is_list, unit=column.unit,
                                    missing=None if column.is_list else "mask"))
    return features


def infer_spec(units: Sequence[WorkUnit], fmt: str, *, csv: CsvOptions | None = None,
               splits: Sequence[tuple[str, float]] = (), split_key: Sequence[str] = (),
               sample_rows: int = DEFAULT_SAMPLE_ROWS) -> ConversionSpec:
    """A spec with one feature per column found in the sample (see module docstring)."""
    csv = _csv_for(fmt, csv or CsvOptions())
    sample = _sample(units, fmt, csv, sample_rows)
    if sample.unreadable and not sample.columns:
        # The first file's cause: that 0 rows were sampled is not what is wrong.
        more = len(sample.unreadable) - 1
        raise SpecError(sample.unreadable[0] + (f" (and {more} more unreadable files)" if more else ""))
    _warn_unreadable(sample.unreadable)
    features = _features(sample)
    if not features and units and not sample.rows and not sample.unreadable:
        paths = list(dict.fromkeys(unit.path for unit in units))
        files = (f"{paths[0]} has" if len(paths) == 1
                 else f"the {len(paths)} input files ({paths[0]}, ...) have")
        raise SpecError(f"{files} no data rows: there are no values to infer the column types "
                        f"from; give a spec with --spec to convert to an empty output")
    if not features:
        raise SpecError(f"no convertible column found in the first {sample.rows} rows of the "
                        f"input; give a spec with --spec")
    spec = ConversionSpec(features=tuple(features), splits=tuple(splits),
                          split_key=tuple(split_key), csv=csv)
    _check_columns(spec, sample, fmt)
    return spec


#: Rows read to check that a given spec's columns exist (see `resolve_spec`).
_COLUMN_CHECK_ROWS = 200


def resolve_spec(units: Sequence[WorkUnit], fmt: str, spec: ConversionSpec | None = None, *,
                 sample_rows: int = DEFAULT_SAMPLE_ROWS) -> ConversionSpec:
    """The spec to convert with: inferred when `spec` is None; with `include_unlisted`,
    the spec plus an inferred feature for every sampled column it does not read (the
    result lists them and has include_unlisted false). Checks that split_key and required
    columns exist in the sample. Raises SpecError."""
    if spec is None:
        return infer_spec(units, fmt, sample_rows=sample_rows)
    csv = _csv_for(fmt, spec.csv)
    # A complete spec needs the sample only to see which columns exist; typing every cell
    # of a full sample would cost seconds on wide tables for nothing.
    rows = sample_rows if spec.include_unlisted else min(sample_rows, _COLUMN_CHECK_ROWS)
    sample = _sample(units, fmt, csv, rows)
    _warn_unreadable(sample.unreadable)
    if spec.include_unlisted:
        used = {f.source_column for f in spec.features} | {f.name for f in spec.features}
        extra = _features(sample, skip=used)
        spec = dataclasses.replace(spec, features=spec.features + tuple(extra),
                                   include_unlisted=False)
    spec = dataclasses.replace(spec, csv=csv)
    _check_columns(spec, sample, fmt)
    return spec


def _check_columns(spec: ConversionSpec, sample: _Sample, fmt: str) -> None:
    """Refuses a spec naming a column the input does not have (with a did-you-mean), so a
    misspelled column never turns into a feature that is silently absent everywhere.

    CSV headers and Parquet schemas name every column of the files read; JSON Lines only
    shows the keys of the lines sampled, so there a column is refused only when the whole
    input was sampled, and otherwise named in a warning.
    """
    if not sample.columns:
        return
    known = list(sample.columns)

    def absent(column: str) -> str:
        close = difflib.get_close_matches(column, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"is not in the input ({hint}columns: {known})"

    for column in spec.split_key:
        if column not in sample.columns:
            raise SpecError(f"spec: split_key column {column!r} {absent(column)}")
    for feature in spec.features:
        column = feature.source_column
        if column in sample.columns:
            continue
        message = (f"spec: feature {feature.name!r}: {'required ' if feature.required else ''}"
                   f"column {column!r} {absent(column)}")
        if feature.required or fmt != "jsonl" or sample.complete:
            raise SpecError(message)
        _LOG.warning("%s in the %d lines sampled", message, sample.rows)


# ---------------------------------------------------------------------------------------
# Output estimate.


@dataclasses.dataclass(frozen=True)
class OutputEstimate:
    """What --dry-run reports: an estimate from converting the sample.

    Attributes:
      rows: estimated input rows in total; `rows_exact`: counted (every file read to its
        end, or Parquet metadata); `exact`: the whole input was sampled, every figure exact.
      bytes_per_example: mean framed size of a sampled record, uncompressed.
      compression_ratio: compressed / uncompressed size of the sampled records.
      shards: estimated shard count per split (every work unit writes its own shards).
    """

    sampled_rows: int
    rows: int
    rows_exact: bool
    exact: bool
    dead_letter_rate: float
    bytes_per_example: float
    compression_ratio: float
    output_bytes: int
    shards: dict[str, int]

    @property
    def num_shards(self) -> int:
        return sum(self.shards.values())

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["num_shards"] = self.num_shards
        return out


def _uncompressed_size(unit: WorkUnit) -> float:
    size = float(unit.size)
    if not unit.path.endswith(".gz") or not size:
        return size
    # Measure the ratio on the head of the file.
    with FileSystems.open(unit.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        head = f.read(1 << 20)
    inflater = zlib.decompressobj(wbits=31)
    try:
        inflated = len(inflater.decompress(head, 64 << 20))
    except zlib.error:
        return size
    return size * inflated / max(len(head) - len(inflater.unconsumed_tail), 1)


def _chunk_input_bytes(chunk: Chunk) -> float:
    """Approximate text bytes of a chunk's rows (for CSV and JSON Lines estimates)."""
    total = float(chunk.num_rows)  # newlines
    if chunk.mode == "text":
        for values in chunk.columns.values():
            total += pc.sum(pc.binary_length(values)).as_py() or 0
            total += chunk.num_rows  # delimiters
    else:
        total += sum(len(chunk.raw(i) or b"") for i in range(chunk.num_rows))
    for failure in chunk.failures:
        total += len(failure.raw or b"") + 1
    return total


def estimate_output(units: Sequence[WorkUnit], spec: ConversionSpec, fmt: str,
                    sample_rows: int = DEFAULT_SAMPLE_ROWS, *,
                    max_shard_bytes: int | None = None, num_shards: int | None = None,
                    compression: str = "none", compression_level: int | None = None
                    ) -> OutputEstimate:
    """Converts the first `sample_rows` rows and extrapolates rows, bytes and shards.

    Rows: Parquet row counts come from the metadata; CSV/JSON Lines files read to the
    end are counted, the others are estimated from their (uncompressed) size and the
    sample's bytes per row. Shards: `num_shards` per split, else per work unit with rows of
    the split (each writes its own), its estimated bytes over `max_shard_bytes` (default
    200 MiB), at least one.
    """
    assigner = split_assigner(spec)
    whole_row = not spec.split_key and len(assigner.names) > 1
    batch_rows = max(1, min(sample_rows, 65536))
    sampled = dead = payload_bytes = 0
    records: list[bytes] = []
    per_split: collections.Counter = collections.Counter()
    counted_rows, counted_bytes = 0, 0.0  # rows and text bytes of the units read
    estimated_rows = 0.0  # rows of units not read to the end
    pending: list[WorkUnit] = []  # units not read at all
    for unit in units:
        if sampled >= sample_rows:
            pending.append(unit)
            continue
        unit_rows, unit_bytes, complete = 0, 0.0, True
        try:
            # Closed when the sample is taken (see `_sample_unit`).
            with closing(read_chunks(unit, fmt, spec, batch_rows, whole_row=whole_row)) as chunks:
                for chunk in chunks:
                    result = convert_chunk(chunk, spec, assigner, unit)
                    unit_rows += result.rows
                    if fmt != "parquet":
                        unit_bytes += _chunk_input_bytes(chunk)
                    for batch in result.batches:
                        dead += len(batch.dead_letters)
                        sizes = sum(framed_size(len(r)) for r in batch.records)
                        per_split[batch.split] += sizes
                        payload_bytes += sizes
                        if len(records) < 20000:
                            records.extend(batch.records)
                    if sampled + unit_rows >= sample_rows:
                        complete = False
                        break
        except Exception:  # noqa: BLE001 - an unreadable file is one dead letter
            unit_rows, dead = unit_rows + 1, dead + 1
        sampled += unit_rows
        counted_bytes += unit_bytes
        if complete or fmt == "parquet":
            counted_rows += unit_rows
        elif unit_bytes:
            estimated_rows += unit_rows * _uncompressed_size(unit) / unit_bytes
    if fmt == "parquet":
        rows = sum((u.extra or {}).get("rows", 0) for u in units)
        rows_exact = all("rows" in (u.extra or {}) for u in units)
        exact = rows_exact and sampled == rows and not pending
    else:
        per_row = counted_bytes / sampled if sampled else 0.0
        if per_row:
            estimated_rows += sum(_uncompressed_size(u) for u in pending) / per_row
        rows_exact = exact = estimated_rows == 0 and not pending
        rows = counted_rows + int(round(estimated_rows))
    written = sampled - dead
    bytes_per_example = payload_bytes / written if written else 0.0
    ratio = _compression_ratio(records, compression, compression_level)
    rate = dead / sampled if sampled else 0.0
    output_bytes = int(round(rows * (1 - rate) * bytes_per_example * ratio))
    names = list(assigner.names)
    total = sum(per_split.values())
    cap = max_shard_bytes or _DEFAULT_MAX_SHARD_BYTES
    shards = {}
    for name in names:
        share = per_split[name] / total if total else 1 / len(names)
        # Each work unit with rows of the split writes its own shards, rolled at the cap.
        units_with_rows = max(1, len(units)) if share else 1
        per_unit = output_bytes * share / units_with_rows
        shards[name] = num_shards or units_with_rows * max(1, math.ceil(per_unit / cap))
    return OutputEstimate(sampled_rows=sampled, rows=rows, rows_exact=rows_exact, exact=exact,
                          dead_letter_rate=rate,
                          bytes_per_example=bytes_per_example, compression_ratio=ratio,
                          output_bytes=output_bytes, shards=shards)


def _compression_ratio(records: Sequence[bytes], compression: str, level: int | None) -> float:
    codec = parse_compression(compression)
    if codec.value == "none" or not records:
        return 1.0
    framed = frame_records(records)
    sink = io.BytesIO()
    writer = open_compressor(sink, codec, level)
    writer.write(framed)
    writer.close()
    return len(sink.getvalue()) / len(framed)
