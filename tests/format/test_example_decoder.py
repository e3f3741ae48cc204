"""The batch Example decoder gives exactly what the reference decoder gives, record by record."""

from __future__ import annotations

import math
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.format.reference_codec import encode_example
from tests.format.strategies import KINDS, NAMES, VALUES
from transforms.format.example_codec import decode_example, encode_varint
from transforms.format.example_decoder import (
    ExampleDecodeError,
    MixedKindError,
    decode_examples,
)
from transforms.format.wire_scan import packed_varints, read_varints


@st.composite
def batches(draw):
    """(features per record) for a random schema: a feature is absent (None), an empty list,
    or a list of values of its kind."""
    num_rows = draw(st.integers(0, 20))
    names = draw(st.lists(NAMES, max_size=6, unique=True))
    kinds = {name: draw(st.sampled_from(KINDS)) for name in names}
    records = []
    for _ in range(num_rows):
        record = {}
        for name, kind in kinds.items():
            values = draw(st.one_of(st.none(), st.lists(VALUES[kind], max_size=draw(
                st.sampled_from([0, 1, 3, 8])))))
            if values is not None:
                record[name] = (kind, values)
        records.append(record)
    return records


def _same(a, b) -> bool:
    """Decoded values equal, NaN included (floats compared as float32 bits)."""
    if a.keys() != b.keys():
        return False
    for name in a:
        (kind_a, values_a), (kind_b, values_b) = a[name], b[name]
        if kind_a != kind_b or len(values_a) != len(values_b):
            return False
        if kind_a == "float":
            values_a = [struct.pack("<f", v) for v in values_a]
            values_b = [struct.pack("<f", v) for v in values_b]
        if values_a != values_b:
            return False
    return True


def _row(batch, index: int) -> dict:
    """Record `index` of a decoded batch as `decode_example` gives it: {name: (kind, values)}."""
    row = {}
    for name, column in sorted(batch.columns.items(), key=lambda item: item[0].encode()):
        if not column.present[index]:
            continue
        begin, end = int(column.row_offsets[index]), int(column.row_offsets[index + 1])
        if column.kind == "bytes":
            cuts = column.value_offsets[begin : end + 1].tolist()
            values = [column.values[a:b].tobytes() for a, b in zip(cuts, cuts[1:], strict=False)]
        else:
            values = column.values[begin:end].tolist()
        kindless = column.kindless is not None and column.kindless[index]
        row[name] = (None if kindless else column.kind, values)
    return row


def assert_matches_reference(payloads):
    batch = decode_examples(payloads)
    assert batch.num_rows == len(payloads)
    for index, payload in enumerate(payloads):
        expected = decode_example(payload)
        got = _row(batch, index)
        assert _same(got, expected), (index, got, expected)
    return batch


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_random_examples_decode_as_the_reference(records):
    assert_matches_reference([encode_example(record) for record in records])


def test_absent_features_and_empty_lists_differ():
    payloads = [
        encode_example({"a": ("int64", [1]), "b": ("bytes", [b"x"])}),
        encode_example({"a": ("int64", [])}),  # b absent, a empty
        encode_example({}),
        b"",  # an Example with no `features` field at all
    ]
    batch = assert_matches_reference(payloads)
    a, b = batch.columns["a"], batch.columns["b"]
    assert a.present.tolist() == [True, True, False, False]
    assert a.counts.tolist() == [1, 0, 0, 0]
    assert b.present.tolist() == [True, False, False, False]


def test_nan_infinities_large_ints_and_non_utf8_bytes():
    nan_bits = struct.unpack("<f", struct.pack("<I", 0x7FC00001))[0]  # a NaN with a payload
    payloads = [encode_example({
        "f": ("float", [math.nan, math.inf, -math.inf, -0.0, nan_bits, 1e-45]),
        "i": ("int64", [2**63 - 1, -(2**63), -1, 0, 2**32]),
        "b": ("bytes", [b"\xff\xfe\x00", b"", "héllo".encode()]),
    })]
    batch = assert_matches_reference(payloads)
    floats = batch.columns["f"].values
    assert floats.dtype == np.float32
    assert floats.view(np.uint32)[4] == struct.unpack("<I", struct.pack("<f", nan_bits))[0]
    assert batch.columns["i"].values.dtype == np.int64
    assert batch.columns["i"].values.tolist() == [2**63 - 1, -(2**63), -1, 0, 2**32]


def _entry(name: bytes, feature: bytes) -> bytes:
    body = b"\x0a" + encode_varint(len(name)) + name + b"\x12" + encode_varint(len(feature)) + feature
    return b"\x0a" + encode_varint(len(body)) + body


def _example(*entries: bytes, extra: bytes = b"") -> bytes:
    body = b"".join(entries)
    return b"\x0a" + encode_varint(len(body)) + body + extra


def _int_list(*chunks: bytes) -> bytes:
    body = b"".join(chunks)
    return b"\x1a" + encode_varint(len(body)) + body


