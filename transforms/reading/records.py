"""The payloads of shard ranges, TF-free, every CRC checked (`tfrecord_reader.iter_records`):
`iter_payloads` streams ranges of records, `read_payload_at` reads one record of an
uncompressed shard at its indexed offset.

A range that starts inside a shard is entered at its sidecar's offset when the shard has
one, else read from the start and skipped to (compressed streams cannot be entered). The
manifest's counts are checked: a shard holding fewer or more records than it lists is an
error, never a silently shorter read."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

from transforms.format.compression import Compression
from transforms.format.tfrecord_reader import iter_records
from transforms.reading.files import open_binary
from transforms.reading.parts import ShardRange

__all__ = ["iter_payloads", "read_payload_at"]


def _iter_range(piece: ShardRange, compression: Compression) -> Iterator[bytes]:
    shard = piece.shard
    entered = compression is Compression.NONE and shard.sidecar is not None and piece.start > 0
    with open_binary(shard.path) as handle:
        skip = piece.start
        if entered:
            handle.seek(int(shard.record_index().offsets[piece.start]))
            skip = 0
        wanted = piece.records
        seen = 0
        records = iter_records(handle, compression, path=shard.path)
        for record in records:
            if skip:
                skip -= 1
                continue
            yield record.payload
            seen += 1
            if seen == wanted:
                break
        if seen < wanted:
            raise ValueError(f"{shard.path}: ended after {piece.start + seen} records; the "
                             f"manifest lists {shard.records}")
        # A shard read to its end must end there: more records than listed is not what was
        # committed.
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
