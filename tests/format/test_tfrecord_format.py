"""Tests for transforms/tfrecord_format.py: golden bytes, TensorFlow interop, corruption."""

from __future__ import annotations

import gzip
import io
import pickle
import random
import struct
import zlib

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from isal import isal_zlib

from tests.helpers import ModuleServer
from transforms.format import compression as compression_module
from transforms.format import tfrecord_reader
from transforms.format.compression import (
    Compression,
    compression_from_path,
    open_compressor,
    parse_compression,
    shard_suffix,
)
from transforms.format.tfrecord_format import (
    FramedRecords,
    TFRecordWriter,
    frame_parts,
    frame_record,
    frame_records,
    framed_size,
    framing_headers,
    masked_crc32c,
)
from transforms.format.tfrecord_reader import RecordInfo, TFRecordCorruptError, iter_records
from transforms.tfrecord_io import read_tfrecord_file

# Golden framings, from the spec: uint64 LE length | masked crc32c(length bytes) LE |
# payload | masked crc32c(payload) LE. crc32c(b"foo") = 0xcfc4ae1d, masked by hand:
# (0xcfc4ae1d >> 15) | (0xcfc4ae1d << 17) mod 2**32 = 0x5c3b9f89, + 0xa282ead8 = 0xfebe8a61.
# crc32c(b"") = 0, masked = 0xa282ead8. The length CRCs are those of the 8 length bytes.
FOO_FRAMED = bytes.fromhex(
    "0300000000000000"  # length 3
    "b099490e"  # masked crc32c of the length bytes = 0x0e4999b0
    "666f6f"  # b"foo"
    "618abefe"  # masked crc32c(b"foo") = 0xfebe8a61
)
EMPTY_FRAMED = bytes.fromhex(
    "0000000000000000"  # length 0
    "29039807"  # masked crc32c of the length bytes = 0x07980329
    ""  # no payload
    "d8ea82a2"  # masked crc32c(b"") = 0xa282ead8
)

TF_NAMES = {Compression.NONE: "", Compression.GZIP: "GZIP", Compression.ZLIB: "ZLIB"}
ALL = list(Compression)
COMPRESSED = [Compression.GZIP, Compression.ZLIB]


def _payloads(seed: int = 0) -> list[bytes]:
    rnd = random.Random(seed)
    out = [b"", b"foo", bytes(range(256)) * 300, b"\x00" * 5]
    out += [rnd.randbytes(rnd.randint(0, 2000)) for _ in range(200)]
    return out


def _write(payloads, compression, level=None) -> bytes:
    raw = io.BytesIO()
    with TFRecordWriter(raw, compression, level) as writer:
        for p in payloads:
            writer.write(p)
    return raw.getvalue()


def _read_all(data: bytes, compression=Compression.NONE, **kwargs) -> list[bytes]:
    return [r.payload for r in iter_records(io.BytesIO(data), compression, **kwargs)]


def _read_until_error(data: bytes, compression=Compression.NONE):
    """(payloads yielded, error raised or None)."""
    got = []
    try:
        for r in iter_records(io.BytesIO(data), compression, path="f.tfrecord"):
            got.append(r.payload)
    except TFRecordCorruptError as e:
        return got, e
    return got, None


def _starts(payloads) -> list[int]:
    starts, pos = [], 0
    for p in payloads:
        starts.append(pos)
        pos += framed_size(len(p))
    return starts + [pos]


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


@pytest.fixture(scope="module")
def without_isal():
    """Runs format code in one child Python where ISA-L is not installed (its import blocked),
    as on a machine without the `isal` package; one child for the module's calls."""
    child = ModuleServer("tests.format.without_isal", prelude="sys.modules['isal'] = None")
    yield child
    child.close()


# --------------------------------------------------------------------------- golden bytes


def test_golden_foo_and_empty():
    assert frame_record(b"foo") == FOO_FRAMED
    assert frame_record(b"") == EMPTY_FRAMED
    assert frame_records([b"foo", b""]) == FOO_FRAMED + EMPTY_FRAMED
    assert framed_size(3) == len(FOO_FRAMED) == 19
    assert framed_size(0) == len(EMPTY_FRAMED) == 16
    assert _write([b"foo", b""], Compression.NONE) == FOO_FRAMED + EMPTY_FRAMED


