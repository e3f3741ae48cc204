"""The vectorised encoder is byte-identical to the protobuf reference encoder."""

from __future__ import annotations

import contextlib
import math
import struct
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.format.reference_codec import column_from_values, encode_example
from tests.format.strategies import INT64, KINDS, NAMES, VALUES
from transforms.format import example_encoder
from transforms.format.example_codec import decode_example
from transforms.format.example_columns import Column, NullElementError, column_from_arrow
from transforms.format.example_encoder import encode_columns, encode_framed
from transforms.format.tfrecord_format import frame_records


def reference(num_rows, data):
    """Per-row reference encoding; data: {name: (kind, rows)}, a row None = absent."""
    return [
        encode_example({name: (kind, rows[r]) for name, (kind, rows) in data.items() if rows[r] is not None})
        for r in range(num_rows)
    ]


def encode_values(data, num_rows):
    return encode_columns(
        num_rows, [column_from_values(name, kind, rows) for name, (kind, rows) in data.items()]
    )


@contextlib.contextmanager
def encoder_mode(mode):
    """Force one of the encoder's internal strategies (all must give the same bytes)."""
    with contextlib.ExitStack() as stack:
        if mode == "padded":
            stack.enter_context(mock.patch.object(example_encoder, "_use_padded", lambda *a: True))
        elif mode == "scatter":
            stack.enter_context(mock.patch.object(example_encoder, "_use_padded", lambda *a: False))
        elif mode == "split":  # encode rows in groups of similar size
            stack.enter_context(mock.patch.object(example_encoder, "_MAX_PADDING_FACTOR", 0))
            stack.enter_context(mock.patch.object(example_encoder, "_PADDING_ALLOWANCE", 0))
        yield


# ------------------------------------------------------------------ random schemas

@st.composite
def schemas(draw):
    """(num_rows, {name: (kind, rows)}); a row is None (absent), a value or a list."""
    num_rows = draw(st.integers(0, 25))
    names = draw(st.lists(NAMES, max_size=6, unique=True))
    data = {}
    for name in names:
        kind = draw(st.sampled_from(KINDS))
        value = VALUES[kind]
        shape = draw(st.sampled_from(["scalar", "list", "fixed"]))
        if shape == "scalar":
            row = value
        elif shape == "list":
            row = st.lists(value, max_size=draw(st.sampled_from([0, 1, 3, 8])))
        else:
            size = draw(st.integers(0, 4))
            row = st.lists(value, min_size=size, max_size=size)
        if draw(st.booleans()):
            row = st.one_of(st.none(), row)
        data[name] = (kind, draw(st.lists(row, min_size=num_rows, max_size=num_rows)))
    return num_rows, data


def messy_column(name, kind, rows):
    """Same logical column as column_from_values, laid out awkwardly: values held by absent
    rows, a non-zero first offset, unused values at the end, float64 values and for bytes
    a data buffer with unused bytes around and between the selected values."""
    flat, row_offsets, present = [_junk(kind)], [1], []
    for row in rows:
        present.append(row is not None)
        if row is None:
            flat.extend([_junk(kind), _junk(kind)])
        else:
            flat.extend(row if isinstance(row, list) else [row])
        row_offsets.append(len(flat))
    flat.append(_junk(kind))
    present = np.array(present, bool)
    row_offsets = np.array(row_offsets, np.int64)
    if kind != "bytes":
        dtype = np.int64 if kind == "int64" else np.float64  # floats cast to float32
        return Column(name, kind, np.array(flat, dtype), None, row_offsets, present)
    # Data starts after a prefix and ends before a suffix; junk values in between are
    # skipped, so the selected bytes are not contiguous.
    data, starts = bytearray(b"??"), []
    for value in flat:
        starts.append(len(data))
        data += value
    value_offsets = np.array(starts + [len(data)], np.int64)
    data += b"trailing"
    return Column(name, kind, np.frombuffer(bytes(data), np.uint8), value_offsets, row_offsets, present)


def _junk(kind):
    return {"int64": -(2**62), "float": 7.5, "bytes": b"junk\xff"}[kind]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(), messy=st.booleans())
