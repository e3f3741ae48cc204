"""Tests for transforms/format/tfrecord_index.py (index sidecars) and the compression sniffing
of transforms/format/tfrecord_reader.py (what a suffix-less file holds)."""

from __future__ import annotations

import gzip
import io
import zlib

import numpy as np
import pytest

from transforms.format.compression import Compression, compression_from_path
from transforms.format.tfrecord_format import FramedRecords, frame_record, frame_records
from transforms.format.tfrecord_index import (
    IndexEntry,
    IndexWriter,
    index_line,
    iter_index_entries,
    write_index,
)
from transforms.format.tfrecord_reader import SNIFF_BYTES, TFRecordCorruptError, sniff_compression


class _Unseekable:
    """A read-only stream without seek, as a pipe or a network download is."""

    def __init__(self, data: bytes):
        self._buffer = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._buffer.read(size)

    def seekable(self) -> bool:
        return False


def _expected(payloads) -> bytes:
    """The index, written out by hand from the framing rule: 8 + 4 + payload + 4."""
    lines, offset = [], 0
    for payload in payloads:
        length = 8 + 4 + len(payload) + 4
        lines.append(f"{offset} {length}\n")
        offset += length
    return "".join(lines).encode("ascii")


def _index_of(data: bytes, seekable: bool = True) -> bytes:
    out = io.BytesIO()
    write_index(io.BytesIO(data) if seekable else _Unseekable(data), out, path="f.tfrecord")
    return out.getvalue()


@pytest.mark.parametrize("seekable", [True, False])
def test_an_empty_file_has_an_empty_index(seekable):
    assert _index_of(b"", seekable) == b""
    assert list(iter_index_entries(io.BytesIO(b""))) == []


@pytest.mark.parametrize("seekable", [True, False])
def test_one_record(seekable):
    payload = b"hello"
    assert _index_of(frame_record(payload), seekable) == b"0 21\n"
    assert list(iter_index_entries(io.BytesIO(frame_record(payload)))) == [IndexEntry(0, 21)]


@pytest.mark.parametrize("seekable", [True, False])
def test_many_records_of_many_sizes(seekable):
    payloads = [bytes([i % 251]) * (i * 37 % 1500) for i in range(500)] + [b""]
    data = frame_records(payloads)
    assert _index_of(data, seekable) == _expected(payloads)


@pytest.mark.parametrize("seekable", [True, False])
def test_records_larger_than_the_scan_chunk_are_skipped_not_held(seekable):
    # Payloads larger than the scan's 1 MiB chunk, between small ones: most of their bytes
    # lie beyond what the scan buffers.
    chunk = 1 << 20
    payloads = [b"a" * 5, b"b" * (chunk + 300), b"c" * 61, b"d" * (3 * chunk), b"e"]
    assert _index_of(frame_records(payloads), seekable) == _expected(payloads)


def test_offsets_count_from_where_the_stream_starts():
    stream = io.BytesIO(b"JUNK" + frame_records([b"x", b"yy"]))
    stream.seek(4)
    assert list(iter_index_entries(stream)) == [IndexEntry(0, 17), IndexEntry(17, 18)]


@pytest.mark.parametrize("seekable", [True, False])
def test_a_corrupt_length_is_reported_with_file_offset_and_index(seekable):
    payloads = [b"first", b"second", b"third"]
    data = bytearray(frame_records(payloads))
    second = 16 + len(payloads[0])
    data[second] ^= 0x01  # a bit of the second record's length
    stream = io.BytesIO(bytes(data)) if seekable else _Unseekable(bytes(data))
    entries = []
    with pytest.raises(TFRecordCorruptError) as caught:
        for entry in iter_index_entries(stream, path="shard.tfrecord"):
            entries.append(entry)
    assert entries == [IndexEntry(0, second)]  # the records before it, never the bad one
    error = caught.value
    assert (error.path, error.offset, error.index) == ("shard.tfrecord", second, 1)
    assert "length CRC mismatch" in error.reason
    assert "shard.tfrecord" in str(error) and f"offset {second}" in str(error)


@pytest.mark.parametrize("seekable", [True, False])
@pytest.mark.parametrize(("cut", "reason"), [(3, "truncated footer"), (10, "truncated payload"),
                                             (30, "truncated record header")])
