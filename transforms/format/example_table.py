"""Decoded Example batches as Arrow tables of a fixed schema, and the schema itself: read from
`feature_spec.json` entries or learnt from the records (`SchemaLearner`). Beam-free.

Conversions (the README's "Export back to Parquet"): int64 -> int64, float -> float32, bytes ->
binary, or UTF-8 `string` where the column is known to be text (a spec `string`: `text`;
TFRecord has no text type); a list column where the feature may hold several values. A scalar
column is null where the record lacks the feature or holds no value; a list column is null
where the record lacks it and an empty list where it holds none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.format.example_decoder import DecodedBatch, DecodedColumn

__all__ = ["ColumnSchema", "SchemaLearner", "SchemaMismatch", "arrow_schema", "batch_to_table",
           "column_from_feature_spec"]

_ARROW_TYPES = {"int64": pa.int64(), "float": pa.float32(), "bytes": pa.binary(), None: pa.null()}
_NUMPY_TYPES = {"int64": np.int64, "float": np.float32}
#: feature_spec.json dtypes (tf.as_dtype names) -> tf.train.Feature kinds.
_KIND_OF_DTYPE = {"int64": "int64", "float32": "float", "string": "bytes"}


class SchemaMismatch(ValueError):
    """A record does not fit the schema (a feature of another kind, several values in a
    scalar column, a feature the schema lacks). `index`: the record's index in the batch."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index

    def __reduce__(self):
        return (type(self), (self.index, str(self)))


@dataclasses.dataclass(frozen=True)
class ColumnSchema:
    """One output column: the feature, its kind (None: never seen with values) and whether
    it is a list column (`is_list` None: not known yet, to be learnt from the records);
    `text`: its bytes are UTF-8 text (Arrow `string`, not `binary`)."""

    name: str
    kind: str | None
    is_list: bool | None
    text: bool = False

    @property
    def arrow_type(self) -> pa.DataType:
        value_type = pa.string() if self.text else _ARROW_TYPES[self.kind]
        return pa.list_(value_type) if self.is_list else value_type


def column_from_feature_spec(name: str, entry: Mapping[str, Any]) -> ColumnSchema:
    """The column of one `feature_spec.json` entry. A "var_len" entry says nothing of lists
    unless it has a list default (or an explicit "list"/"shape"): `is_list` is None then."""
    dtype = entry.get("dtype")
    if dtype not in _KIND_OF_DTYPE:
        raise ValueError(f"feature {name!r}: unknown dtype {dtype!r} in feature_spec.json")
    if "list" in entry:
        is_list: bool | None = bool(entry["list"])
    elif entry.get("shape"):
        is_list = True
    elif entry.get("kind") == "fixed" or isinstance(entry.get("default"), list):
        is_list = entry.get("kind") != "fixed"
    else:
        presence = entry.get("presence")
        is_list = (presence["max_values"] > 1 if isinstance(presence, Mapping)
                   and isinstance(presence.get("max_values"), int) else None)
    return ColumnSchema(name, _KIND_OF_DTYPE[dtype], is_list)


def arrow_schema(columns: Iterable[ColumnSchema]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.arrow_type) for c in columns])


class SchemaLearner:
    """Learns the columns of records batch by batch: each feature's kind, and whether any
    record holds more than one value of it (a list column). Memory: a few numbers per
    feature, whatever the number of records."""

    def __init__(self):
        self._kinds: dict[str, str | None] = {}
        self._max_values: dict[str, int] = {}

    def add(self, batch: DecodedBatch) -> None:
        """Raises SchemaMismatch when a feature's kind differs from earlier batches."""
        for name, column in batch.columns.items():
            known = self._kinds.get(name)
            if known is not None and column.kind is not None and column.kind != known:
                raise SchemaMismatch(_first_with_values(column),
                                     f"feature {name!r} holds {column.kind} values here and "
                                     f"{known} values in earlier records")
            if known is None:
                self._kinds[name] = column.kind
            counts = column.counts
            most = int(counts.max()) if counts.size else 0
            self._max_values[name] = max(self._max_values.get(name, 0), most)

    def columns(self) -> list[ColumnSchema]:
        """The learnt columns, sorted by name (UTF-8 bytes, the order of Example features)."""
        return [ColumnSchema(name, self._kinds[name], self._max_values[name] > 1)
                for name in sorted(self._kinds, key=lambda n: n.encode("utf-8"))]

    def is_list(self, name: str) -> bool | None:
        """Whether `name` needs a list column (None: never seen)."""
        return None if name not in self._max_values else self._max_values[name] > 1


