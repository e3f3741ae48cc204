"""TFRecord framing and compression, byte-compatible with TensorFlow, without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64  length          little endian
    uint32  masked_crc32c(length bytes)
    byte    payload[length]
    uint32  masked_crc32c(payload)

where ``masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)`` and
``crc`` is the CRC-32C (Castagnoli) of ``x``, computed with the ``crc32c`` package. Every
function that computes a CRC takes a ``crc_fn`` argument so that the CRC implementation
can be swapped (tests, or a platform without the ``crc32c`` wheel).

Compression: the whole record stream is compressed, exactly the three ways TensorFlow's
``tf.data.TFRecordDataset(compression_type=...)`` reads:

* ``NONE`` (TensorFlow ``""``): the framed records as they are.
* ``GZIP``: one RFC 1952 gzip stream (the reader also accepts concatenated gzip members,
  as TensorFlow does).
* ``ZLIB``: one RFC 1950 zlib stream. TensorFlow silently ignores bytes after the end of
  the stream; this reader refuses them, because our writer never produces them and they
  mean the file is not what was written.

Anything else (bzip2, zstd, lzma, snappy, Beam's ``auto`` ...) is refused with a
``ValueError``: TensorFlow cannot read it, so writing it would produce unusable shards.

Compression level and backend: the ``isal`` package (Intel ISA-L, levels 0-3, several times
faster than zlib) is used when importable, the standard library ``zlib`` otherwise. Both
write standard streams that any inflater (and TensorFlow) reads.

* ``level=None``: ISA-L's default level (2); without ``isal``, zlib level 6.
* ``level`` 0-3: ISA-L at that level when ``isal`` is installed, else zlib at that level.
  (ISA-L level 0 still compresses; zlib level 0 stores.)
* ``level`` 4-9: zlib at that level (ISA-L has no such levels).

The level is ignored for ``NONE``. Output is deterministic for a given backend and level
(gzip header with mtime 0 and no file name), but ISA-L and zlib streams differ in bytes.

Reading verifies both CRCs of every record and raises `TFRecordCorruptError` (naming the
file, byte offset and record index) on any mismatch, truncation or bad compressed stream;
a corrupt payload is never returned. Decompression is streaming with bounded memory.

This module is Beam-free except `read_tfrecord_file`, which opens files through
``apache_beam.io.filesystems.FileSystems`` (imported lazily) so that any Beam filesystem
(gs://, ...) works.
"""

from __future__ import annotations

import enum
import functools
import itertools
import pickle
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

import crc32c
import numpy as np

try:
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - isal is a declared dependency
    _isal_zlib = None

__all__ = [
    "MAX_RECORD_BYTES",
    "Compression",
    "FramedRecords",
    "RecordInfo",
    "TFRecordCorruptError",
    "TFRecordWriter",
    "compression_from_path",
    "frame_parts",
    "frame_record",
    "frame_records",
    "framed_size",
    "framing_headers",
    "iter_records",
    "masked_crc32c",
    "open_compressor",
    "parse_compression",
    "read_tfrecord_file",
    "shard_suffix",
]

#: Whether the ISA-L backend is used. Tests set this to False to force the zlib fallback.
_HAVE_ISAL = _isal_zlib is not None

CrcFn = Callable[[bytes], int]

_DEFAULT_CRC: CrcFn = crc32c.crc32c
_MASK_DELTA = 0xA282EAD8
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")  # length, masked crc of the length
_HEADER_SIZE = 12
_FOOTER_SIZE = 4
_FRAMING_BYTES = _HEADER_SIZE + _FOOTER_SIZE
_ISAL_DEFAULT_LEVEL = 2
_ZLIB_DEFAULT_LEVEL = 6
_ISAL_MAX_LEVEL = 3
# Below this many records the numpy set-up costs more than it saves.
_VECTOR_THRESHOLD = 128
# Bytes read from the underlying file at a time, and the largest single read request
# (so a huge declared length cannot make us allocate it before the data exists).
_READ_CHUNK = 1 << 20
#: The longest record payload the reader accepts (see `iter_records`): far above any record
#: this tool writes (images are capped at 64 MiB by default), far below what exhausts memory.
MAX_RECORD_BYTES = 256 << 20
_MAX_READ = 64 << 20

