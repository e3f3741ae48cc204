"""Protobuf base-128 varints of whole numpy arrays at once: their sizes and their bytes, as the
vectorised Example encoder writes lengths and int64 values. Beam-free."""

from __future__ import annotations

import numpy as np

__all__ = [
    "as_u64",
    "varint_bytes",
    "varint_sizes",
]


_VARINT_LIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]


def as_u64(values: np.ndarray) -> np.ndarray:
    # Varints encode int64 as its two's complement uint64 (negative -> 10 bytes).
    if values.dtype == np.uint64:
        return values
    if values.dtype == np.int64:
        return values.view(np.uint64)
    return values.astype(np.uint64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes in the varint encoding of each value, int64 (a read-only view when all are 1).

    int64 on purpose: with numpy's promotion rules `python_int + uint8_array` stays uint8
    and would wrap for long names.
    """
    u = as_u64(values)
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
    u = as_u64(values)
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
