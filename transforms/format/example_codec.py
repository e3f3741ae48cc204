"""tf.train.Example and SequenceExample one record at a time: the decoders (on our generated
protobuf classes) and the fast per-record Example encoder (`encode_example_parts`), which writes
the wire format directly. The tests hold the encoders byte for byte to a protobuf reference
(tests/format/reference_codec.py) and that to TensorFlow. Beam-free.

Feature order: features are written sorted by the UTF-8 bytes of their names (Python's `sorted`
on the names), so the bytes do not depend on insertion order, process or protobuf backend. Not
`SerializeToString(deterministic=True)`: the upb backend (the default Python runtime) sorts a
longer key before its prefix ("aa" before "a"), unlike the C++ and pure-Python runtimes, and
protocolbuffers/protobuf#26621 proposes changing that comparator.

An Example always carries its `features` field, even with no feature: b"\\n\\x00", the same as
TensorFlow's `tf.train.Example(features=tf.train.Features(feature={}))`.

A SequenceExample (written by `transforms.format.sequence_encoder`) is laid out as:

    0a len(Features) ...                        context (always present: exactly the bytes of
                                                 an Example of the context features)
    12 len(FeatureLists)                        feature_lists (always present)
      per feature list, sorted by UTF-8 name:
      0a len(entry) 0a len(name) name           FeatureLists.feature_list map entry
        12 len(FeatureList)
          per step: 0a len(Feature) Feature     FeatureList.feature

Every feature list holds one Feature per step, of the list's kind; a step without a value is a
Feature with an empty list of that kind (never one with no kind, which TensorFlow's parser
refuses). Because both fields are always written, `is_sequence_example` tells an Example
payload (field 1 only) from a SequenceExample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from protos import example_pb2

__all__ = ["FLOAT32_MAX", "INT64_MAX", "INT64_MIN", "KINDS", "decode_example", "decode_sequence_example",
           "encode_example_parts", "encode_varint", "feature_sort_key", "is_sequence_example"]

#: Feature kinds, named after the tf.train.Feature list they fill.
KINDS = ("int64", "float", "bytes")

#: The range an Int64List value holds; every int64 check uses these.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The largest finite float32 (FloatList values are float32): finite values beyond it
#: would become infinities.
FLOAT32_MAX = 3.4028234663852886e38

_BYTES_LIKE = (bytes, bytearray, memoryview)
_KIND_OF_FIELD = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes"}


def feature_sort_key(name: str) -> bytes:
    """Sort key of a feature name: its UTF-8 bytes (raises ValueError when not encodable)."""
    if not isinstance(name, str):
        raise ValueError(f"feature name must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError("feature name must not be empty")
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"feature name {name!r} is not valid UTF-8: {e}") from None


_ONE_BYTE_VARINTS = tuple(bytes((i,)) for i in range(128))


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of `value`; negative ints wrap to 64 bits, as int64 fields do."""
    value &= (1 << 64) - 1
    if value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _parse(payload: bytes | bytearray | memoryview, message):
    """`message`, an empty tf.train.Example or SequenceExample, filled from `payload`. Raises
    TypeError when `payload` is not bytes-like, ValueError when it is not such a message."""
    if not isinstance(payload, _BYTES_LIKE):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    try:
        message.ParseFromString(bytes(payload))
    except DecodeError as e:
        raise ValueError(
            f"payload of {len(payload)} bytes is not a serialized tf.train.{type(message).__name__}: {e}"
        ) from None
    return message


def _feature_values(feature) -> tuple[str | None, list]:
    """(kind, values) of a tf.train.Feature message; (None, []) when no list is set."""
    field = feature.WhichOneof("kind")
    return (None, []) if field is None else (_KIND_OF_FIELD[field], list(getattr(feature, field).value))


def decode_example(payload: bytes) -> dict[str, tuple[str | None, list]]:
    """Parse a serialized tf.train.Example into {name: (kind, values)}, sorted by name.

    Values are Python ints, floats (the float32 value, widened) or bytes. A Feature with
    no list set decodes as (None, []). Raises ValueError when the payload is not an Example.
    """
    feature_map = _parse(payload, example_pb2.Example()).features.feature
    return {name: _feature_values(feature_map[name]) for name in sorted(feature_map, key=feature_sort_key)}


def is_sequence_example(payload: bytes) -> bool:
    """Whether a payload holds the `feature_lists` field (an Example does not). Raises
    ValueError when it parses neither as an Example nor a SequenceExample."""
    return _parse(payload, example_pb2.SequenceExample()).HasField("feature_lists")


def decode_sequence_example(payload: bytes) -> tuple[dict, dict]:
    """Parse a serialized SequenceExample into (context, feature_lists).

    `context` is what `decode_example` gives for the context features; `feature_lists` is
    {name: (kind, [values of each step])}, sorted by name, kind None when no step has one.
    Raises ValueError when the payload does not parse, or a feature list mixes kinds.
    """
    message = _parse(payload, example_pb2.SequenceExample())
    context = decode_example(example_pb2.Example(features=message.context).SerializeToString())
    lists: dict[str, tuple[str | None, list]] = {}
    feature_list_map = message.feature_lists.feature_list
    for name in sorted(feature_list_map, key=feature_sort_key):
        kinds, steps = set(), []
        for feature in feature_list_map[name].feature:
            kind, values = _feature_values(feature)
            if kind:
                kinds.add(kind)
            steps.append(values)
        if len(kinds) > 1:
            raise ValueError(f"feature list {name!r} mixes kinds {sorted(kinds)}")
        lists[name] = (kinds.pop() if kinds else None, steps)
    return context, lists