# Masked CRC of the 8 length bytes, per length, for the default CRC function.
# Record lengths repeat a lot (fixed-size rows), so this removes one CRC per record.
_LENGTH_CRC_CACHE: dict[int, int] = {}
_LENGTH_CRC_CACHE_MAX = 1 << 16

_SEPARATOR = np.dtype([("footer", "<u4"), ("length", "<u8"), ("length_crc", "<u4")])
_HEADER_DTYPE = np.dtype([("length", "<u8"), ("length_crc", "<u4")])  # packed: 12 bytes

# Per payload length, for the default CRC function: the CRC correction of a payload CRC
# computed with the 16 framing bytes before it (see `FramedRecords.complete`).
_PREFIX_CORRECTION_CACHE: dict[int, int] = {}
# Mean span (record plus framing) from which `FramedRecords.complete` hands the CRC function
# memoryview slices rather than bytes copies cut by pyarrow. Measured per 62,500 records:
# copies win below ~225 bytes (60 B: 16 vs 27 ms), views above (400 B: 18 vs 30 ms).
_VIEW_CRC_MIN_SPAN = 256


class Compression(enum.Enum):
    """The compressions TensorFlow's TFRecordDataset can read."""

    NONE = "none"
    GZIP = "gzip"
    ZLIB = "zlib"


_ALLOWED = "none|gzip|zlib"
_SUFFIXES = {
    Compression.NONE: ".tfrecord",
    Compression.GZIP: ".tfrecord.gz",
    Compression.ZLIB: ".tfrecord.zz",
}
_WBITS = {Compression.GZIP: 31, Compression.ZLIB: 15}
_GZIP_MAGIC = b"\x1f\x8b"


def parse_compression(value: str | Compression | None) -> Compression:
    """Returns the `Compression` named by `value`.

    Accepts a `Compression`, None (NONE), or a case-insensitive name: "none", "gzip",
    "zlib", TensorFlow's spellings "" (NONE), "GZIP", "ZLIB", and Beam's
    `CompressionTypes.UNCOMPRESSED` ("uncompressed", NONE).

    Raises:
      ValueError: for any other codec (bzip2, zstd, lzma, snappy, "auto", "deflate", ...),
        because TensorFlow cannot read it.
    """
    if value is None:
        return Compression.NONE
    if isinstance(value, Compression):
        return value
    if not isinstance(value, str):
        raise ValueError(
            f"compression must be a string or Compression, got {type(value).__name__} "
            f"{value!r}; allowed: {_ALLOWED}"
        )
    name = value.strip().lower()
    if name in ("", "uncompressed"):
        return Compression.NONE
    try:
        return Compression(name)
    except ValueError:
        raise ValueError(
            f"unsupported TFRecord compression {value!r}: TensorFlow cannot read it; allowed: {_ALLOWED}"
        ) from None


def compression_from_path(path: str) -> Compression:
    """Guesses the compression from the file name: .gz -> GZIP, .zz/.zlib -> ZLIB, else NONE."""
    lower = str(path).lower()
    if lower.endswith(".gz"):
        return Compression.GZIP
    if lower.endswith((".zz", ".zlib")):
        return Compression.ZLIB
    return Compression.NONE


def shard_suffix(compression: str | Compression | None) -> str:
    """The file suffix for shards: ".tfrecord", ".tfrecord.gz" or ".tfrecord.zz"."""
    return _SUFFIXES[parse_compression(compression)]


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes, crc_fn: CrcFn = _DEFAULT_CRC) -> int:
    """The masked CRC-32C of `data`, as stored in TFRecord headers and footers."""
    return _mask(crc_fn(data) & 0xFFFFFFFF)


def _length_crc_cache(crc_fn: CrcFn, shared: dict[int, int] = _LENGTH_CRC_CACHE) -> dict[int, int]:
    if crc_fn is _DEFAULT_CRC:
        if len(shared) > _LENGTH_CRC_CACHE_MAX:
            shared.clear()
        return shared
    return {}  # unknown CRC function: cache for this call only


def _masked_length_crc(n: int, crc_fn: CrcFn = _DEFAULT_CRC) -> int:
    """The masked CRC of a payload length's 8 bytes (what a record header holds)."""
    return masked_crc32c(_U64.pack(n), crc_fn)


