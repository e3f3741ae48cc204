"""stats.json: every batch's statistics merged per split, as one JSON document (Beam-free).

The commit merges every unit's result (`merge_units`) and renders (`stats_document`):

    {"schema_version": 1,
     "splits": {SPLIT: {"records": N,
        "features": {NAME: {"kind": "int64"|"float"|"bytes", "records": R,
            "values_per_record": {"min", "max", "mean"},
            "numeric": {"count", "min", "max", "mean", "std", "zeros", "nan", "inf",
                        "quantiles_exact", "rank_error", "quantiles": [[rank, value], ...],
                        "histogram": {"edges", "counts"}},
            "bytes": {"count", "length": {"min", "max", "mean"}, "distinct", "distinct_exact",
                      "distinct_range": [low, high], "top": [{"value", "count"}, ...],
                      "top_exact", "top_error"}}},
        "images": {"formats", "width", "height", "channels", "labels"}}},
     "dead_letters": {"total", "by_reason", "examples"}}

A split whose records some converter did not describe (SequenceExample outputs; statistics
switched off) has `"features": {}`; features declared but carried by no record have 0 records.
Quantiles 0.0 and 1.0 are the exact min and max. The histogram has 10 equal-width bins over
[min, max], each holding the values >= its left edge and < its right edge, the last also its
right edge. "rank_error" is a share of the count; "distinct_range" spans two standard
deviations (the estimates: README, `transforms.stats.sketches`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transforms.splits import DEAD_LETTER_SPLIT
from transforms.stats.dead_letters import merge_examples
from transforms.stats.sketches import BatchStats, FeatureTotal, ImageTotal, NumericTotal, StatsTotal

__all__ = ["HISTOGRAM_BINS", "QUANTILE_RANKS", "SCHEMA_VERSION", "STATS_NAME", "SplitStats", "declared_kinds",
           "merge_units", "numeric_summary", "stats_document"]

STATS_NAME = "stats.json"
SCHEMA_VERSION = 1
QUANTILE_RANKS = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0)
HISTOGRAM_BINS = 10
TOP_VALUES = 10
_KINDS = {"int64": "int64", "float32": "float", "float": "float", "string": "bytes", "bytes": "bytes"}


class SplitStats(StatsTotal):
    """One split's merged statistics; `known` is False when some batch with records had none."""

    def __init__(self):
        super().__init__()
        self.known = True


def merge_units(results: Sequence[Any]) -> tuple[dict[str, SplitStats], dict[str, list[dict]]]:
    """Each split's statistics and the dead-letter examples, merged in owner order. Dead
    letters of no split (`DEAD_LETTER_SPLIT`) give examples, no split."""
    merged: dict[str, SplitStats] = {}
    examples = []
    for result in sorted(results, key=lambda result: result.owner):
        if result.examples:
            examples.append((result.owner, result.examples))
        for part in result.splits:
            if part.split == DEAD_LETTER_SPLIT:
                continue
            target = merged.setdefault(part.split, SplitStats())
            if isinstance(part.stats, BatchStats):
                target.add(part.stats)
            elif part.written:
                target.known = False
    return merged, merge_examples(examples)


def declared_kinds(feature_spec_json: bytes | None) -> dict[str, str]:
    """{feature: kind} of an Example output's feature_spec.json ({} for other layouts)."""
    try:
        features = json.loads(feature_spec_json or b"{}").get("features")
    except (ValueError, AttributeError):  # not JSON, or not an object
        return {}
    if not isinstance(features, dict):
        return {}
    return {name: _KINDS[entry["dtype"]] for name, entry in features.items()
            if isinstance(entry, dict) and entry.get("dtype") in _KINDS}


def _number(value: Any) -> Any:
    if value is None or isinstance(value, int):
        return value
    return float(value)