def test_a_truncated_file_is_reported_at_the_record_that_is_cut(seekable, cut, reason):
    data = frame_records([b"a" * 10, b"b" * 20])
    cut_data = data[:-cut]
    stream = io.BytesIO(cut_data) if seekable else _Unseekable(cut_data)
    with pytest.raises(TFRecordCorruptError, match=reason) as caught:
        list(iter_index_entries(stream, path="cut"))
    assert caught.value.offset == 26 and caught.value.index == 1


def test_a_compressed_stream_is_not_indexed():
    compressed = gzip.compress(frame_records([b"x" * 100] * 3))
    with pytest.raises(TFRecordCorruptError, match="not an uncompressed TFRecord stream"):
        _index_of(compressed)


def test_payload_crcs_are_not_read_so_a_bad_payload_still_indexes():
    # The index is framing only; verify (iter_records) is what checks payloads.
    data = bytearray(frame_records([b"payload", b"more"]))
    data[14] ^= 0xFF
    assert _index_of(bytes(data)) == _expected([b"payload", b"more"])


@pytest.mark.parametrize("seekable", [True, False])
def test_checking_payloads_finds_a_bad_payload_and_indexes_a_good_one_alike(seekable):
    payloads = [b"payload", b"more", b"x" * 3000]
    data = frame_records(payloads)
    out = io.BytesIO()
    write_index(io.BytesIO(data) if seekable else _Unseekable(data), out, check_payloads=True)
    assert out.getvalue() == _expected(payloads)
    damaged = bytearray(data)
    damaged[16 + len(payloads[0]) + 13] ^= 0xFF  # a payload byte of the second record
    with pytest.raises(TFRecordCorruptError, match="data CRC mismatch") as caught:
        write_index(io.BytesIO(bytes(damaged)), io.BytesIO(), path="f.tfrecord", check_payloads=True)
    assert (caught.value.path, caught.value.offset, caught.value.index) == ("f.tfrecord", 23, 1)


def test_lines_as_written_equal_lines_found_by_scanning():
    payloads = [b"p" * n for n in (0, 1, 200, 3, 70000, 5)]
    scanned = _index_of(frame_records(payloads))
    assert b"".join(index_line(e.offset, e.length)
                    for e in iter_index_entries(io.BytesIO(frame_records(payloads)))) == scanned
    # Written batch by batch while the shard grows, from FramedRecords or from sizes.
    out = io.BytesIO()
    writer = IndexWriter(out)
    writer.add(FramedRecords.frame(payloads[:2]).framed_sizes())
    writer.add(np.array([], np.int64))
    writer.add([len(p) + 16 for p in payloads[2:]])
    assert out.getvalue() == scanned
    assert writer.offset == len(frame_records(payloads))


def test_index_lines_continue_from_the_records_already_indexed():
    out = io.BytesIO()
    writer = IndexWriter(out)
    writer.add([100])
    writer.add([])
    writer.add([16, 20])
    assert out.getvalue() == b"0 100\n100 16\n116 20\n"


# ------------------------------------------------------------------- compression sniffing


def test_sniffing_tells_uncompressed_gzip_and_zlib_apart():
    data = frame_records([b"x" * 50])
    assert sniff_compression(data[:SNIFF_BYTES]) is Compression.NONE
    assert sniff_compression(b"") is Compression.NONE
    assert sniff_compression(gzip.compress(data)[:SNIFF_BYTES]) is Compression.GZIP
    for level in (1, 6, 9):
        assert sniff_compression(zlib.compress(data, level)[:SNIFF_BYTES]) is Compression.ZLIB


def test_a_record_whose_length_looks_like_a_zlib_header_is_still_uncompressed():
    # Length 0x0178 starts with bytes 78 01: a valid zlib header (0x7801 % 31 == 0).
    data = frame_record(b"z" * 0x178)
    assert data[:2] == b"\x78\x01"
    assert sniff_compression(data[:SNIFF_BYTES]) is Compression.NONE
    gzip_like = frame_record(b"g" * 0x8B1F)  # length bytes 1f 8b: the gzip magic
    assert sniff_compression(gzip_like[:SNIFF_BYTES]) is Compression.NONE


def test_beams_deflate_suffix_is_zlib():
    assert compression_from_path("out/data-00000-of-00001.deflate") is Compression.ZLIB
    assert compression_from_path("out/data-00000-of-00001") is Compression.NONE