# ---------------------------------------------------------------------------------------
# The per-record encoder: writes the wire format directly, without protobuf messages.

_FEATURE_KEYS: dict[str, bytes] = {}  # encoded map-entry keys of the feature names seen
_FEATURE_KEYS_MAX = 4096
_SMALL_ENTRIES: dict[tuple, bytes] = {}  # map entries of small values seen (labels, sizes, ...)
_SMALL_ENTRIES_MAX = 4096
_SMALL_VALUE_BYTES = 16  # longer strings (file names, hashes) rarely repeat


def encode_example_parts(features: Mapping[str, tuple[str, Sequence[Any]]]) -> list:
    """The serialized Example of `features` ({name: (kind, sequence of values)}) as a list of
    byte parts, values not copied; int64 values must lie in the int64 range (larger ones wrap
    to 64 bits), floats are stored as float32.

    Built without protobuf messages (sorting str names sorts their UTF-8 bytes too): several
    times faster, which matters next to the ~100 us an image costs in total. Large values
    (image bytes) are parts of their own, so `tfrecord_format.frame_parts` copies them only
    once. Raises ValueError, naming the feature, for an unknown kind or values of the wrong type.
    """
    parts: list = []
    total = 0
    for name in sorted(features):
        kind, values = features[name]
        entry = _small_entry(name, kind, values)
        if entry is not None:
            parts.append(entry)
            total += len(entry)
            continue
        entry_parts, size = _entry_parts(name, kind, values)
        parts += entry_parts
        total += size
    return [b"\x0a", encode_varint(total), *parts]


def _feature_key(name: str) -> bytes:
    """The map entry's key field (tag 1) holding `name`, cached for the names seen."""
    key = _FEATURE_KEYS.get(name)
    if key is None:
        raw = name.encode("utf-8")
        key = b"\x0a" + encode_varint(len(raw)) + raw
        if len(_FEATURE_KEYS) < _FEATURE_KEYS_MAX:
            _FEATURE_KEYS[name] = key
    return key


def _list_parts(kind: str, values: Sequence[Any]) -> tuple[bytes, list, int]:
    """(Feature oneof tag + list length, list body parts, list body length) of one feature."""
    if kind == "bytes":
        parts, size = [], 0
        for value in values:
            if isinstance(value, str):
                value = value.encode("utf-8")
            head = b"\x0a" + encode_varint(len(value))
            parts += (head, value)
            size += len(head) + len(value)
        return b"\x0a" + encode_varint(size), parts, size
    if kind == "int64":
        tag = b"\x1a"
        packed = b"".join(encode_varint(int(v) & 0xFFFFFFFFFFFFFFFF) for v in values)
    elif kind == "float":
        tag = b"\x12"
        packed = np.asarray(values, dtype="<f4").tobytes()
    else:
        raise ValueError(f"unknown feature kind {kind!r}; expected one of {KINDS}")
    body = b"\x0a" + encode_varint(len(packed)) + packed if len(values) else b""
    return tag + encode_varint(len(body)), [body], len(body)


def _small_entry(name: str, kind: str, values: Sequence[Any]) -> bytes | None:
    """The whole encoded map entry of a feature with few short values, cached: many
    features (an image's format, size, channels, label) repeat from record to record."""
    # Not floats: 0.0 == -0.0 as a key, but their encodings differ.
    if kind == "float" or len(values) > 4 or any(
            isinstance(v, (bytes, str)) and len(v) > _SMALL_VALUE_BYTES for v in values):
        return None
    try:
        # Values equal as keys encode alike (1 and True both as 1), except 0.0 and -0.0.
        cache_key = (name, kind, tuple(values))
        entry = _SMALL_ENTRIES.get(cache_key)
    except TypeError:  # unhashable values: encoded without the cache
        return None
    if entry is None:
        entry = b"".join(_entry_parts(name, kind, values)[0])
        if len(_SMALL_ENTRIES) >= _SMALL_ENTRIES_MAX:
            _SMALL_ENTRIES.clear()
        _SMALL_ENTRIES[cache_key] = entry
    return entry


def _entry_parts(name: str, kind: str, values: Sequence[Any]) -> tuple[list, int]:
    """The parts of one feature's map entry (values not copied) and their total length."""
    key = _feature_key(name)
    if kind == "bytes" and len(values) == 1:  # the common case, written directly
        value = values[0]
        if isinstance(value, str):
            value = value.encode("utf-8")
        size = len(value)
        inner = encode_varint(size)
        list_size = 1 + len(inner) + size
        list_head = encode_varint(list_size)
        feature_size = 1 + len(list_head) + list_size
        value_head = encode_varint(feature_size)
        entry_size = len(key) + 1 + len(value_head) + feature_size
        entry_head = encode_varint(entry_size)
        parts = [b"\x0a", entry_head, key, b"\x12", value_head, b"\x0a", list_head, b"\x0a", inner,
                 value]
        return parts, 1 + len(entry_head) + entry_size
    try:
        list_head, list_parts, list_size = _list_parts(kind, values)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"feature {name!r} ({kind}): {error}") from None
    feature_size = len(list_head) + list_size
    value_head = b"\x12" + encode_varint(feature_size)
    entry_size = len(key) + len(value_head) + feature_size
    entry_head = b"\x0a" + encode_varint(entry_size)
    return [entry_head, key, value_head, list_head, *list_parts], len(entry_head) + entry_size
