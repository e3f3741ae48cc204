"""tf.train.SequenceExample: the decoder, and the layout `transforms.format.sequence_encoder`
writes (the tests hold it to a protobuf reference encoder, tests/format/reference_codec.py,
on random schemas, and that reference to TensorFlow). Beam-free.

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

from protos import example_pb2
from transforms.format.example_codec import (
    decode_example,
    feature_sort_key,
    feature_values,
    parse_message,
)

__all__ = ["decode_sequence_example", "is_sequence_example"]


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
            kind, values = feature_values(feature)
            if kind:
                kinds.add(kind)
            steps.append(values)
        if len(kinds) > 1:
            raise ValueError(f"feature list {name!r} mixes kinds {sorted(kinds)}")
        lists[name] = (kinds.pop() if kinds else None, steps)
    return context, lists