def _length_crc(n: int, crc_fn: CrcFn = _DEFAULT_CRC) -> int:
    """`_masked_length_crc`, cached for the default CRC."""
    cache = _length_crc_cache(crc_fn)
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
    return ((crcs >> 15) | (crcs << 17)) + np.uint32(_MASK_DELTA)


def framing_headers(payload_lengths: Sequence[int] | np.ndarray,
                    crc_fn: CrcFn = _DEFAULT_CRC) -> np.ndarray:
    """The 12-byte header (length, masked CRC of the length) of each record, as an (n, 12)
    uint8 array: what `frame_records` writes before each payload."""
    lengths = np.asarray(payload_lengths, np.int64)
    headers = np.empty(lengths.size, _HEADER_DTYPE)
    headers["length"] = lengths
    headers["length_crc"] = _per_length(lengths, _length_crc_cache(crc_fn),
                                        functools.partial(_masked_length_crc, crc_fn=crc_fn))
    return headers.view(np.uint8).reshape(-1, _HEADER_SIZE)


def _prefix_correction(n: int, crc_fn: CrcFn) -> int:
    """What XORs crc(footer 0000 + header(n) + payload) into crc(payload), for any payload
    of n bytes.

    CRC-32C is affine over GF(2): for a fixed prefix P and a message M of n bytes,
    crc(P + M) ^ crc(M) does not depend on M's content, so it can be computed once per
    length with M = n zero bytes. The prefix here (a zero footer and the header of an
    n-byte payload) is itself fixed by n.
    """
    zeros = bytes(n)
    prefix = bytes(_FOOTER_SIZE) + _HEADER.pack(n, _length_crc(n, crc_fn))
    return (crc_fn(prefix + zeros) ^ crc_fn(zeros)) & 0xFFFFFFFF


def framed_size(payload_len: int) -> int:
    """Bytes a payload of `payload_len` bytes takes once framed."""
    return payload_len + _HEADER_SIZE + _FOOTER_SIZE


def frame_record(payload: bytes, crc_fn: CrcFn = _DEFAULT_CRC) -> bytes:
    """Frames one payload as a TFRecord record."""
    n = len(payload)
    return b"".join((_HEADER.pack(n, _length_crc(n, crc_fn)), payload,
                     _U32.pack(masked_crc32c(payload, crc_fn))))


def frame_parts(parts: Sequence[bytes], crc_fn: CrcFn = _DEFAULT_CRC) -> bytes:
    """`frame_record(b"".join(parts), crc_fn)`, copying the parts once: with the default
    CRC-32C, which continues from a previous value, the CRC runs over the parts in turn;
    another `crc_fn` gets the joined payload."""
    n = sum(map(len, parts))
    if crc_fn is _DEFAULT_CRC:
        crc = 0
        for part in parts:
            crc = _DEFAULT_CRC(part, crc)
    else:
        crc = crc_fn(b"".join(parts))
    return b"".join((_HEADER.pack(n, _length_crc(n, crc_fn)), *parts, _U32.pack(_mask(crc))))


def frame_records(payloads: Sequence[bytes], crc_fn: CrcFn = _DEFAULT_CRC) -> bytes:
    """Frames many payloads; the result is the concatenation of `frame_record` of each.

    This is the writer's hot path. Per record, only the payload CRC and a `len` are computed
    in Python; the length CRCs come from a per-length cache, and for larger batches the
    masking and packing of headers/footers is vectorised with numpy.
    """
    return _frame(payloads, list(map(len, payloads)), crc_fn)


