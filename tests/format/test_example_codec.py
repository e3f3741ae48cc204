"""The reference Example encoder (tests/format/reference_codec.py) and our decoder, checked against
TensorFlow's own classes and parser; the fast per-record encoder against the reference."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from protos import example_pb2
from tests.format.reference_codec import encode_example
from transforms.format.example_codec import decode_example, encode_example_parts, feature_sort_key


def _tf_example(features):
    """The same Example built with TensorFlow's classes (features always set)."""
    feature_map = {}
    for name, (kind, values) in features.items():
        if kind == "int64":
            feature_map[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        elif kind == "float":
            feature_map[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature_map[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature_map))


def _entry_names(payload):
    """Feature names in the order their map entries appear on the wire."""
    # Example: 0a len Features; Features: repeated (0a len entry); entry: 0a len key ...
    assert payload[0] == 0x0A
    names = []
    pos = 1 + _read_varint(payload, 1)[1]
    while pos < len(payload):
        assert payload[pos] == 0x0A
        entry_len, n = _read_varint(payload, pos + 1)
        entry = payload[pos + 1 + n : pos + 1 + n + entry_len]
        key_len, m = _read_varint(entry, 1)
        names.append(entry[1 + m : 1 + m + key_len].decode())
        pos += 1 + n + entry_len
    return names


def _read_varint(data, pos):
    value = shift = 0
    start = pos
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if byte < 0x80:
            return value, pos - start


def test_empty_example_has_features_field_like_tensorflow():
    payload = encode_example({})
    assert payload == b"\n\x00"
    assert payload == tf.train.Example(features=tf.train.Features()).SerializeToString()
    assert decode_example(payload) == {}


def test_matches_tensorflow_serialization_byte_for_byte():
    features = {
        "label": ("int64", [3]),
        "neg": ("int64", [-1, -(2**63), 2**63 - 1]),
        "score": ("float", [0.1, -0.0, math.inf]),
        "text": ("bytes", ["héllo".encode(), b"\xff\xfe", b""]),
        "empty_f": ("float", []),
        "empty_b": ("bytes", []),
        "zz": ("int64", list(range(300))),
    }
    expected = _tf_example(features).SerializeToString(deterministic=True)
    assert encode_example(features) == expected


def test_features_sorted_by_utf8_name_regardless_of_insertion_order():
    names = ["b", "a", "ab", "aa", "B", "é", "z", "a_", "\U0001f600"]
    features = {name: ("int64", [i]) for i, name in enumerate(names)}
    payload = encode_example(features)
    assert _entry_names(payload) == sorted(names)
    assert sorted(names, key=feature_sort_key) == sorted(names)
    reordered = dict(reversed(list(features.items())))
    assert encode_example(reordered) == payload
    # TensorFlow reads the same map.
    parsed = tf.train.Example.FromString(payload).features.feature
    assert {k: list(v.int64_list.value) for k, v in parsed.items()} == {
        name: [i] for i, name in enumerate(names)
    }


def test_prefix_names_shorter_first():
    # protobuf's upb backend would write "ab", "a" with deterministic=True; we write
    # plain byte order, which does not depend on the protobuf backend or release.
    payload = encode_example({"ab": ("int64", [1]), "a": ("int64", [2])})
    assert _entry_names(payload) == ["a", "ab"]
    assert decode_example(payload) == {"a": ("int64", [2]), "ab": ("int64", [1])}


def test_values_and_kinds_round_trip():
    features = {
        "i": ("int64", [0, -5, 2**62]),
        "f": ("float", [1.5, -2.25]),
        "b": ("bytes", [b"\x00\x01", b"abc"]),
        "e": ("int64", []),
    }
    assert decode_example(encode_example(features)) == {
        "b": ("bytes", [b"\x00\x01", b"abc"]),
        "e": ("int64", []),
        "f": ("float", [1.5, -2.25]),
        "i": ("int64", [0, -5, 2**62]),
    }


def test_float_values_are_stored_as_float32():
    (decoded,) = decode_example(encode_example({"x": ("float", [0.1])}))["x"][1]
    assert decoded == float(np.float32(0.1)) != 0.1
    nan_bits = struct.pack("<f", math.nan)
    assert nan_bits in encode_example({"x": ("float", [math.nan])})
    assert struct.pack("<f", -0.0) in encode_example({"x": ("float", [-0.0])})


def test_scalars_str_and_numpy_inputs():
    lists = {"s": ("bytes", ["ü".encode()]), "i": ("int64", [7]), "f": ("float", [0.5])}
    explicit = encode_example(lists)
    scalars = {"s": ("bytes", "ü"), "i": ("int64", 7), "f": ("float", 0.5)}
    assert encode_example(scalars) == explicit
    numpy_scalars = {
        "s": ("bytes", b"\xc3\xbc"),
        "i": ("int64", np.int64(7)),
        "f": ("float", np.float32(0.5)),
    }
    assert encode_example(numpy_scalars) == explicit
    arrays = encode_example({"i": ("int64", np.array([1, 2])), "f": ("float", np.array([0.5]))})
    assert decode_example(arrays) == {"f": ("float", [0.5]), "i": ("int64", [1, 2])}
    bools = encode_example({"i": ("int64", [True, False, np.bool_(True)])})
    assert decode_example(bools) == {"i": ("int64", [1, 0, 1])}


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"": ("int64", [1])}, "must not be empty"),
        ({3: ("int64", [1])}, "must be a str"),
        ({"\ud800": ("int64", [1])}, "not valid UTF-8"),
        ({"x": ("int32", [1])}, "feature 'x': unknown kind 'int32'"),
        ({"x": ("int64", [2**63])}, "feature 'x' \\(int64\\)"),
        ({"x": ("int64", [1.5])}, "feature 'x' \\(int64\\)"),
        ({"x": ("int64", b"ab")}, "feature 'x' \\(int64\\)"),
        ({"x": ("float", ["1.0"])}, "feature 'x' \\(float\\)"),
        ({"x": ("bytes", [1])}, "feature 'x' \\(bytes\\)"),
        ({"x": [1, 2, 3]}, "feature 'x': expected a \\(kind, values\\) pair"),
        ({"x": 5}, "feature 'x': expected a \\(kind, values\\) pair"),
    ],
)
def test_invalid_features_raise_value_error_naming_them(features, message):
    with pytest.raises(ValueError, match=message):
        encode_example(features)