def test_golden_bytes_equal_tensorflow_writer(tf, tmp_path):
    big = bytes(range(256)) * 300
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for p in (b"foo", b"", big):
            w.write(p)
    with open(path, "rb") as f:
        tf_bytes = f.read()
    assert tf_bytes == FOO_FRAMED + EMPTY_FRAMED + frame_record(big)
    assert frame_records([b"foo", b"", big]) == tf_bytes


def test_record_larger_than_64k():
    payload = bytes(range(256)) * 300  # 76800 = 0x12c00 bytes
    framed = frame_record(payload)
    assert len(framed) == 76800 + 16
    assert framed[:8] == bytes.fromhex("002c010000000000")
    assert framed[8:12] == struct.pack("<I", masked_crc32c(framed[:8]))
    assert framed[12:-4] == payload
    assert framed[-4:] == struct.pack("<I", masked_crc32c(payload))
    assert _read_all(framed) == [payload]


@pytest.mark.parametrize(
    "data, masked",
    [
        (b"", 0xA282EAD8),  # crc 0
        (b"foo", 0xFEBE8A61),  # crc 0xcfc4ae1d
        (b"123456789", 0xC78AB0E5),  # crc 0xe3069283 (the CRC-32C check value)
        (bytes(32), 0x0FD7FFFA),  # crc 0x8a9136aa (RFC 3720 B.4, 32 zero bytes)
    ],
)
def test_masked_crc32c_known_vectors(data, masked):
    assert masked_crc32c(data) == masked


def test_crc_fn_is_injectable_everywhere():
    calls = []

    def zero_crc(data):
        calls.append(bytes(data))
        return 0

    masked_zero = struct.pack("<I", 0xA282EAD8)
    assert masked_crc32c(b"foo", crc_fn=zero_crc) == 0xA282EAD8
    fake = frame_record(b"foo", crc_fn=zero_crc)
    assert fake == bytes.fromhex("0300000000000000") + masked_zero + b"foo" + masked_zero
    assert b"foo" in calls
    # Both the small and the vectorised path of frame_records use it.
    for n in (3, 500):
        payloads = [b"p%d" % i for i in range(n)]
        assert frame_records(payloads, crc_fn=zero_crc) == b"".join(
            frame_record(p, crc_fn=zero_crc) for p in payloads
        )
        assert frame_records(payloads, crc_fn=zero_crc) != frame_records(payloads)
    # frame_parts too, with the parts joined for it.
    calls.clear()
    assert frame_parts([b"f", b"", b"oo"], crc_fn=zero_crc) == fake
    assert b"foo" in calls
    # The reader verifies with the injected function: real CRCs do not match it...
    real = frame_records([b"a", b"b"])
    with pytest.raises(TFRecordCorruptError, match="length CRC mismatch"):
        _read_all(real, crc_fn=zero_crc)
    # ... and a file framed with it reads back with it.
    raw = io.BytesIO()
    with TFRecordWriter(raw, crc_fn=zero_crc) as w:
        w.write(b"a")
        w.write_framed(frame_records([b"b", b"c"], crc_fn=zero_crc), 2)
    assert raw.getvalue() == b"".join(frame_record(p, zero_crc) for p in (b"a", b"b", b"c"))
    assert _read_all(raw.getvalue(), crc_fn=zero_crc) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("n", [0, 1, 127, 128, 129, 1000])
def test_frame_records_equals_frame_record_concatenation(n):
    rnd = random.Random(n)
    payloads = [rnd.randbytes(rnd.choice([0, 1, 60, 60, 300, 70000])) for _ in range(n)]
    assert frame_records(payloads) == b"".join(frame_record(p) for p in payloads)
    assert frame_records(tuple(payloads)) == frame_records(payloads)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_frame_parts_frames_the_joined_parts(parts):
    assert frame_parts(parts) == frame_record(b"".join(parts))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=300))
def test_frame_records_property(payloads):
    assert frame_records(payloads) == b"".join(frame_record(p) for p in payloads)


def _zero_footers(payloads, crc_fn=crc32c.crc32c):
    """`frame_records(payloads)` with every footer zeroed: what the encoder renders."""
    buffer = np.frombuffer(bytearray(frame_records(payloads, crc_fn)), np.uint8)
    ends = np.cumsum([len(p) + 16 for p in payloads], dtype=np.int64)
    for end in ends.tolist():
        buffer[end - 4 : end] = 0
    return buffer


