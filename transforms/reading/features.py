"""How each feature of `feature_spec.json` is read, dense (one fixed shape in every record) or
varlen: `feature_layout` is the one rule every reader uses, so all see the same shapes.

Shapes follow from the spec alone (version 2 and later), never from the data: dense when the
kind is "fixed" or "fixed_len_sequence"; an optional scalar with "missing": "mask" is a dense
scalar holding the type's zero where the record lacks it, with a boolean `<name>/present`
(`MASK_SUFFIX`) in every reader; anything else (lists) is varlen. Version-1 outputs (before
"missing") read as they always did: also dense when the "presence" entry (`{"records": R,
"of": N, "min_values": a, "max_values": b}`) shows it in every record with a constant count."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["DTYPES", "MASK_SUFFIX", "FeatureLayout", "RecordLayout", "feature_layout",
           "record_layout", "shapes_counted"]

#: The dtypes `feature_spec.json` names (`tf.as_dtype` names) and their numpy types.
DTYPES = {"int64": np.dtype(np.int64), "float32": np.dtype(np.float32), "string": np.dtype(object)}
#: The tf.train.Feature kind holding each dtype.
KIND_OF_DTYPE = {"int64": "int64", "float32": "float", "string": "bytes"}
#: What a masked scalar holds where its record lacks it.
FILLS = {"int64": 0, "float32": 0.0, "string": b""}
#: The name suffix of a masked scalar's boolean companion in every reader.
MASK_SUFFIX = "/present"
_DENSE_KINDS = ("fixed", "fixed_len_sequence")
_KINDS = (*_DENSE_KINDS, "var_len")


@dataclasses.dataclass(frozen=True)
class FeatureLayout:
    """How one feature is read: `shape` is the dense shape (() for a scalar) or None for a
    varlen feature; `default` (the spec's, or a masked scalar's fill) is used where the
    feature is absent (TensorFlow always; `read_examples` when asked)."""

    name: str
    dtype: str
    shape: tuple[int, ...] | None
    default: Any = None
    masked: bool = False

    @property
    def dense(self) -> bool:
        return self.shape is not None

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Every feature of a record: `features` for an Example or a SequenceExample's context,
    `sequence` (None for Examples) for its feature lists (a dense shape is per step)."""

    features: Mapping[str, FeatureLayout]
    sequence: Mapping[str, FeatureLayout] | None = None


def _is_list(entry: Mapping[str, Any]) -> bool:
    """Whether an entry holds a list: an explicit "list", a non-empty "shape" or a list
    default (nothing else marks one in `to_feature_spec`'s entries)."""
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


def shapes_counted(feature_spec: Mapping[str, Any]) -> bool:
    """Whether a parsed `feature_spec.json` predates "missing" (version 1 or none), so its
    readers also shape features by their counted presence."""
    version = feature_spec.get("version", 1)
    return not isinstance(version, int) or version < 2


def feature_layout(name: str, entry: Mapping[str, Any], *, counted: bool = False) -> FeatureLayout:
    """The layout of feature `name` from its spec entry: THE dense-or-varlen rule (see the
    module docstring); `counted`: a version-1 entry. ValueError for an unknown dtype or kind."""
    dtype, kind = entry.get("dtype"), entry.get("kind")
    if dtype not in DTYPES or kind not in _KINDS:
        raise ValueError(f"feature_spec.json: feature {name!r} has dtype {dtype!r} and kind "
                         f"{kind!r}; expected a dtype in {list(DTYPES)} and a kind in {list(_KINDS)}")
    default = entry.get("default")
    if kind in _DENSE_KINDS:
        return FeatureLayout(name, dtype, tuple(entry.get("shape") or ()), default)
    if entry.get("missing") == "mask" and not _is_list(entry):
        return FeatureLayout(name, dtype, (), FILLS[dtype], masked=True)
    count = _constant_count(entry.get("presence")) if counted else None
    if count is None:
        return FeatureLayout(name, dtype, None, default)
    shape = (count,) if count != 1 or _is_list(entry) else ()
    return FeatureLayout(name, dtype, shape, default)


def _layouts(entries: Any, where: str, counted: bool) -> dict[str, FeatureLayout]:
    if not isinstance(entries, Mapping):
        raise ValueError(f"feature_spec.json: {where!r} is not an object of features")
    return {name: feature_layout(name, entry, counted=counted) for name, entry in entries.items()}


def record_layout(feature_spec: Mapping[str, Any]) -> RecordLayout:
    """The layout of every feature of a parsed `feature_spec.json`."""
    counted = shapes_counted(feature_spec)
    if "sequence" in feature_spec:
        return RecordLayout(_layouts(feature_spec.get("context", {}), "context", counted),
                            _layouts(feature_spec["sequence"], "sequence", counted))
    return RecordLayout(_layouts(feature_spec.get("features"), "features", counted))
