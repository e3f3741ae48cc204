"""Feature presence: for each feature of a batch's records, how many records carry it and the
fewest and most values such a record holds (Beam-free).

Converters attach it to each `RecordBatch` (`feature_presence`) and the commit adds it up
per split (exact, whatever the bundles or the runner) into `feature_spec.json`: facts about
the data (reports, drift), never shapes, which follow from the spec alone (version-1 outputs,
written before `missing`, were also shaped by them: see `transforms.reading.features`). A
batch with records but no presence (a converter that does not count) makes the split's
presence unknown, never wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Presence", "add_presence", "arrow_presence", "as_presence", "with_presence"]

#: One batch's presence: ((feature, records carrying it, min values, max values), ...); a
#: feature absent from every record of the batch is not listed.
Presence = tuple[tuple[str, int, int, int], ...]


def arrow_presence(columns: Iterable[tuple[str, pa.Array]]) -> Presence:
    """The presence of features given as Arrow arrays of one batch's records (null: absent)."""
    out = []
    for name, values in columns:
        records = len(values) - values.null_count
        if not records:
            continue
        if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
            low_high = pc.min_max(pc.list_value_length(values))
            low, high = low_high["min"].as_py(), low_high["max"].as_py()
        else:
            low = high = 1
        out.append((name, records, low, high))
    return tuple(out)


def add_presence(total: dict[str, list[int]], presence: Presence) -> None:
    """Adds one batch's presence into `total` ({feature: [records, min, max]})."""
    for name, records, low, high in presence:
        entry = total.get(name)
        if entry is None:
            total[name] = [records, low, high]
        else:
            entry[0] += records
            entry[1] = min(entry[1], low)
            entry[2] = max(entry[2], high)


def as_presence(total: Mapping[str, Sequence[int]]) -> Presence:
    """A total of `add_presence` as one batch's presence."""
    return tuple((name, *entry) for name, entry in total.items())


def with_presence(feature_spec_json: bytes, presence: Mapping[str, Sequence[int]],
                  written: int) -> bytes:
    """`feature_spec.json` with a `presence` entry in every feature of an Example output (0
    records, 0 values for one no record carries); SequenceExample layouts unchanged."""
    spec: Any = json.loads(feature_spec_json)
    features = spec.get("features") if isinstance(spec, dict) else None
    if not isinstance(features, dict):
        return feature_spec_json
    for name, entry in features.items():
        if isinstance(entry, dict):
            records, low, high = presence.get(name, (0, 0, 0))
            entry["presence"] = {"records": records, "of": written, "min_values": low, "max_values": high}
    return (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()
