"""One work unit's statistics and counts gathered before they reach the commit (Beam-free).

The sink passes the commit one count entry per batch (`transforms.shard_writers.batch_counts`:
key, split, input, written, dead, record_rows, presence, statistics, dead-letter examples),
and the commit holds them all at once, so what they carry must not grow with the chunks:

* `defer_statistics` (every converter): a batch's statistics and presence (~14 KB) travel
  once per work unit and split, merged, on the last batch of that split; the others carry
  `DEFERRED` (counted in a later batch of the unit), which the commit skips.
* `fold_counts` (forked converters, which see every count of their unit): one count entry
  per work unit and split.

The commit's figures stay those of the batches one by one (statistics up to the order in
which sketches merge).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from transforms.records import with_batches
from transforms.stats.dead_letters import first_examples
from transforms.stats.presence import add_presence, as_presence, sum_presence
from transforms.stats.sketches import BatchStats, StatsTotal, merge_stats

__all__ = ["DEFERRED", "defer_statistics", "fold_counts"]

#: A batch's `feature_stats` / `feature_presence` when they are counted in a later batch
#: of its work unit and split (see `defer_statistics`).
DEFERRED = "deferred to the unit's last batch"

R = TypeVar("R")


class _SplitTotal:
    """A split's statistics and presence so far in one work unit (None: unknown)."""

    def __init__(self):
        self.stats: StatsTotal | None = StatsTotal()
        self.presence: dict[str, list[int]] | None = {}

    def add(self, batch) -> None:
        stats, presence = batch.feature_stats, batch.feature_presence
        if isinstance(stats, BatchStats):
            if self.stats is not None:
                self.stats.add(stats)
        elif batch.records:
            self.stats = None  # records without statistics: the split's are unknown
        if presence is not None and presence != DEFERRED:
            if self.presence is not None:
                add_presence(self.presence, presence)
        elif batch.records:
            self.presence = None

    def finish(self, batch):
        """`batch` carrying the split's statistics and presence."""
        return dataclasses.replace(
            batch, feature_stats=self.stats.partial() if self.stats is not None else None,
            feature_presence=as_presence(self.presence) if self.presence is not None else None)


def defer_statistics(results: Iterable[R]) -> Iterator[R]:
    """A work unit's converter results (each with a `batches` list of RecordBatches), with
    every batch's statistics and presence moved onto the last batch of its split (merged),
    the others marked `DEFERRED`. A batch is held until the next batch of its split (or the
    unit's end) shows whether it is the last, so results go out one behind and a batch may
    travel with a later result; at most one batch per split is held."""
    held: dict[str, object] = {}
    totals: dict[str, _SplitTotal] = {}
    pending = None
    for result in results:
        out = []
        for batch in result.batches:
            previous = held.pop(batch.split, None)
            if previous is not None:
                out.append(dataclasses.replace(previous, feature_stats=DEFERRED,
                                               feature_presence=DEFERRED))
            totals.setdefault(batch.split, _SplitTotal()).add(batch)
            held[batch.split] = batch
        if pending is not None:
            yield pending
        pending = with_batches(result, out)
    if pending is not None:
        last = [totals[split].finish(batch) for split, batch in held.items()]
        yield with_batches(pending, [*pending.batches, *last])


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
            presence = sum_presence(entry[6] for entry in group
                                    if entry[6] is not None and entry[6] != DEFERRED)
        measured = [entry[7] for entry in group if isinstance(entry[7], BatchStats)]
        unknown = any(entry[3] and not isinstance(entry[7], BatchStats) and entry[7] != DEFERRED
                      for entry in group)
        if measured and not unknown:
            stats = merge_stats(measured)
        key = group[0][0]
        folded.append((key, split, sum(entry[2] for entry in group), written,
                       sum(entry[4] for entry in group), record_rows, presence, stats,
                       examples if key == counts[0][0] else ()))
    return folded
