"""Which compression a TFRecord file's first bytes show, for files whose name does not say
(Beam's `WriteToTFRecord` writes `prefix-00000-of-00001` with no suffix, compressed or not).

An uncompressed file starts with a record header whose length CRC checks; a gzip stream
with the magic bytes 1f 8b; a zlib (Beam: DEFLATE) stream with a two-byte header whose
method is deflate and whose value is a multiple of 31 (RFC 1950). The header test comes
first: the odd TFRecord whose first length bytes happen to look like a gzip or zlib header
still has a matching length CRC, while a compressed stream passes that check with
probability 2**-32. Beam-free.
"""

from __future__ import annotations

from transforms.format.compression import Compression
from transforms.format.tfrecord_format import HEADER, HEADER_SIZE, masked_crc32c

__all__ = ["SNIFF_BYTES", "sniff_compression"]

#: How many bytes from the start of a file `sniff_compression` looks at.
SNIFF_BYTES = HEADER_SIZE

_GZIP_MAGIC = b"\x1f\x8b"
_DEFLATE_METHOD = 8
_ZLIB_MAX_WINDOW = 7  # CINFO: log2(window size) - 8


def _is_tfrecord_header(head: bytes) -> bool:
    if len(head) < HEADER_SIZE:
        return False
    _, stored_crc = HEADER.unpack_from(head, 0)
    return stored_crc == masked_crc32c(head[:8])


def _is_zlib_header(head: bytes) -> bool:
    if len(head) < 2:
        return False
    cmf, flg = head[0], head[1]
    return (cmf & 0x0F) == _DEFLATE_METHOD and (cmf >> 4) <= _ZLIB_MAX_WINDOW \
        and (cmf * 256 + flg) % 31 == 0


def sniff_compression(head: bytes) -> Compression:
    """The compression the first `SNIFF_BYTES` bytes of a file show. An empty file, and
    bytes that are neither (which the reader then reports as corrupt), count as NONE."""
    if not head or _is_tfrecord_header(head):
        return Compression.NONE
    if head[:2] == _GZIP_MAGIC:
        return Compression.GZIP
    if _is_zlib_header(head):
        return Compression.ZLIB
    return Compression.NONE
