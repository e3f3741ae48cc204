"""Index sidecars of uncompressed TFRecord files: the `.tfindex` format of the `tfrecord`
package's `tfrecord2idx` and of NVIDIA DALI, written as records are framed or built by
streaming over an existing file.

An index holds one ASCII line per record, ``"OFFSET LENGTH\\n"`` in decimal: OFFSET is the
byte offset of the record's 8-byte length field in the (uncompressed) file, LENGTH the whole
framed record, ``8 + 4 + payload + 4`` bytes. Readers seek to OFFSET to start a slice of the
file, so offsets only mean something in an uncompressed file: a gzip or zlib stream cannot
be entered in the middle, and no index is ever written for one. Beam-free.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

import numpy as np

from transforms.format.tfrecord_format import (
    DEFAULT_CRC,
    FOOTER_SIZE,
    HEADER,
    HEADER_SIZE,
    CrcFn,
    framed_size,
    length_crc_cache,
    masked_crc32c,
)
from transforms.format.tfrecord_reader import (
    TFRecordCorruptError,
    iter_records,
    length_crc_problem,
    truncation_reason,
)

__all__ = ["INDEX_SUFFIX", "IndexEntry", "IndexWriter", "index_line", "iter_index_entries",
           "write_index"]

#: The sidecar of `x.tfrecord` is `x.tfrecord.tfindex`.
INDEX_SUFFIX = ".tfindex"

# Bytes read at a time while scanning; headers are parsed out of these chunks, and payloads
# longer than what is left of a chunk are skipped with a seek (or bounded reads).
_SCAN_CHUNK = 1 << 20


class IndexEntry(NamedTuple):
    """One record's index entry: where its length field starts and its framed length."""

    offset: int
    length: int


def index_line(offset: int, length: int) -> bytes:
    """The index line of one record, exactly as `tfrecord2idx` writes it."""
    return b"%d %d\n" % (offset, length)


class IndexWriter:
    """Writes the index of a TFRecord file while the file itself is written: the caller hands
    over the framed size of every record it writes, in order, and the lines go to `out` at
    once (no second pass over the shard). `offset`: bytes indexed so far."""

    def __init__(self, out: BinaryIO):
        self._out = out
        self.offset = 0

    def add(self, framed_sizes: Sequence[int] | np.ndarray) -> None:
        sizes = np.asarray(framed_sizes, dtype=np.int64)
        starts = (np.cumsum(sizes) - sizes + self.offset).tolist()
        lines = [f"{start} {size}\n" for start, size in zip(starts, sizes.tolist(), strict=True)]
        self._out.write("".join(lines).encode("ascii"))
        self.offset += int(sizes.sum())


def _skipper(binary_file: BinaryIO) -> tuple[int | None, Callable[[int], int]]:
    """(bytes from the current position to the end of the file, or None when unknown;
    skip(n) -> bytes skipped) for a file read from its current position. Skipping seeks
    when the file can (a payload is never read), else reads and drops bounded chunks."""
    seekable = getattr(binary_file, "seekable", None)
    if seekable is not None and seekable():
        start = binary_file.tell()
        size = binary_file.seek(0, io.SEEK_END)
        binary_file.seek(start)

        def seek_over(count: int) -> int:
            position = binary_file.tell()
            target = min(position + count, size)
            binary_file.seek(target)
            return target - position

        return size - start, seek_over

    def read_over(count: int) -> int:
        skipped = 0
        while skipped < count:
            chunk = binary_file.read(min(_SCAN_CHUNK, count - skipped))
            if not chunk:
                break
            skipped += len(chunk)
        return skipped

    return None, read_over


def iter_index_entries(
    binary_file: BinaryIO, path: str = "<stream>", crc_fn: CrcFn = DEFAULT_CRC
) -> Iterator[IndexEntry]:
    """The index entries of an uncompressed TFRecord stream, read from its current position
    (offsets are relative to it) in bounded chunks: every record's length CRC is checked and
    that the whole record is there, payloads are skipped (by seeking when the file allows),
    their CRCs not checked (`tfrecord_reader.iter_records` does that).

    Raises:
      TFRecordCorruptError: on a length CRC mismatch (also what a compressed stream looks
        like) or a truncated record. Entries before it have been yielded.
    """
    size, skip = _skipper(binary_file)
    cache = length_crc_cache(crc_fn)
    buffer, position, base = b"", 0, 0  # base: file offset of buffer[0]
    index = 0
    while True:
        if len(buffer) - position < HEADER_SIZE:
            buffer = buffer[position:] + binary_file.read(_SCAN_CHUNK)
            base += position
            position = 0
            if not buffer:
                return
            if len(buffer) < HEADER_SIZE:
                raise TFRecordCorruptError(path, base, index, f"truncated record header: "
                                           f"{len(buffer)} of {HEADER_SIZE} bytes")
        offset = base + position
        length, stored_crc = HEADER.unpack_from(buffer, position)
        expected = cache.get(length)
        if expected is None:
            expected = masked_crc32c(buffer[position : position + 8], crc_fn)
        if stored_crc != expected:
            problem = length_crc_problem(index, buffer[position: position + HEADER_SIZE],
                                         stored_crc, expected)
            raise TFRecordCorruptError(path, offset, index,
                                       f"{problem}: not an uncompressed TFRecord stream")
        total = HEADER_SIZE + length + FOOTER_SIZE
        if size is not None and offset + total > size:
            raise TFRecordCorruptError(path, offset, index, truncation_reason(length, size - offset))
        if len(buffer) - position >= total:
            position += total
        else:
            missing = total - (len(buffer) - position)
            skipped = skip(missing)
            if skipped < missing:
                raise TFRecordCorruptError(path, offset, index,
                                           truncation_reason(length, total - missing + skipped))
            base, buffer, position = offset + total, b"", 0
        yield IndexEntry(offset, total)
        index += 1


def write_index(
    binary_file: BinaryIO, out: BinaryIO, path: str = "<stream>", crc_fn: CrcFn = DEFAULT_CRC,
    check_payloads: bool = False,
) -> int:
    """Writes the index of the uncompressed stream `binary_file` to `out` as records are found
    (`iter_index_entries`) and returns the number of records. With `check_payloads` (an index
    only for an intact file) every record is read with both CRCs checked (`iter_records`).
    Raises TFRecordCorruptError as those do; `out` then holds the lines before the bad record,
    so callers write to a temporary name.
    """
    if check_payloads:
        entries = (IndexEntry(info.offset, framed_size(len(info.payload)))
                   for info in iter_records(binary_file, path=path, crc_fn=crc_fn))
    else:
        entries = iter_index_entries(binary_file, path, crc_fn)
    lines: list[bytes] = []
    records = 0
    for entry in entries:
        lines.append(index_line(entry.offset, entry.length))
        records += 1
        if len(lines) >= 8192:  # bounded memory, few writes
            out.write(b"".join(lines))
            lines.clear()
    out.write(b"".join(lines))
    return records