def _crc32c_bitwise(data) -> int:
    """CRC-32C bit by bit: an independent implementation, for injection."""
    crc = 0xFFFFFFFF
    for byte in bytes(data):
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.binary(max_size=40), st.binary(min_size=100, max_size=400)), max_size=60))
def test_complete_fills_footers_exactly_like_frame_records(payloads):
    framed = FramedRecords.complete(_zero_footers(payloads), np.array([len(p) for p in payloads]))
    assert framed.data == frame_records(payloads)
    assert list(framed) == payloads


def test_complete_with_rare_huge_lengths_and_an_injected_crc():
    # A length far above the record count takes the sorted (np.unique) lookup path.
    payloads = [b"a", bytes(range(256)) * 800, b"", b"bc", b"a"]
    lengths = np.array([len(p) for p in payloads])
    assert FramedRecords.complete(_zero_footers(payloads), lengths).data == frame_records(payloads)
    small = [b"xyz", b"", b"\x00" * 17, b"xyz"]
    buffer = _zero_footers(small, _crc32c_bitwise)
    got = FramedRecords.complete(buffer, np.array([3, 0, 17, 3]), crc_fn=_crc32c_bitwise)
    assert got.data == frame_records(small)  # any CRC-32C implementation gives the same bytes


@pytest.mark.parametrize("size", [20, 600])  # mean span below and above _VIEW_CRC_MIN_SPAN
@pytest.mark.parametrize("crc_fn", [None, _crc32c_bitwise])
def test_complete_cuts_spans_as_copies_or_views_with_the_same_bytes(size, crc_fn):
    payloads = [bytes([i % 251]) * (size + i % 7) for i in range(40)]
    lengths = np.array([len(p) for p in payloads])
    args = {} if crc_fn is None else {"crc_fn": crc_fn}
    got = FramedRecords.complete(_zero_footers(payloads, *args.values()), lengths, **args)
    assert got.data == frame_records(payloads)
    assert list(got) == payloads


def test_complete_rejects_a_buffer_of_the_wrong_size_and_accepts_none():
    with pytest.raises(ValueError, match="as long as the framed records"):
        FramedRecords.complete(np.zeros(20, np.uint8), np.array([5]))
    empty = FramedRecords.complete(np.zeros(0, np.uint8), np.zeros(0, np.int64))
    assert len(empty) == 0 and empty.data == b""


def test_framing_headers_are_the_frame_record_headers():
    lengths = [0, 3, 3, 70000, 2**40]
    headers = framing_headers(lengths)
    assert headers.shape == (5, 12) and headers.dtype == np.uint8
    assert headers[1].tobytes() == FOO_FRAMED[:12]
    assert headers[0].tobytes() == EMPTY_FRAMED[:12]
    for row, n in zip(headers, lengths, strict=True):
        assert row.tobytes() == struct.pack("<QI", n, masked_crc32c(struct.pack("<Q", n)))


# --------------------------------------------------------------------------- round trips


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(st.binary(max_size=3000), max_size=40),
    compression=st.sampled_from(ALL),
    level=st.sampled_from([None, 0, 1, 3, 5, 9]),
    framed=st.booleans(),
)
def test_round_trip_property(payloads, compression, level, framed):
    raw = io.BytesIO()
    writer = TFRecordWriter(raw, compression, level)
    if framed:
        writer.write_framed(frame_records(payloads), len(payloads))
    else:
        for p in payloads:
            writer.write(p)
    writer.close()
    assert writer.records_written == len(payloads)
    records = list(iter_records(io.BytesIO(raw.getvalue()), compression))
    assert [r.payload for r in records] == payloads
    assert [r.index for r in records] == list(range(len(payloads)))
    assert [r.offset for r in records] == _starts(payloads)[:-1]
    if compression is Compression.NONE:
        assert raw.getvalue() == frame_records(payloads)
    else:
        wbits = 31 if compression is Compression.GZIP else 15
        assert zlib.decompress(raw.getvalue(), wbits) == frame_records(payloads)