def _first_with_values(column: DecodedColumn) -> int:
    with_values = np.flatnonzero(column.counts)
    return int(with_values[0]) if with_values.size else int(np.flatnonzero(column.present)[0])


def batch_to_table(batch: DecodedBatch, columns: list[ColumnSchema]) -> pa.Table:
    """The batch as a table of `columns` (each with a known `is_list`), in their order. Raises
    SchemaMismatch when a record holds a feature `columns` lack, values of another kind, or
    several values of a scalar column."""
    wanted = {c.name for c in columns}
    for name, column in batch.columns.items():
        if name not in wanted:
            raise SchemaMismatch(int(np.flatnonzero(column.present)[0]),
                                 f"feature {name!r} is not in the schema")
    arrays = []
    for schema in columns:
        column = batch.columns.get(schema.name)
        if column is None:
            arrays.append(pa.nulls(batch.num_rows, schema.arrow_type))
            continue
        if column.kind is not None and column.kind != schema.kind:
            raise SchemaMismatch(_first_with_values(column),
                                 f"feature {schema.name!r} holds {column.kind} values, "
                                 f"expected {schema.kind}")
        array = _list_array(column, schema) if schema.is_list else _scalar_array(column, schema)
        try:
            arrays.append(array.cast(schema.arrow_type) if schema.text else array)
        except pa.ArrowInvalid:
            raise SchemaMismatch(_first_with_values(column), f"feature {schema.name!r} is text "
                                 f"(a spec string) but holds bytes that are not UTF-8") from None
    return pa.Table.from_arrays(arrays, schema=arrow_schema(columns))


def _validity(mask: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap of a bool mask (None when all valid)."""
    if mask.all():
        return None
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _scalar_array(column: DecodedColumn, schema: ColumnSchema) -> pa.Array:
    counts = column.counts
    if counts.size and counts.max() > 1:
        row = int(np.flatnonzero(counts > 1)[0])
        raise SchemaMismatch(row, f"feature {schema.name!r} holds {int(counts[row])} values in "
                                  "one record; its column is a scalar")
    valid = counts == 1
    rows = len(counts)
    if schema.kind is None or column.kind is None:
        return pa.nulls(rows, schema.arrow_type)
    starts = column.row_offsets[:-1]
    if schema.kind == "bytes":
        # Row r's bytes are value number starts[r] (an empty range where it has none).
        offsets = column.value_offsets[column.row_offsets]
        return _binary_array(rows, offsets, column.values, _validity(valid))
    values = np.zeros(rows, _NUMPY_TYPES[schema.kind])
    values[valid] = column.values[starts[valid]]
    return pa.Array.from_buffers(schema.arrow_type, rows, [_validity(valid), pa.py_buffer(values)])


def _binary_array(rows: int, offsets: np.ndarray, data: np.ndarray, validity) -> pa.Array:
    if offsets.size and offsets[-1] >= 2**31:  # more than 2 GiB of bytes in one batch
        array = pa.Array.from_buffers(pa.large_binary(), rows,
                                      [validity, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)])
        return array.cast(pa.binary())  # fails loudly if one value alone is over 2 GiB
    return pa.Array.from_buffers(pa.binary(), rows,
                                 [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def _list_array(column: DecodedColumn, schema: ColumnSchema) -> pa.Array:
    rows = column.present.size
    value_type = _ARROW_TYPES[schema.kind]  # bytes as binary: text is cast by the caller
    values = column.values_array(value_type)
    offsets = pa.py_buffer(column.row_offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.list_(value_type), rows, [_validity(column.present), offsets],
                                 children=[values])
