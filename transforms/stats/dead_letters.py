"""Example dead letters per reason, for stats.json (Beam-free).

The sink takes from each batch the first `EXAMPLES_PER_REASON` dead letters of every reason
(`batch_examples`, which also counts the reasons); the commit keeps, per reason, the first
ones in batch-key order (`merge_examples`), so the examples are the same whatever the
bundles or the runner.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["EXAMPLES_PER_REASON", "batch_examples", "first_examples", "merge_examples"]

EXAMPLES_PER_REASON = 3
_MESSAGE_CHARS = 300

#: One example: (reason, position in the batch, source, row, message).
Example = tuple[str, int, Any, Any, str]


def batch_examples(dead_letters: Sequence[bytes], reasons: Counter) -> tuple[Example, ...]:
    """Up to `EXAMPLES_PER_REASON` examples per reason among a batch's dead-letter documents;
    counts every document's reason into `reasons` ("unknown" where it has none), so that each
    document is parsed once."""
    taken: dict[str, int] = {}
    out = []
    for position, document in enumerate(dead_letters):
        try:
            letter = json.loads(document)
        except ValueError:
            letter = None
        if not isinstance(letter, dict):
            reasons["unknown"] += 1
            continue
        reason = letter.get("reason") if isinstance(letter.get("reason"), str) else "unknown"
        reasons[reason or "unknown"] += 1
        if taken.get(reason, 0) >= EXAMPLES_PER_REASON:
            continue
        taken[reason] = taken.get(reason, 0) + 1
        message = str(letter.get("message") or "")[:_MESSAGE_CHARS]
        out.append((reason, position, letter.get("source"), letter.get("row"), message))
    return tuple(out)


def first_examples(batches: Iterable[Sequence[Example]]) -> tuple[Example, ...]:
    """The examples of consecutive batches (in batch-key order) as one batch's: the first
    of each reason, numbered in that order, as `merge_examples` would pick them."""
    taken: dict[str, int] = {}
    out = []
    for examples in batches:
        for reason, _, source, row, message in sorted(examples, key=lambda e: e[1]):
            if taken.get(reason, 0) < EXAMPLES_PER_REASON:
                taken[reason] = taken.get(reason, 0) + 1
                out.append((reason, len(out), source, row, message))
    return tuple(out)


def merge_examples(batches: Iterable[tuple[str, Sequence[Example]]]) -> dict[str, list[dict]]:
    """{reason: [{"source", "row", "message"}, ...]} from (batch key, examples) pairs: the
    first examples of each reason in (batch key, position) order."""
    ordered = sorted(((key, example) for key, examples in batches for example in examples),
                     key=lambda pair: (pair[0], pair[1][1]))
    out: dict[str, list[dict]] = {}
    for _, (reason, _, source, row, message) in ordered:
        kept = out.setdefault(reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append({"source": source, "row": row, "message": message})
    return dict(sorted(out.items()))