def test_random_schemas_match_reference(schema, messy):
    """Each schema through every strategy of the encoder (drawing a schema costs about as
    much as encoding it four times, so the strategies share the schemas)."""
    num_rows, data = schema
    build = messy_column if messy else column_from_values
    columns = [build(name, kind, rows) for name, (kind, rows) in data.items()]
    expected = reference(num_rows, data)
    for mode in ["auto", "padded", "scatter", "split"]:
        with encoder_mode(mode):
            got = encode_columns(num_rows, columns)
            framed = encode_framed(num_rows, columns)
        assert got == expected, mode
        assert framed.data == frame_records(expected), mode
        assert framed.framed_sizes().tolist() == [len(e) + 16 for e in expected], mode


# -------------------------------------------------------------------- edge cases


def test_no_rows_and_no_columns():
    assert encode_columns(0, [column_from_values("a", "int64", [])]) == []
    assert encode_columns(3, []) == [b"\n\x00"] * 3


def test_absent_everywhere_column_is_left_out():
    data = {"gone": ("bytes", [None, None]), "x": ("int64", [1, None])}
    got = encode_values(data, 2)
    assert got == reference(2, data)
    assert got[1] == b"\n\x00"
    assert decode_example(got[0]) == {"x": ("int64", [1])}


@pytest.mark.parametrize("kind", KINDS)
def test_empty_lists_are_present_features_with_empty_list(kind):
    data = {"e": (kind, [[], None, []])}
    got = encode_values(data, 3)
    assert got == reference(3, data)
    tag = {"bytes": b"\x0a", "float": b"\x12", "int64": b"\x1a"}[kind]
    # entry {key "e", value Feature{<kind>_list {}}}: the list is set but empty.
    assert got[0] == b"\n\x09\n\x07\n\x01e\x12\x02" + tag + b"\x00"
    assert decode_example(got[0]) == {"e": (kind, [])}
    assert got[1] == b"\n\x00"


def test_wire_bytes_of_a_small_example():
    data = {"a": ("int64", [[-1]]), "b": ("bytes", [[b"", b"\xff"]])}
    got = encode_values(data, 1)
    # Pinned independently of protobuf (and equal to the reference).
    assert got == [
        b"\n\x23"  # Example.features, 35 bytes
        + b"\n\x13\n\x01a\x12\x0e\x1a\x0c\n\x0a"
        + b"\xff" * 9
        + b"\x01"  # a: [-1]
        + b"\n\x0c\n\x01b\x12\x07\n\x05\n\x00\n\x01\xff"  # b: [b"", b"\xff"]
    ]
    assert got == reference(1, data)


def test_negative_and_extreme_int64():
    values = [-1, -(2**63), 2**63 - 1, 0, 1, 127, 128, -128, 2**31, -(2**31)]
    data = {"i": ("int64", [[v] for v in values] + [values])}
    got = encode_values(data, len(values) + 1)
    assert got == reference(len(values) + 1, data)
    assert b"\xff" * 9 + b"\x01" in got[0]  # -1 is a 10-byte varint
    assert decode_example(got[-1]) == {"i": ("int64", values)}


def test_float_special_values_keep_their_bits():
    values = np.array([math.nan, math.inf, -math.inf, -0.0, 1e-45, 3.4028235e38], np.float32)
    column = Column("f", "float", values, None, np.arange(values.size + 1), None)
    got = encode_columns(values.size, [column])
    assert got == reference(values.size, {"f": ("float", [[float(v)] for v in values])})
    for payload, value in zip(got, values, strict=True):
        assert payload.endswith(b"\n\x04" + value.tobytes())
    assert got[3].endswith(struct.pack("<f", -0.0)) and struct.pack("<f", -0.0) != b"\0" * 4


def test_float64_values_are_cast_to_float32():
    column = Column("f", "float", np.array([0.1, 1e40]), None, np.arange(3), None)
    assert encode_columns(2, [column]) == reference(2, {"f": ("float", [0.1, 1e40])})
    assert decode_example(encode_columns(2, [column])[1])["f"][1] == [math.inf]


def test_bytes_empty_non_ascii_and_long():
    rows = [b"", "héllo wörld 日本".encode(), b"\x00\xff" * 70_000, [b"", b"", b"a"], []]
    data = {"b": ("bytes", rows)}
    got = encode_values(data, len(rows))
    assert got == reference(len(rows), data)
    assert decode_example(got[2])["b"][1] == [b"\x00\xff" * 70_000]


def test_long_int_list_has_multibyte_length_varints():
    data = {"ids": ("int64", [list(range(-5000, 5000)), [3]])}
    assert encode_values(data, 2) == reference(2, data)