def numeric_summary(total: NumericTotal) -> dict[str, Any]:
    """The "numeric" entry of one feature (also an image's "width"/"height")."""
    out: dict[str, Any] = {
        "count": total.count, "min": _number(total.min), "max": _number(total.max),
        "mean": float(total.mean) if total.finite else None,
        "std": total.std if total.finite else None,
        "zeros": total.zeros, "nan": total.nan, "inf": total.inf,
    }
    summary = total.summary
    out["quantiles_exact"] = not summary.error
    out["rank_error"] = summary.error / total.finite if total.finite else 0.0
    if not total.finite:
        out["quantiles"] = [[rank, None] for rank in QUANTILE_RANKS]
        out["histogram"] = {"edges": [], "counts": []}
        return out
    values = summary.quantiles(QUANTILE_RANKS)
    if isinstance(total.min, int):  # int64 values: the summary holds them as floats
        values = [int(value) for value in values]
    # The summary holds float64s: an int64 near 2**63 comes back rounded, possibly past the
    # exact max (2**63 itself is no int64). Clamped, the quantiles stay within [min, max].
    values = [min(max(value, total.min), total.max) for value in values]
    values[0], values[-1] = total.min, total.max
    out["quantiles"] = [[rank, _number(value)] for rank, value in zip(QUANTILE_RANKS, values, strict=True)]
    low, high = float(total.min), float(total.max)
    edges = np.linspace(low, high, HISTOGRAM_BINS + 1)
    if high > low:
        cumulative = [0, *summary.below(edges[1:-1].tolist()), total.finite]
        counts = np.diff(cumulative).tolist()
    else:
        counts = [total.finite] + [0] * (HISTOGRAM_BINS - 1)
    out["histogram"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return out


def _feature(total: FeatureTotal) -> dict[str, Any]:
    records = total.records
    out: dict[str, Any] = {
        "kind": total.kind, "records": records,
        "values_per_record": {"min": total.values_min or 0, "max": total.values_max or 0,
                              "mean": total.values_total / records if records else 0.0},
    }
    if total.numeric is not None:
        out["numeric"] = numeric_summary(total.numeric)
    if total.bytes is not None:
        b = total.bytes
        out["bytes"] = {
            "count": b.count,
            "length": {"min": b.length_min or 0, "max": b.length_max or 0,
                       "mean": b.length_total / b.count if b.count else 0.0},
            "distinct": b.distinct, "distinct_exact": b.exact, "distinct_range": list(b.distinct_range),
            "top": [{"value": value, "count": count} for value, count in b.top(TOP_VALUES)],
            "top_exact": b.exact, "top_error": b.error,
        }
    return out


def _images(images: ImageTotal, features: Mapping[str, FeatureTotal]) -> dict[str, Any]:
    def size(name: str) -> dict[str, Any]:
        total = features.get(name)
        return numeric_summary(total.numeric if total is not None and total.numeric is not None
                               else NumericTotal())

    return {"formats": dict(sorted(images.formats.items())), "width": size("image/width"),
            "height": size("image/height"),
            "channels": {str(k): v for k, v in sorted(images.channels.items())},
            "labels": dict(sorted(images.labels.items()))}


def stats_document(merged: Mapping[str, SplitStats], totals: Mapping[str, Any],
                   splits: Sequence[str] = (), declared: Mapping[str, str] | None = None,
                   examples: Mapping[str, list] | None = None) -> dict[str, Any]:
    """The stats.json document. `totals`: the manifest's "counts"; `declared`: the feature
    kinds of feature_spec.json."""
    per_split = totals.get("splits") or {}
    out_splits: dict[str, Any] = {}
    for split in sorted(set(per_split) | set(splits) | set(merged)):
        stats = merged.get(split, SplitStats())
        features: dict[str, Any] = {}
        if stats.known:
            features = {name: _feature(FeatureTotal(name, kind)) for name, kind in (declared or {}).items()}
            features.update((name, _feature(total)) for name, total in stats.features.items())
        entry: dict[str, Any] = {"records": (per_split.get(split) or {}).get("written", 0),
                                 "features": dict(sorted(features.items()))}
        if stats.images is not None and stats.known:
            entry["images"] = _images(stats.images, stats.features)
        out_splits[split] = entry
    reasons = dict(totals.get("dead_letter_reasons") or {})
    return {
        "schema_version": SCHEMA_VERSION,
        "splits": out_splits,
        "dead_letters": {"total": totals.get("dead_letter", 0), "by_reason": reasons,
                         "examples": dict(examples or {})},
    }
