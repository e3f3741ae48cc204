"""Comparing a run's statistics with a previous run's stats.json: drift.json (Beam-free).

"Schema" drift: features added, missing or of another kind, image labels or splits that
appeared or vanished. "Distribution" drift: a feature's share of records down by more than
`PRESENCE_DROP`, or below 100 % from always (however few: its readers now see masks or defaults
where they never did); or a numeric feature's population stability index (PSI) above
`PSI_THRESHOLD` (by common practice < 0.1 is stable, 0.1-0.25 a moderate shift, > 0.25 a major
one). The PSI bins' edges are the distinct values among the previous run's quantiles, plus the
two open ends; the previous share of each bin follows from the ranks, the current one from this
run's quantiles (the share below an edge interpolated linearly between them), so both runs are
read alike and equal quantiles give 0 whatever the sample size. Shares are floored at 1e-4;
with heavily tied values bins merge, so the index is coarser there.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["DRIFT_NAME", "FAIL_MODES", "PRESENCE_DROP", "PSI_THRESHOLD", "compare", "describe",
           "drift_failure", "population_stability_index"]

DRIFT_NAME = "drift.json"
PRESENCE_DROP = 0.10
PSI_THRESHOLD = 0.2
FAIL_MODES = ("schema", "distribution")
_FLOOR = 1e-4


def _cdf_points(quantiles: list) -> tuple[list[float], list[float]]:
    """(distinct values, share of values <= each) from [[rank, value], ...] (ties: highest rank)."""
    below: dict[float, float] = {}
    for rank, value in quantiles:
        if value is not None:
            below[float(value)] = max(below.get(float(value), 0.0), float(rank))
    values = sorted(below)
    return values, [below[value] for value in values]


def _cdf(values: list[float], ranks: list[float], x: float) -> float:
    """The share of values <= x, interpolated linearly between the quantile points."""
    if x < values[0]:
        return 0.0
    if x >= values[-1]:
        return 1.0
    i = bisect.bisect_right(values, x) - 1
    low, high = values[i], values[i + 1]
    return ranks[i] + (ranks[i + 1] - ranks[i]) * (x - low) / (high - low)


def population_stability_index(previous_quantiles: list, current_quantiles: list) -> float | None:
    """PSI of the current distribution over the previous run's quantile bins (see above)."""
    edges, previous_cdf = _cdf_points(previous_quantiles)
    values, ranks = _cdf_points(current_quantiles)
    if not edges or not values:
        return None
    current_cdf = [_cdf(values, ranks, edge) for edge in edges]
    index, before_previous, before_current = 0.0, 0.0, 0.0
    for previous_at, current_at in zip(previous_cdf + [1.0], current_cdf + [1.0], strict=True):
        previous_share = max(previous_at - before_previous, _FLOOR)
        current_share = max(current_at - before_current, _FLOOR)
        index += (current_share - previous_share) * math.log(current_share / previous_share)
        before_previous, before_current = previous_at, current_at
    return index


def _share(feature: Mapping[str, Any] | None, records: int) -> float:
    if not feature or not records:
        return 0.0
    return feature.get("records", 0) / records


