"""Mergeable per-batch statistics of one feature, and their merge (Beam-free).

A converter summarises each batch's values into small frozen partials (`FeaturePartial`,
with `NumericPartial` for int64/float values and `BytesPartial` for bytes values; sketches
serialized to bytes so a partial pickles small), attached to its `RecordBatch` as a
`BatchStats`. The commit adds the partials of a split up with `FeatureTotal`, in batch-key
order, so the exact figures do not depend on bundles or runners (the order in which sketches
are merged moves their estimates within their error bounds). A converter that holds many
batches of one work unit merges them into one `BatchStats` first (`merge_stats`: the totals
turned back into partials), so the commit receives one per work unit, not one per chunk.

* exact: records carrying the feature, values per record (min/max/total), value counts,
  NaN/inf/zero counts, min and max, lengths of bytes values;
* mean and (population) standard deviation: merged with Chan et al.'s pairwise formula,
  exact up to float rounding;
* approximate, from Apache DataSketches (`datasketches`): quantiles and the histogram from
  a KLL sketch (k=200: normalized rank error ~1.33 %, 99th percentile; exact while it holds
  fewer than ~k values), distinct counts from an HLL sketch (lg_k=12: ~1.6 % relative
  standard error, ~3.3 % at two sigmas; the sketch ignores the empty string, so whether a
  batch holds it is kept apart, exactly, and adds one), the most frequent values from a frequent-items
  sketch. To keep the cost per row low, each batch offers the frequent-items sketch only
  its `TOP_PER_BATCH` most frequent values (with their exact counts in the batch): a value
  that is rarely among a batch's most frequent is undercounted, which only matters for
  columns without dominant values (where a top list says little anyway).

The numeric moments and quantiles cover the finite values only; NaN and infinities are
counted apart. Setting the environment variable `TFRECORD_PIPELINE_STATS=0` makes the
converters skip statistics (an internal switch, to measure their cost).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "BYTES_DISPLAY_CHARS",
    "BatchStats",
    "BytesPartial",
    "BytesTotal",
    "FeaturePartial",
    "FeatureTotal",
    "HLL_LG_K",
    "ImagePartial",
    "ImageTotal",
    "KLL_K",
    "NumericPartial",
    "NumericTotal",
    "StatsTotal",
    "TOP_PER_BATCH",
    "bytes_partial",
    "counted",
    "merge_stats",
    "numeric_partial",
    "stats_enabled",
]

KLL_K = 200
HLL_LG_K = 12
#: The frequent-items sketch's map holds 2**8 slots (it tracks up to 192 values).
FREQUENT_LG_MAX_K = 8
TOP_PER_BATCH = 64
#: Values are counted (and shown) by their first this many characters.
BYTES_DISPLAY_CHARS = 100


def stats_enabled() -> bool:
    """False when `TFRECORD_PIPELINE_STATS=0` (see the module docstring)."""
    return os.environ.get("TFRECORD_PIPELINE_STATS", "1") != "0"


def _datasketches():
    # Imported where sketches are made or merged: a launcher that never converts does not pay.
    import datasketches

    return datasketches


@dataclasses.dataclass(frozen=True)
class NumericPartial:
    """int64/float values of one feature in one batch. `finite` values are those the moments
    (`mean`, `m2`: sum of squared deviations from the mean) and the KLL sketch cover."""

    count: int
    nan: int
    inf: int
    zeros: int
    finite: int
    min: float | int | None
    max: float | int | None
    mean: float
    m2: float
    kll: bytes


@dataclasses.dataclass(frozen=True)
class BytesPartial:
    """bytes values of one feature in one batch: lengths, an HLL sketch of the values and a
    frequent-items sketch of their display text (None: not tracked, e.g. image bytes).
    `has_empty`: some value is the empty string, which the HLL sketch skips."""

    count: int
    length_min: int
    length_max: int
    length_total: int
    hll: bytes
    frequent: bytes | None
    has_empty: bool = False


@dataclasses.dataclass(frozen=True)
class FeaturePartial:
    """One feature in one batch: records carrying it and their values per record."""

    name: str
    kind: str
    records: int
    values_min: int
    values_max: int
    values_total: int
    numeric: NumericPartial | None = None
    bytes: BytesPartial | None = None


@dataclasses.dataclass(frozen=True)
class ImagePartial:
    """Exact counts of image outputs in one batch: formats, channels, label texts."""

    formats: tuple[tuple[str, int], ...] = ()
    channels: tuple[tuple[int, int], ...] = ()
    labels: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """The statistics of one `RecordBatch`'s records (features absent from all are left out)."""

    features: tuple[FeaturePartial, ...] = ()
    images: ImagePartial | None = None