@pytest.mark.parametrize("compression", ALL)
def test_round_trip_with_tiny_read_chunks(monkeypatch, compression):
    # Forces every buffer refill / partial-inflate path on record boundaries.
    monkeypatch.setattr(compression_module, "READ_CHUNK", 7)
    monkeypatch.setattr(tfrecord_reader, "READ_CHUNK", 7)
    payloads = _payloads(1)[:12]
    assert _read_all(_write(payloads, compression), compression) == payloads


@pytest.mark.parametrize("compression", ALL)
def test_reader_streams_instead_of_reading_whole_file(compression):
    rnd = random.Random(5)
    payloads = [rnd.randbytes(10_000) for _ in range(400)]  # ~4 MB, incompressible
    data = _write(payloads, compression)

    class CountingReader(io.BytesIO):
        consumed = 0

        def read(self, n=-1):
            out = super().read(n)
            self.consumed += len(out)
            return out

    f = CountingReader(data)
    it = iter_records(f, compression)
    assert next(it).payload == payloads[0]
    assert f.consumed <= 2 * compression_module.READ_CHUNK < len(data)
    assert [r.payload for r in it] == payloads[1:]


def test_writer_counters_close_and_errors():
    raw = io.BytesIO()
    writer = TFRecordWriter(raw, "gzip")
    writer.write(b"foo")
    writer.write_framed(frame_records([b"", b"bar"]), 2)
    writer.write_framed(frame_record(b"x"), num_records=1)
    assert writer.records_written == 4
    writer.close()
    writer.close()  # idempotent
    assert writer.closed and not raw.closed  # the raw file stays open
    assert gzip.decompress(raw.getvalue()) == frame_records([b"foo", b"", b"bar", b"x"])
    with pytest.raises(ValueError):
        writer.write(b"late")


@pytest.mark.parametrize("compression", COMPRESSED)
def test_compressed_output_is_deterministic_without_name_or_mtime(compression):
    named = io.BytesIO()
    named.name = "/some/path/shard.tfrecord.gz"
    with TFRecordWriter(named, compression) as w:
        w.write(b"foo")
    assert named.getvalue() == _write([b"foo"], compression)
    if compression is Compression.GZIP:
        header = named.getvalue()[:10]
        assert header[:4] == b"\x1f\x8b\x08\x00"  # no FNAME flag
        assert header[4:8] == b"\x00\x00\x00\x00"  # mtime 0
    else:
        assert named.getvalue()[0] == 0x78  # zlib header, deflate with 32K window


# --------------------------------------------------------------------------- backends


@pytest.mark.parametrize("compression", COMPRESSED)
@pytest.mark.parametrize(
    "level, have_isal, backend, effective",
    [
        (None, True, "isal", 2),
        (0, True, "isal", 0),
        (3, True, "isal", 3),
        (4, True, "zlib", 4),
        (9, True, "zlib", 9),
        (None, False, "zlib", 6),
        (0, False, "zlib", 0),
        (3, False, "zlib", 3),
        (9, False, "zlib", 9),
    ],
)
def test_backend_selection_and_exact_stream(without_isal, compression, level, have_isal, backend,
                                           effective):
    framed = frame_records(_payloads(2))
    if have_isal:
        raw = io.BytesIO()
        comp = open_compressor(raw, compression, level)
        assert (comp.backend, comp.level) == (backend, effective)
        comp.write(framed)
        comp.close()
        assert not raw.closed
        written = raw.getvalue()
    else:  # a machine without the isal package
        chosen_backend, chosen_level, written = without_isal("compress", framed, compression, level)
        assert (chosen_backend, chosen_level) == (backend, effective)
    module = isal_zlib if backend == "isal" else zlib
    wbits = 31 if compression is Compression.GZIP else 15
    reference = module.compressobj(effective, module.DEFLATED, wbits)
    assert written == reference.compress(framed) + reference.flush()
    # Our reader (with either inflater) reads it back.
    assert _read_all(written, compression) == _payloads(2)


def test_backends_really_differ(without_isal):
    framed = frame_records(_payloads(3))
    isal_out = io.BytesIO()
    with open_compressor(isal_out, "gzip", None) as c:
        c.write(framed)
    zlib_backend, _, zlib_out = without_isal("compress", framed, "gzip", None)
    assert zlib_backend == "zlib"
    assert isal_out.getvalue() != zlib_out
    assert gzip.decompress(isal_out.getvalue()) == gzip.decompress(zlib_out) == framed


