"""The SequenceExample codec: the reference against TensorFlow, the batch encoder against
the reference on random schemas (hypothesis), and the decoder."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protos import example_pb2
from tests.format.reference_codec import column_from_values, encode_sequence_example
from transforms.format.example_codec import INT64_MAX, INT64_MIN, decode_sequence_example, is_sequence_example
from transforms.format.sequence_encoder import encode_sequence_batch, encode_sequence_framed
from transforms.format.tfrecord_format import FramedRecords

CONTEXT = {"user": ("bytes", [b"u1"]), "age": ("int64", [42]), "w": ("float", [0.5, 1.5])}
LISTS = {"ts": ("int64", [[1], [2], []]), "tags": ("bytes", [[b"a", b"b"], [], ["c"]]),
         "x": ("float", [[0.25], [], [-1.0, 2.0]])}


def test_reference_is_what_tensorflow_writes_and_reads(tf):
    payload = encode_sequence_example(CONTEXT, LISTS)
    theirs = tf.train.SequenceExample.FromString(payload)
    assert theirs.context.feature["age"].int64_list.value == [42]
    assert [list(f.bytes_list.value) for f in theirs.feature_lists.feature_list["tags"].feature] == \
        [[b"a", b"b"], [], [b"c"]]
    # TensorFlow's own serialization of the same message parses to the same content.
    assert example_pb2.SequenceExample.FromString(theirs.SerializeToString()) == \
        example_pb2.SequenceExample.FromString(payload)
    context, sequences = tf.io.parse_single_sequence_example(
        payload,
        context_features={"age": tf.io.FixedLenFeature([], tf.int64)},
        sequence_features={"tags": tf.io.VarLenFeature(tf.string),
                           "ts": tf.io.VarLenFeature(tf.int64)},
    )
    assert int(context["age"]) == 42
    assert tf.sparse.to_dense(sequences["ts"]).numpy().tolist() == [[1], [2], [0]]


def test_decode_round_trip_and_detection():
    payload = encode_sequence_example(CONTEXT, LISTS)
    context, lists = decode_sequence_example(payload)
    assert context == {"age": ("int64", [42]), "user": ("bytes", [b"u1"]), "w": ("float", [0.5, 1.5])}
    assert lists["tags"] == ("bytes", [[b"a", b"b"], [], [b"c"]])
    assert list(lists) == ["tags", "ts", "x"]
    assert is_sequence_example(payload)
    assert not is_sequence_example(example_pb2.Example().SerializeToString() or b"\n\x00")
    assert encode_sequence_example({}, {}) == b"\n\x00\x12\x00"
    with pytest.raises(ValueError, match="not a serialized"):
        decode_sequence_example(b"\xff\xff")


def test_batch_rejects_bad_offsets():
    with pytest.raises(ValueError, match="step_offsets"):
        encode_sequence_batch(2, [], np.array([0, 2]), [])
    with pytest.raises(ValueError, match="expected 3 steps"):
        encode_sequence_batch(1, [], np.array([0, 3]), [column_from_values("a", "int64", [1])])


_NAMES = st.text(alphabet="abcé_", min_size=1, max_size=4)
_KIND = st.sampled_from(["int64", "float", "bytes"])


def _value(kind):
    if kind == "int64":
        return st.integers(INT64_MIN, INT64_MAX)
    if kind == "float":
        return st.floats(width=32, allow_nan=False)
    return st.binary(max_size=6)


def _cell(kind):
    # None: no value; a list: the values (possibly none).
    return st.one_of(st.none(), st.lists(_value(kind), max_size=3))


@st.composite
def _batches(draw):
    names = draw(st.lists(_NAMES, max_size=5, unique=True))
    kinds = {name: draw(_KIND) for name in names}
    in_context = {name: draw(st.booleans()) for name in names}
    lengths = draw(st.lists(st.integers(0, 4), min_size=0, max_size=4))
    context = {name: [draw(_cell(kinds[name])) for _ in lengths]
               for name in names if in_context[name]}
    steps = {name: [draw(_cell(kinds[name])) for _ in range(sum(lengths))]
             for name in names if not in_context[name]}
    return kinds, lengths, context, steps


def _batch_args(kinds, lengths, context, steps) -> tuple:
    """The arguments of encode_sequence_batch/framed for sequences of `lengths` steps."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return (len(lengths), [column_from_values(n, kinds[n], v) for n, v in context.items()],
            offsets, [column_from_values(n, kinds[n], v) for n, v in steps.items()])


def assert_batch_matches_reference(kinds, lengths, context, steps) -> None:
    """Each sequence of the batch encoder is the reference encoder's bytes (a context cell
    of None is an absent feature, a step cell of None an empty list)."""
    args = _batch_args(kinds, lengths, context, steps)
    offsets = args[2]
    encoded = encode_sequence_batch(*args)
    assert len(encoded) == len(lengths)
    for s in range(len(lengths)):
        reference = encode_sequence_example(
            {n: (kinds[n], v[s]) for n, v in context.items() if v[s] is not None},
            {n: (kinds[n], [cell or [] for cell in v[offsets[s]:offsets[s + 1]]])
             for n, v in steps.items()})
        assert encoded[s] == reference, s


@settings(max_examples=150, deadline=None)
@given(_batches())
def test_batch_encoder_matches_the_reference(batch):
    assert_batch_matches_reference(*batch)


@settings(max_examples=60, deadline=None)
@given(_batches())
def test_framed_batch_is_the_framed_payloads(batch):
    args = _batch_args(*batch)
    framed = encode_sequence_framed(*args)
    assert framed == FramedRecords.frame(encode_sequence_batch(*args))
    assert framed.data == FramedRecords.frame(encode_sequence_batch(*args)).data


def test_large_batch_of_short_and_long_sequences_matches_the_reference():
    """Multi-byte lengths everywhere: long names, long values, sequences of 0..300 steps."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 300, 40).tolist()
    num_steps = sum(lengths)
    name = "n" * 200
    big = [None if i % 7 == 0 else [bytes(rng.integers(0, 256, int(rng.integers(0, 300)), np.uint8))]
           for i in range(num_steps)]
    ints = [[int(v) for v in rng.integers(-2**63, 2**63 - 1, int(i % 4), dtype=np.int64)]
            for i in range(num_steps)]
    floats = [[float(v) for v in rng.random(i % 3).astype(np.float32)] for i in range(num_steps)]
    context = {"c": [[b"x" * (s * 5)] for s in range(len(lengths))]}
    steps = {name: big, "i": ints, "f": floats}
    kinds = {name: "bytes", "i": "int64", "f": "float", "c": "bytes"}
    assert_batch_matches_reference(kinds, lengths, context, steps)
