"""Protobuf wire data of many messages at once with numpy. Writing: varints of whole arrays
(their sizes and bytes, written at many positions), as the vectorised encoders write lengths
and int64 values. Reading: varints at many positions, packed varint lists, and byte ranges
gathered into one buffer, the primitives of the batch Example decoder. Beam-free.

Every reading function takes the concatenated bytes of a batch as one uint8 array plus
positions in it, and reports malformed input as a boolean "ok" per position instead of
raising: the caller decides what a malformed record means (the decoder hands it to the
reference parser, which names the problem).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_VARINT_BYTES", "bytes_at", "exclusive_cumsum", "gather_ranges", "packed_varints",
           "put_varints", "read_lengths", "read_varints", "segment_counts", "varint_bytes", "varint_sizes"]

#: A varint of a 64-bit value takes at most 10 bytes; protobuf rejects longer ones.
MAX_VARINT_BYTES = 10
# Above this many bytes per range, ranges are copied one slice at a time (one Python call
# each, no index array); below it a single fancy-index copy over all ranges is faster.
_SLICE_COPY_MIN_AVERAGE = 256


# --------------------------------------------------------------------------- writing

_VARINT_LIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]


def _as_u64(values: np.ndarray) -> np.ndarray:
    # Varints encode int64 as its two's complement uint64 (negative -> 10 bytes).
    if values.dtype == np.uint64:
        return values
    if values.dtype == np.int64:
        return values.view(np.uint64)
    return values.astype(np.uint64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes in the varint encoding of each value (a read-only view when all are 1). int64 on
    purpose: with numpy's promotion rules `python_int + uint8_array` stays uint8 and would wrap."""
    u = _as_u64(values)
    if u.size == 0 or u.max() < _VARINT_LIMITS[0]:
        # Lengths are nearly always < 128: skip allocating (and page-faulting) an array.
        return np.broadcast_to(np.int64(1), u.shape)
    top = u.max()
    size = np.ones(u.shape, np.uint8)  # counted in uint8: 8x less memory traffic
    for limit in _VARINT_LIMITS:
        if top < limit:
            break
        size += u >= limit
    return size.astype(np.int64)


# Continuation bits (0x80) of bytes 0..7 of a varint of each size, as one little-endian word.
_CONTINUATION = np.array(
    [sum(0x80 << (8 * j) for j in range(min(size - 1, 8))) if size else 0 for size in range(11)],
    np.uint64,
)


def varint_bytes(values: np.ndarray, width: int, sizes: np.ndarray) -> np.ndarray:
    """(len(values), width) uint8: each value's varint, left-aligned, garbage after it.

    The 7-bit groups of each value are spread into the bytes of one uint64 with shifts
    (the first 8 groups), which is several times faster than one pass per group.
    """
    u = _as_u64(values)
    if width == 1:
        return u.astype(np.uint8).reshape(-1, 1)
    low = u & np.uint64(0x7F)
    for group in range(1, min(width, 8)):
        low |= (u & np.uint64(0x7F << (7 * group))) << np.uint64(group)
    low |= _CONTINUATION[sizes]
    low_bytes = low.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
    if width <= 8:
        return low_bytes[:, :width]
    out = np.empty((u.size, width), np.uint8)
    out[:, :8] = low_bytes
    high = u >> np.uint64(56)  # groups 8 and 9 (a 10-byte varint has 1 bit in group 9)
    out[:, 8] = (high & np.uint64(0x7F)).astype(np.uint8)
    out[:, 8] |= (sizes > 9).view(np.uint8) << np.uint8(7)
    if width > 9:
        out[:, 9] = (high >> np.uint64(7)).astype(np.uint8)
    return out


def put_varints(out: np.ndarray, positions: np.ndarray, values: np.ndarray,
                sizes: np.ndarray | None = None) -> np.ndarray:
    """Writes the varint of each value at its position in `out` (flat uint8); returns their
    sizes (`varint_sizes(values)`, computed unless given)."""
    if sizes is None:
        sizes = varint_sizes(values)
    if values.size == 0:
        return sizes
    width = int(sizes.max())
    if width == 1:
        out[positions] = values
        return sizes
    encoded = varint_bytes(values, width, sizes)
    keep = np.arange(width) < sizes[:, None]
    out[(positions[:, None] + np.arange(width))[keep]] = encoded[keep]
    return sizes


# --------------------------------------------------------------------------- reading


def exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    """[0, c0, c0+c1, ...]: the offsets of segments of the given sizes (int64, len + 1)."""
    out = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, dtype=np.int64, out=out[1:])
    return out


