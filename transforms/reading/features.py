"""How each feature of `feature_spec.json` is read: dense (one fixed shape in every record)
or varlen (any number of values, possibly absent). `feature_layout` is the one rule, used by
every reader, so TensorFlow, numpy, PyTorch and Grain users all see the same shapes.

A feature is dense when its entry's kind is "fixed" (or "fixed_len_sequence", a sequence
feature with one value at every step), or when its "presence" entry
(`{"records": R, "of": N, "min_values": a, "max_values": b}`: carried by R of the N records
written, with a to b values where present) shows it in every record with a constant number
of values: shape [] for a scalar, [a] for a list. Anything else is varlen."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["DTYPES", "FeatureLayout", "RecordLayout", "feature_layout", "record_layout"]

#: The dtypes `feature_spec.json` names (`tf.as_dtype` names) and their numpy types.
DTYPES = {"int64": np.dtype(np.int64), "float32": np.dtype(np.float32), "string": np.dtype(object)}
#: The tf.train.Feature kind holding each dtype.
KIND_OF_DTYPE = {"int64": "int64", "float32": "float", "string": "bytes"}
_DENSE_KINDS = ("fixed", "fixed_len_sequence")
_KINDS = (*_DENSE_KINDS, "var_len")


@dataclasses.dataclass(frozen=True)
class FeatureLayout:
    """How one feature is read.

    Attributes:
      name: the feature's name.
      dtype: "int64", "float32" or "string".
      shape: the dense shape (() for a scalar), or None for a varlen feature.
      default: the spec's default (a scalar, a list or None), used where the feature is
        absent (TensorFlow always; `read_examples` when asked).
    """

    name: str
    dtype: str
    shape: tuple[int, ...] | None
    default: Any = None

    @property
    def dense(self) -> bool:
        return self.shape is not None

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def kind(self) -> str:
        """The tf.train.Feature kind ("int64", "float", "bytes") holding its values."""
        return KIND_OF_DTYPE[self.dtype]


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Every feature of a record: `features` for an Example or a SequenceExample's context,
    `sequence` (None for Examples) for its feature lists (a dense shape is per step)."""

    features: Mapping[str, FeatureLayout]
    sequence: Mapping[str, FeatureLayout] | None = None


def _is_list(entry: Mapping[str, Any]) -> bool:
    """Whether a feature holds a list rather than one scalar, from what its entry says: an
    explicit "list", a non-empty "shape", or a list default. Nothing else marks a list in
    `to_feature_spec`'s entries, so an entry saying none of these is read as a scalar."""
    if "list" in entry:
        return bool(entry["list"])
    return bool(entry.get("shape")) or isinstance(entry.get("default"), list)


def _constant_count(presence: Any) -> int | None:
    """The number of values every record has, when `presence` shows one; else None."""
    if not isinstance(presence, Mapping):
        return None
    records, written = presence.get("records"), presence.get("of")
    low, high = presence.get("min_values"), presence.get("max_values")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (records, written, low, high)):
        return None
    return low if records == written and low == high else None


def feature_layout(name: str, entry: Mapping[str, Any]) -> FeatureLayout:
    """The layout of feature `name` from its `feature_spec.json` entry: THE dense-or-varlen
    rule (see the module docstring).

    Raises:
      ValueError: naming the feature, for an unknown dtype or kind.
    """
    dtype, kind = entry.get("dtype"), entry.get("kind")
    if dtype not in DTYPES or kind not in _KINDS:
        raise ValueError(f"feature_spec.json: feature {name!r} has dtype {dtype!r} and kind "
                         f"{kind!r}; expected a dtype in {list(DTYPES)} and a kind in {list(_KINDS)}")
    default = entry.get("default")
    if kind in _DENSE_KINDS:
        return FeatureLayout(name, dtype, tuple(entry.get("shape") or ()), default)
    count = _constant_count(entry.get("presence"))
    if count is None:
        return FeatureLayout(name, dtype, None, default)
    shape = (count,) if count != 1 or _is_list(entry) else ()
    return FeatureLayout(name, dtype, shape, default)


def _layouts(entries: Any, where: str) -> dict[str, FeatureLayout]:
    if not isinstance(entries, Mapping):
        raise ValueError(f"feature_spec.json: {where!r} is not an object of features")
    return {name: feature_layout(name, entry) for name, entry in entries.items()}


def record_layout(feature_spec: Mapping[str, Any]) -> RecordLayout:
    """The layout of every feature of a parsed `feature_spec.json`."""
    if "sequence" in feature_spec:
        return RecordLayout(_layouts(feature_spec.get("context", {}), "context"),
                            _layouts(feature_spec["sequence"], "sequence"))
    return RecordLayout(_layouts(feature_spec.get("features"), "features"))
