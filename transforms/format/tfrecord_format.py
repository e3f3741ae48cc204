"""TFRecord framing and writing, byte-compatible with TensorFlow, without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64  length          little endian
    uint32  masked_crc32c(length bytes)
    byte    payload[length]
    uint32  masked_crc32c(payload)

where ``masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)`` and
``crc`` is the CRC-32C (Castagnoli) of ``x``, from the ``crc32c`` package; every function that
computes one takes a ``crc_fn`` so the implementation can be swapped (tests, or a platform
without the ``crc32c`` wheel). Compression lives in `transforms.format.compression`, reading
in `transforms.format.tfrecord_reader`. Beam-free (`transforms.tfrecord_io` opens files).
"""

from __future__ import annotations

import functools
import itertools
import pickle
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import crc32c
import numpy as np

from transforms.format.compression import Compression, open_compressor

__all__ = ["DEFAULT_CRC", "FOOTER_SIZE", "HEADER", "HEADER_SIZE", "LENGTH_CRC_CACHE_MAX", "MASK_DELTA", "U32",
           "CrcFn", "FramedRecords", "TFRecordWriter", "frame_parts", "frame_record", "frame_records",
           "framed_size", "framing_headers", "length_crc_cache", "masked_crc32c"]


CrcFn = Callable[[bytes], int]

DEFAULT_CRC: CrcFn = crc32c.crc32c
MASK_DELTA = 0xA282EAD8
U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
HEADER = struct.Struct("<QI")  # length, masked crc of the length
HEADER_SIZE = 12
FOOTER_SIZE = 4
_FRAMING_BYTES = HEADER_SIZE + FOOTER_SIZE
# Below this many records the numpy set-up costs more than it saves.
_VECTOR_THRESHOLD = 128

# Masked CRC of the 8 length bytes, per length, for the default CRC function.
# Record lengths repeat a lot (fixed-size rows), so this removes one CRC per record.
_LENGTH_CRC_CACHE: dict[int, int] = {}
LENGTH_CRC_CACHE_MAX = 1 << 16

_SEPARATOR = np.dtype([("footer", "<u4"), ("length", "<u8"), ("length_crc", "<u4")])
_HEADER_DTYPE = np.dtype([("length", "<u8"), ("length_crc", "<u4")])  # packed: 12 bytes

# Per payload length, for the default CRC function: the CRC correction of a payload CRC
# computed with the 16 framing bytes before it (see `FramedRecords.complete`).
_PREFIX_CORRECTION_CACHE: dict[int, int] = {}
# Mean span (record plus framing) from which `FramedRecords.complete` hands the CRC function
# memoryview slices rather than bytes copies cut by pyarrow. Measured per 62,500 records:
# copies win below ~225 bytes (60 B: 16 vs 27 ms), views above (400 B: 18 vs 30 ms).
_VIEW_CRC_MIN_SPAN = 256


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes, crc_fn: CrcFn = DEFAULT_CRC) -> int:
    """The masked CRC-32C of `data`, as stored in TFRecord headers and footers."""
    return _mask(crc_fn(data) & 0xFFFFFFFF)


def length_crc_cache(crc_fn: CrcFn, shared: dict[int, int] = _LENGTH_CRC_CACHE) -> dict[int, int]:
    if crc_fn is DEFAULT_CRC:
        if len(shared) > LENGTH_CRC_CACHE_MAX:
            shared.clear()
        return shared
    return {}  # unknown CRC function: cache for this call only


def _masked_length_crc(n: int, crc_fn: CrcFn = DEFAULT_CRC) -> int:
    """The masked CRC of a payload length's 8 bytes (what a record header holds)."""
    return masked_crc32c(_U64.pack(n), crc_fn)


def _length_crc(n: int, crc_fn: CrcFn = DEFAULT_CRC) -> int:
    """`_masked_length_crc`, cached for the default CRC."""
    cache = length_crc_cache(crc_fn)
    length_crc = cache.get(n)
    if length_crc is None:
        length_crc = cache[n] = _masked_length_crc(n, crc_fn)
    return length_crc