def numeric_partial(values: np.ndarray, integral: bool) -> NumericPartial:
    """The partial of a batch's flat values (int64, or float32: the floats an Example holds)."""
    ds = _datasketches()
    count = int(values.size)
    # One sorted float64 copy serves everything: sorted, NaN gathers at the end and the
    # infinities at the ends of the numbers, so counts, min and max are binary searches,
    # and the sketch's compactions then sort runs already in order (~3x less work in all;
    # its error bounds hold for any order of the input). Sorted in the values' own type,
    # then widened (which keeps the order): float32 sorts in half the time of float64.
    ordered = np.sort(values).astype(np.float64, copy=False)
    if integral:
        first, last, beyond = 0, count, count
    else:
        first = int(np.searchsorted(ordered, -np.inf, side="right"))
        last = int(np.searchsorted(ordered, np.inf, side="left"))
        beyond = int(np.searchsorted(ordered, np.inf, side="right"))
    finite = ordered[first:last]
    zeros = int(np.searchsorted(finite, 0.0, side="right") - np.searchsorted(finite, 0.0, side="left"))
    sketch = ds.kll_doubles_sketch(KLL_K)
    if finite.size:
        if integral:  # exact, beyond float64's 2**53
            low, high = int(values.min()), int(values.max())
        else:
            low, high = float(finite[0]), float(finite[-1])
        sketch.update(finite)
        mean = float(finite.mean())
        deviations = finite - mean
        # Not np.dot: that goes to BLAS, whose threads cost 10x the arithmetic on busy cores.
        np.multiply(deviations, deviations, out=deviations)
        m2 = float(deviations.sum())
    else:
        low = high = None
        mean = m2 = 0.0
    return NumericPartial(count, count - beyond, first + beyond - last, zeros, int(finite.size),
                          low, high, mean, m2, sketch.serialize())


def bytes_partial(lengths: np.ndarray, texts: Sequence[str], counts: np.ndarray,
                  frequent: bool = True) -> BytesPartial:
    """The partial of a batch's bytes values, given their lengths and their distinct values'
    display texts (see `columns.display_texts`) with how often each occurs."""
    ds = _datasketches()
    hll = ds.hll_sketch(HLL_LG_K)
    collections.deque(map(hll.update, texts), maxlen=0)  # the loop runs in C
    frequent_bytes = None
    if frequent:
        sketch = ds.frequent_strings_sketch(FREQUENT_LG_MAX_K)
        order = (np.argsort(-counts, kind="stable")[:TOP_PER_BATCH] if len(texts) > TOP_PER_BATCH
                 else range(len(texts)))
        for i in order:
            sketch.update(texts[i][:BYTES_DISPLAY_CHARS], int(counts[i]))
        frequent_bytes = sketch.serialize()
    size = int(lengths.size)
    low = int(lengths.min()) if size else 0
    return BytesPartial(size, low, int(lengths.max()) if size else 0, int(lengths.sum()),
                        hll.serialize_compact(), frequent_bytes, has_empty=bool(size) and low == 0)


class NumericTotal:
    """`NumericPartial`s added up; `kll` is the merged sketch (None while empty)."""

    def __init__(self):
        self.count = self.nan = self.inf = self.zeros = self.finite = 0
        self.min = self.max = None
        self.mean = self.m2 = 0.0
        self.kll = None

    def add(self, part: NumericPartial) -> None:
        self.count += part.count
        self.nan += part.nan
        self.inf += part.inf
        self.zeros += part.zeros
        if part.finite:
            self.min = part.min if self.min is None else min(self.min, part.min)
            self.max = part.max if self.max is None else max(self.max, part.max)
            total = self.finite + part.finite
            delta = part.mean - self.mean
            self.mean += delta * part.finite / total
            self.m2 += part.m2 + delta * delta * self.finite * part.finite / total
            self.finite = total
            ds = _datasketches()
            if self.kll is None:
                self.kll = ds.kll_doubles_sketch(KLL_K)
            self.kll.merge(ds.kll_doubles_sketch.deserialize(part.kll))

    @property
    def std(self) -> float:
        return float(np.sqrt(self.m2 / self.finite)) if self.finite else 0.0

    def partial(self) -> NumericPartial:
        """The total as one partial (adding it equals adding every part, up to the
        sketch's merge order)."""
        kll = self.kll if self.kll is not None else _datasketches().kll_doubles_sketch(KLL_K)
        return NumericPartial(self.count, self.nan, self.inf, self.zeros, self.finite, self.min,
                              self.max, self.mean, self.m2, kll.serialize())