@pytest.mark.parametrize(
    "payload",
    [b"\xff", b"\n\x05\n\x03", b"\n\x03\n\x01\xff", b"\x0a\x80", b"\n\x04\n\x02\n\x00\xff"],
)
def test_decode_rejects_unparsable_payloads(payload):
    with pytest.raises(ValueError, match=f"payload of {len(payload)} bytes is not a serialized"):
        decode_example(payload)


def test_decode_rejects_non_bytes():
    with pytest.raises(TypeError):
        decode_example("not bytes")


def test_decode_reads_tensorflow_written_examples_and_kindless_features():
    payload = _tf_example({"a": ("float", [2.0]), "b": ("bytes", [b"q"])}).SerializeToString()
    assert decode_example(memoryview(payload)) == {"a": ("float", [2.0]), "b": ("bytes", [b"q"])}
    ex = example_pb2.Example()
    ex.features.feature["nothing"].SetInParent()
    assert decode_example(ex.SerializeToString()) == {"nothing": (None, [])}


_names = st.text(min_size=1, max_size=12)
_feature = st.one_of(
    st.tuples(st.just("int64"), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5)),
    st.tuples(st.just("float"), st.lists(st.floats(width=32, allow_nan=False), max_size=5)),
    st.tuples(st.just("bytes"), st.lists(st.binary(max_size=20), max_size=5)),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_names, _feature, max_size=6))
def test_tensorflow_parses_what_we_encode(features):
    payload = encode_example(features)
    parsed = tf.train.Example.FromString(payload).features.feature
    assert set(parsed) == set(features)
    for name, (kind, values) in features.items():
        assert list(getattr(parsed[name], f"{kind}_list").value) == values
    assert decode_example(payload) == {name: features[name] for name in sorted(features)}
    # Byte-identical to TensorFlow's deterministic serialization unless a name is a
    # proper prefix of another (where only the upb backend's order differs).
    if not any(a != b and b.startswith(a) for a in features for b in features):
        assert payload == _tf_example(features).SerializeToString(deterministic=True)


# --------------------------------------------------------------------------- per-record encoder

_part_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1,
                      max_size=12)
_part_features = st.one_of(
    st.tuples(st.just("bytes"), st.lists(st.one_of(st.binary(max_size=300), st.text(max_size=20)),
                                         max_size=4)),
    st.tuples(st.just("int64"), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5)),
    st.tuples(st.just("float"), st.lists(
        st.floats(width=32, allow_nan=False) | st.sampled_from([float("inf"), -float("inf")]),
        max_size=5)),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_part_names, _part_features, max_size=8))
def test_example_parts_are_byte_identical_to_the_reference(features):
    assert b"".join(encode_example_parts(features)) == encode_example(features)


def test_example_parts_cache_never_confuses_equal_keys_with_different_encodings():
    cases = [{"f": ("float", [0.0])}, {"f": ("float", [-0.0])}, {"n": ("int64", [1])},
             {"n": ("int64", [True])}, {"s": ("bytes", ["é"])}, {"s": ("bytes", [b"\xc3\xa9"])},
             {"s": ("bytes", [b"x" * 17])}, {"n": ("int64", [2**63 - 1, -1])}]
    for features in cases + cases:  # the second pass hits the cache
        assert b"".join(encode_example_parts(features)) == encode_example(features)
