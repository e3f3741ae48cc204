"""A work unit's statistics and counts gathered before the commit (`defer_statistics`, used
by every converter; `fold_counts`, used by forked converters): the commit's figures are
those of the batches one by one."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from transforms.records import RecordBatch
from transforms.stats.columns import arrow_batch_stats
from transforms.stats.dead_letters import batch_examples, merge_examples
from transforms.stats.document import merge_batches
from transforms.stats.presence import add_presence, arrow_presence
from transforms.stats.sketches import BatchStats, ImagePartial, merge_stats
from transforms.stats.unit_counts import DEFERRED, defer_statistics, fold_counts


def _entry(index: int, split: str, rng: np.random.Generator) -> tuple:
    """One batch's `batch_counts` value: random ints (some null), floats with NaN and
    infinities, strings, and dead letters of two reasons."""
    rows = int(rng.integers(1, 60))
    ints = pa.array([None if rng.random() < 0.2 else int(v) for v in rng.integers(-50, 50, rows)],
                    pa.int64())
    floats = pa.array(rng.choice([np.nan, np.inf, -1.5, 0.0, 2.25, 1e9], rows))
    texts = pa.array([f"v{int(v)}" for v in rng.integers(0, 8, rows)])
    columns = [("i", "int64", ints), ("f", "float", floats), ("s", "bytes", texts)]
    dead = [json.dumps({"reason": reason, "source": "in.csv", "row": index * 100 + k,
                        "message": f"bad {index}.{k}"}).encode()
            for k, reason in enumerate(rng.choice(["invalid_int", "missing"], int(rng.integers(0, 4))))]
    return (f"{index:08d}", split, rows + len(dead), rows, len(dead), None,
            arrow_presence((name, values) for name, _, values in columns),
            arrow_batch_stats(columns), batch_examples(dead))


def _exact(merged) -> dict:
    """Every figure of merged statistics: all exact with so few distinct values, whatever the
    batches (quantiles, means, distinct counts and top values too)."""
    out = {}
    for split, stats in merged.items():
        for name, total in stats.features.items():
            figures = [total.records, total.values_total, total.values_min, total.values_max]
            if total.numeric is not None:
                n = total.numeric
                figures += [n.count, n.nan, n.inf, n.zeros, n.finite, n.min, n.max, n.mean, n.std]
                if n.finite:
                    figures += [n.summary.quantiles([0.1, 0.5, 0.9]), n.summary.error]
            if total.bytes is not None:
                b = total.bytes
                figures += [b.count, b.length_min, b.length_max, b.length_total, b.distinct, b.exact,
                            b.top(10)]
            out[(split, name)] = figures
    return out


@pytest.mark.parametrize("seed", range(5))
def test_folded_counts_give_the_commit_the_same_figures(seed):
    rng = np.random.default_rng(seed)
    entries = [_entry(i, "train" if rng.random() < 0.7 else "test", rng) for i in range(12)]
    folded = fold_counts(entries)
    assert sorted(entry[1] for entry in folded) == sorted({entry[1] for entry in entries})
    for entry in folded:
        group = [e for e in entries if e[1] == entry[1]]
        assert entry[0] == min(e[0] for e in group)
        assert entry[2:5] == tuple(sum(e[k] for e in group) for k in (2, 3, 4))
        presence: dict = {}
        for e in group:
            add_presence(presence, e[6])
        assert {name: list(figures) for name, *figures in entry[6]} == presence
    (one_by_one, examples), (at_once, folded_examples) = merge_batches(entries), merge_batches(folded)
    assert _exact(one_by_one) == _exact(at_once)
    for split, stats in one_by_one.items():
        for name, total in stats.features.items():
            if total.numeric is not None and total.numeric.finite:
                assert math.isclose(total.numeric.mean, at_once[split].features[name].numeric.mean,
                                    rel_tol=1e-9, abs_tol=1e-9)
    assert examples == folded_examples and sum(map(len, examples.values())) >= 2
    assert merge_examples((e[0], e[8]) for e in entries) == \
        merge_examples((e[0], e[8]) for e in folded)


def test_a_batch_without_statistics_or_presence_leaves_the_fold_without_them():
    rng = np.random.default_rng(1)
    entries = [_entry(i, "train", rng) for i in range(3)]
    entries[1] = (*entries[1][:6], None, None, entries[1][8])
    (folded,) = fold_counts(entries)
    assert folded[6] is None and folded[7] is None
    empty = (*entries[1][:3], 0, entries[1][4], None, None, None, ())  # no records: no matter
    (folded,) = fold_counts([entries[0], empty])
    assert folded[6] is not None and isinstance(folded[7], BatchStats)


def test_image_counts_merge_exactly():
    parts = [BatchStats((), ImagePartial((("jpeg", 2),), ((3, 2),), (("cat", 1), ("dog", 1)))),
             BatchStats((), ImagePartial((("jpeg", 1), ("png", 1)), ((3, 1), (1, 1)), (("cat", 2),)))]
    merged = merge_stats(parts).images
    assert merged == ImagePartial((("jpeg", 3), ("png", 1)), ((1, 1), (3, 3)), (("cat", 3), ("dog", 1)))


@dataclasses.dataclass
class _Result:
    """A converter result as `defer_statistics` takes them."""

    batches: list
    rows: int = 0


def _batch(index: int, split: str, rng: np.random.Generator, stats: bool = True):
    """A RecordBatch with the records, statistics and presence of one random entry."""
    entry = _entry(index, split, rng)
    return RecordBatch(key=entry[0], split=split, records=[b"r"] * entry[3],
                       dead_letters=[b"{}"] * entry[4], input_count=entry[2],
                       feature_presence=entry[6], feature_stats=entry[7] if stats else None)


@pytest.mark.parametrize("seed", range(5))
def test_deferred_statistics_travel_once_per_split_and_give_the_same_figures(seed):
    rng = np.random.default_rng(seed)
    results, index = [], 0
    for _ in range(int(rng.integers(1, 8))):  # chunks; a split may miss some of them
        batches = []
        for split in ("train", "test"):
            if rng.random() < 0.7:
                batches.append(_batch(index, split, rng))
                index += 1
        results.append(_Result(batches=batches, rows=len(batches)))
    original = [b for r in results for b in r.batches]
    deferred_results = list(defer_statistics(
        _Result(batches=list(r.batches), rows=r.rows) for r in results))
    deferred = [b for r in deferred_results for b in r.batches]
    assert [r.rows for r in deferred_results] == [r.rows for r in results]
    assert sorted(b.key for b in deferred) == sorted(b.key for b in original)
    for split in {b.split for b in original}:
        mine = [b for b in deferred if b.split == split]
        carried = [b for b in mine if b.feature_stats != DEFERRED]
        assert len(carried) == 1 and carried[0].key == max(b.key for b in mine)
        assert all(b.feature_presence == DEFERRED for b in mine if b is not carried[0])

    def entries(batches):
        return [(b.key, b.split, b.input_count, len(b.records), len(b.dead_letters), None,
                 b.feature_presence, b.feature_stats, ()) for b in batches]

    assert _exact(merge_batches(entries(original))[0]) == _exact(merge_batches(entries(deferred))[0])
    assert _exact(merge_batches(fold_counts(entries(deferred)))[0]) == \
        _exact(merge_batches(entries(original))[0])


def test_a_batch_without_statistics_leaves_its_split_unknown_after_deferral():
    rng = np.random.default_rng(3)
    results = [_Result(batches=[_batch(0, "data", rng)]),
               _Result(batches=[_batch(1, "data", rng, stats=False)]),
               _Result(batches=[_batch(2, "data", rng)])]
    deferred = [b for r in defer_statistics(results) for b in r.batches]
    assert [b.feature_stats for b in deferred[:2]] == [DEFERRED, DEFERRED]
    assert deferred[2].feature_stats is None and deferred[2].feature_presence is not None