def _per_length(lengths: np.ndarray, cache: dict[int, int], compute: Callable[[int], int]) -> np.ndarray:
    """uint32 `compute(n)` for each length n, computed once per distinct length (and cached)."""
    if lengths.size == 0:
        return np.zeros(0, np.uint32)
    top = int(lengths.max())

    def value(n: int) -> int:
        known = cache.get(n)
        if known is None:
            known = cache[n] = compute(n)
        return known

    if top <= 4 * lengths.size + 4096:  # a table indexed by length: no sort needed
        table = np.zeros(top + 1, np.uint32)
        distinct = np.flatnonzero(np.bincount(lengths))
        table[distinct] = [value(n) for n in distinct.tolist()]
        return table[lengths]
    distinct, inverse = np.unique(lengths, return_inverse=True)
    return np.array([value(n) for n in distinct.tolist()], np.uint32)[inverse]


def _mask_array(crcs: np.ndarray) -> np.ndarray:
    """`_mask` of a uint32 array (the addition wraps mod 2**32)."""
    return ((crcs >> 15) | (crcs << 17)) + np.uint32(MASK_DELTA)


def framing_headers(payload_lengths: Sequence[int] | np.ndarray,
                    crc_fn: CrcFn = DEFAULT_CRC) -> np.ndarray:
    """The 12-byte header (length, masked CRC of the length) of each record, as an (n, 12)
    uint8 array: what `frame_records` writes before each payload."""
    lengths = np.asarray(payload_lengths, np.int64)
    headers = np.empty(lengths.size, _HEADER_DTYPE)
    headers["length"] = lengths
    headers["length_crc"] = _per_length(lengths, length_crc_cache(crc_fn),
                                        functools.partial(_masked_length_crc, crc_fn=crc_fn))
    return headers.view(np.uint8).reshape(-1, HEADER_SIZE)


def _prefix_correction(n: int, crc_fn: CrcFn) -> int:
    """What XORs crc(footer 0000 + header(n) + payload) into crc(payload), for any payload
    of n bytes.

    CRC-32C is affine over GF(2): for a fixed prefix P and a message M of n bytes,
    crc(P + M) ^ crc(M) does not depend on M's content, so it can be computed once per
    length with M = n zero bytes. The prefix here (a zero footer and the header of an
    n-byte payload) is itself fixed by n.
    """
    zeros = bytes(n)
    prefix = bytes(FOOTER_SIZE) + HEADER.pack(n, _length_crc(n, crc_fn))
    return (crc_fn(prefix + zeros) ^ crc_fn(zeros)) & 0xFFFFFFFF


def framed_size(payload_len: int) -> int:
    """Bytes a payload of `payload_len` bytes takes once framed."""
    return payload_len + HEADER_SIZE + FOOTER_SIZE


def frame_record(payload: bytes, crc_fn: CrcFn = DEFAULT_CRC) -> bytes:
    """Frames one payload as a TFRecord record."""
    n = len(payload)
    return b"".join((HEADER.pack(n, _length_crc(n, crc_fn)), payload,
                     U32.pack(masked_crc32c(payload, crc_fn))))


def frame_parts(parts: Sequence[bytes], crc_fn: CrcFn = DEFAULT_CRC) -> bytes:
    """`frame_record(b"".join(parts), crc_fn)`, copying the parts once: with the default
    CRC-32C, which continues from a previous value, the CRC runs over the parts in turn;
    another `crc_fn` gets the joined payload."""
    n = sum(map(len, parts))
    if crc_fn is DEFAULT_CRC:
        crc = 0
        for part in parts:
            crc = DEFAULT_CRC(part, crc)
    else:
        crc = crc_fn(b"".join(parts))
    return b"".join((HEADER.pack(n, _length_crc(n, crc_fn)), *parts, U32.pack(_mask(crc))))


def frame_records(payloads: Sequence[bytes], crc_fn: CrcFn = DEFAULT_CRC) -> bytes:
    """The concatenation of `frame_record` of each payload: the writer's hot path. Per record only
    the payload CRC and a `len` run in Python; length CRCs come from a per-length cache, and for
    larger batches headers and footers are masked and packed with numpy."""
    return _frame(payloads, list(map(len, payloads)), crc_fn)