def _compare_split(split: str, previous: Mapping[str, Any], current: Mapping[str, Any],
                   out: dict[str, list]) -> None:
    before, now = previous.get("features") or {}, current.get("features") or {}
    if (previous.get("records") and not before) or (current.get("records") and not now):
        return  # one side's features are unknown (e.g. SequenceExample outputs)
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name), now.get(name)
        if old is None or new is None:
            if (new if old is None else old).get("records", 0) > 0:  # else declared, carried by none
                out["schema"].append({"split": split, "feature": name,
                                      "change": "added" if old is None else "missing",
                                      "previous": old and old.get("kind"),
                                      "current": new and new.get("kind")})
            continue
        if old.get("kind") != new.get("kind"):
            out["schema"].append({"split": split, "feature": name, "change": "kind_changed",
                                  "previous": old.get("kind"), "current": new.get("kind")})
            continue
        old_share = _share(old, previous.get("records", 0))
        new_share = _share(new, current.get("records", 0))
        always_before = previous.get("records", 0) > 0 and old.get("records") == previous.get("records")
        if old_share - new_share > PRESENCE_DROP or (always_before and new_share < 1):
            out["presence"].append({"split": split, "feature": name,
                                    "previous": round(old_share, 6), "current": round(new_share, 6)})
        numeric_before, numeric_now = old.get("numeric"), new.get("numeric")
        if numeric_before and numeric_now:
            psi = population_stability_index(numeric_before.get("quantiles") or [],
                                              numeric_now.get("quantiles") or [])
            if psi is not None and psi > PSI_THRESHOLD:
                out["distribution"].append({"split": split, "feature": name,
                                            "psi": round(psi, 6),
                                            "previous_mean": numeric_before.get("mean"),
                                            "current_mean": numeric_now.get("mean")})
    old_labels = set((previous.get("images") or {}).get("labels") or {})
    new_labels = set((current.get("images") or {}).get("labels") or {})
    if previous.get("images") and current.get("images") and old_labels != new_labels:
        out["labels"].append({"split": split, "added": sorted(new_labels - old_labels),
                              "vanished": sorted(old_labels - new_labels)})


def compare(previous: Mapping[str, Any], current: Mapping[str, Any],
            compared_to: str) -> dict[str, Any]:
    """drift.json: this run's stats.json document against the one of the folder `compared_to`."""
    out: dict[str, list] = {"schema": [], "labels": [], "presence": [], "distribution": []}
    before, now = previous.get("splits") or {}, current.get("splits") or {}
    for split in sorted(set(before) | set(now)):
        if split not in now or split not in before:
            out["schema"].append({"split": split, "feature": None,
                                  "change": "split_missing" if split not in now else "split_added",
                                  "previous": None, "current": None})
            continue
        _compare_split(split, before[split], now[split], out)
    return {
        "schema_version": 1,
        "compared_to": compared_to,
        "thresholds": {"presence_drop": PRESENCE_DROP, "psi": PSI_THRESHOLD},
        "schema_drift": bool(out["schema"] or out["labels"]),
        "distribution_drift": bool(out["presence"] or out["distribution"]),
        **out,
    }


def describe(drift: Mapping[str, Any], limit: int = 3) -> list[str]:
    """Short descriptions of the changes found, schema changes first."""
    out = []
    for change in drift.get("schema") or ():
        if change["feature"] is None:
            out.append(f"split {change['split']!r} {change['change'].split('_')[1]}")
        elif change["change"] == "kind_changed":
            out.append(f"{change['feature']!r} {change['previous']} -> {change['current']}")
        else:
            out.append(f"{change['feature']!r} {change['change']}")
    for change in drift.get("labels") or ():
        parts = [f"labels added {change['added']}"] if change["added"] else []
        parts += [f"labels vanished {change['vanished']}"] if change["vanished"] else []
        out.append(" and ".join(parts))
    for change in drift.get("presence") or ():
        if change["previous"] == 1:
            out.append(f"{change['feature']!r} now missing in {1 - change['current']:.1%} of records "
                       f"(was in every one)")
        else:
            out.append(f"{change['feature']!r} presence {change['previous']:.0%} -> {change['current']:.0%}")
    for change in drift.get("distribution") or ():
        out.append(f"{change['feature']!r} PSI {change['psi']:.2f}")
    unique = list(dict.fromkeys(out))
    if len(unique) > limit:
        return unique[:limit] + [f"{len(unique) - limit} more"]
    return unique


def drift_failure(drift: Mapping[str, Any], mode: str | None) -> str | None:
    """The one-line reason to fail the run under `--fail-on-drift mode`, or None."""
    if mode is None:
        return None
    failing = drift.get("schema_drift") or (mode == "distribution" and drift.get("distribution_drift"))
    if not failing:
        return None
    kind = "schema" if drift.get("schema_drift") else "distribution"
    return f"{kind} drift against {drift.get('compared_to')}: " + "; ".join(describe(drift))
