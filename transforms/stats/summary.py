"""The CLI's end-of-run lines about statistics and drift, from a committed output's
stats.json and drift.json (Beam-free apart from reading files through Beam's filesystems).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.format.manifest_format import Manifest
from transforms.stats.document import STATS_NAME
from transforms.stats.drift import DRIFT_NAME, describe

__all__ = ["MAX_FEATURE_LINES", "feature_lines", "drift_lines", "read_listed_json", "summary_lines"]

MAX_FEATURE_LINES = 12


def read_listed_json(output: str, manifest: Manifest, name: str) -> Any:
    """The JSON side file `name` of a committed output, when its manifest lists it; else None."""
    if manifest.side_file(name) is None:
        return None
    try:
        with FileSystems.open(fs.join_path(output, name)) as handle:
            return json.loads(handle.read())
    except Exception:  # noqa: BLE001 - the summary never fails a committed run
        return None


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4g}"


def feature_lines(stats: Mapping[str, Any]) -> list[str]:
    """The feature table of the split with the most records ([] when nothing is known): per
    feature its presence (share of records carrying it), then min/mean/max for numbers or the
    distinct count for bytes; past `MAX_FEATURE_LINES` features, the rest counted."""
    splits = stats.get("splits") or {}
    if not splits:
        return []
    split, entry = max(sorted(splits.items()), key=lambda item: item[1].get("records", 0))
    features, records = entry.get("features") or {}, entry.get("records", 0)
    if not features or not records:
        return []
    width = min(max(len(name) for name in features), 32)
    where = f"split {split}, " if len(splits) > 1 else ""
    lines = [f"  features ({where}{records:,} records):  presence  min / mean / max or distinct"]
    for name, feature in list(features.items())[:MAX_FEATURE_LINES]:
        share = feature.get("records", 0) / records
        numeric, text = feature.get("numeric"), feature.get("bytes")
        if numeric:
            shown = " / ".join(_short(numeric.get(key)) for key in ("min", "mean", "max"))
        elif text:
            approximate = "" if text.get("distinct_exact") else "~"
            shown = f"{approximate}{text.get('distinct', 0):,} distinct"
        else:
            shown = ""
        label = name if len(name) <= width else name[:width - 1] + "…"
        lines.append(f"    {label.ljust(width)}  {share:>7.1%}  {shown}")
    if len(features) > MAX_FEATURE_LINES:
        lines.append(f"    {len(features) - MAX_FEATURE_LINES} more features in {STATS_NAME}")
    return lines


def drift_lines(drift: Mapping[str, Any]) -> list[str]:
    """A few lines on a drift.json: what was compared and what changed."""
    schema, distribution = drift.get("schema_drift"), drift.get("distribution_drift")
    if not schema and not distribution:
        return [f"  drift: none against {drift.get('compared_to')}"]
    kinds = " and ".join(kind for kind, found in (("schema", schema), ("distribution", distribution))
                         if found)
    lines = [f"  drift ({kinds}) against {drift.get('compared_to')}, see {DRIFT_NAME}:"]
    lines += [f"    {change}" for change in describe(drift, limit=4)]
    return lines


def summary_lines(output: str, manifest: Manifest) -> list[str]:
    """The statistics and drift lines of the run summary."""
    lines = []
    stats = read_listed_json(output, manifest, STATS_NAME)
    if isinstance(stats, dict):
        lines += feature_lines(stats)
    drift = read_listed_json(output, manifest, DRIFT_NAME)
    if isinstance(drift, dict):
        lines += drift_lines(drift)
    return lines