@pytest.mark.parametrize("length", [1, 2, 63, 127, 128, 200, 16384])
def test_feature_name_lengths(length):
    name = ("n" * length)[:length]
    data = {name: ("int64", [1, None, [2, 3]]), "é" * (length % 7 + 1): ("float", [0.5] * 3)}
    assert encode_values(data, 3) == reference(3, data)


def test_features_sorted_by_name_like_reference_whatever_the_column_order():
    names = ["b", "ab", "a", "aa", "A", "é", "a\x00", "zz"]
    data = {name: ("int64", [i, None, [i, i]]) for i, name in enumerate(names)}
    expected = reference(3, data)
    for order in (names, sorted(names), list(reversed(names))):
        assert encode_values({n: data[n] for n in order}, 3) == expected


def test_outlier_row_uses_size_groups_and_stays_identical():
    rows = [b"x"] * 300 + [b"y" * 3_000_000] + [b"z" * 100] * 50
    data = {"blob": ("bytes", rows), "n": ("int64", list(range(len(rows))))}
    with mock.patch.object(example_encoder, "take_rows", wraps=example_encoder.take_rows) as take_rows:
        got = encode_values(data, len(rows))
    assert take_rows.called  # split into groups rather than a 351 x 3 MB matrix
    assert got == reference(len(rows), data)
    columns = [column_from_values(name, kind, rows) for name, (kind, rows) in data.items()]
    assert encode_framed(len(rows), columns).data == frame_records(got)


@pytest.mark.parametrize("width", [1, 3, 8, 9, 16, 17, 40])
def test_row_gather_and_column_copy_match_plain_indexing(width):
    # The void-element fast paths behind every head and value write of the padded matrix.
    rng = np.random.default_rng(width)
    table = rng.integers(0, 256, (7, width), dtype=np.uint8)
    index = rng.integers(0, 7, 1000)
    gathered = example_encoder._gather_rows(table, index)
    assert np.array_equal(gathered, table[index])
    matrix = rng.integers(0, 256, (1000, width + 11), dtype=np.uint8)
    expected = matrix.copy()
    expected[:, 5 : 5 + width] = table[index]
    example_encoder._put_columns(matrix, 5, gathered)  # rows strided (padded), bytes contiguous
    assert np.array_equal(matrix, expected)


@pytest.mark.parametrize("width", [1, 5, example_encoder._MASK_TABLE_MAX_WIDTH,
                                   example_encoder._MASK_TABLE_MAX_WIDTH + 1, 300])
