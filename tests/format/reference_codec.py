"""The reference encoders: tf.train.Example and SequenceExample serialized by protobuf itself,
one feature at a time, features sorted by UTF-8 name (see `transforms.format.example_codec` on
why the whole map is not serialized with deterministic=True).

The test oracle of the fast encoders (`example_codec.encode_example_parts`, the vectorised
`example_encoder` and `sequence_encoder`), held to TensorFlow's own bytes in
tests/format/test_example_codec.py and test_sequence_codec.py, and a convenient way for tests
to build records. Not product code: the product only writes with the fast encoders. Also
`column_from_values`, the vectorised encoders' input built from Python values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from protos import example_pb2, feature_pb2
from transforms.format.example_codec import KINDS, encode_varint, feature_sort_key
from transforms.format.example_columns import Column, exclusive_cumsum

__all__ = ["column_from_values", "encode_example", "encode_sequence_example"]

_BYTES_LIKE = (bytes, bytearray, memoryview)
_LIST_FIELD = {"int64": "int64_list", "float": "float_list", "bytes": "bytes_list"}


def _as_value_list(kind: str, values: Any) -> list:
    """Accepts a sequence of values, or a single value, of the given kind."""
    if isinstance(values, (str, *_BYTES_LIKE)):
        if kind != "bytes":
            raise TypeError(f"{kind} features take numbers, got {type(values).__name__}")
        values = [values]
    elif isinstance(values, np.ndarray):
        values = values.reshape(-1).tolist()
    elif isinstance(values, Iterable):
        values = list(values)
    else:
        values = [values]
    if kind == "bytes":
        return [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    if kind == "int64":
        # protobuf deprecates bools in int fields (rejected from 7.34); they mean 0/1 here.
        return [int(v) if isinstance(v, (bool, np.bool_)) else v for v in values]
    return values


def _feature_entry(name: str, kind: str, values: Any) -> bytes:
    """The serialized Features message holding only this feature (one map entry)."""
    if kind not in _LIST_FIELD:
        raise ValueError(f"feature {name!r}: unknown kind {kind!r}; expected one of {KINDS}")
    features = feature_pb2.Features()
    value_list = getattr(features.feature[name], _LIST_FIELD[kind])
    try:
        # SetInParent: an empty list is still a present feature of this kind.
        value_list.SetInParent()
        value_list.value.extend(_as_value_list(kind, values))
    except (TypeError, ValueError, UnicodeEncodeError) as e:
        raise ValueError(f"feature {name!r} ({kind}): invalid values: {e}") from e
    return features.SerializeToString()


def encode_example(features: Mapping[str, tuple[str, Sequence]]) -> bytes:
    """Serialize one tf.train.Example, features sorted by name.

    Args:
      features: feature name -> (kind, values), kind one of KINDS. `values` is a
        sequence (an empty one gives a present feature with an empty list) or a single
        value. "int64" takes Python/numpy integers in the int64 range, "float" takes real
        numbers (stored as float32, like TensorFlow), "bytes" takes bytes-like objects or
        str (encoded as UTF-8).

    Raises:
      ValueError: naming the feature, for an empty or non-str name, an unknown kind or a
        value protobuf refuses (e.g. an out-of-range int, a float for an int64 feature).
    """
    keyed = sorted((feature_sort_key(name), name) for name in features)
    entries = []
    for _, name in keyed:
        try:
            kind, values = features[name]
        except (TypeError, ValueError):
            raise ValueError(f"feature {name!r}: expected a (kind, values) pair") from None
        entries.append(_feature_entry(name, kind, values))
    # Example.features is field 1, length-delimited; the concatenated single-entry
    # Features messages are one Features message with all the entries.
    body = b"".join(entries)
    return b"\n" + encode_varint(len(body)) + body


def _step_feature(name: str, kind: str, values: Any) -> feature_pb2.Feature:
    """One step's Feature, with the value rules (and errors) of `encode_example`."""
    example = example_pb2.Example.FromString(encode_example({name: (kind, values)}))
    return example.features.feature[name]


def encode_sequence_example(
    context: Mapping[str, tuple[str, Sequence]],
    feature_lists: Mapping[str, tuple[str, Sequence[Sequence]]],
) -> bytes:
    """Serialize one tf.train.SequenceExample (layout: `transforms.format.example_codec`).

    Args:
      context: feature name -> (kind, values), as `encode_example` takes.
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
        # One map entry per message, concatenated in our order.
        entries.append(single.SerializeToString())
    body = b"".join(entries)
    return context_bytes + b"\x12" + encode_varint(len(body)) + body


def column_from_values(name: str, kind: str, rows: Sequence[Any]) -> Column:
    """A Column from Python values, one entry per row (convenience; loops in Python).

    Each entry is None (feature absent), a sequence of values, or a single value (for
    "bytes", a bytes-like or str is a single value; str is encoded as UTF-8).
    """
    if kind not in KINDS:
        raise ValueError(f"feature {name!r}: unknown kind {kind!r}; expected one of {KINDS}")
    present = np.array([row is not None for row in rows], bool)
    flat: list = []
    counts = np.zeros(len(rows), np.int64)
    for i, row in enumerate(rows):
        if row is None:
            continue
        if isinstance(row, (str, bytes, bytearray, memoryview)) or not isinstance(row, Sequence):
            row = [row]
        counts[i] = len(row)
        flat.extend(row)
    row_offsets = exclusive_cumsum(counts)
    if kind == "bytes":
        data = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat]
        value_offsets = exclusive_cumsum(np.fromiter(map(len, data), np.int64, len(data)))
        values = np.frombuffer(b"".join(data), np.uint8)
        return Column(name, kind, values, value_offsets, row_offsets, present)
    dtype = np.int64 if kind == "int64" else np.float32
    return Column(name, kind, np.array(flat, dtype=dtype), None, row_offsets, present)