@pytest.mark.parametrize("level", [-1, 10, 2.0, "3", True])
def test_bad_levels(level):
    with pytest.raises(ValueError, match="level"):
        open_compressor(io.BytesIO(), "gzip", level)


def test_level_is_ignored_for_none():
    raw = io.BytesIO()
    with TFRecordWriter(raw, "none", level=9) as w:
        w.write(b"foo")
    assert raw.getvalue() == FOO_FRAMED


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, Compression.NONE),
        ("", Compression.NONE),
        ("none", Compression.NONE),
        (" NONE ", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("GZIP", Compression.GZIP),
        ("Zlib", Compression.ZLIB),
        ("ZLIB", Compression.ZLIB),
        (Compression.GZIP, Compression.GZIP),
    ],
)
def test_parse_compression_accepts(value, expected):
    assert parse_compression(value) is expected


@pytest.mark.parametrize(
    "value", ["bzip2", "BZIP2", "zstd", "lzma", "xz", "snappy", "auto", "deflate", "gz", 3]
)
def test_unknown_codecs_are_refused(value, tmp_path):
    with pytest.raises(ValueError, match="none\\|gzip\\|zlib") as info:
        parse_compression(value)
    if isinstance(value, str):
        assert "TensorFlow cannot read" in str(info.value)
        with pytest.raises(ValueError, match="TensorFlow cannot read"):
            TFRecordWriter(io.BytesIO(), value)
        with pytest.raises(ValueError, match="TensorFlow cannot read"):
            shard_suffix(value)
        path = tmp_path / "x.tfrecord"
        path.write_bytes(FOO_FRAMED)
        with pytest.raises(ValueError, match="TensorFlow cannot read"):
            list(read_tfrecord_file(str(path), value))


def test_beam_compression_types_are_mapped_or_refused():
    from apache_beam.io.filesystem import CompressionTypes

    assert parse_compression(CompressionTypes.GZIP) is Compression.GZIP
    assert parse_compression(CompressionTypes.UNCOMPRESSED) is Compression.NONE
    for refused in (CompressionTypes.AUTO, CompressionTypes.BZIP2, CompressionTypes.ZSTD):
        with pytest.raises(ValueError, match="TensorFlow cannot read"):
            parse_compression(refused)


@pytest.mark.parametrize(
    "path, expected",
    [
        ("gs://b/train-00000-of-00002.tfrecord", Compression.NONE),
        ("/x/a.tfrecord.gz", Compression.GZIP),
        ("/x/A.TFRECORD.GZ", Compression.GZIP),
        ("/x/a.tfrecord.zz", Compression.ZLIB),
        ("/x/a.zlib", Compression.ZLIB),
        ("/x/a", Compression.NONE),
    ],
)
def test_compression_from_path(path, expected):
    assert compression_from_path(path) is expected


def test_shard_suffix_round_trips_through_compression_from_path():
    assert [shard_suffix(c) for c in ALL] == [".tfrecord", ".tfrecord.gz", ".tfrecord.zz"]
    for c in ALL:
        assert compression_from_path("a" + shard_suffix(c)) is c


# --------------------------------------------------------------------------- TensorFlow interop


@pytest.mark.parametrize(
    "compression, level, have_isal",
    [
        pytest.param(c, level, have_isal, id=f"{c.value}-level{level}-{'isal' if have_isal else 'stdlib'}")
        for c, level, have_isal in [(Compression.NONE, None, True)]
        + [(c, lv, isal) for c in COMPRESSED for lv in (None, 1, 9) for isal in (True, False)]
    ],
)
def test_tensorflow_reads_our_files(tf, without_isal, tmp_path, compression, level, have_isal):
    payloads = _payloads(4)
    path = tmp_path / ("ours" + shard_suffix(compression))
    framed = frame_records(payloads[:150])  # the vectorised framing path, then one by one
    expected_backend = (
        None if compression is Compression.NONE else ("isal" if have_isal and level != 9 else "zlib")
    )
    if have_isal:
        with open(path, "wb") as raw:
            with TFRecordWriter(raw, compression, level) as writer:
                writer.write_framed(framed, len(payloads[:150]))
                for p in payloads[150:]:
                    writer.write(p)
                assert writer._out.backend == expected_backend
            assert not raw.closed
    else:  # a machine without the isal package
        backend = without_isal("write_records", str(path), framed, payloads[150:], compression, level)
        assert backend == expected_backend
    dataset = tf.data.TFRecordDataset(str(path), compression_type=TF_NAMES[compression])
    assert [t.numpy() for t in dataset] == payloads


