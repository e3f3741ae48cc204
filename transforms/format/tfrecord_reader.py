"""Reading TFRecord streams with every CRC checked and memory bounded (`iter_records`), and
`sniff_compression`: which compression a file's first bytes show. Decompression streams
through `transforms.format.compression.Inflater`. Beam-free."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple

from transforms.format.compression import READ_CHUNK, Compression, Inflater, StreamError, parse_compression
from transforms.format.tfrecord_format import (
    DEFAULT_CRC,
    FOOTER_SIZE,
    HEADER,
    HEADER_SIZE,
    LENGTH_CRC_CACHE_MAX,
    MASK_DELTA,
    U32,
    CrcFn,
    length_crc_cache,
    masked_crc32c,
)

__all__ = ["MAX_RECORD_BYTES", "SNIFF_BYTES", "RecordInfo", "TFRecordCorruptError", "iter_records",
           "length_crc_problem", "sniff_compression", "truncation_reason"]


#: The longest record payload the reader accepts (see `iter_records`): far above any record
#: this tool writes (images are capped at 64 MiB by default), far below what exhausts memory.
MAX_RECORD_BYTES = 256 << 20


_MAX_READ = 64 << 20


def length_crc_problem(index: int, header: bytes, stored: int, computed: int) -> str:
    """The problem of a record header whose length CRC does not check. On the first record
    the stream is most likely no TFRecord at all (a CSV, an image, ...): saying so beats
    quoting a "length" read from its text."""
    if index == 0:
        return (f"length CRC mismatch in the first record header: not a TFRecord file (it "
                f"starts with {bytes(header)!r}), or a damaged one")
    length = int.from_bytes(header[:8], "little")
    return f"length CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x} for length {length})"


class TFRecordCorruptError(ValueError):
    """A TFRecord stream is corrupt or truncated: at `path`, the record of 0-based `index`
    starting at byte `offset` of the record stream (of the decompressed stream for GZIP/ZLIB)
    is wrong for `reason`."""

    def __init__(self, path: str, offset: int, index: int, reason: str):
        super().__init__(f"{path}: corrupt TFRecord at byte offset {offset} (record index {index}): {reason}")
        self.path, self.offset, self.index, self.reason = path, offset, index, reason

    def __reduce__(self):  # keep the attributes across pickling (Beam workers)
        return (type(self), (self.path, self.offset, self.index, self.reason))


class RecordInfo(NamedTuple):
    """One record read back: its index, its byte offset in the record stream, its payload."""

    index: int
    offset: int
    payload: bytes


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
            chunk = self._read(max(READ_CHUNK, min(need - have, _MAX_READ)))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        return have


def truncation_reason(length: int, available: int) -> str:
    """What a record of `length` payload bytes lacks when only `available` of its framed
    bytes (at least its header) are there."""
    if available < HEADER_SIZE + length:
        return f"truncated payload: {available - HEADER_SIZE} of {length} bytes"
    return f"truncated footer: {available - HEADER_SIZE - length} of {FOOTER_SIZE} bytes"


def iter_records(
    binary_file: BinaryIO,
    compression: str | Compression | None = Compression.NONE,
    path: str = "<stream>",
    crc_fn: CrcFn = DEFAULT_CRC,
) -> Iterator[RecordInfo]:
    """The records of a TFRecord stream, read from a raw (not auto-decompressing) binary file
    at its current position, as `RecordInfo`s (`offset`: in the decompressed stream for
    GZIP/ZLIB). `path` names the file in errors.

    Raises:
      TFRecordCorruptError: on a length or payload CRC mismatch, a truncated header, payload
        or footer, a bad or truncated gzip or zlib stream, or a record longer than
        `MAX_RECORD_BYTES`. Records before it have been yielded; a corrupt one never is.
    """
    compression = parse_compression(compression)
    source = _Source(binary_file.read if compression is Compression.NONE
                     else Inflater(binary_file, compression).read)
    cache = length_crc_cache(crc_fn)
    unpack_header = HEADER.unpack_from
    unpack_footer = U32.unpack_from
    index = 0
    while True:
        buf, pos = source.buf, source.pos
        offset = source.base + pos
        try:
            if len(buf) - pos < HEADER_SIZE:
                have = source.fill(HEADER_SIZE)
                if have == 0:
                    return
                if have < HEADER_SIZE:
                    raise StreamError(f"truncated record header: {have} of {HEADER_SIZE} bytes")
                buf, pos = source.buf, source.pos
            length, length_crc = unpack_header(buf, pos)
            expected = cache.get(length)
            if expected is None:
                expected = masked_crc32c(buf[pos : pos + 8], crc_fn)
                if len(cache) < LENGTH_CRC_CACHE_MAX:
                    cache[length] = expected
            if length_crc != expected:
                raise StreamError(length_crc_problem(index, buf[pos: pos + HEADER_SIZE],
                                                     length_crc, expected))
            # Refused before any of it is read: a hostile length field (or a small gzip
            # stream inflating to gigabytes) cannot exhaust memory.
            if length > MAX_RECORD_BYTES:
                raise StreamError(f"record length {length} exceeds the reader's limit of "
                                   f"{MAX_RECORD_BYTES} bytes")
            total = HEADER_SIZE + length + FOOTER_SIZE
            if len(buf) - pos < total:
                have = source.fill(total)
                if have < total:
                    raise StreamError(truncation_reason(length, have))
                buf, pos = source.buf, source.pos
            start = pos + HEADER_SIZE
            payload = buf[start : start + length]
            (data_crc,) = unpack_footer(buf, start + length)
            crc = crc_fn(payload)
            expected = (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF
            if data_crc != expected:
                raise StreamError(f"data CRC mismatch (stored 0x{data_crc:08x}, computed 0x{expected:08x})")
        except StreamError as e:
            raise TFRecordCorruptError(path, offset, index, str(e)) from e.__cause__
        source.pos = pos + total
        yield RecordInfo(index, offset, payload)
        index += 1


#: How many bytes from the start of a file `sniff_compression` looks at.
SNIFF_BYTES = HEADER_SIZE


def sniff_compression(head: bytes) -> Compression:
    """The compression the first `SNIFF_BYTES` bytes of a file show, for files whose name does
    not say (Beam's `WriteToTFRecord` writes `prefix-00000-of-00001`, compressed or not).

    An uncompressed file starts with a record header whose length CRC checks; gzip with the
    magic bytes 1f 8b; zlib (Beam: DEFLATE) with a two-byte header whose method is deflate and
    whose value is a multiple of 31 (RFC 1950). The header test comes first: a TFRecord whose
    first length bytes look like a gzip or zlib header still has a matching length CRC, which
    a compressed stream has with probability 2**-32. An empty file, and bytes that are neither
    (which the reader then reports as corrupt), count as NONE.
    """
    if not head or (len(head) >= HEADER_SIZE and HEADER.unpack_from(head)[1] == masked_crc32c(head[:8])):
        return Compression.NONE
    if head[:2] == b"\x1f\x8b":
        return Compression.GZIP
    cmf, flg = (head + b"\0")[:2]
    # zlib: compression method 8 (deflate), log2(window size) - 8 at most 7, check bits.
    if (cmf & 0x0F) == 8 and (cmf >> 4) <= 7 and (cmf * 256 + flg) % 31 == 0:
        return Compression.ZLIB
    return Compression.NONE