def bytes_at(data: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """data[positions], where a position past the end (computed from a malformed length)
    reads the last byte instead of raising: the caller's limit checks reject it anyway."""
    return data[np.minimum(positions, data.size - 1)]


def read_varints(data: np.ndarray, positions: np.ndarray, limits: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values as uint64, sizes as int64, ok) of the varint at each position, read without
    passing `limits` (exclusive). Not ok (value garbage): running into the limit, longer than
    `MAX_VARINT_BYTES`, or bits beyond bit 63 (so a caller never has to decide what they mean).

    Bytes are read one position of the varint at a time, only for the varints not finished
    yet: lengths and small ints are nearly always one byte, so this is one pass.
    """
    positions = positions.astype(np.int64, copy=False)
    ok = positions < limits
    first = bytes_at(data, positions)
    values = (first & 0x7F).astype(np.uint64)
    sizes = np.ones(positions.size, np.int64)
    pending = np.flatnonzero(ok & (first >= 0x80))
    for shift in range(1, MAX_VARINT_BYTES):
        if pending.size == 0:
            break
        where = positions[pending] + shift
        inside = where < limits[pending]
        if not inside.all():  # ran into the limit before the last byte
            ok[pending[~inside]] = False
            pending, where = pending[inside], where[inside]
        byte = data[where]
        group = (byte & 0x7F).astype(np.uint64)
        if shift == MAX_VARINT_BYTES - 1:
            too_big = byte > 1  # bits 64 and up
            ok[pending[too_big]] = False
        values[pending] |= group << np.uint64(7 * shift)
        sizes[pending] = shift + 1
        pending = pending[byte >= 0x80]
    ok[pending] = False  # still continuing after 10 bytes
    return values, sizes, ok


def read_lengths(data: np.ndarray, positions: np.ndarray, limits: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`read_varints` for length prefixes: (lengths as int64, sizes, ok), where ok also
    requires the length to fit between the varint's end and the limit, so a malformed
    length near 2**64 never turns into a negative position."""
    values, sizes, ok = read_varints(data, positions, limits)
    room = np.maximum(limits - positions.astype(np.int64, copy=False) - sizes, 0)
    ok &= values <= room.astype(np.uint64)
    return np.where(ok, values, 0).astype(np.int64), sizes, ok


def gather_ranges(data: np.ndarray | bytes, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes data[starts[i]:starts[i] + lengths[i]] of every range, back to back (uint8)."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    source = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
    width = int(lengths[0])
    if total == width * lengths.size and (lengths == width).all():  # scalars: a 2-D gather
        return source[starts.astype(np.int64)[:, None] + np.arange(width)].reshape(-1)
    if total >= _SLICE_COPY_MIN_AVERAGE * lengths.size:
        # Few large ranges (images): an index per byte would take 8x their size.
        view = memoryview(data if isinstance(data, bytes) else data.data).cast("B")
        joined = b"".join([view[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)])
        return np.frombuffer(joined, np.uint8)
    offsets = exclusive_cumsum(lengths)
    # Index of every byte: its range's start, plus its position inside the range.
    index = np.repeat(starts.astype(np.int64) - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return source[index]


def segment_counts(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The sum of each segment flags[offsets[i]:offsets[i + 1]] (int64): of bool flags, how
    many are True."""
    cumulative = exclusive_cumsum(flags.astype(np.int64, copy=False))
    return cumulative[offsets[1:]] - cumulative[offsets[:-1]]


def packed_varints(chunks: np.ndarray, chunk_offsets: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decodes chunks of back-to-back varints; chunk i is chunks[chunk_offsets[i]:chunk_offsets[i+1]].

    Returns (values as uint64 of all chunks in order, number of values per chunk, ok per
    chunk); a chunk is not ok when it ends inside a varint or holds one that `read_varints`
    would refuse.
    """
    ends = chunks < 0x80  # the last byte of each varint
    counts = segment_counts(ends, chunk_offsets)
    ok = np.ones(counts.size, bool)
    nonempty = chunk_offsets[1:] > chunk_offsets[:-1]
    ok[nonempty] = ends[chunk_offsets[1:][nonempty] - 1]  # a chunk must end a varint
    last_bytes = np.flatnonzero(ends)
    first_bytes = np.empty_like(last_bytes)
    first_bytes[:1] = 0
    first_bytes[1:] = last_bytes[:-1] + 1
    sizes = last_bytes - first_bytes + 1
    if last_bytes.size and int(sizes.max()) > 1:
        # Which byte of its varint each byte is; bytes after the last end belong to a bad
        # chunk and to no varint.
        used = int(last_bytes[-1]) + 1
        place = np.arange(used, dtype=np.int64) - np.repeat(first_bytes, sizes)
        too_long = place >= MAX_VARINT_BYTES
        top = (place == MAX_VARINT_BYTES - 1) & (chunks[:used] > 1)
        if too_long.any() or top.any():
            bad_bytes = np.flatnonzero(too_long | top)
            ok[np.searchsorted(chunk_offsets, bad_bytes, side="right") - 1] = False
            place = np.minimum(place, MAX_VARINT_BYTES - 1)
        groups = (chunks[:used] & 0x7F).astype(np.uint64) << (place.astype(np.uint64) * np.uint64(7))
        values = np.bitwise_or.reduceat(groups, first_bytes) if first_bytes.size else groups[:0]
    else:  # every varint is one byte: the common case of small ints
        values = chunks[last_bytes].astype(np.uint64)
    return values, counts, ok