def _frame(payloads: Sequence[bytes], lengths: list[int], crc_fn: CrcFn) -> bytes:
    """`frame_records`, given the payload lengths (which callers may need as well)."""
    n = len(payloads)
    if n == 0:
        return b""
    cache = _length_crc_cache(crc_fn)
    if n < _VECTOR_THRESHOLD:
        parts = []
        append = parts.append
        pack_header = _HEADER.pack
        pack_footer = _U32.pack
        for payload, size in zip(payloads, lengths, strict=True):
            length_crc = cache.get(size)
            if length_crc is None:
                length_crc = cache[size] = _masked_length_crc(size, crc_fn)
            crc = crc_fn(payload)
            append(pack_header(size, length_crc))
            append(payload)
            append(pack_footer((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF))
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
    parts[0] = pieces[0][_FOOTER_SIZE:]
    parts[1::2] = payloads
    parts[2 : 2 * n - 1 : 2] = pieces[1:n]
    parts[2 * n] = pieces[n][:_FOOTER_SIZE]
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
    `transforms.ordered_pool`), so the sink only compresses and writes; and one buffer
    moves between Beam workers far cheaper than thousands of small bytes objects. As a
    sequence it reads as the payloads (framing stripped), so code that just iterates
    records does not care which form it got.

    Pickled with protocol 5, `data` and `ends` are out-of-band buffers: a pickler given a
    `buffer_callback` (as `transforms.forked_pool` does) moves them without copying them
    into the pickle.

    Attributes:
      data: the framed records, concatenated (what `frame_records` returns): bytes, or
        another read-only bytes-like object (a `memoryview` over the encoder's buffer, or
        over a received buffer after out-of-band unpickling).
      ends: int64 array, the end offset in `data` of each framed record.
    """

    __slots__ = ("data", "ends")

    def __init__(self, data: bytes | memoryview, ends: np.ndarray):
        self.data = data
        self.ends = np.asarray(ends, dtype=np.int64)
        if self.ends.ndim != 1 or (self.ends.size and int(self.ends[-1]) != len(data)):
            raise ValueError("FramedRecords: ends must be 1-d and end at len(data)")

    @classmethod
    def frame(cls, payloads: Sequence[bytes], crc_fn: CrcFn = _DEFAULT_CRC) -> FramedRecords:
        """Frames `payloads` (see `frame_records`)."""
        lengths = list(map(len, payloads))
        sizes = np.array(lengths, dtype=np.int64) + _FRAMING_BYTES
        return cls(_frame(payloads, lengths, crc_fn), np.cumsum(sizes))

    @classmethod
    def complete(cls, buffer: np.ndarray, payload_lengths: np.ndarray,
                 crc_fn: CrcFn = _DEFAULT_CRC) -> FramedRecords:
        """Framed records from a buffer already laid out as framed records, headers
        written (`framing_headers`) and every 4-byte footer zero: the payload CRCs are
        computed and the footers written into `buffer` (uint8, modified in place).

        This is how the vectorised Example encoder frames a batch it renders with the
        framing slots in place, without one bytes object and one join part per record.
        The payload CRCs come from CRCs of the spans between payload ends (each is the
        previous record's zero footer, a header and a payload; `crc_fn` gets each as a
        bytes-like object, see `_span_crcs`) and a per-length correction
        (`_prefix_correction`), so `crc_fn` must be a CRC-32C implementation: exactly what
        `frame_records` needs too.
        """
        lengths = np.asarray(payload_lengths, np.int64)
        n = lengths.size
        ends = np.cumsum(lengths + _FRAMING_BYTES)
        if buffer.dtype != np.uint8 or buffer.ndim != 1 or buffer.size != (int(ends[-1]) if n else 0):
            raise ValueError("FramedRecords.complete: buffer must be 1-d uint8, as long as the "
                             "framed records")
        if n == 0:
            return cls(b"", ends)
        payload_ends = ends - _FOOTER_SIZE
        crcs = np.empty(n, np.uint32)
        crcs[0] = crc_fn(buffer[_HEADER_SIZE : payload_ends[0]].tobytes())
        if n > 1:
            crcs[1:] = np.fromiter(_span_crcs(buffer, payload_ends, crc_fn), np.uint32, n - 1)
            cache = _length_crc_cache(crc_fn, _PREFIX_CORRECTION_CACHE)
            crcs[1:] ^= _per_length(lengths[1:], cache, lambda size: _prefix_correction(size, crc_fn))
        footers = _mask_array(crcs).astype("<u4").view(np.uint8).reshape(n, _FOOTER_SIZE)
        buffer[payload_ends[:, None] + np.arange(_FOOTER_SIZE)] = footers
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
        return bytes(self.data[self._start(i) + _HEADER_SIZE : int(self.ends[i]) - _FOOTER_SIZE])

    def __iter__(self) -> Iterator[bytes]:
        view, start = memoryview(self.data), 0
        for end in self.ends.tolist():
            yield bytes(view[start + _HEADER_SIZE : end - _FOOTER_SIZE])
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


def _select_backend(level: int | None) -> tuple[str, object, int]:
    """(backend name, zlib-like module, effective level) for a compression level."""
    if level is None:
        if _HAVE_ISAL:
            return "isal", _isal_zlib, _ISAL_DEFAULT_LEVEL
        return "zlib", zlib, _ZLIB_DEFAULT_LEVEL
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise ValueError(f"compression level must be None or an integer 0-9, got {level!r}")
    if level <= _ISAL_MAX_LEVEL and _HAVE_ISAL:
        return "isal", _isal_zlib, level
    return "zlib", zlib, level


class _CompressingWriter:
    """Compresses what is written to it into `raw`; close() ends the stream, not `raw`.

    Deliberately not an io.IOBase: IOBase closes itself on garbage collection, which would
    append a valid stream trailer to a file whose writing failed half way.
    """

    def __init__(self, raw: BinaryIO, compression: Compression, level: int | None):
        self.compression = compression
        if compression is Compression.NONE:
            self.backend, self.level, self._compressor = None, None, None
        else:
            self.backend, module, self.level = _select_backend(level)
            self._compressor = module.compressobj(self.level, module.DEFLATED, _WBITS[compression])
        self._raw = raw
        self.closed = False

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:
        if self.closed:
            raise ValueError("write to a closed compressor")
        if self._compressor is None:
            self._raw.write(data)
        else:
            out = self._compressor.compress(data)
            if out:
                self._raw.write(out)
        return len(data)

    def flush(self) -> None:
        """Flushes `raw` (not the compressor: a sync flush would enlarge the stream)."""
        self._raw.flush()

    def close(self) -> None:
        """Writes the end of the compressed stream; `raw` stays open."""
        if self.closed:
            return
        self.closed = True
        if self._compressor is not None:
            self._raw.write(self._compressor.flush())
            self._compressor = None
        self._raw.flush()

    def __enter__(self) -> _CompressingWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def open_compressor(
    raw_binary_file: BinaryIO,
    compression: str | Compression | None,
    level: int | None = None,
):
    """A writable file object that compresses into `raw_binary_file`.

    See the module docstring for the level/backend rules. The returned object has
    ``write``, ``flush``, ``close`` (ends the compressed stream but does NOT close
    `raw_binary_file`), is a context manager, and exposes ``backend`` ("isal", "zlib" or
    None for NONE) and the effective ``level``.
    """
    return _CompressingWriter(raw_binary_file, parse_compression(compression), level)


class TFRecordWriter:
    """Writes TFRecord records, optionally compressed, to a raw binary file object.

    `close()` finishes the compressed stream but leaves `raw_binary_file` open (the caller
    owns it, e.g. a Beam FileSystems handle that must be closed to commit).

    Attributes:
      records_written: number of records written.
      bytes_written_uncompressed: framed bytes written, before compression.
    """

    def __init__(
        self,
        raw_binary_file: BinaryIO,
        compression: str | Compression | None = Compression.NONE,
        level: int | None = None,
        crc_fn: CrcFn = _DEFAULT_CRC,
    ):
        self._out = open_compressor(raw_binary_file, compression, level)
        self._crc_fn = crc_fn
        self.compression = self._out.compression
        self.records_written = 0
        self.bytes_written_uncompressed = 0

    def write(self, payload: bytes) -> None:
        """Frames and writes one payload."""
        framed = frame_record(payload, self._crc_fn)
        self._out.write(framed)
        self.records_written += 1
        self.bytes_written_uncompressed += len(framed)

    def write_framed(self, framed: bytes, num_records: int | None = None) -> None:
        """Writes bytes already framed by `frame_records` (the fast path).

        Args:
          framed: concatenated framed records.
          num_records: how many records `framed` holds, if the caller knows; otherwise
            they are counted by walking the length fields, which also checks that
            `framed` is a whole number of records.

        Raises:
          ValueError: if `num_records` is None and `framed` is not whole records.
        """
        if num_records is None:
            num_records = _count_framed(framed)
        self._out.write(framed)
        self.records_written += num_records
        self.bytes_written_uncompressed += len(framed)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """Finishes the compressed stream; the raw file stays open."""
        self._out.close()

    @property
    def closed(self) -> bool:
        return self._out.closed

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _count_framed(framed: bytes) -> int:
    pos, count, end = 0, 0, len(framed)
    unpack = _U64.unpack_from
    while pos < end:
        if end - pos < _HEADER_SIZE:
            raise ValueError(f"framed bytes end with a partial record header at byte {pos}")
        (length,) = unpack(framed, pos)
        pos += length + _HEADER_SIZE + _FOOTER_SIZE
        count += 1
    if pos != end:
        raise ValueError("framed bytes end with a partial record")
    return count


# --------------------------------------------------------------------------- reading


class TFRecordCorruptError(ValueError):
    """A TFRecord stream is corrupt or truncated.

    Attributes:
      path: the file (or the `path` label given to `iter_records`).
      offset: byte offset of the start of the failing record in the record stream, i.e.
        in the file for NONE and in the decompressed stream for GZIP/ZLIB.
      index: 0-based index of the failing record.
      reason: what is wrong.
    """

    def __init__(self, path: str, offset: int, index: int, reason: str):
        super().__init__(f"{path}: corrupt TFRecord at byte offset {offset} (record index {index}): {reason}")
        self.path = path
        self.offset = offset
        self.index = index
        self.reason = reason

    def __reduce__(self):  # keep the attributes across pickling (Beam workers)
        return (type(self), (self.path, self.offset, self.index, self.reason))


class RecordInfo(NamedTuple):
    """One record read back: its index, its byte offset in the record stream, its payload."""

    index: int
    offset: int
    payload: bytes


class _StreamError(Exception):
    """The compressed stream is bad; converted to TFRecordCorruptError with a position."""


class _Inflater:
    """Streams the decompressed bytes of a gzip or zlib stream with bounded memory."""

    def __init__(self, raw: BinaryIO, compression: Compression):
        self._raw = raw
        self._compression = compression
        self._module = _isal_zlib if _HAVE_ISAL else zlib
        self._errors = (zlib.error,) if _isal_zlib is None else (zlib.error, _isal_zlib.error)
        self._inflater = self._new()
        self._started = False  # any compressed byte seen
        self._done = False

    def _new(self):
        return self._module.decompressobj(_WBITS[self._compression])

    def read(self, size: int) -> bytes:
        """Up to `size` (>0) decompressed bytes; b"" only at the clean end of the stream."""
        name = self._compression.value
        while not self._done:
            inflater = self._inflater
            try:
                if inflater.unconsumed_tail:
                    data = inflater.decompress(inflater.unconsumed_tail, size)
                elif inflater.eof:
                    rest = inflater.unused_data or self._raw.read(_READ_CHUNK)
                    if not rest:
                        self._done = True
                        break
                    if self._compression is Compression.ZLIB:
                        raise _StreamError("unexpected bytes after the end of the zlib stream")
                    # Another gzip member may follow (RFC 1952 allows it; TensorFlow reads it).
                    while len(rest) < 2:
                        more = self._raw.read(_READ_CHUNK)
                        if not more:
                            break
                        rest += more
                    if rest[:2] != _GZIP_MAGIC:
                        raise _StreamError(
                            "unexpected bytes after the end of the gzip stream (not a gzip member)"
                        )
                    self._inflater = self._new()
                    data = self._inflater.decompress(rest, size)
                else:
                    chunk = self._raw.read(_READ_CHUNK)
                    if not chunk:
                        if not self._started:  # an empty file is an empty record stream
                            self._done = True
                            break
                        raise _StreamError(f"truncated {name} stream (unexpected end of file)")
                    self._started = True
                    data = inflater.decompress(chunk, size)
            except self._errors as e:
                raise _StreamError(f"bad {name} stream: {e}") from e
            if data:
                return data
        return b""


class _Source:
    """A buffer over a read(n) callable that hands out exact byte counts."""

    def __init__(self, read: Callable[[int], bytes]):
        self._read = read
        self.buf = b""
        self.pos = 0
        self.base = 0  # stream offset of buf[0]

    def fill(self, need: int) -> int:
        """Makes `need` bytes available from pos if the stream has them; returns how many are."""
        have = len(self.buf) - self.pos
        parts = [self.buf[self.pos :]]
        self.base += self.pos
        self.pos = 0
        while have < need:
            chunk = self._read(max(_READ_CHUNK, min(need - have, _MAX_READ)))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        return have


def _open_stream(binary_file: BinaryIO, compression: Compression) -> Callable[[int], bytes]:
    if compression is Compression.NONE:
        return binary_file.read
    return _Inflater(binary_file, compression).read


def iter_records(
    binary_file: BinaryIO,
    compression: str | Compression | None = Compression.NONE,
    path: str = "<stream>",
    crc_fn: CrcFn = _DEFAULT_CRC,
    verify: bool = True,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> Iterator[RecordInfo]:
    """Reads the records of a TFRecord stream from a binary file object.

    Args:
      binary_file: raw (not auto-decompressing) binary file object, read from its
        current position.
      compression: how the stream is compressed (see `parse_compression`).
      path: name used in errors.
      crc_fn: the CRC-32C function.
      verify: check the length and payload CRCs of every record. Truncation and bad
        compressed streams are detected either way.
      max_record_bytes: a record claiming a longer payload is reported as corruption before
        any of it is read, so a hostile length field (or a small gzip stream inflating to
        gigabytes) cannot exhaust memory.

    Yields:
      `RecordInfo(index, offset, payload)`; `offset` is the byte offset of the record's
      start in the record stream: the file offset for NONE, the offset in the
      decompressed stream for GZIP/ZLIB.

    Raises:
      TFRecordCorruptError: on a length or payload CRC mismatch, a truncated header,
        payload or footer, or a bad/truncated gzip or zlib stream. Records before the
        corruption have been yielded; the corrupt one never is.
    """
    compression = parse_compression(compression)
    source = _Source(_open_stream(binary_file, compression))
    cache = _length_crc_cache(crc_fn) if verify else {}
    unpack_header = _HEADER.unpack_from
    unpack_footer = _U32.unpack_from
    index = 0
    while True:
        buf, pos = source.buf, source.pos
        offset = source.base + pos
        try:
            if len(buf) - pos < _HEADER_SIZE:
                have = source.fill(_HEADER_SIZE)
                if have == 0:
                    return
                if have < _HEADER_SIZE:
                    raise _StreamError(f"truncated record header: {have} of {_HEADER_SIZE} bytes")
                buf, pos = source.buf, source.pos
            length, length_crc = unpack_header(buf, pos)
            if verify:
                expected = cache.get(length)
                if expected is None:
                    expected = masked_crc32c(buf[pos : pos + 8], crc_fn)
                    if len(cache) < _LENGTH_CRC_CACHE_MAX:
                        cache[length] = expected
                if length_crc != expected:
                    raise _StreamError(
                        f"length CRC mismatch (stored 0x{length_crc:08x}, computed "
                        f"0x{expected:08x} for length {length})"
                    )
            if length > max_record_bytes:
                raise _StreamError(f"record length {length} exceeds the reader's limit of "
                                   f"{max_record_bytes} bytes")
            total = _HEADER_SIZE + length + _FOOTER_SIZE
            if len(buf) - pos < total:
                have = source.fill(total)
                if have < total:
                    if have < _HEADER_SIZE + length:
                        got = have - _HEADER_SIZE
                        raise _StreamError(f"truncated payload: {got} of {length} bytes")
                    got = have - _HEADER_SIZE - length
                    raise _StreamError(f"truncated footer: {got} of {_FOOTER_SIZE} bytes")
                buf, pos = source.buf, source.pos
            start = pos + _HEADER_SIZE
            payload = buf[start : start + length]
            if verify:
                (data_crc,) = unpack_footer(buf, start + length)
                crc = crc_fn(payload)
                expected = (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
                if data_crc != expected:
                    raise _StreamError(
                        f"data CRC mismatch (stored 0x{data_crc:08x}, computed 0x{expected:08x})"
                    )
        except _StreamError as e:
            raise TFRecordCorruptError(path, offset, index, str(e)) from e.__cause__
        source.pos = pos + total
        yield RecordInfo(index, offset, payload)
        index += 1


def read_tfrecord_file(path: str, compression: str | Compression | None = None) -> Iterator[bytes]:
    """Yields the payloads of one TFRecord file on any Beam filesystem.

    Args:
      path: file path or URI.
      compression: the file's compression; None guesses it from the suffix
        (see `compression_from_path`).

    Raises:
      TFRecordCorruptError: see `iter_records`.
    """
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    resolved = compression_from_path(path) if compression is None else parse_compression(compression)
    # Open raw: decompression is ours, so gzip errors get a record offset and index.
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for record in iter_records(f, resolved, path=path):
            yield record.payload
