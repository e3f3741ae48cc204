"""The whole-stream compression of TFRecord files, exactly the three ways TensorFlow reads them:
the `Compression` enum and its one parser, file suffixes, the compressing writer (ISA-L when
importable, else zlib) and the streaming `Inflater` (bounded memory, errors as `StreamError`).

* ``NONE`` (TensorFlow ``""``): the framed records as they are.
* ``GZIP``: one RFC 1952 gzip stream (the reader also accepts concatenated gzip members,
  as TensorFlow does).
* ``ZLIB``: one RFC 1950 zlib stream (what Beam calls DEFLATE). TensorFlow silently ignores
  bytes after the end of the stream; this reader refuses them, because our writer never
  produces them and they mean the file is not what was written.

Anything else (bzip2, zstd, lzma, snappy, Beam's ``auto`` ...) is refused with a
``ValueError``: TensorFlow cannot read it, so writing it would produce unusable shards.

Levels and backend: ``level=None`` is ISA-L's default (2), or zlib's 6 without ``isal``;
levels 0-3 use ISA-L when installed (ISA-L level 0 still compresses; zlib level 0 stores);
4-9 use zlib. Output is deterministic for a given backend and level (gzip header with mtime 0
and no file name), but ISA-L and zlib streams differ in bytes. Beam-free."""

from __future__ import annotations

import enum
import zlib
from typing import BinaryIO

try:
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - isal is a declared dependency
    _isal_zlib = None

__all__ = ["Compression", "Inflater", "READ_CHUNK", "StreamError", "check_level", "compression_from_path",
           "open_compressor", "parse_compression", "shard_suffix"]


_ISAL_DEFAULT_LEVEL = 2
_ZLIB_DEFAULT_LEVEL = 6
_ISAL_MAX_LEVEL = 3

# Bytes read from the underlying file at a time, and the largest single read request
# (so a huge declared length cannot make us allocate it before the data exists).
READ_CHUNK = 1 << 20


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
    """The `Compression` named by `value`: a `Compression`, None (NONE), or a case-insensitive
    name: "none", "gzip", "zlib", TensorFlow's "" (NONE), Beam's "uncompressed" (NONE).
    Raises ValueError for any other codec ("deflate", "auto", bzip2, ...): TensorFlow cannot
    read it."""
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
    """Guesses the compression from the file name: .gz -> GZIP, .zz/.zlib/.deflate -> ZLIB
    (Beam's `CompressionTypes.DEFLATE` writes the same RFC 1950 stream and names it
    `.deflate`), else NONE."""
    lower = str(path).lower()
    if lower.endswith(".gz"):
        return Compression.GZIP
    if lower.endswith((".zz", ".zlib", ".deflate")):
        return Compression.ZLIB
    return Compression.NONE


def shard_suffix(compression: str | Compression | None) -> str:
    """The file suffix for shards: ".tfrecord", ".tfrecord.gz" or ".tfrecord.zz"."""
    return _SUFFIXES[parse_compression(compression)]


def check_level(level: int | None) -> int | None:
    """`level` when it is None (the codec's default) or 0-9, else raises ValueError."""
    if level is not None and (isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9):
        raise ValueError(f"compression level must be an integer 0-9, got {level!r}")
    return level


class _CompressingWriter:
    """Compresses what is written to it into `raw`; close() ends the stream, not `raw`.

    Deliberately not an io.IOBase: IOBase closes itself on garbage collection, which would
    append a valid stream trailer to a file whose writing failed half way.
    """

    def __init__(self, raw: BinaryIO, compression: Compression, level: int | None):
        self.compression = compression
        self.backend, self.level, self._compressor = None, None, None
        if compression is not Compression.NONE:
            if check_level(level) is None:
                level = _ISAL_DEFAULT_LEVEL if _isal_zlib else _ZLIB_DEFAULT_LEVEL
            self.backend = "isal" if _isal_zlib and level <= _ISAL_MAX_LEVEL else "zlib"
            module = _isal_zlib if self.backend == "isal" else zlib
            self.level = level
            self._compressor = module.compressobj(level, module.DEFLATED, _WBITS[compression])
        self._raw = raw
        self.closed = False

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


def open_compressor(raw_binary_file: BinaryIO, compression: str | Compression | None,
                    level: int | None = None):
    """A writable file object (and context manager) that compresses into `raw_binary_file`;
    `close()` ends the stream, not the file. It tells its `backend` ("isal", "zlib", None for
    NONE) and effective `level` (the rules: the module docstring)."""
    return _CompressingWriter(raw_binary_file, parse_compression(compression), level)


class StreamError(Exception):
    """The compressed stream is bad; converted to TFRecordCorruptError with a position."""


class Inflater:
    """Streams the decompressed bytes of a gzip or zlib stream with bounded memory."""

    def __init__(self, raw: BinaryIO, compression: Compression):
        self._raw = raw
        self._compression = compression
        self._module = _isal_zlib or zlib
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
                    rest = inflater.unused_data or self._raw.read(READ_CHUNK)
                    if not rest:
                        self._done = True
                        break
                    if self._compression is Compression.ZLIB:
                        raise StreamError("unexpected bytes after the end of the zlib stream")
                    # Another gzip member may follow (RFC 1952 allows it; TensorFlow reads it).
                    while len(rest) < 2:
                        more = self._raw.read(READ_CHUNK)
                        if not more:
                            break
                        rest += more
                    if rest[:2] != _GZIP_MAGIC:
                        raise StreamError(
                            "unexpected bytes after the end of the gzip stream (not a gzip member)"
                        )
                    self._inflater = self._new()
                    data = self._inflater.decompress(rest, size)
                else:
                    chunk = self._raw.read(READ_CHUNK)
                    if not chunk:
                        if not self._started:  # an empty file is an empty record stream
                            self._done = True
                            break
                        raise StreamError(f"truncated {name} stream (unexpected end of file)")
                    self._started = True
                    data = inflater.decompress(chunk, size)
            except self._errors as e:
                raise StreamError(f"bad {name} stream: {e}") from e
            if data:
                return data
        return b""
