"""The input side of the vectorised Example encoder: a batch's values per feature as a `Column`
(built by callers or from Arrow arrays), checked and normalised into flat numpy arrays from
offset 0 (`NormalisedColumn`) for `transforms.format.example_encoder` to render. Beam-free."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.format.example_codec import INT64_MAX, KINDS, feature_sort_key
from transforms.format.wire_scan import exclusive_cumsum

__all__ = ["Column", "NormalisedColumn", "NullElementError", "column_from_arrow", "exclusive_cumsum",
           "normalise", "take_rows"]


@dataclasses.dataclass(frozen=True)
class Column:
    """One feature of a batch of rows, in columnar (Arrow-like) form.

    Attributes:
      name: feature name (non-empty).
      kind: "int64", "float" or "bytes".
      values: all values of all rows, flat: int64 for "int64", float32 for "float"
        (other float dtypes are cast), for "bytes" the np.uint8 data buffer that
        `value_offsets` index into.
      value_offsets: "bytes" only: int64 offsets into `values`, one more than the number
        of values; value i is values[value_offsets[i]:value_offsets[i+1]].
      row_offsets: int64, num_rows + 1 entries; row r holds the values
        values[row_offsets[r]:row_offsets[r+1]] (for "bytes": values with those indices).
        A scalar column has row_offsets == arange(num_rows + 1).
      present: optional bool per row; False leaves the feature out of that row's Example
        (and ignores its values). None means present in every row. A present row with
        no values gets the feature with an empty list.
    """

    name: str
    kind: str
    values: np.ndarray
    value_offsets: np.ndarray | None
    row_offsets: np.ndarray
    present: np.ndarray | None = None


class NullElementError(ValueError):
    """An Arrow list column holds null elements, which an Example list cannot hold: the
    `feature`, and the indices of the `rows` that hold one."""

    def __init__(self, feature: str, rows: np.ndarray):
        self.feature = feature
        self.rows = rows
        super().__init__(f"feature {feature!r}: {len(rows)} row(s) hold null list elements (first: row "
                         f"{int(rows[0])}); tf.train.Example lists cannot hold nulls")


@dataclasses.dataclass
class NormalisedColumn:
    """A validated column with exactly the values of its present rows, from offset 0."""

    name: bytes
    kind: str
    present: np.ndarray  # bool per row
    all_present: bool
    counts: np.ndarray  # values per row (0 for absent rows)
    row_offsets: np.ndarray  # int64, starts at 0
    one_each: bool  # every row holds exactly one value
    values: np.ndarray  # int64 / '<f4' values; bytes: the data of the values, contiguous
    value_lengths: np.ndarray | None = None  # bytes only
    value_offsets: np.ndarray | None = None  # bytes only, starts at 0

    @property
    def num_values(self) -> int:
        return int(self.row_offsets[-1])


def _int_array(name: str, what: str, a: Any) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"feature {name!r}: {what} must be a 1-D integer array")
    return a.astype(np.int64, copy=False)


def _check_offsets(name: str, what: str, offsets: np.ndarray, limit: int) -> None:
    if offsets.size and (offsets[0] < 0 or offsets[-1] > limit or np.any(offsets[1:] < offsets[:-1])):
        raise ValueError(f"feature {name!r}: {what} must be non-decreasing offsets within [0, {limit}]")


def _numeric_values(name: str, kind: str, values: Any) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"feature {name!r}: values must be a 1-D array")
    if kind == "int64":
        if values.dtype.kind == "u" and values.size and values.max() > INT64_MAX:
            raise ValueError(f"feature {name!r}: value {values.max()} is out of the int64 range")
        if values.dtype.kind not in "iub":
            raise ValueError(f"feature {name!r}: int64 values must be integers, got {values.dtype}")
        return np.ascontiguousarray(values, dtype=np.int64)
    if values.dtype.kind not in "fiub":
        raise ValueError(f"feature {name!r}: float values must be numbers, got {values.dtype}")
    with np.errstate(over="ignore"):  # out of float32 range -> +-inf, as protobuf does
        return np.ascontiguousarray(values, dtype="<f4")


def _select(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, slice | np.ndarray]:
    """New row offsets and the index (slice when contiguous) of the selected values."""
    new_offsets = exclusive_cumsum(counts)
    total = int(new_offsets[-1])
    if total == 0:
        return new_offsets, slice(0, 0)
    first = int(starts[np.argmax(counts > 0)])
    if np.all((starts == first + new_offsets[:-1]) | (counts == 0)):
        return new_offsets, slice(first, first + total)
    index = np.repeat(starts - new_offsets[:-1], counts)
    index += np.arange(total)
    return new_offsets, index


def _take(name: bytes, kind: str, starts: np.ndarray, counts: np.ndarray, present: np.ndarray,
          values: np.ndarray, value_offsets: np.ndarray | None) -> NormalisedColumn:
    counts = np.where(present, counts, 0)
    row_offsets, index = _select(starts, counts)
    n = counts.size
    one_each = bool(n) and int(row_offsets[-1]) == n and bool(np.all(counts == 1))
    all_present = bool(np.all(present))
    if kind != "bytes":
        return NormalisedColumn(name, kind, present, all_present, counts, row_offsets, one_each,
                                values[index])
    if isinstance(index, slice):
        value_starts = value_offsets[index.start : index.stop]
        value_ends = value_offsets[index.start + 1 : index.stop + 1]
    else:
        value_starts = value_offsets[index]
        value_ends = value_offsets[index + 1]
    lengths = value_ends - value_starts
    data_offsets, data_index = _select(value_starts, lengths)
    selected = values[data_index]
    norm = NormalisedColumn(name, kind, present, all_present, counts, row_offsets, one_each, selected)
    norm.value_lengths, norm.value_offsets = lengths, data_offsets
    return norm


def normalise(column: Column, num_rows: int) -> NormalisedColumn:
    name = column.name
    key = feature_sort_key(name)
    if column.kind not in KINDS:
        raise ValueError(f"feature {name!r}: unknown kind {column.kind!r}; expected one of {KINDS}")
    row_offsets = _int_array(name, "row_offsets", column.row_offsets)
    if row_offsets.size != num_rows + 1:
        raise ValueError(f"feature {name!r}: row_offsets has {row_offsets.size} entries, "
                         f"expected num_rows + 1 = {num_rows + 1}")
    if column.present is None:
        present = np.ones(num_rows, bool)
    else:
        present = np.asarray(column.present)
        if present.shape != (num_rows,) or present.dtype != bool:
            raise ValueError(f"feature {name!r}: present must be a bool array of {num_rows} rows")
    value_offsets = None
    if column.kind == "bytes":
        values = np.asarray(column.values)
        if values.ndim != 1 or values.dtype not in (np.uint8, np.int8):
            raise ValueError(f"feature {name!r}: bytes values must be a 1-D uint8 data buffer")
        values = np.ascontiguousarray(values).view(np.uint8)
        if column.value_offsets is None:
            raise ValueError(f"feature {name!r}: bytes columns need value_offsets")
        value_offsets = _int_array(name, "value_offsets", column.value_offsets)
        _check_offsets(name, "value_offsets", value_offsets, values.size)
        num_values = value_offsets.size - 1
        if num_values < 0:
            raise ValueError(f"feature {name!r}: value_offsets must not be empty")
    else:
        values = _numeric_values(name, column.kind, column.values)
        num_values = values.size
    _check_offsets(name, "row_offsets", row_offsets, num_values)
    return _take(key, column.kind, row_offsets[:-1], np.diff(row_offsets), present, values, value_offsets)


def take_rows(norm: NormalisedColumn, rows: np.ndarray) -> NormalisedColumn:
    starts = norm.row_offsets[:-1][rows]
    counts = norm.counts[rows]
    return _take(norm.name, norm.kind, starts, counts, norm.present[rows], norm.values, norm.value_offsets)


_BYTES_TYPES = (pa.types.is_binary, pa.types.is_string, pa.types.is_large_binary, pa.types.is_large_string,
                pa.types.is_fixed_size_binary, pa.types.is_binary_view, pa.types.is_string_view)


def _arrow_values(name: str, kind: str, values: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """numpy values (and value offsets for bytes) of a flat Arrow array; nulls become 0/b""."""
    value_type = values.type
    if kind == "bytes":
        if not any(is_type(value_type) for is_type in _BYTES_TYPES):
            raise ValueError(f"feature {name!r}: a bytes feature cannot be built from {value_type}")
        values = values.cast(pa.large_binary())
        _, offsets_buffer, data_buffer = values.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int64)[values.offset : values.offset + len(values) + 1]
        data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
        return data, offsets
    if not (pa.types.is_integer(value_type) or pa.types.is_boolean(value_type)
            or (kind == "float" and pa.types.is_floating(value_type))):
        raise ValueError(f"feature {name!r}: a {kind} feature cannot be built from {value_type}")
    if values.null_count:
        values = values.fill_null(False if pa.types.is_boolean(value_type) else 0)
    if kind == "int64":
        try:
            values = values.cast(pa.int64())
        except pa.ArrowInvalid as e:
            raise ValueError(f"feature {name!r}: values do not fit in int64: {e}") from None
        return values.to_numpy(zero_copy_only=False), None
    with np.errstate(over="ignore"):  # out of float32 range -> +-inf, as protobuf does
        return values.to_numpy(zero_copy_only=False).astype("<f4", copy=False), None


def column_from_arrow(name: str, kind: str, array: pa.Array | pa.ChunkedArray) -> Column:
    """A Column from an Arrow array of scalars or lists; null entries are absent features.

    Supported: integer and boolean arrays for "int64"; floating (cast to float32, like
    TensorFlow) and integer arrays for "float"; binary/string (also large, view and
    fixed-size variants) for "bytes"; list, large_list and fixed_size_list of those;
    dictionary-encoded arrays; and the null type (absent everywhere). Values are not
    copied where Arrow's layout allows. Raises NullElementError when a present list row
    holds a null element, ValueError (naming the feature) for an unsupported type or kind.
    """
    if kind not in KINDS:
        raise ValueError(f"feature {name!r}: unknown kind {kind!r}; expected one of {KINDS}")
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    num_rows = len(array)
    present = None if array.null_count == 0 else array.is_valid().to_numpy(zero_copy_only=False)
    array_type = array.type
    if pa.types.is_null(array_type):
        empty = np.zeros(0, np.uint8 if kind == "bytes" else np.int64)
        offsets = np.zeros(1, np.int64) if kind == "bytes" else None
        return Column(name, kind, empty, offsets, np.zeros(num_rows + 1, np.int64), np.zeros(num_rows, bool))
    if pa.types.is_list(array_type) or pa.types.is_large_list(array_type):
        row_offsets = np.asarray(array.offsets).astype(np.int64)
        child = array.values
    elif pa.types.is_fixed_size_list(array_type):
        size = array_type.list_size
        row_offsets = (np.arange(num_rows + 1, dtype=np.int64) + array.offset) * size
        child = array.values
    else:
        row_offsets = np.arange(num_rows + 1, dtype=np.int64)
        child = array
    if child is not array:
        if pa.types.is_dictionary(child.type):
            child = child.dictionary_decode()
        if child.null_count:
            nulls = exclusive_cumsum(~child.is_valid().to_numpy(zero_copy_only=False))
            in_row = nulls[row_offsets[1:]] - nulls[row_offsets[:-1]]
            bad = in_row > 0
            if present is not None:
                bad &= present
            if bad.any():
                raise NullElementError(name, np.flatnonzero(bad))
    values, value_offsets = _arrow_values(name, kind, child)
    return Column(name, kind, values, value_offsets, row_offsets, present)
