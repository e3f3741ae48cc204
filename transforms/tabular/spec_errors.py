"""The spec's error type and the checks every spec section uses, shared by
`transforms.tabular.spec` and `transforms.tabular.sequence_spec` (Beam-free)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SpecError", "check_bool", "check_positive_int", "reject_unknown_keys"]


class SpecError(ValueError):
    """A conversion spec is malformed; the message names the offending key."""


def reject_unknown_keys(where: str, given: Mapping, allowed: Sequence[str]) -> None:
    """Raises SpecError for the first key of `given` not in `allowed`, suggesting a close one."""
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(
                f"{where}: unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}"
            )


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
