"""tf.train.SequenceExample: the reference encoder and the decoder.

`encode_sequence_example` is the test oracle, built on our generated protobuf classes;
`transforms.format.sequence_encoder` encodes many sequences from columns, and the tests hold
it to the oracle's bytes on random schemas. Beam-free.

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

from collections.abc import Mapping, Sequence
from typing import Any

from protos import example_pb2, feature_pb2
from transforms.format.example_codec import (
    decode_example,
    encode_example,
    encode_varint,
    feature_sort_key,
    kind_of_list_field,
    parse_message,
)

__all__ = [
    "decode_sequence_example",
    "encode_sequence_example",
    "is_sequence_example",
]


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
    return parse_message(payload, example_pb2.SequenceExample())


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
            kinds.add(kind_of_list_field(field))
            steps.append(list(getattr(feature, field).value))
        if len(kinds) > 1:
            raise ValueError(f"feature list {name!r} mixes kinds {sorted(kinds)}")
        lists[name] = (kinds.pop() if kinds else None, steps)
    return context, lists