def test_prefix_and_suffix_masks(width):
    lengths = np.array([0, width, 1, width // 2, width - 1])
    columns = np.arange(width)
    prefix = example_encoder._prefix_masks(lengths, width)
    suffix = example_encoder._prefix_masks(lengths, width, suffix=True)
    assert prefix.dtype == bool and suffix.dtype == bool
    assert np.array_equal(prefix, columns < lengths[:, None])
    assert np.array_equal(suffix, columns >= (width - lengths)[:, None])


def test_scalar_batch_through_tensorflow_parse_example():
    import tensorflow as tf

    rng = np.random.default_rng(1)
    n = 500
    ints = rng.integers(-(2**63), 2**63 - 1, n)
    floats = rng.standard_normal(n).astype(np.float32)
    words = ["cat", "dög", "", "日本"]
    texts = [words[i] for i in rng.integers(0, 4, n)]
    lists = [list(rng.integers(-3, 3, rng.integers(0, 4))) for _ in range(n)]
    columns = [
        Column("i", "int64", ints, None, np.arange(n + 1), None),
        Column("f", "float", floats, None, np.arange(n + 1), None),
        column_from_values("t", "bytes", texts),
        column_from_values("l", "int64", lists),
    ]
    parsed = tf.io.parse_example(
        tf.constant(encode_columns(n, columns)),
        {
            "i": tf.io.FixedLenFeature([], tf.int64),
            "f": tf.io.FixedLenFeature([], tf.float32),
            "t": tf.io.FixedLenFeature([], tf.string),
            "l": tf.io.RaggedFeature(tf.int64),
        },
    )
    np.testing.assert_array_equal(parsed["i"].numpy(), ints)
    np.testing.assert_array_equal(parsed["f"].numpy(), floats)
    assert [t.decode() for t in parsed["t"].numpy()] == texts
    assert parsed["l"].to_list() == [[int(v) for v in row] for row in lists]


# ------------------------------------------------------------------------ errors


def _col(**overrides):
    fields = dict(
        name="x",
        kind="int64",
        values=np.array([1, 2], np.int64),
        value_offsets=None,
        row_offsets=np.array([0, 1, 2]),
        present=None,
    )
    fields.update(overrides)
    return Column(**fields)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (_col(name=""), "must not be empty"),
        (_col(kind="int32"), "feature 'x': unknown kind"),
        (_col(row_offsets=np.array([0, 2])), "feature 'x': row_offsets has 2 entries"),
        (_col(row_offsets=np.array([0, 2, 1])), "feature 'x': row_offsets must be non-decreasing"),
        (_col(row_offsets=np.array([0, 1, 3])), "feature 'x': row_offsets must be non-decreasing"),
        (_col(row_offsets=np.array([0.0, 1, 2])), "feature 'x': row_offsets must be a 1-D int"),
        (_col(present=np.array([1, 0])), "feature 'x': present must be a bool array"),
        (_col(present=np.array([True])), "feature 'x': present must be a bool array"),
        (_col(values=np.array([1.5, 2])), "feature 'x': int64 values must be integers"),
        (_col(values=np.array([2**64 - 1, 0], np.uint64)), "out of the int64 range"),
        (_col(kind="float", values=np.array(["a", "b"])), "float values must be numbers"),
        (_col(kind="bytes", values=np.zeros(3, np.uint8)), "bytes columns need value_offsets"),
        (
            _col(kind="bytes", values=np.zeros(3, np.uint8), value_offsets=np.array([0, 2, 9])),
            "value_offsets must be non-decreasing",
        ),
        (
            _col(kind="bytes", values=np.zeros(3, np.int64), value_offsets=np.array([0, 1, 2])),
            "uint8 data buffer",
        ),
    ],
)
def test_invalid_columns_raise_value_error_naming_the_feature(column, message):
    with pytest.raises(ValueError, match=message):
        encode_columns(2, [column])


def test_duplicate_names_rejected():
    with pytest.raises(ValueError, match="'x' is given more than once"):
        encode_columns(2, [_col(), _col()])


def test_negative_num_rows_rejected():
    with pytest.raises(ValueError, match="num_rows"):
        encode_columns(-1, [])


def test_unsigned_and_bool_int_values_accepted():
    column = _col(values=np.array([2**63 - 1, 5], np.uint64))
    assert encode_columns(2, [column]) == reference(2, {"x": ("int64", [2**63 - 1, 5])})
    column = _col(values=np.array([True, False]))
    assert encode_columns(2, [column]) == reference(2, {"x": ("int64", [1, 0])})


# ----------------------------------------------------------------------- arrow


def _arrow_reference(name, kind, array):
    """The reference encoding of an Arrow column, from its Python values."""
    convert = {
        "int64": int,
        "float": lambda v: float(np.float32(v)),
        "bytes": lambda v: v.encode() if isinstance(v, str) else v,
    }[kind]
    rows = []
    for row in array.to_pylist():
        if row is not None:
            row = [convert(v) for v in (row if isinstance(row, list) else [row])]
        rows.append(row)
    return reference(len(rows), {name: (kind, rows)})


@pytest.mark.parametrize(
    ("kind", "array"),
    [
        ("int64", pa.array([1, None, -(2**63), 2**63 - 1, None])),
        ("int64", pa.array([1, None, 3], pa.int8())),
        ("int64", pa.array([2**64 - 1 - 2**63, None], pa.uint64())),
        ("int64", pa.array([True, None, False])),
        ("float", pa.array([0.1, None, math.inf, -0.0], pa.float64())),
        ("float", pa.array([1.5, None], pa.float32())),
        ("float", pa.array([1, None, 2**40], pa.int64())),
        ("float", pa.array([np.float16(0.5), None], pa.float16())),
        ("bytes", pa.array(["héllo", None, "", "日本語"])),
        ("bytes", pa.array(["a", None, "bc"], pa.large_string())),
        ("bytes", pa.array([b"\xff\x00", None, b""], pa.binary())),
        ("bytes", pa.array([b"\xff", None], pa.large_binary())),
        ("bytes", pa.array([b"abc", None, b"\x00\x00\x00"], pa.binary(3))),
        ("bytes", pa.array(["view", None, "x" * 40], pa.string_view())),
        ("bytes", pa.array(["a", "b", None, "a"]).dictionary_encode()),
        ("int64", pa.array([[1, -2], None, [], [2**63 - 1]])),
        ("int64", pa.array([[1], None, []], pa.large_list(pa.int32()))),
        ("float", pa.array([[0.5, 1.5], None, [2.5, 3.5]], pa.list_(pa.float64(), 2))),
        ("bytes", pa.array([["a", "ü"], [], None, [""]], pa.large_list(pa.large_string()))),
        ("bytes", pa.array([[b"\x01"], None], pa.list_(pa.binary()))),
        ("float", pa.array([None, None])),
    ],
    ids=lambda v: str(v.type) if isinstance(v, pa.Array) else v,
)
def test_column_from_arrow_matches_reference(kind, array):
    assert encode_columns(len(array), [column_from_arrow("c", kind, array)]) == _arrow_reference(
        "c", kind, array
    )


