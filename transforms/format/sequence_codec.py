"""tf.train.SequenceExample: the reference encoder and decoder, and the batch encoder that
must give the reference's bytes.

`encode_sequence_example` is the test oracle, built on our generated protobuf classes;
`encode_sequence_batch` encodes many sequences from columns (the vectorised Example
encoder writes every step's feature) and the tests hold it to the oracle's bytes on
random schemas. Beam-free.

Wire layout and the conventions that make the bytes deterministic:

    0a len(Features) ...                        SequenceExample.context (always present,
                                                 exactly the bytes of an Example of the
                                                 context features: sorted by name)
    12 len(FeatureLists)                        SequenceExample.feature_lists (always present)
      per feature list, sorted by UTF-8 name:
      0a len(entry) 0a len(name) name           FeatureLists.feature_list map entry
        12 len(FeatureList)
          per step: 0a len(Feature) Feature     FeatureList.feature

Every feature list holds one Feature per step, of the list's kind; a step without a value
is a Feature with an empty list of that kind (never a Feature with no kind, which
TensorFlow's parser refuses). Because both fields are always written, an Example payload
(field 1 only) is told apart from a SequenceExample by `is_sequence_example`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from protos import example_pb2, feature_pb2
from transforms.format.example_codec import (
    decode_example,
    encode_example,
    encode_varint,
    feature_sort_key,
)
from transforms.format.example_columns import Column
from transforms.format.example_encoder import encode_columns

__all__ = [
    "decode_sequence_example",
    "encode_sequence_batch",
    "encode_sequence_example",
    "is_sequence_example",
]

_BYTES_LIKE = (bytes, bytearray, memoryview)
_KIND_OF_FIELD = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes"}
# The one-letter feature name under which each step is encoded as an Example; the bytes
# in front of its Feature are then stripped (see `_step_features`).
_STEP_NAME = "f"


# --------------------------------------------------------------------------- reference


def _step_feature(name: str, kind: str, values: Any) -> feature_pb2.Feature:
    """One step's Feature, with the value rules (and errors) of `encode_example`."""
    example = example_pb2.Example.FromString(encode_example({name: (kind, values)}))
    return example.features.feature[name]


def encode_sequence_example(
    context: Mapping[str, tuple[str, Sequence]],
    feature_lists: Mapping[str, tuple[str, Sequence[Sequence]]],
) -> bytes:
    """Serialize one tf.train.SequenceExample (the reference; see the module docstring).

    Args:
      context: feature name -> (kind, values), as `example_codec.encode_example` takes.
      feature_lists: feature name -> (kind, steps): one sequence of values per step (an
        empty one is a step without a value).

    Raises:
      ValueError: naming the feature, for what `encode_example` refuses.
    """
    context_bytes = encode_example(context)
    entries = []
    for _, name in sorted((feature_sort_key(name), name) for name in feature_lists):
        try:
            kind, steps = feature_lists[name]
        except (TypeError, ValueError):
            raise ValueError(f"feature list {name!r}: expected a (kind, steps) pair") from None
        single = feature_pb2.FeatureLists()
        feature_list = single.feature_list[name]
        feature_list.SetInParent()
        for values in steps:
            feature_list.feature.add().CopyFrom(_step_feature(name, kind, values))
        # One map entry per message, concatenated in our order (see example_codec on why
        # the whole map is not serialized with deterministic=True).
        entries.append(single.SerializeToString())
    body = b"".join(entries)
    return context_bytes + b"\x12" + encode_varint(len(body)) + body


def _parse(payload: bytes | bytearray | memoryview) -> example_pb2.SequenceExample:
    if not isinstance(payload, _BYTES_LIKE):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    message = example_pb2.SequenceExample()
    try:
        message.ParseFromString(bytes(payload))
    except DecodeError as e:
        raise ValueError(
            f"payload of {len(payload)} bytes is not a serialized tf.train.SequenceExample: {e}"
        ) from None
    return message


def is_sequence_example(payload: bytes) -> bool:
    """Whether a payload that parses holds the `feature_lists` field (an Example does not).

    Raises:
      ValueError: when the payload parses neither as an Example nor a SequenceExample.
    """
    return _parse(payload).HasField("feature_lists")


def decode_sequence_example(payload: bytes) -> tuple[dict, dict]:
    """Parse a serialized SequenceExample into (context, feature_lists).

    `context` is what `decode_example` gives for the context features; `feature_lists` is
    {name: (kind, [values of each step])}, sorted by name, kind None when no step has one.

    Raises:
      ValueError: when the payload does not parse, or a feature list mixes kinds.
    """
    message = _parse(payload)
    context = decode_example(example_pb2.Example(features=message.context).SerializeToString())
    lists: dict[str, tuple[str | None, list]] = {}
    feature_list_map = message.feature_lists.feature_list
    for name in sorted(feature_list_map, key=feature_sort_key):
        kinds, steps = set(), []
        for feature in feature_list_map[name].feature:
            field = feature.WhichOneof("kind")
            if field is None:
                steps.append([])
                continue
            kinds.add(_KIND_OF_FIELD[field])
            steps.append(list(getattr(feature, field).value))
        if len(kinds) > 1:
            raise ValueError(f"feature list {name!r} mixes kinds {sorted(kinds)}")
        lists[name] = (kinds.pop() if kinds else None, steps)
    return context, lists


# ---------------------------------------------------------------------------- batch


