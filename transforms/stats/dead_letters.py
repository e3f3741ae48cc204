"""Example dead letters per reason, for stats.json (Beam-free).

The examples of a reason are its first `EXAMPLES_PER_REASON` dead letters by where their
records are in the input (`source`, then `row`): each batch keeps its first ones
(`batch_examples`, which also counts the reasons), each unit its first ones of those
(`first_examples`), the commit the first ones of all (`merge_examples`). So they are the same
whatever the bundles, the runner or the generations an output was appended in.
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
    """The first examples of each reason among a batch's dead letters, by place; counts every
    document's reason into `reasons` ("unknown" where it has none): each is parsed once."""
    found: dict[str, list[Example]] = {}
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
        message = str(letter.get("message") or "")[:_MESSAGE_CHARS]
        example = (reason, position, letter.get("source"), letter.get("row"), message)
        found.setdefault(reason, []).append(example)
    kept = [example for examples in found.values()
            for example in sorted(examples, key=lambda e: (_place(e), e[1]))[:EXAMPLES_PER_REASON]]
    return tuple(sorted(kept, key=lambda example: example[1]))


def _place(example: Example) -> tuple:
    """Its source, then its row (None last)."""
    _, _, source, row, _ = example
    return source is None, str(source or ""), not isinstance(row, int), row if isinstance(row, int) else 0


def first_examples(batches: Iterable[Sequence[Example]]) -> tuple[Example, ...]:
    """The examples of consecutive batches as one batch's: numbered in place order, the ones
    `merge_examples` would pick."""
    ordered = sorted(((batch, example) for batch, examples in enumerate(batches) for example in examples),
                     key=lambda pair: (_place(pair[1]), pair[0], pair[1][1]))
    taken: dict[str, int] = {}
    out = []
    for _, (reason, _, source, row, message) in ordered:
        if taken.get(reason, 0) < EXAMPLES_PER_REASON:
            taken[reason] = taken.get(reason, 0) + 1
            out.append((reason, len(out), source, row, message))
    return tuple(out)


def merge_examples(batches: Iterable[tuple[str, Sequence[Example]]]) -> dict[str, list[dict]]:
    """{reason: [{"source", "row", "message"}, ...]} from (batch key, examples) pairs; ties
    of place in (batch key, position) order."""
    ordered = sorted(((key, example) for key, examples in batches for example in examples),
                     key=lambda pair: (_place(pair[1]), pair[0], pair[1][1]))
    out: dict[str, list[dict]] = {}
    for _, (reason, _, source, row, message) in ordered:
        kept = out.setdefault(reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append({"source": source, "row": row, "message": message})
    return dict(sorted(out.items()))