def test_layouts_other_writers_produce_decode_as_the_reference():
    unpacked_ints = _int_list(b"\x08\x05", b"\x08\x96\x01")  # one tag per value
    two_packed_chunks = _int_list(b"\x0a\x01\x07", b"\x0a\x02\x96\x01")
    unpacked_floats = b"\x12\x0a" + b"\x0d" + struct.pack("<f", 1.5) + b"\x0d" + struct.pack("<f", -2)
    value_before_key = b"\x0a\x09" + b"\x12\x04\x1a\x02\x0a\x00" + b"\x0a\x01z"
    payloads = [
        _example(_entry(b"u", unpacked_ints), _entry(b"p", two_packed_chunks)),
        _example(_entry(b"f", unpacked_floats)),
        _example(value_before_key),
        _example(_entry(b"d", _int_list(b"\x0a\x01\x01")), _entry(b"d", _int_list(b"\x0a\x01\x02"))),
        _example(_entry(b"u", _int_list(b"\x0a\x01\x03")), extra=b"\x10\x01"),  # unknown field
        _example(_entry(b"p", _int_list())) + _example(_entry(b"f", b"")),  # two `features` fields
        _example(_entry(b"n", b"")),  # a Feature with no list: kind None
        _example(_entry(b"u", b"\x1a\x00"), _entry(b"k", b"\x0a\x00")),  # empty lists
        _example(_entry(b"u", _int_list(b"\x0a\x0a" + b"\xff" * 9 + b"\x01"))),  # 10-byte varint
    ]
    assert_matches_reference(payloads)


@pytest.mark.parametrize("payload", [
    b"\x0a\x05\x0a\x03",  # truncated
    b"\xff\xff",
    _example(_entry(b"\xff\xfe", _int_list(b"\x0a\x01\x01"))),  # a name that is not UTF-8
    _example(_entry(b"x", _int_list(b"\x0a\x02\x81"))),  # varint cut by its chunk
    # a name length near 2**64 (found by the damage test): refused, never a negative position
    b"\n\x11\n\x0f\n\x89\xc2\x80\xc2\x80\xf0\x90\x80\x801\x12\x02\x1a\x00",
    _example(_entry(b"x", b"\x1a" + b"\xff" * 9 + b"\x01")),  # a list length of 2**64 - 1
])
def test_a_payload_that_is_not_an_example_is_named_by_its_index(payload):
    good = encode_example({"x": ("int64", [1])})
    with pytest.raises(ExampleDecodeError) as raised:
        decode_examples([good, good, payload])
    assert raised.value.index == 2
    with pytest.raises(ValueError):
        decode_example(payload)


def test_a_feature_of_two_kinds_is_refused():
    payloads = [encode_example({"x": ("int64", [1])}), encode_example({"x": ("float", [1.0])})]
    with pytest.raises(MixedKindError) as raised:
        decode_examples(payloads)
    assert raised.value.name == "x" and raised.value.index == 1


def test_columns_become_arrow_arrays():
    payloads = [encode_example({"b": ("bytes", [b"ab", b"\xff"]), "i": ("int64", [7])}),
                encode_example({"b": ("bytes", [b""])})]
    batch = decode_examples(payloads)
    assert batch.columns["b"].values_array().to_pylist() == [b"ab", b"\xff", b""]
    assert batch.columns["i"].values_array(pa.int64()).to_pylist() == [7]
    assert batch.columns["b"].row_offsets.tolist() == [0, 2, 3]


def test_many_features_and_records_in_a_big_batch():
    rng = np.random.default_rng(7)
    payloads = [
        encode_example({f"f{j}": ("int64", rng.integers(-(2**40), 2**40, int(rng.integers(0, 4))).tolist())
                        for j in range(int(rng.integers(0, 30)))})
        for _ in range(500)
    ]
    assert_matches_reference(payloads)


def test_varint_readers_refuse_what_protobuf_refuses():
    data = np.frombuffer(b"\x96\x01" + b"\xff" * 10 + b"\x01" + b"\xff" * 9 + b"\x02", np.uint8)
    values, sizes, ok = read_varints(data, np.array([0, 2, 13]), np.array([2, 13, 23]))
    assert values[0] == 150 and sizes[0] == 2 and ok.tolist() == [True, False, False]
    chunks = np.frombuffer(b"\x96\x01\x05" + b"\x80", np.uint8)
    values, counts, ok = packed_varints(chunks, np.array([0, 3, 4]))
    assert values[:2].tolist() == [150, 5] and counts[0] == 2 and ok.tolist() == [True, False]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data())
def test_damaged_payloads_fail_or_decode_as_the_reference(records, data):
    """Flipped, cut or inserted bytes: the batch decoder raises for exactly the payloads the
    reference refuses, and otherwise decodes what the reference decodes."""
    payloads = [encode_example(record) for record in records] or [b""]
    index = data.draw(st.integers(0, len(payloads) - 1))
    damaged = bytearray(payloads[index])
    action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    where = data.draw(st.integers(0, len(damaged)))
    if action == "flip" and damaged:
        damaged[min(where, len(damaged) - 1)] ^= data.draw(st.integers(1, 255))
    elif action == "cut":
        del damaged[where:]
    else:
        damaged[where:where] = data.draw(st.binary(min_size=1, max_size=3))
    payloads[index] = bytes(damaged)
    try:
        decode_example(payloads[index])
    except ValueError:
        with pytest.raises(ExampleDecodeError) as raised:
            decode_examples(payloads)
        assert raised.value.index == index
        return
    try:
        assert_matches_reference(payloads)
    except MixedKindError:  # a flipped tag may turn a list into another kind
        pass
