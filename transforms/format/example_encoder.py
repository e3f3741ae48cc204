"""Vectorised tf.train.Example encoder: a whole batch of rows (one `example_columns.Column` per
feature) per call, numpy only, byte-identical to `example_codec.encode_example_parts` and the
protobuf reference, feature order included (the tests compare them on random schemas). Beam-free.

A protobuf message per row costs tens of microseconds; array operations over the batch cost a
few hundred nanoseconds per row. Wire layout of one Example (lengths are varints, tags hex):

    0a len(Features)                               Example.features
      per feature, sorted by name:
      0a len(entry)                                Features.feature (map entry)
        0a len(name) name                          entry key
        12 len(Feature)                            entry value
          0a|12|1a len(list)                       Feature.bytes_list|float_list|int64_list
            bytes: per value  0a len(value) value  BytesList.value
            float: 0a 4*n float32-LE...            FloatList.value (packed; omitted if n == 0)
            int64: 0a len varint...                Int64List.value (packed; omitted if n == 0)

How: the length of every feature's values ("body") is computed for all rows at once (varint
sizes, cumsum segment sums). A feature's "head" (tags, name, three or four length varints)
depends only on its body length, so heads are built once per distinct length and looked up per
row. Rows are rendered as a padded matrix, one fixed slot per head and body: constants (and
heads equal in every row) come from a template row broadcast over the matrix, heads are written
as one 2-D block per feature, values as matrix columns (scalars, fixed-size lists) or scattered
to computed offsets (ragged lists, bytes). Narrow columns (a 4-byte float, a dozen-byte head)
are copied as one void element per row, which numpy moves in single loads and stores instead of
looping over each row's few bytes. One boolean compaction drops the padding (a 1-byte varint in
a 3-byte slot, an absent feature), leaving the Examples back to back; pyarrow splits them into
bytes objects in C++. When one row would make the matrix much larger than the output (a large
value among small ones), rows are encoded in groups of similar size.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from transforms.format.example_codec import encode_varint
from transforms.format.example_columns import Column, NormalisedColumn, exclusive_cumsum, normalise, take_rows
from transforms.format.tfrecord_format import CrcFn, FramedRecords, framing_headers
from transforms.format.wire_scan import put_varints, segment_counts, varint_bytes, varint_sizes

__all__ = ["KIND_TAG", "Body", "encode_columns", "encode_framed", "feature_body", "list_and_feature_lengths",
           "put_bytes_values", "split_records", "within_row"]

KIND_TAG = {"bytes": 0x0A, "float": 0x12, "int64": 0x1A}
# A padded matrix may be this many times larger than the output it holds (plus a fixed
# allowance) before rows are split into groups of similar size.
_MAX_PADDING_FACTOR = 3
_PADDING_ALLOWANCE = 1 << 20
_FOOTER_SLOT = 4  # a TFRecord footer: the masked CRC of the payload
# Spans up to this wide get their validity masks from a table of every possible mask.
_MASK_TABLE_MAX_WIDTH = 64


def _gather_rows(table: np.ndarray, index: np.ndarray | slice) -> np.ndarray:
    """`table[index]` for a 2-D uint8 table: the rows `index` selects, (len(index), width).

    Each row is gathered as one void element, padded to 8 or 16 bytes when it fits (numpy
    copies those sizes with single moves): about 3x faster than fancy-indexing the 2-D
    array, which copies every row byte by byte.
    """
    if isinstance(index, slice) or table.shape[1] == 0:
        return table[index]
    width = table.shape[1]
    padded = 8 if width <= 8 else 16 if width <= 16 else width
    if padded != width:
        table = np.pad(table, ((0, 0), (0, padded - width)))
    rows = np.ascontiguousarray(table).view(np.dtype((np.void, padded))).reshape(-1)
    return rows[index].view(np.uint8).reshape(-1, padded)[:, :width]


def _put_columns(matrix: np.ndarray, start: int, block: np.ndarray) -> None:
    """`matrix[:, start:start + width] = block` for a (rows, width) uint8 block.

    A narrow column slice copied as uint8 costs a loop call per row; when every row of the
    block is contiguous, both sides are viewed as one void element per row instead, which
    numpy copies up to 5x faster (single moves for widths 2, 4, 8 and 16).
    """
    width = block.shape[1]
    target = matrix[:, start : start + width]
    if width > 1 and block.strides[1] == 1:
        row = np.dtype((np.void, width))
        target.view(row)[...] = block.view(row)
    else:
        target[...] = block


def _prefix_masks(lengths: np.ndarray, width: int, suffix: bool = False) -> np.ndarray:
    """(len(lengths), width) bool: True in the first (`suffix`: last) lengths[r] columns
    of row r. Rows come from a table of every possible mask (`_gather_rows`), which is
    several times faster than a broadcast comparison for narrow spans."""
    if width > _MASK_TABLE_MAX_WIDTH:  # the table would have (width + 1) * width bytes
        columns = np.arange(width)
        return columns >= (width - lengths)[:, None] if suffix else columns < lengths[:, None]
    table = np.tri(width + 1, width, -1, dtype=np.uint8)  # row k: k ones, then zeros
    if suffix:
        table = np.ascontiguousarray(table[:, ::-1])
    return _gather_rows(table, lengths).view(bool)


# ------------------------------------------------------------------- padded matrix


class _RowMatrix:
    """A padded row layout: a constant template plus deferred per-row writes and masks."""

    def __init__(self, num_rows: int):
        self.num_rows = num_rows
        self.template = bytearray()
        self.writes: list = []  # callables(matrix)
        self.span_masks: list = []  # (start, callable() -> bool (rows, span width))
        self.row_masks: list = []  # (absent rows bool, start, stop)

    @property
    def width(self) -> int:
        return len(self.template)

    def const(self, data: bytes) -> None:
        self.template += data

    def reserve(self, width: int) -> int:
        start = self.width
        self.template += bytes(width)
        return start

    def varint(self, values: np.ndarray, valid: np.ndarray | None) -> None:
        """One varint per row (e.g. each Example's length); rows where `valid` is False
        must be masked by the caller."""
        chosen = values if valid is None else values[valid]
        low, high = int(chosen.min()), int(chosen.max())
        if low == high:
            self.const(encode_varint(low))
            return
        sizes = varint_sizes(values)
        width = len(encode_varint(high))
        start = self.reserve(width)

        def write(matrix, start=start, width=width):
            _put_columns(matrix, start, varint_bytes(values, width, sizes))

        self.writes.append(write)
        if len(encode_varint(low)) != width:
            self.span_masks.append((start, lambda: _prefix_masks(sizes, width)))

    def prefix_mask(self, start: int, width: int, lengths: np.ndarray, rows: np.ndarray,
                    suffix: bool = False) -> None:
        """Within [start, start+width) only the first (`suffix`: last) lengths[r] bytes of
        row r are valid."""
        if not np.all(lengths[rows] == width):
            self.span_masks.append((start, lambda: _prefix_masks(lengths, width, suffix)))

    def mask_rows(self, rows: np.ndarray, start: int, stop: int) -> None:
        """Drop [start, stop) of the rows where `rows` is True."""
        if rows.any() and stop > start:
            self.row_masks.append((rows, start, stop))

    def render(self) -> np.ndarray:
        """All rows, padding removed, back to back (uint8)."""
        matrix = np.empty((self.num_rows, self.width), np.uint8)
        matrix[:] = np.frombuffer(bytes(self.template), np.uint8)
        for write in self.writes:
            write(matrix)
        if not self.span_masks and not self.row_masks:
            return matrix.reshape(-1)
        valid = np.ones(matrix.shape, bool)
        for start, mask in self.span_masks:
            _put_columns(valid.view(np.uint8), start, mask().view(np.uint8))
        for rows, start, stop in self.row_masks:
            valid[rows, start:stop] = False
        return matrix[valid]


# -------------------------------------------------------------------------- encoder


@dataclasses.dataclass
class Body:
    """Per-row byte counts of a feature's values (its "body")."""

    lengths: np.ndarray  # int64 per row: packed values (numeric) or value items (bytes)
    value_sizes: np.ndarray | None  # int64: varint size per value; bytes: of each length


def feature_body(norm: NormalisedColumn) -> Body:
    if norm.kind == "float":
        return Body(4 * norm.counts, None)
    if norm.kind == "int64":
        sizes = varint_sizes(norm.values)
        per_value = sizes
    else:
        sizes = varint_sizes(norm.value_lengths)
        per_value = 1 + sizes + norm.value_lengths
    if norm.one_each:
        return Body(per_value.astype(np.int64), sizes)
    return Body(segment_counts(per_value, norm.row_offsets), sizes)


def list_and_feature_lengths(kind: str, body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each body length, the length of the Feature's list (`[0a len(packed)] values` of
    int64/float, omitted without values; the values of bytes) and of the Feature."""
    list_len = body if kind == "bytes" else np.where(body > 0, 1 + varint_sizes(body) + body, 0)
    return list_len, 1 + varint_sizes(list_len) + list_len


def _head_table(name: bytes, kind: str, body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The head of a feature for each given body length, right-aligned, and head lengths: all of
    its map entry before its values, `0a len(entry) 0a len(name) name 12 len(Feature) tag
    len(list) [0a len(packed)]` (the bracket for int64/float features with values)."""
    count = body.size
    list_len, feature_len = list_and_feature_lengths(kind, body)
    key = b"\n" + encode_varint(len(name)) + name + b"\x12"
    entry_len = len(key) + varint_sizes(feature_len) + feature_len
    head_len = 1 + varint_sizes(entry_len) + entry_len - body
    width = int(head_len.max())
    table = np.zeros((count, width), np.uint8)
    flat = table.reshape(-1)
    # Right-aligned: the padding before a head joins the padding after the previous
    # feature's values, leaving one gap for the final compaction.
    cursor = np.arange(count) * width + (width - head_len)

    def put_const(data: bytes, rows: np.ndarray | None = None) -> None:
        nonlocal cursor
        at = cursor if rows is None else cursor[rows]
        flat[at[:, None] + np.arange(len(data))] = np.frombuffer(data, np.uint8)
        cursor = cursor + (len(data) if rows is None else len(data) * rows)

    def put_varint(values: np.ndarray, rows: np.ndarray | None = None) -> None:
        nonlocal cursor
        if rows is None:
            cursor = cursor + put_varints(flat, cursor, values)
        else:
            cursor[rows] += put_varints(flat, cursor[rows], values[rows])

    put_const(b"\n")
    put_varint(entry_len)
    put_const(key)
    put_varint(feature_len)
    put_const(bytes([KIND_TAG[kind]]))
    put_varint(list_len)
    has_values = body > 0
    if kind != "bytes" and has_values.any():
        put_const(b"\n", has_values)
        put_varint(body, has_values)
    return table, head_len


def _plan(norms: Sequence[NormalisedColumn], num_rows: int, framed: bool = False,
          crc_args: tuple = ()) -> tuple[_RowMatrix, np.ndarray]:
    """The padded layout of the Examples and each Example's length; `framed`: each row laid out
    as a TFRecord, header written (CRC function in `crc_args`, if any), footer slot zero."""
    features = np.zeros(num_rows, np.int64)
    heads = []
    for norm in norms:
        if not norm.present.any():
            continue
        body = feature_body(norm)
        present_lengths = body.lengths if norm.all_present else body.lengths[norm.present]
        low, high = int(present_lengths.min()), int(present_lengths.max())
        if low == high:
            table, head_len = _head_table(norm.name, norm.kind, np.array([low]))
            row_head, index = head_len[0], None
        elif high < max(num_rows, 1024):
            # One head per possible length, looked up by each row's body length.
            table, head_len = _head_table(norm.name, norm.kind, np.arange(high + 1))
            row_head, index = head_len[body.lengths], body.lengths
        else:
            table, head_len = _head_table(norm.name, norm.kind, body.lengths)
            row_head, index = head_len, slice(None)
        segment = row_head + body.lengths
        features += segment if norm.all_present else np.where(norm.present, segment, 0)
        heads.append((norm, body, table, row_head, index))
    example_lengths = 1 + varint_sizes(features) + features
    layout = _RowMatrix(num_rows)
    if framed:
        headers = framing_headers(example_lengths, *crc_args)
        at = layout.reserve(headers.shape[1])
        layout.writes.append(functools.partial(_put_columns, start=at, block=headers))
    layout.const(b"\n")
    layout.varint(features, None)
    for norm, body, table, row_head, index in heads:
        start = layout.width
        if index is None:
            layout.const(table[0].tobytes())
        else:
            width = table.shape[1]
            head_start = layout.reserve(width)

            def write(matrix, table=table, index=index, at=head_start, width=width):
                _put_columns(matrix, at, _gather_rows(table, index))

            layout.writes.append(write)
            layout.prefix_mask(head_start, width, row_head, norm.present, suffix=True)
        if int(body.lengths.max()) > 0:
            if norm.kind == "float":
                _plan_floats(layout, norm)
            elif norm.kind == "int64":
                _plan_int64s(layout, norm, body)
            else:
                _plan_bytes(layout, norm, body)
        layout.mask_rows(~norm.present, start, layout.width)
    if framed:
        layout.reserve(_FOOTER_SLOT)
    return layout, example_lengths


def _padded_index(norm: NormalisedColumn, max_count: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, max_count) indices of each row's values (0 past its end) and their validity."""
    slots = np.arange(max_count)
    in_row = slots < norm.counts[:, None]
    index = np.where(in_row, norm.row_offsets[:-1, None] + slots, 0)
    return index, in_row


def _use_padded(norm: NormalisedColumn, max_count: int, unit: int, body: np.ndarray) -> bool:
    # Lists padded to the longest row of the batch are cheap when rows are about as
    # long as each other (scalars, fixed-size lists); scatter ragged lists instead.
    return norm.counts.size * max_count * unit <= 2 * int(body.sum()) + 4 * norm.counts.size


def within_row(norm: NormalisedColumn, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's row and its byte offset within its row's values (`sizes`: bytes per value)."""
    if norm.one_each:
        return np.arange(sizes.size), np.zeros(sizes.size, np.int64)
    rows = np.repeat(np.arange(norm.counts.size), norm.counts)
    before = exclusive_cumsum(sizes)
    return rows, before[:-1] - before[norm.row_offsets[:-1]][rows]


def _value_positions(norm: NormalisedColumn, width: int, start: int, sizes: np.ndarray) -> np.ndarray:
    """Flat offset in the (rows, width) matrix where each value's bytes start."""
    rows, offsets = within_row(norm, sizes)
    return rows * width + start + offsets


def put_bytes_values(flat: np.ndarray, positions: np.ndarray, norm: NormalisedColumn,
                     len_sizes: np.ndarray) -> None:
    """Writes each value of a bytes column as a BytesList item, `0a len value`, at its position."""
    flat[positions] = 0x0A  # BytesList.value tag
    put_varints(flat, positions + 1, norm.value_lengths, len_sizes)
    if norm.values.size:
        # Every data byte moves by the gap between its value's source and target.
        target = np.repeat(positions + 1 + len_sizes - norm.value_offsets[:-1], norm.value_lengths)
        target += np.arange(norm.values.size)
        flat[target] = norm.values


def _plan_floats(layout: _RowMatrix, norm: NormalisedColumn) -> None:
    max_count = int(norm.counts.max())
    body = 4 * norm.counts
    start = layout.reserve(4 * max_count)
    if _use_padded(norm, max_count, 4, body):

        def write(matrix):
            if norm.one_each:
                values = norm.values
            else:
                values = norm.values[_padded_index(norm, max_count)[0]]
            _put_columns(matrix, start, values.view(np.uint8).reshape(norm.counts.size, 4 * max_count))
    else:

        def write(matrix):
            positions = _value_positions(norm, matrix.shape[1], start, np.full(norm.num_values, 4, np.int64))
            flat = matrix.reshape(-1)
            flat[(positions[:, None] + np.arange(4)).reshape(-1)] = norm.values.view(np.uint8)

    layout.writes.append(write)
    layout.prefix_mask(start, 4 * max_count, body, norm.present)


def _plan_int64s(layout: _RowMatrix, norm: NormalisedColumn, length: Body) -> None:
    max_count = int(norm.counts.max())
    sizes = length.value_sizes
    width = int(sizes.max())
    if _use_padded(norm, max_count, width, length.lengths):
        start = layout.reserve(max_count * width)
        if norm.one_each:
            values, value_sizes = norm.values, sizes
        else:
            index, in_row = _padded_index(norm, max_count)
            values = norm.values[index].reshape(-1)
            value_sizes = np.where(in_row, sizes[index], 0).reshape(-1)

        def write(matrix):
            encoded = varint_bytes(values, width, value_sizes)
            _put_columns(matrix, start, encoded.reshape(norm.counts.size, max_count * width))

        layout.writes.append(write)
        if not np.all(value_sizes == width):
            shape = (norm.counts.size, max_count * width)
            layout.span_masks.append((start, lambda: _prefix_masks(value_sizes, width).reshape(shape)))
        return
    body_width = int(length.lengths.max())
    start = layout.reserve(body_width)

    def write(matrix):
        positions = _value_positions(norm, matrix.shape[1], start, sizes)
        put_varints(matrix.reshape(-1), positions, norm.values, sizes)

    layout.writes.append(write)
    layout.prefix_mask(start, body_width, length.lengths, norm.present)


def _plan_bytes(layout: _RowMatrix, norm: NormalisedColumn, length: Body) -> None:
    body_width = int(length.lengths.max())
    start = layout.reserve(body_width)
    len_sizes = length.value_sizes

    def write(matrix):
        positions = _value_positions(norm, matrix.shape[1], start, 1 + len_sizes + norm.value_lengths)
        put_bytes_values(matrix.reshape(-1), positions, norm, len_sizes)

    layout.writes.append(write)
    layout.prefix_mask(start, body_width, length.lengths, norm.present)


def split_records(buffer: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Object array of one bytes object per row (pyarrow copies them out in C++)."""
    offsets = exclusive_cumsum(lengths)
    if buffer.size != offsets[-1]:
        raise AssertionError(f"example_encoder: rendered {buffer.size} bytes, planned {int(offsets[-1])}")
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), lengths.size, [None, pa.py_buffer(offsets), pa.py_buffer(buffer)]
    )
    return binary.to_numpy(zero_copy_only=False)


def _mostly_padding(layout: _RowMatrix, example_lengths: np.ndarray) -> bool:
    padded = layout.num_rows * layout.width
    return padded > _MAX_PADDING_FACTOR * int(example_lengths.sum()) + _PADDING_ALLOWANCE


def _encode_group(norms: Sequence[NormalisedColumn], num_rows: int, may_split: bool) -> np.ndarray:
    layout, example_lengths = _plan(norms, num_rows)
    if may_split and _mostly_padding(layout, example_lengths):
        # Group rows whose Examples are within a factor of two in size.
        groups = np.log2(example_lengths).astype(np.int64)
        if np.unique(groups).size > 1:
            out = np.empty(num_rows, object)
            for group in np.unique(groups):
                rows = np.flatnonzero(groups == group)
                subset = [take_rows(norm, rows) for norm in norms]
                out[rows] = _encode_group(subset, rows.size, may_split=False)
            return out
    return split_records(layout.render(), example_lengths)


def _normalised(num_rows: int, columns: Sequence[Column]) -> list[NormalisedColumn]:
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    norms = sorted((normalise(column, num_rows) for column in columns), key=lambda n: n.name)
    for a, b in itertools.pairwise(norms):
        if a.name == b.name:
            raise ValueError(f"feature {a.name.decode()!r} is given more than once")
    return norms


def encode_framed(num_rows: int, columns: Sequence[Column],
                  crc_fn: CrcFn | None = None) -> FramedRecords:
    """`FramedRecords.frame(encode_columns(num_rows, columns))`, cheaper: rows are rendered with
    their framing in place and the footers filled in one pass (`FramedRecords.complete`), no
    bytes object per record; a batch that would be mostly padding is encoded in groups and
    framed by `FramedRecords.frame` instead. Raises what `encode_columns` raises."""
    crc_args = () if crc_fn is None else (crc_fn,)
    norms = _normalised(num_rows, columns)
    if num_rows == 0:
        return FramedRecords(b"", np.zeros(0, np.int64))
    layout, example_lengths = _plan(norms, num_rows, framed=True, crc_args=crc_args)
    if _mostly_padding(layout, example_lengths):
        return FramedRecords.frame(_encode_group(norms, num_rows, may_split=True).tolist(), *crc_args)
    return FramedRecords.complete(layout.render(), example_lengths, *crc_args)


def encode_columns(num_rows: int, columns: Sequence[Column]) -> list[bytes]:
    """Serialize `num_rows` tf.train.Examples from columns, byte-identical to encode_example_parts.

    Row r's Example holds every column present in row r, with that row's values. Raises
    ValueError, naming the feature, for an empty, non-str or duplicated name, an unknown kind,
    arrays of the wrong shape or dtype, or offsets out of range.
    """
    norms = _normalised(num_rows, columns)
    if num_rows == 0:
        return []
    return _encode_group(norms, num_rows, may_split=True).tolist()