@pytest.mark.parametrize("compression", ALL, ids=lambda c: c.value)
def test_we_read_tensorflow_files(tf, without_isal, tmp_path, compression):
    payloads = _payloads(5)
    path = str(tmp_path / ("theirs" + shard_suffix(compression)))
    options = tf.io.TFRecordOptions(compression_type=TF_NAMES[compression])
    with tf.io.TFRecordWriter(path, options=options) as writer:
        for p in payloads:
            writer.write(p)
    assert list(read_tfrecord_file(path)) == payloads  # compression from the suffix
    with open(path, "rb") as f:
        records = list(iter_records(f, TF_NAMES[compression]))
    assert [r.payload for r in records] == payloads
    assert [r.offset for r in records] == _starts(payloads)[:-1]
    assert without_isal("read_records", path, TF_NAMES[compression]) == payloads  # stdlib inflater


def test_we_read_tensorflow_concatenated_gzip_members(tf, tmp_path):
    # TensorFlow reads concatenated gzip members as one stream; so do we.
    path = tmp_path / "multi.tfrecord.gz"
    path.write_bytes(gzip.compress(frame_records([b"a", b"b"])) + gzip.compress(frame_record(b"c")))
    expected = [b"a", b"b", b"c"]
    assert [t.numpy() for t in tf.data.TFRecordDataset(str(path), "GZIP")] == expected
    assert list(read_tfrecord_file(str(path))) == expected
    # Bytes after the last member that are not a gzip member: both refuse them.
    path.write_bytes(gzip.compress(frame_records([b"a", b"b"])) + b"garbage!!!!")
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path), "GZIP"))
    with pytest.raises(TFRecordCorruptError, match="after the end of the gzip stream"):
        list(read_tfrecord_file(str(path)))


# --------------------------------------------------------------------------- corruption


SMALL = [b"alpha", b"bravo-bravo", b"", b"delta"]


def test_corrupt_error_attributes_message_and_pickle():
    err = TFRecordCorruptError("gs://b/f.tfrecord", 35, 2, "data CRC mismatch")
    assert isinstance(err, ValueError)
    assert (err.path, err.offset, err.index, err.reason) == (
        "gs://b/f.tfrecord",
        35,
        2,
        "data CRC mismatch",
    )
    for part in ("gs://b/f.tfrecord", "35", "index 2", "data CRC mismatch"):
        assert part in str(err)
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.path, clone.offset, clone.index, clone.reason) == (
        err.path,
        err.offset,
        err.index,
        err.reason,
    )


@pytest.mark.parametrize(
    "region, lo, hi, reason",
    [
        ("length", 0, 8, "length CRC mismatch"),
        ("length_crc", 8, 12, "length CRC mismatch"),
        ("payload", 12, -4, "data CRC mismatch"),
        ("data_crc", -4, None, "data CRC mismatch"),
    ],
)
def test_one_byte_flip_in_each_region_of_each_record(region, lo, hi, reason):
    data = frame_records(SMALL)
    starts = _starts(SMALL)
    for index, payload in enumerate(SMALL):
        record = range(starts[index], starts[index + 1])
        positions = list(record[lo:hi])
        if not positions:  # the empty payload has no payload byte to flip
            assert region == "payload" and payload == b""
            continue
        for pos in positions:
            bad = bytearray(data)
            bad[pos] ^= 0x5A
            got, err = _read_until_error(bytes(bad))
            assert err is not None, (region, index, pos)
            assert (err.offset, err.index, err.path) == (starts[index], index, "f.tfrecord")
            assert reason in err.reason
            assert f"offset {starts[index]}" in str(err)
            assert got == SMALL[:index]  # nothing corrupt, nothing after