def _frame(payloads: Sequence[bytes], lengths: list[int], crc_fn: CrcFn) -> bytes:
    n = len(payloads)
    if n == 0:
        return b""
    cache = length_crc_cache(crc_fn)
    if n < _VECTOR_THRESHOLD:
        parts = []
        append = parts.append
        pack_header = HEADER.pack
        pack_footer = U32.pack
        for payload, size in zip(payloads, lengths, strict=True):
            length_crc = cache.get(size)
            if length_crc is None:
                length_crc = cache[size] = _masked_length_crc(size, crc_fn)
            crc = crc_fn(payload)
            append(pack_header(size, length_crc))
            append(payload)
            append(pack_footer((((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF))
        return b"".join(parts)

    crcs = np.fromiter(map(crc_fn, payloads), dtype=np.uint32, count=n)
    # Record i's footer and record i+1's header are adjacent: build them as one 16-byte
    # separator so the join interleaves 2n+1 pieces instead of 3n.
    seps = np.empty(n + 1, dtype=_SEPARATOR)
    seps["footer"][0] = 0
    seps["footer"][1:] = _mask_array(crcs)
    seps["length"][:-1] = lengths
    seps["length"][-1] = 0
    seps["length_crc"][:-1] = _per_length(np.asarray(lengths, np.int64), cache,
                                          functools.partial(_masked_length_crc, crc_fn=crc_fn))
    seps["length_crc"][-1] = 0
    pieces = seps.view("V16").tolist()
    parts = [b""] * (2 * n + 1)
    parts[0] = pieces[0][FOOTER_SIZE:]
    parts[1::2] = payloads
    parts[2 : 2 * n - 1 : 2] = pieces[1:n]
    parts[2 * n] = pieces[n][:FOOTER_SIZE]
    return b"".join(parts)


def _span_crcs(buffer: np.ndarray, bounds: np.ndarray, crc_fn: CrcFn) -> Iterator[int]:
    """`crc_fn` of each span `buffer[bounds[i]:bounds[i + 1]]`, in order."""
    if (int(bounds[-1]) - int(bounds[0])) >= _VIEW_CRC_MIN_SPAN * (len(bounds) - 1):
        view = memoryview(buffer)
        return (crc_fn(view[start:end]) for start, end in itertools.pairwise(bounds.tolist()))
    import pyarrow as pa  # lazily: the image path does not otherwise need it

    spans = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), pa.py_buffer(buffer)])
    return map(crc_fn, spans.to_numpy(zero_copy_only=False))


