"""A batch's statistics from the features of the image Examples it holds (Beam-free).

The image converter keeps each record's feature values but the image bytes (`image/encoded`:
only their length, and `image/key/sha256`, so its distinct count counts distinct images and
it has no top values). Images take milliseconds each, so the per-record Python here is
noise; the values become Arrow arrays, summarised like tabular columns.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from transforms.stats.columns import feature_partial
from transforms.stats.sketches import BatchStats, FeaturePartial, ImagePartial, bytes_partial

__all__ = ["ENCODED", "image_batch_stats"]

ENCODED = "image/encoded"
_TYPES = {"int64": pa.int64(), "float": pa.float32(), "bytes": pa.binary()}


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _values(kind: str, values: Sequence) -> list:
    if kind == "bytes":
        return [value.encode("utf-8") if isinstance(value, str) else bytes(value) for value in values]
    return list(values)


def image_batch_stats(records: Sequence[Mapping[str, tuple[str, Sequence]]],
                      encoded_lengths: Sequence[int]) -> BatchStats:
    """The statistics of a batch of image records ({name: (kind, values)}, without
    `image/encoded`, whose byte lengths `encoded_lengths` holds)."""
    kinds: dict[str, str] = {}
    for record in records:
        for name, (kind, _) in record.items():
            kinds.setdefault(name, kind)
    parts = []
    for name in sorted(kinds):
        kind = kinds[name]
        rows = [_values(kind, record[name][1]) if name in record else None for record in records]
        part = feature_partial(name, kind, pa.array(rows, pa.list_(_TYPES[kind])))
        if part is not None:
            parts.append(part)
    if encoded_lengths:  # images told apart by their sha256 key
        distinct = collections.Counter(_text(record.get("image/key/sha256", ("bytes", [""]))[1][0])
                                       for record in records)
        part = bytes_partial(np.asarray(encoded_lengths, dtype=np.int64), list(distinct),
                             np.fromiter(distinct.values(), np.int64, len(distinct)), frequent=False)
        count = len(encoded_lengths)
        parts.append(FeaturePartial(ENCODED, "bytes", count, 1, 1, count, bytes=part))
        parts.sort(key=lambda part: part.name)

    def counted(name: str, value_of) -> tuple:
        """(value, count) pairs of each record's first `name` value, sorted by value."""
        values = (value_of(record[name][1][0]) for record in records if name in record and record[name][1])
        return tuple(sorted(collections.Counter(values).items()))

    images = ImagePartial(formats=counted("image/format", _text), channels=counted("image/channels", int),
                          labels=counted("image/class/text", _text))
    return BatchStats(features=tuple(parts), images=images)
