"""The spec's `sequence:` section: rows grouped into tf.train.SequenceExamples (Beam-free).

Its keys (README, "Sequences"): `group_by` (one sequence per key), `order_by` (a scalar
feature ordering the steps, ascending; ties by source path, then row number), `context`
(features written once per sequence), `feature_lists` (written once per step; default: every
feature not in context), `context_mismatch` (`dead_letter` the group, or take the `first`
step's value), `max_length` with `overflow` (`split` into chunks whose index is the context
feature `chunk_feature`, or `truncate`), `max_group_rows` (a larger group's rows are
`group_too_large` dead letters, never held beyond `bucket_bytes`) and `bucket_bytes` (a
worker holds at most this many bytes of a bucket's rows at once, plus one group).

Rows dropped by `truncate` are dead letters (`sequence_truncated`), so every input row is
either in a written SequenceExample or a dead letter. `SequenceSpec.feature_spec` gives the
`feature_spec.json` of such an output.

Here too: the spec's error type and the checks every spec section uses (`spec` imports them).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CONTEXT_MISMATCH_POLICIES",
    "DEFAULT_CHUNK_FEATURE",
    "DEFAULT_BUCKET_BYTES",
    "DEFAULT_MAX_GROUP_ROWS",
    "OVERFLOW_POLICIES",
    "SEQUENCE_RECORD",
    "SequenceSpec",
    "SpecError",
    "check_bool",
    "check_positive_int",
    "reject_unknown_keys",
]


class SpecError(ValueError):
    """A conversion spec is malformed; the message names the offending key."""


def reject_unknown_keys(where: str, given: Mapping, allowed: Sequence[str]) -> None:
    """Raises SpecError for the first key of `given` not in `allowed`, suggesting a close one."""
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"{where}: unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}")


def check_bool(where: str, key: str, value: Any) -> bool:
    """Returns `value` when it is true or false; raises SpecError naming `key` otherwise."""
    if not isinstance(value, bool):
        raise SpecError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value


def check_positive_int(where: str, key: str, value: Any) -> int:
    """Returns `value` when it is an integer of at least 1; raises SpecError naming `key` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{where}: {key!r} must be a positive integer, got {value!r}")
    return value


CONTEXT_MISMATCH_POLICIES = ("dead_letter", "first")
OVERFLOW_POLICIES = ("split", "truncate")
DEFAULT_CHUNK_FEATURE = "sequence_chunk"
#: Rows a group may have before it is dead-lettered instead of assembled.
DEFAULT_MAX_GROUP_ROWS = 1_000_000
#: Bytes of a bucket's rows (as Arrow columns) one worker holds at once to group them.
DEFAULT_BUCKET_BYTES = 128 << 20
# Above this, a bucket's columns could overflow Arrow's 32-bit offsets when concatenated.
_MAX_BUCKET_BYTES = 1 << 30
#: The `record` of a `feature_spec.json` describing SequenceExamples.
SEQUENCE_RECORD = "sequence_example"

_WHERE = "spec: sequence"