def test_truncation_at_every_position_uncompressed():
    data = frame_records(SMALL)
    starts = _starts(SMALL)
    for cut in range(len(data)):
        got, err = _read_until_error(data[:cut])
        if cut in starts:  # a whole number of records is a valid, shorter file
            assert err is None and got == SMALL[: starts.index(cut)]
            continue
        index = max(i for i, s in enumerate(starts) if s < cut)
        assert err is not None, cut
        assert (err.offset, err.index) == (starts[index], index)
        assert "truncated" in err.reason
        assert got == SMALL[:index]


@pytest.mark.parametrize("compression", COMPRESSED)
def test_truncation_at_every_position_compressed(compression):
    data = _write(SMALL, compression)
    assert _read_all(data[:0], compression) == []  # an empty file is an empty stream, as in TF
    for cut in range(1, len(data)):
        got, err = _read_until_error(data[:cut], compression)
        assert err is not None, cut
        assert got == SMALL[: err.index]
        assert err.offset == _starts(SMALL)[err.index]
        assert "truncated" in err.reason or f"bad {compression.value} stream" in err.reason


@pytest.mark.parametrize("compression", COMPRESSED)
def test_byte_flips_in_compressed_stream_never_yield_wrong_payloads(compression):
    data = _write(SMALL * 3, compression)
    header = 10 if compression is Compression.GZIP else 2  # gzip mtime/OS bytes are unchecked
    raised = 0
    for pos in range(header, len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        got, err = _read_until_error(bytes(bad), compression)
        if err is None:  # only possible if inflating gives the same bytes (padding bits)
            assert got == SMALL * 3
        else:
            raised += 1
            assert got == (SMALL * 3)[: err.index]
    assert raised >= 0.9 * (len(data) - header)


@pytest.mark.parametrize("compression", COMPRESSED)
def test_bad_compressed_streams(monkeypatch, compression):
    name = compression.value
    good = _write(SMALL, compression)
    # Garbage instead of a stream header.
    with pytest.raises(TFRecordCorruptError, match=f"bad {name} stream") as info:
        _read_all(b"\x00" + good[1:], compression, path="x")
    assert (info.value.offset, info.value.index, info.value.path) == (0, 0, "x")
    # A bad checksum in the stream trailer (gzip CRC32 / zlib Adler-32).
    trailer = len(good) - (8 if compression is Compression.GZIP else 4)
    bad = bytearray(good)
    bad[trailer] ^= 0x01
    got, err = _read_until_error(bytes(bad), compression)
    assert err is not None and f"bad {name} stream" in err.reason
    assert got == SMALL[: err.index]
    # Read in small pieces, the (intact, CRC-checked) records come out before the trailer
    # is reached, and the error points at the end of the record stream.
    with monkeypatch.context() as m:
        m.setattr(compression_module, "READ_CHUNK", 1)
        m.setattr(tfrecord_reader, "READ_CHUNK", 1)
        got, err = _read_until_error(bytes(bad), compression)
    assert err is not None and f"bad {name} stream" in err.reason
    assert got == SMALL
    assert (err.offset, err.index) == (_starts(SMALL)[-1], len(SMALL))
    # Bytes after the end of the stream.
    with pytest.raises(TFRecordCorruptError, match="unexpected bytes after the end"):
        _read_all(good + b"garbage", compression)
    # A file that is not compressed at all.
    with pytest.raises(TFRecordCorruptError, match=f"bad {name} stream"):
        _read_all(frame_records(SMALL), compression)


def test_corrupt_gzip_file_via_read_tfrecord_file_names_the_file(tmp_path):
    path = tmp_path / "shard.tfrecord.gz"
    data = bytearray(_write(SMALL * 20, Compression.GZIP))
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    got = []
    with pytest.raises(TFRecordCorruptError) as info:
        for payload in read_tfrecord_file(str(path)):
            got.append(payload)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert got == (SMALL * 20)[: info.value.index]


def test_record_info_fields():
    [first, second] = list(iter_records(io.BytesIO(frame_records([b"foo", b""]))))
    assert first == RecordInfo(index=0, offset=0, payload=b"foo")
    assert second == RecordInfo(index=1, offset=19, payload=b"")
    assert crc32c.crc32c(b"foo") == 0xCFC4AE1D  # the value the golden bytes were derived from