class FramedRecords(Sequence[bytes]):
    """Payloads already framed as TFRecords, back to back in one buffer.

    Converters frame their records where they are produced (on a converter thread, see
    `transforms.ordered_pool`), so the sink only compresses and writes; and one buffer moves
    between Beam workers far cheaper than thousands of small bytes objects. As a sequence it
    reads as the payloads (framing stripped). Pickled with protocol 5, `data` and `ends` are
    out-of-band buffers, moved without a copy by a pickler given a `buffer_callback` (as
    `transforms.forked_pool` does).

    Attributes:
      data: what `frame_records` returns: bytes, or another read-only bytes-like object (a
        memoryview over the encoder's buffer, or over a buffer received out of band).
      ends: int64 array, the end offset in `data` of each framed record.
    """

    __slots__ = ("data", "ends")

    def __init__(self, data: bytes | memoryview, ends: np.ndarray):
        self.data = data
        self.ends = np.asarray(ends, dtype=np.int64)
        if self.ends.ndim != 1 or (self.ends.size and int(self.ends[-1]) != len(data)):
            raise ValueError("FramedRecords: ends must be 1-d and end at len(data)")

    @classmethod
    def frame(cls, payloads: Sequence[bytes], crc_fn: CrcFn = DEFAULT_CRC) -> FramedRecords:
        """Frames `payloads` (see `frame_records`)."""
        lengths = list(map(len, payloads))
        sizes = np.array(lengths, dtype=np.int64) + _FRAMING_BYTES
        return cls(_frame(payloads, lengths, crc_fn), np.cumsum(sizes))

    @classmethod
    def complete(cls, buffer: np.ndarray, payload_lengths: np.ndarray,
                 crc_fn: CrcFn = DEFAULT_CRC) -> FramedRecords:
        """Framed records from a buffer (uint8) laid out as framed records, headers written
        (`framing_headers`) and footers zero: the footers are computed and written in place.

        This is how the vectorised encoders frame a batch without a bytes object per record.
        Payload CRCs come from CRCs of the spans between payload ends (the previous record's
        zero footer, a header and a payload; `crc_fn` gets each as a bytes-like object, see
        `_span_crcs`) and a per-length correction (`_prefix_correction`), so `crc_fn` must be
        a CRC-32C implementation, as `frame_records` needs too.
        """
        lengths = np.asarray(payload_lengths, np.int64)
        n = lengths.size
        ends = np.cumsum(lengths + _FRAMING_BYTES)
        if buffer.dtype != np.uint8 or buffer.ndim != 1 or buffer.size != (int(ends[-1]) if n else 0):
            raise ValueError("FramedRecords.complete: buffer must be 1-d uint8, as long as the "
                             "framed records")
        if n == 0:
            return cls(b"", ends)
        payload_ends = ends - FOOTER_SIZE
        crcs = np.empty(n, np.uint32)
        crcs[0] = crc_fn(buffer[HEADER_SIZE : payload_ends[0]].tobytes())
        if n > 1:
            crcs[1:] = np.fromiter(_span_crcs(buffer, payload_ends, crc_fn), np.uint32, n - 1)
            cache = length_crc_cache(crc_fn, _PREFIX_CORRECTION_CACHE)
            crcs[1:] ^= _per_length(lengths[1:], cache, lambda size: _prefix_correction(size, crc_fn))
        footers = _mask_array(crcs).astype("<u4").view(np.uint8).reshape(n, FOOTER_SIZE)
        buffer[payload_ends[:, None] + np.arange(FOOTER_SIZE)] = footers
        return cls(memoryview(buffer).toreadonly(), ends)  # no copy of the whole batch

    def __len__(self) -> int:
        return len(self.ends)

    def _start(self, i: int) -> int:
        return int(self.ends[i - 1]) if i > 0 else 0

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if start == 0 and stop == len(self):
                return self
            stop = max(start, stop)
            first, last = self._start(start), self._start(stop)
            return FramedRecords(self.data[first:last], self.ends[start:stop] - first)
        i = range(len(self))[index]  # IndexError and negative indices as for a list
        return bytes(self.data[self._start(i) + HEADER_SIZE : int(self.ends[i]) - FOOTER_SIZE])

    def __iter__(self) -> Iterator[bytes]:
        view, start = memoryview(self.data), 0
        for end in self.ends.tolist():
            yield bytes(view[start + HEADER_SIZE : end - FOOTER_SIZE])
            start = end

    def __eq__(self, other) -> bool:
        if isinstance(other, FramedRecords):
            return self.data == other.data and np.array_equal(self.ends, other.ends)
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # mutable-looking sequence semantics, like list

    def __repr__(self) -> str:
        return f"FramedRecords({len(self)} records, {len(self.data)} bytes)"

    def __reduce_ex__(self, protocol):
        data = self.data
        if protocol >= 5:
            data = pickle.PickleBuffer(data)  # out of band when the pickler takes buffers
        elif not isinstance(data, bytes):
            data = bytes(data)
        return FramedRecords, (data, self.ends)

    def framed_sizes(self) -> np.ndarray:
        """Bytes each framed record takes (payload + 16)."""
        return np.diff(self.ends, prepend=0)


# --------------------------------------------------------------------------- writing


class TFRecordWriter:
    """Writes TFRecord records, optionally compressed, to a raw binary file object, counting
    them in `records_written`. `close()` finishes the compressed stream but leaves the file
    open (the caller owns it, e.g. a Beam FileSystems handle that must be closed to commit)."""

    def __init__(
        self,
        raw_binary_file: BinaryIO,
        compression: str | Compression | None = Compression.NONE,
        level: int | None = None,
        crc_fn: CrcFn = DEFAULT_CRC,
    ):
        self._out = open_compressor(raw_binary_file, compression, level)
        self._crc_fn = crc_fn
        self.compression = self._out.compression
        self.records_written = 0

    def write(self, payload: bytes) -> None:
        self._out.write(frame_record(payload, self._crc_fn))
        self.records_written += 1

    def write_framed(self, framed: bytes, num_records: int) -> None:
        """Writes `num_records` records already framed by `frame_records` (the fast path)."""
        self._out.write(framed)
        self.records_written += num_records

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.close()

    @property
    def closed(self) -> bool:
        return self._out.closed

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
