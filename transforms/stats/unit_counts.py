"""One work unit's batch counts folded into one per split: `fold_counts` (Beam-free).

The sink passes the commit one count entry per batch (`transforms.shard_writers.batch_counts`:
key, split, input, written, dead, record_rows, presence, statistics, dead-letter examples),
and the commit holds them all at once. A forked converter, which sees every batch of its
work unit, folds them first, so what the commit holds grows with the work units, not with
the chunks; the commit's figures stay those of the batches one by one (statistics up to the
order in which sketches merge).
"""

from __future__ import annotations

from collections.abc import Sequence

from transforms.stats.dead_letters import first_examples
from transforms.stats.presence import sum_presence
from transforms.stats.sketches import BatchStats, merge_stats

__all__ = ["fold_counts"]


def fold_counts(counts: Sequence[tuple]) -> list[tuple]:
    """The `batch_counts` values of the batches of one work unit, one per split, under the
    split's first batch key: counts and presence added, statistics merged (`merge_stats`).
    The dead-letter examples the commit could pick (the first of each reason in batch-key
    order, all splits together) go with the unit's first key. A batch with records but no
    presence or statistics leaves the folded one without them (unknown, as it would be)."""
    counts = sorted(counts, key=lambda entry: entry[0])
    by_split: dict[str, list[tuple]] = {}
    for entry in counts:
        by_split.setdefault(entry[1], []).append(entry)
    examples = first_examples(entry[8] for entry in counts)
    folded = []
    for split, group in by_split.items():
        written = sum(entry[3] for entry in group)
        record_rows = (None if all(entry[5] is None for entry in group)
                       else sum(entry[3] if entry[5] is None else entry[5] for entry in group))
        presence = stats = None
        if not any(entry[6] is None and entry[3] for entry in group):
            presence = sum_presence(entry[6] for entry in group if entry[6] is not None)
        measured = [entry[7] for entry in group if isinstance(entry[7], BatchStats)]
        if measured and not any(not isinstance(entry[7], BatchStats) and entry[3] for entry in group):
            stats = merge_stats(measured)
        key = group[0][0]
        folded.append((key, split, sum(entry[2] for entry in group), written,
                       sum(entry[4] for entry in group), record_rows, presence, stats,
                       examples if key == counts[0][0] else ()))
    return folded