@pytest.mark.parametrize(
    ("kind", "array"),
    [
        ("int64", pa.array([1, None, 3, 4, None, 6])),
        ("bytes", pa.array(["aa", None, "ccc", "d", None, "ffffff"])),
        ("int64", pa.array([[1], [2, 3], None, [], [4, 5, 6], [7]])),
        ("bytes", pa.array([["a"], ["bb", "c"], None, [], ["ddd"], ["e"]])),
        ("float", pa.array([[1, 2], [3, 4], None, [5, 6], [7, 8], [9, 0]], pa.list_(pa.float32(), 2))),
    ],
)
def test_column_from_arrow_sliced_and_chunked(kind, array):
    sliced = array.slice(1, 4)
    assert encode_columns(4, [column_from_arrow("s", kind, sliced)]) == _arrow_reference("s", kind, sliced)
    chunked = pa.chunked_array([array.slice(0, 2), array.slice(2)])
    assert encode_columns(6, [column_from_arrow("s", kind, chunked)]) == _arrow_reference("s", kind, array)


def test_column_from_arrow_null_list_elements():
    array = pa.array([[1, None], [2], None, [None]])
    with pytest.raises(NullElementError, match="feature 'tags': 2 row") as info:
        column_from_arrow("tags", "int64", array)
    assert info.value.rows.tolist() == [0, 3]
    assert info.value.feature == "tags"
    # Null elements only in null (absent) rows or outside the slice are fine.
    ok = pa.array([[9, None], [1], None, [2, 3]]).slice(1)
    assert encode_columns(3, [column_from_arrow("t", "int64", ok)]) == _arrow_reference("t", "int64", ok)


@pytest.mark.parametrize(
    ("kind", "array", "message"),
    [
        ("int64", pa.array(["a"]), "feature 'c': a int64 feature cannot be built from string"),
        ("int64", pa.array([1.5]), "cannot be built from double"),
        ("bytes", pa.array([1]), "a bytes feature cannot be built from int64"),
        ("float", pa.array([[["nested"]]]), "cannot be built from list<item: string>"),
        ("int64", pa.array([2**64 - 1], pa.uint64()), "values do not fit in int64"),
        ("int32", pa.array([1]), "unknown kind"),
    ],
)
def test_column_from_arrow_rejects_mismatched_types(kind, array, message):
    with pytest.raises(ValueError, match=message):
        column_from_arrow("c", kind, array)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), INT64), max_size=4)), max_size=20),
    st.lists(st.one_of(st.none(), st.text(max_size=5)), max_size=20),
)
def test_column_from_arrow_random(int_lists, texts):
    n = min(len(int_lists), len(texts))
    ints = pa.array(int_lists[:n], pa.list_(pa.int64()))
    strings = pa.array(texts[:n], pa.string())
    bad_rows = [i for i, row in enumerate(int_lists[:n]) if row is not None and None in row]
    if bad_rows:
        with pytest.raises(NullElementError) as info:
            column_from_arrow("ints", "int64", ints)
        assert info.value.rows.tolist() == bad_rows
        return
    got = encode_columns(
        n, [column_from_arrow("ints", "int64", ints), column_from_arrow("text", "bytes", strings)]
    )
    data = {
        "ints": ("int64", int_lists[:n]),
        "text": ("bytes", [None if t is None else t.encode() for t in texts[:n]]),
    }
    assert got == reference(n, data)