class BytesTotal:
    """`BytesPartial`s added up; `hll` and `frequent` are the merged sketches."""

    def __init__(self):
        self.count = self.length_total = 0
        self.length_min = self.length_max = None
        self._hll = None
        self.has_empty = False
        self.frequent = None
        self.tracks_frequent = True

    def add(self, part: BytesPartial) -> None:
        ds = _datasketches()
        self.count += part.count
        if part.count:
            self.length_min = part.length_min if self.length_min is None else min(
                self.length_min, part.length_min)
            self.length_max = part.length_max if self.length_max is None else max(
                self.length_max, part.length_max)
        self.length_total += part.length_total
        self.has_empty |= part.has_empty
        if self._hll is None:
            self._hll = ds.hll_union(HLL_LG_K)
        self._hll.update(ds.hll_sketch.deserialize(part.hll))
        if part.frequent is None:
            self.tracks_frequent = False
        elif self.tracks_frequent:
            other = ds.frequent_strings_sketch.deserialize(part.frequent)
            if self.frequent is None:
                self.frequent = other
            else:
                self.frequent.merge(other)

    @property
    def distinct(self) -> float:
        """The estimated distinct values: the HLL sketch's, plus the empty string it skips."""
        estimate = float(self._hll.get_result().get_estimate()) if self._hll is not None else 0.0
        return estimate + self.has_empty

    def partial(self) -> BytesPartial:
        """The total as one partial (see `NumericTotal.partial`)."""
        ds = _datasketches()
        hll = self._hll.get_result() if self._hll is not None else ds.hll_sketch(HLL_LG_K)
        frequent = None
        if self.tracks_frequent:
            frequent = (self.frequent if self.frequent is not None
                        else ds.frequent_strings_sketch(FREQUENT_LG_MAX_K)).serialize()
        return BytesPartial(self.count, self.length_min or 0, self.length_max or 0,
                            self.length_total, hll.serialize_compact(), frequent,
                            has_empty=self.has_empty)

    def top(self, limit: int) -> list[tuple[str, int]]:
        """The `limit` most frequent display texts with their estimated counts."""
        if not self.tracks_frequent or self.frequent is None:
            return []
        ds = _datasketches()
        items = self.frequent.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
        ranked = sorted(((int(estimate), item) for item, estimate, _, _ in items),
                        key=lambda pair: (-pair[0], pair[1]))
        return [(item, estimate) for estimate, item in ranked[:limit]]


class FeatureTotal:
    """`FeaturePartial`s of one feature in one split added up."""

    def __init__(self, name: str, kind: str):
        self.name = name
        self.kind = kind
        self.records = self.values_total = 0
        self.values_min = self.values_max = None
        self.numeric = NumericTotal() if kind in ("int64", "float") else None
        self.bytes = BytesTotal() if kind == "bytes" else None

    def add(self, part: FeaturePartial) -> None:
        self.records += part.records
        self.values_total += part.values_total
        self.values_min = part.values_min if self.values_min is None else min(
            self.values_min, part.values_min)
        self.values_max = part.values_max if self.values_max is None else max(
            self.values_max, part.values_max)
        if part.numeric is not None and self.numeric is not None:
            self.numeric.add(part.numeric)
        if part.bytes is not None and self.bytes is not None:
            self.bytes.add(part.bytes)

    def partial(self) -> FeaturePartial:
        """The total as one partial (see `NumericTotal.partial`)."""
        return FeaturePartial(
            self.name, self.kind, self.records, self.values_min or 0, self.values_max or 0,
            self.values_total,
            numeric=self.numeric.partial() if self.numeric is not None and self.numeric.count else None,
            bytes=self.bytes.partial() if self.bytes is not None and self.bytes.count else None)


class ImageTotal:
    """`ImagePartial`s added up (exact counts)."""

    def __init__(self):
        self.formats: collections.Counter = collections.Counter()
        self.channels: collections.Counter = collections.Counter()
        self.labels: collections.Counter = collections.Counter()

    def add(self, part: ImagePartial) -> None:
        for counter, pairs in ((self.formats, part.formats), (self.channels, part.channels),
                               (self.labels, part.labels)):
            for value, number in pairs:
                counter[value] += number

    def partial(self) -> ImagePartial:
        return ImagePartial(tuple(sorted(self.formats.items())),
                            tuple(sorted(self.channels.items())), tuple(sorted(self.labels.items())))


class StatsTotal:
    """`BatchStats` added up, as one `BatchStats` again (`partial`)."""

    def __init__(self):
        self.features: dict[str, FeatureTotal] = {}
        self.images: ImageTotal | None = None

    def add(self, stats: BatchStats) -> None:
        for part in stats.features:
            total = self.features.get(part.name)
            if total is None:
                total = self.features[part.name] = FeatureTotal(part.name, part.kind)
            total.add(part)
        if stats.images is not None:
            self.images = self.images or ImageTotal()
            self.images.add(stats.images)

    def partial(self) -> BatchStats:
        return BatchStats(tuple(total.partial() for total in self.features.values()),
                          self.images.partial() if self.images is not None else None)


def merge_stats(parts: Iterable[BatchStats]) -> BatchStats:
    """Several batches' statistics as one batch's: exact counts added, moments combined,
    sketches merged in the order given."""
    total = StatsTotal()
    for stats in parts:
        total.add(stats)
    return total.partial()


def counted(values: Iterable) -> tuple:
    """(value, count) pairs of `values`, sorted by value: an `ImagePartial` field."""
    return tuple(sorted(collections.Counter(values).items()))
