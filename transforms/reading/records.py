"""The payloads of shard ranges, TF-free, every CRC checked: `iter_payloads` streams ranges
of records, `read_payload_at` reads one record of an uncompressed shard at its offset. A
range starting inside an uncompressed shard is entered at its record's offset: from the
index sidecar, else by reading each earlier record's 12-byte framing header and seeking over
its payload. A compressed stream cannot be entered: part k of n of a compressed shard costs
decompressing the k/n before it. A shard holding fewer or more records than the manifest
lists is an error, never a silently shorter read."""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Iterator

from transforms.format.compression import Compression
from transforms.format.tfrecord_index import iter_index_entries
from transforms.format.tfrecord_reader import iter_records
from transforms.reading.files import open_binary
from transforms.reading.parts import ShardRange

__all__ = ["iter_payloads", "read_payload_at"]


def _record_offset(handle, piece: ShardRange) -> int:
    """The byte offset of record `piece.start` of an uncompressed shard (see above)."""
    shard = piece.shard
    if shard.sidecar is not None:
        return int(shard.record_index().offsets[piece.start])
    entry = next(itertools.islice(iter_index_entries(handle, shard.path), piece.start, None), None)
    if entry is None:
        raise ValueError(f"{shard.path}: ended before record {piece.start}; the manifest lists "
                         f"{shard.records}")
    return entry.offset


def _iter_range(piece: ShardRange, compression: Compression) -> Iterator[bytes]:
    shard = piece.shard
    with open_binary(shard.path) as handle:
        skip = piece.start
        if compression is Compression.NONE and piece.start > 0:
            handle.seek(_record_offset(handle, piece))
            skip = 0
        seen = 0
        records = iter_records(handle, compression, path=shard.path)
        for record in itertools.islice(records, skip, skip + piece.records):
            yield record.payload
            seen += 1
        if seen < piece.records:
            raise ValueError(f"{shard.path}: ended after {piece.start + seen} records; the "
                             f"manifest lists {shard.records}")
        # A shard read to its end must end there: more records is not what was committed.
        if piece.stop == shard.records and next(records, None) is not None:
            raise ValueError(f"{shard.path}: holds more than the {shard.records} records the "
                             "manifest lists")


def iter_payloads(ranges: Iterable[ShardRange], compression: Compression) -> Iterator[bytes]:
    """The payload of every record of `ranges`, in order."""
    for piece in ranges:
        if piece.records:
            yield from _iter_range(piece, compression)


def read_payload_at(path: str, offset: int, length: int) -> bytes:
    """The payload of the one record framed in `length` bytes at `offset` of the
    uncompressed file at `path`; ValueError when those bytes are not exactly one record."""
    with open_binary(path) as handle:
        handle.seek(offset)
        framed = handle.read(length)
    records = list(iter_records(io.BytesIO(framed), Compression.NONE,
                                path=f"{path} at byte offset {offset}"))
    if len(records) != 1 or len(framed) != length:
        raise ValueError(f"{path}: the {length} bytes at offset {offset} are not one record: "
                         "the index sidecar does not match the file")
    return records[0].payload