def _names(key: str, value: Any, *, allow_empty: bool = True) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise SpecError(f"{_WHERE}: {key!r} must be a list of names, got {value!r}")
    if len(set(value)) != len(value):
        raise SpecError(f"{_WHERE}: {key!r} has duplicates: {list(value)}")
    if not value and not allow_empty:
        raise SpecError(f"{_WHERE}: {key!r} must name at least one column")
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class SequenceSpec:
    """The `sequence:` section (see the module docstring for each key)."""

    group_by: tuple[str, ...]
    order_by: str | None = None
    context: tuple[str, ...] = ()
    feature_lists: tuple[str, ...] | None = None
    context_mismatch: str = "dead_letter"
    max_length: int | None = None
    overflow: str = "split"
    chunk_feature: str = DEFAULT_CHUNK_FEATURE
    max_group_rows: int = DEFAULT_MAX_GROUP_ROWS
    bucket_bytes: int = DEFAULT_BUCKET_BYTES

    _KEYS = ("group_by", "order_by", "context", "feature_lists", "context_mismatch",
             "max_length", "overflow", "chunk_feature", "max_group_rows", "bucket_bytes")

    def __post_init__(self):
        object.__setattr__(self, "group_by", _names("group_by", self.group_by, allow_empty=False))
        if self.order_by is not None and (not isinstance(self.order_by, str) or not self.order_by):
            raise SpecError(f"{_WHERE}: 'order_by' must be a feature name, got {self.order_by!r}")
        object.__setattr__(self, "context", _names("context", self.context))
        if self.feature_lists is not None:
            object.__setattr__(self, "feature_lists", _names("feature_lists", self.feature_lists))
        if self.context_mismatch not in CONTEXT_MISMATCH_POLICIES:
            raise SpecError(f"{_WHERE}: 'context_mismatch' must be one of "
                            f"{', '.join(CONTEXT_MISMATCH_POLICIES)}, got {self.context_mismatch!r}")
        if self.max_length is not None:
            check_positive_int(_WHERE, "max_length", self.max_length)
        if self.overflow not in OVERFLOW_POLICIES:
            raise SpecError(f"{_WHERE}: 'overflow' must be one of {', '.join(OVERFLOW_POLICIES)}, "
                            f"got {self.overflow!r}")
        if not isinstance(self.chunk_feature, str) or not self.chunk_feature:
            raise SpecError(f"{_WHERE}: 'chunk_feature' must be a feature name, "
                            f"got {self.chunk_feature!r}")
        check_positive_int(_WHERE, "max_group_rows", self.max_group_rows)
        if check_positive_int(_WHERE, "bucket_bytes", self.bucket_bytes) > _MAX_BUCKET_BYTES:
            raise SpecError(f"{_WHERE}: 'bucket_bytes' must be at most {_MAX_BUCKET_BYTES}, "
                            f"got {self.bucket_bytes!r}")
        overlap = sorted(set(self.context) & set(self.feature_lists or ()))
        if overlap:
            raise SpecError(f"{_WHERE}: {overlap} are in both 'context' and 'feature_lists'")

    @property
    def writes_chunk_index(self) -> bool:
        """Whether each SequenceExample's context holds its chunk index."""
        return self.max_length is not None and self.overflow == "split"

    def feature_list_names(self, feature_names: Sequence[str]) -> tuple[str, ...]:
        """The feature lists, given the spec's feature names in order."""
        if self.feature_lists is not None:
            return self.feature_lists
        return tuple(name for name in feature_names if name not in self.context)

    def check_features(self, features: Sequence[Any], include_unlisted: bool) -> None:
        """Raises SpecError when the section does not fit the spec's `features`."""
        by_name = {feature.name: feature for feature in features}
        for key, names in (("context", self.context), ("feature_lists", self.feature_lists or ())):
            for name in names:
                if name not in by_name:
                    raise SpecError(f"{_WHERE}: {key!r} names {name!r}, which is not a feature")
        if self.order_by is not None:
            order = by_name.get(self.order_by)
            if order is None:
                raise SpecError(f"{_WHERE}: 'order_by' names {self.order_by!r}, "
                                f"which is not a feature")
            if order.is_list:
                raise SpecError(f"{_WHERE}: 'order_by' feature {self.order_by!r} must not be a list")
        if self.writes_chunk_index and self.chunk_feature in by_name:
            raise SpecError(f"{_WHERE}: 'chunk_feature' {self.chunk_feature!r} is also a feature; "
                            f"name the chunk index differently")
        if self.feature_lists is not None:
            if include_unlisted:
                raise SpecError(f"{_WHERE}: leave 'feature_lists' out with 'include_unlisted: "
                                f"true' (every feature not in 'context' is then a feature list)")
            written = set(self.context) | set(self.feature_lists) | {self.order_by}
            unused = [name for name in by_name if name not in written]
            if unused:
                raise SpecError(f"{_WHERE}: features {unused} are in neither 'context' nor "
                                f"'feature_lists'")

    @classmethod
    def from_dict(cls, data: Any) -> SequenceSpec:
        if not isinstance(data, Mapping):
            raise SpecError(f"{_WHERE}: must be a mapping, got {data!r}")
        reject_unknown_keys(_WHERE, data, cls._KEYS)
        if "group_by" not in data:
            raise SpecError(f"{_WHERE}: missing 'group_by'")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        out = {"group_by": list(self.group_by), "order_by": self.order_by,
               "context": list(self.context),
               "feature_lists": None if self.feature_lists is None else list(self.feature_lists),
               "context_mismatch": self.context_mismatch, "max_length": self.max_length,
               "overflow": None if self.max_length is None else self.overflow,
               "chunk_feature": None if self.chunk_feature == DEFAULT_CHUNK_FEATURE else self.chunk_feature,
               "max_group_rows": self.max_group_rows,
               "bucket_bytes": None if self.bucket_bytes == DEFAULT_BUCKET_BYTES else self.bucket_bytes}
        return {key: value for key, value in out.items() if value is not None}

    def feature_spec(self, features: Sequence[Any], version: int) -> dict[str, Any]:
        """`feature_spec.json` for SequenceExamples:

        {"version": V, "record": "sequence_example",
         "context": {NAME: ENTRY}, "sequence": {NAME: ENTRY}}

        Context ENTRYs are those of Example features (`FeatureSpec.to_feature_spec`), plus
        the chunk index (int64, fixed) when long groups are split. Sequence ENTRYs are
        {"dtype": D, "kind": "fixed_len_sequence", "shape": []} for features with exactly
        one value at every step (required or defaulted scalars:
        `tf.io.FixedLenSequenceFeature`), else {"dtype": D, "kind": "var_len",
        "default": null} (`tf.io.VarLenFeature`; a step without a value has no values).
        """
        by_name = {feature.name: feature for feature in features}
        context = {name: by_name[name].to_feature_spec() for name in self.context}
        if self.writes_chunk_index:
            context[self.chunk_feature] = {"dtype": "int64", "kind": "fixed", "shape": [],
                                           "default": None}
        sequence = {}
        for name in self.feature_list_names(list(by_name)):
            entry = by_name[name].to_feature_spec()
            fixed = entry["kind"] == "fixed"
            sequence[name] = {"dtype": entry["dtype"], **({"kind": "fixed_len_sequence", "shape": []}
                                                          if fixed else {"kind": "var_len", "default": None})}
        return {"version": version, "record": SEQUENCE_RECORD, "context": context,
                "sequence": sequence}