def _exclusive_cumsum(a: np.ndarray) -> np.ndarray:
    out = np.zeros(len(a) + 1, np.int64)
    np.cumsum(a, dtype=np.int64, out=out[1:])
    return out


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices start..start+length of every range, concatenated."""
    total = int(lengths.sum())
    return np.repeat(starts - _exclusive_cumsum(lengths)[:-1], lengths) + np.arange(total)


def _varint_size(values: np.ndarray) -> np.ndarray:
    size = np.ones(values.shape, np.int64)
    for bits in range(7, 64, 7):
        size += values >= (1 << bits)
    return size


def _inner_length(total: np.ndarray) -> np.ndarray:
    """L such that total == 1 + varint_size(L) + L: the payload of a tag-length-value."""
    inner = np.zeros(total.shape, np.int64)
    for head in range(1, 11):
        candidate = total - 1 - head
        fits = (candidate >= 0) & (_varint_size(np.maximum(candidate, 0)) == head)
        inner = np.where(fits, candidate, inner)
    return inner


def _empty_when_absent(column: Column) -> Column:
    """The column with absent rows turned into present rows without values."""
    present = column.present
    if present is None:
        return column
    row_offsets = np.asarray(column.row_offsets, np.int64)
    counts = np.diff(row_offsets)
    kept = _ranges(row_offsets[:-1][present], counts[present])
    new_offsets = _exclusive_cumsum(np.where(present, counts, 0))
    if column.kind != "bytes":
        return dataclasses.replace(column, values=np.asarray(column.values)[kept],
                                   row_offsets=new_offsets, present=None)
    value_offsets = np.asarray(column.value_offsets, np.int64)
    lengths = value_offsets[kept + 1] - value_offsets[kept]
    data = np.asarray(column.values)[_ranges(value_offsets[kept], lengths)]
    return dataclasses.replace(column, values=data, value_offsets=_exclusive_cumsum(lengths),
                               row_offsets=new_offsets, present=None)


def _step_features(column: Column, num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Every step's `0a len(Feature) Feature` (a FeatureList element), back to back, and
    the offsets of each step in that buffer.

    Each step is encoded as an Example holding only this feature, named `_STEP_NAME`:
    `0a len(Features) 0a len(entry) 0a 01 "f" 12 len(Feature) Feature`. Dropping the bytes
    before the `12` and turning it into `0a` leaves exactly the FeatureList element.
    """
    column = dataclasses.replace(_empty_when_absent(column), name=_STEP_NAME)
    examples = encode_columns(num_steps, [column])
    totals = np.fromiter(map(len, examples), np.int64, num_steps)
    entry_lengths = _inner_length(_inner_length(totals))
    element_lengths = entry_lengths - 3  # minus the entry key: 0a 01 "f"
    buffer = np.frombuffer(b"".join(examples), np.uint8)
    ends = np.cumsum(totals)
    out = buffer[_ranges(ends - element_lengths, element_lengths)]
    offsets = _exclusive_cumsum(element_lengths)
    out[offsets[:-1]] = 0x0A
    return out, offsets


def encode_sequence_batch(num_sequences: int, context: Sequence[Column],
                          step_offsets: np.ndarray, feature_lists: Sequence[Column]) -> list[bytes]:
    """Serialize `num_sequences` SequenceExamples from columns, byte-identical to
    `encode_sequence_example`.

    Args:
      num_sequences: how many sequences.
      context: one Column per context feature, one row per sequence (an absent row leaves
        the feature out of that sequence's context).
      step_offsets: int64, num_sequences + 1 entries: sequence s has the steps
        step_offsets[s]..step_offsets[s+1] of the feature-list columns.
      feature_lists: one Column per feature list, one row per step (an absent row is a
        step without a value: an empty list).

    Raises:
      ValueError: naming the feature, for what `example_encoder.encode_columns` refuses,
        duplicated names, or offsets that do not fit.
    """
    step_offsets = np.asarray(step_offsets, np.int64)
    if step_offsets.shape != (num_sequences + 1,) or (num_sequences and step_offsets[0] != 0) \
            or np.any(np.diff(step_offsets) < 0):
        raise ValueError("step_offsets must be num_sequences + 1 ascending offsets from 0")
    num_steps = int(step_offsets[-1])
    names = [column.name for column in feature_lists]
    if len(set(names)) != len(names):
        raise ValueError(f"feature lists given more than once: {sorted(names)}")
    contexts = encode_columns(num_sequences, context)
    keyed = sorted(feature_lists, key=lambda column: feature_sort_key(column.name))
    encoded = []
    for column in keyed:
        if len(column.row_offsets) != num_steps + 1:
            raise ValueError(f"feature list {column.name!r}: {len(column.row_offsets) - 1} rows, "
                             f"expected {num_steps} steps")
        raw_name = column.name.encode("utf-8")
        key = b"\x0a" + encode_varint(len(raw_name)) + raw_name + b"\x12"
        buffer, offsets = _step_features(column, num_steps)
        encoded.append((key, buffer.tobytes(), offsets[step_offsets]))
    out = []
    for s in range(num_sequences):
        entries = []
        for key, buffer, bounds in encoded:
            body = buffer[bounds[s]:bounds[s + 1]]
            inner = len(key) + len(encode_varint(len(body))) + len(body)
            entries += (b"\x0a", encode_varint(inner), key, encode_varint(len(body)), body)
        lists = b"".join(entries)
        out.append(b"".join((contexts[s], b"\x12", encode_varint(len(lists)), lists)))
    return out
