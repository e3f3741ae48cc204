"""Mergeable per-batch statistics of one feature, and their merge (Beam-free, deterministic).

A converter summarises each batch's values into frozen partials (`FeaturePartial`, holding a
`NumericPartial` or a `BytesPartial`; arrays stored as bytes so a partial pickles small),
attached to its `RecordBatch` as a `BatchStats`. The commit adds a split's partials up with
`FeatureTotal`, in batch-key order; `StatsTotal.partial` turns totals back into one partial
(for a converter that holds many batches of a unit). Nothing here is random: the same
partials merged in the same order give the same figures, to the bit.

* exact: records carrying the feature, values per record, value counts, NaN/inf/zero counts,
  min and max, lengths of bytes values;
* mean and (population) standard deviation: exact sums while the quantile summary is exact
  (below), else merged with Chan et al.'s pairwise formula;
* exact while a feature holds at most `EXACT_VALUES` distinct values in a split, whatever the
  input's cut into batches: every value's count, hence the distinct count and the most
  frequent values, and for numbers the quantiles and histogram;
* beyond that bound, estimates, flagged as such in stats.json with their error:
  - top values: a Misra-Gries summary of `EXACT_VALUES` counters (mergeable, Agarwal et
    al. 2012). A count shown is never above the truth and at most `top_error` below it
    (the thresholds subtracted, <= values / 4,097); a value seen once never shows more than 1.
  - distinct count: an HLL sketch (Apache DataSketches, lg_k=12: ~1.6 % relative standard
    error; stats.json gives its range at two standard deviations). It ignores the empty
    string, whose presence is kept apart, exactly.
  - quantiles and histogram: a deterministic compactor: values of weight 2**i at level i;
    a level holding more than `COMPACTOR_K` is sorted and every other value moves up a level
    (alternately the even and the odd ones), which moves any value's rank by at most 2**i.
    Those moves add up to `rank_error` (<= levels / 1,024 of the values; 0.46 % for 5M
    normal values in batches of 16,384, whose true error was 0.14 %).

Bytes values are counted by their first `BYTES_DISPLAY_CHARS` characters (longer ones with a
digest of the whole, so that distinct long values stay distinct). Numeric moments and
quantiles cover the finite values only. `TFRECORD_PIPELINE_STATS=0` makes the converters
skip statistics (an internal switch, to measure their cost).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import os
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["BYTES_DISPLAY_CHARS", "COMPACTOR_K", "EXACT_VALUES", "BatchStats", "BytesPartial", "BytesTotal",
           "FeaturePartial", "FeatureTotal", "HLL_LG_K", "ImagePartial", "ImageTotal", "NumericPartial",
           "NumericTotal", "QuantileSummary", "StatsTotal", "bytes_partial", "numeric_partial",
           "stats_enabled"]

#: Distinct values of a feature per split counted exactly (and the Misra-Gries counters beyond).
EXACT_VALUES = 4096
#: Values a level of the quantile compactor holds before half of them move up.
COMPACTOR_K = 1024
HLL_LG_K = 12
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
class QuantileSummary:
    """Finite values as (value, weight) float64/int64 arrays as bytes: while not `compacted`,
    each distinct value with its exact count; after, values of weight 2**level. `error`
    bounds any rank's error, in values; `parity` bit i: which half level i's next compaction keeps."""

    values: bytes = b""
    weights: bytes = b""
    compacted: bool = False
    error: int = 0
    parity: int = 0


class _Quantiles:
    """A `QuantileSummary` as numpy arrays, merged and queried."""

    def __init__(self, summary: QuantileSummary = QuantileSummary()):
        self.values = np.frombuffer(summary.values, np.float64)
        self.weights = np.frombuffer(summary.weights, np.int64)
        self.compacted, self.error, self.parity = summary.compacted, summary.error, summary.parity

    @classmethod
    def of(cls, ordered: np.ndarray) -> _Quantiles:
        """The summary of sorted values (past `EXACT_VALUES` distinct ones, level 0 as is)."""
        summary = cls()
        summary.values, summary.weights = ordered, np.ones(ordered.size, np.int64)
        summary.compacted = np.count_nonzero(ordered[1:] != ordered[:-1]) >= EXACT_VALUES
        summary._settle(ordered=True)
        return summary

    def dump(self) -> QuantileSummary:
        return QuantileSummary(self.values.tobytes(), self.weights.tobytes(), self.compacted, self.error,
                               self.parity)

    def merge(self, other: _Quantiles) -> None:
        self.values = np.concatenate([self.values, other.values])
        self.weights = np.concatenate([self.weights, other.weights])
        self.error += other.error
        self.parity ^= other.parity
        self.compacted |= other.compacted
        self._settle()

    def _settle(self, ordered: bool = False) -> None:
        """Equal values added up while exact; else (or once past `EXACT_VALUES`) compacted."""
        if not self.values.size:
            return
        if not self.compacted:
            order = slice(None) if ordered else np.argsort(self.values, kind="stable")
            values, weights = self.values[order], self.weights[order]
            starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
            self.values, self.weights = values[starts], np.add.reduceat(weights, starts)
            if self.values.size <= EXACT_VALUES:
                return
            self.compacted = True
            # A count is a sum of powers of two: the same values, exactly, of weight 2**bit.
            levels = {bit: self.values[(self.weights >> bit) & 1 == 1]
                      for bit in range(int(self.weights.max()).bit_length())}
        elif ordered:  # weight 1 each
            levels = {0: self.values}
        else:
            levels = {level: np.sort(self.values[self.weights == 1 << level])
                      for level in range(int(self.weights.max()).bit_length())}
        level = 0
        while level <= max(levels):
            values = levels.get(level, self.values[:0])
            if values.size > COMPACTOR_K:
                even = values.size - values.size % 2
                promoted = values[(self.parity >> level) & 1:even:2]
                above = levels.get(level + 1, promoted[:0])
                levels[level + 1] = np.sort(np.concatenate([above, promoted])) if above.size else promoted
                levels[level] = values[even:]
                self.parity ^= 1 << level
                self.error += 1 << level
            level += 1
        self.values = np.concatenate(list(levels.values()))
        self.weights = np.concatenate([np.full(values.size, 1 << level, np.int64)
                                       for level, values in levels.items()])

    def _cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(self.values, kind="stable")
        return self.values[order], np.cumsum(self.weights[order])

    def quantiles(self, ranks: Sequence[float]) -> list[float]:
        """The smallest value whose share of values at or below it reaches each rank."""
        values, cumulative = self._cumulative()
        positions = np.searchsorted(cumulative, np.asarray(ranks) * cumulative[-1], side="left")
        return values[np.minimum(positions, values.size - 1)].tolist()

    def below(self, edges: Sequence[float]) -> list[int]:
        """How many values are below each edge."""
        values, cumulative = self._cumulative()
        return np.r_[0, cumulative][np.searchsorted(values, edges, side="left")].tolist()

    def moments(self) -> tuple[float, float]:
        """Mean and sum of squared deviations as correctly rounded sums of the distinct values,
        whatever the input's order (not `compacted` only)."""
        mean = math.fsum((self.values * self.weights).tolist()) / int(self.weights.sum())
        deviations = self.values - mean
        return mean, math.fsum((deviations * deviations * self.weights).tolist())


def _hll_of(keys: Iterable[str]):
    sketch = _datasketches().hll_sketch(HLL_LG_K)
    collections.deque(map(sketch.update, keys), maxlen=0)  # the loop runs in C
    return sketch


def _hll_union(keys: Iterable[str]):
    union = _datasketches().hll_union(HLL_LG_K)
    union.update(_hll_of(keys))
    return union


def _value_key(text: str) -> str:
    """The key a value is counted by: its display text, cut, with a digest of the whole."""
    if len(text) <= BYTES_DISPLAY_CHARS:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{text[:BYTES_DISPLAY_CHARS]}\x00{digest}"


def _misra_gries(keys: Sequence[str], counts: np.ndarray) -> tuple[list[str], np.ndarray, int]:
    """The keys counted above the (EXACT_VALUES+1)-th largest count, less that count (the
    threshold, also returned): at most EXACT_VALUES keys, every count at most lowered."""
    cut = counts.size - EXACT_VALUES - 1
    threshold = int(np.partition(counts, cut)[cut])
    kept = np.flatnonzero(counts > threshold)
    return [keys[i] for i in kept], counts[kept] - threshold, threshold


@dataclasses.dataclass(frozen=True)
class NumericPartial:
    """int64/float values of one feature in one batch. `finite` values are those the moments
    (`mean`, `m2`: sum of squared deviations from the mean) and `quantiles` cover."""

    count: int
    nan: int
    inf: int
    zeros: int
    finite: int
    min: float | int | None
    max: float | int | None
    mean: float
    m2: float
    quantiles: QuantileSummary


@dataclasses.dataclass(frozen=True)
class BytesPartial:
    """bytes values of one feature in one batch: lengths and each value's count (int64 as
    bytes), exact while `error` is 0; beyond `EXACT_VALUES`, Misra-Gries counters, `error` the
    thresholds subtracted and `hll` a sketch of all values. `has_empty`: some value is the
    empty string, which HLL skips. `tracks_top` False: no top values (image bytes)."""

    count: int
    length_min: int
    length_max: int
    length_total: int
    values: tuple[str, ...] = ()
    counts: bytes = b""
    error: int = 0
    hll: bytes | None = None
    has_empty: bool = False
    tracks_top: bool = True


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
    count = int(values.size)
    # One sorted float64 copy serves everything: sorted, NaN gathers at the end and the
    # infinities at the ends of the numbers, so counts, min and max are binary searches, and
    # the distinct values and the compactor's halves are slices. Sorted in the values' own
    # type, then widened (which keeps the order): float32 sorts in half the time of float64.
    ordered = np.sort(values).astype(np.float64, copy=False)
    if integral:
        first, last, beyond = 0, count, count
    else:
        first = int(np.searchsorted(ordered, -np.inf, side="right"))
        last = int(np.searchsorted(ordered, np.inf, side="left"))
        beyond = int(np.searchsorted(ordered, np.inf, side="right"))
    finite = ordered[first:last]
    zeros = int(np.searchsorted(finite, 0.0, side="right") - np.searchsorted(finite, 0.0, side="left"))
    if finite.size:
        if integral:  # exact, beyond float64's 2**53
            low, high = int(values.min()), int(values.max())
        else:
            low, high = float(finite[0]), float(finite[-1])
        mean = float(finite.mean())
        deviations = finite - mean
        # Not np.dot: that goes to BLAS, whose threads cost 10x the arithmetic on busy cores.
        np.multiply(deviations, deviations, out=deviations)
        m2 = float(deviations.sum())
    else:
        low = high = None
        mean = m2 = 0.0
    return NumericPartial(count, count - beyond, first + beyond - last, zeros, int(finite.size),
                          low, high, mean, m2, _Quantiles.of(finite).dump())


def bytes_partial(lengths: np.ndarray, texts: Sequence[str], counts: np.ndarray,
                  frequent: bool = True) -> BytesPartial:
    """The partial of a batch's bytes values, given their lengths and their distinct values'
    display texts (see `columns.display_texts`) with how often each occurs; `frequent`
    False: no top values."""
    keys = list(texts) if max(map(len, texts), default=0) <= BYTES_DISPLAY_CHARS else \
        [_value_key(text) for text in texts]
    counts = np.asarray(counts, dtype=np.int64)
    error, hll = 0, None
    if len(keys) > EXACT_VALUES:
        hll = _hll_of(keys).serialize_compact()
        keys, counts, error = _misra_gries(keys, counts)
    size = int(lengths.size)
    low = int(lengths.min()) if size else 0
    return BytesPartial(size, low, int(lengths.max()) if size else 0, int(lengths.sum()),
                        tuple(keys), counts.tobytes(), error, hll, bool(size) and low == 0, frequent)


class NumericTotal:
    """`NumericPartial`s added up; `summary` holds the quantiles."""

    def __init__(self):
        self.count = self.nan = self.inf = self.zeros = self.finite = 0
        self.min = self.max = None
        self._mean = self._m2 = 0.0
        self.summary = _Quantiles()

    def add(self, part: NumericPartial) -> None:
        self.count += part.count
        self.nan += part.nan
        self.inf += part.inf
        self.zeros += part.zeros
        if part.finite:
            self.min = part.min if self.min is None else min(self.min, part.min)
            self.max = part.max if self.max is None else max(self.max, part.max)
            total = self.finite + part.finite
            delta = part.mean - self._mean
            self._mean += delta * part.finite / total
            self._m2 += part.m2 + delta * delta * self.finite * part.finite / total
            self.finite = total
            self.summary.merge(_Quantiles(part.quantiles))

    def _moments(self) -> tuple[float, float]:
        if not self.finite or self.summary.compacted:
            return self._mean, self._m2
        return self.summary.moments()

    @property
    def mean(self) -> float:
        return self._moments()[0]

    @property
    def std(self) -> float:
        return float(np.sqrt(self._moments()[1] / self.finite)) if self.finite else 0.0

    def partial(self) -> NumericPartial:
        """The total as one partial (adding it equals adding every part)."""
        return NumericPartial(self.count, self.nan, self.inf, self.zeros, self.finite, self.min,
                              self.max, self._mean, self._m2, self.summary.dump())


class BytesTotal:
    """`BytesPartial`s added up: `counts` of each value (exact while `exact`)."""

    def __init__(self):
        self.count = self.length_total = 0
        self.length_min = self.length_max = None
        self.counts: dict[str, int] = {}
        self.error = 0
        self._hll = None  # an HLL union of all values, once beyond EXACT_VALUES
        self.has_empty = False
        self.tracks_top = True

    def add(self, part: BytesPartial) -> None:
        self.count += part.count
        if part.count:
            self.length_min = part.length_min if self.length_min is None else min(
                self.length_min, part.length_min)
            self.length_max = part.length_max if self.length_max is None else max(
                self.length_max, part.length_max)
        self.length_total += part.length_total
        self.has_empty |= part.has_empty
        self.tracks_top &= part.tracks_top
        if self._hll is None and part.hll is not None:
            self._hll = _hll_union(self.counts)
        if self._hll is not None:
            self._hll.update(_datasketches().hll_sketch.deserialize(part.hll) if part.hll is not None
                             else _hll_of(part.values))
        numbers = np.frombuffer(part.counts, np.int64).tolist()
        counts, get = self.counts, self.counts.get
        for key, number in zip(part.values, numbers, strict=True):
            counts[key] = get(key, 0) + number
        self.error += part.error
        if len(counts) > EXACT_VALUES:
            if self._hll is None:
                self._hll = _hll_union(counts)
            keys, numbers, threshold = _misra_gries(list(counts), np.fromiter(counts.values(), np.int64))
            self.counts = dict(zip(keys, numbers.tolist(), strict=True))
            self.error += threshold

    @property
    def exact(self) -> bool:
        """Whether `counts` holds every value, with its exact count."""
        return self._hll is None

    @property
    def distinct(self) -> int:
        """The distinct values (the HLL sketch's estimate, plus the empty string it skips,
        once not `exact`)."""
        if self._hll is None:
            return len(self.counts)
        return round(self._hll.get_result().get_estimate()) + self.has_empty

    @property
    def distinct_range(self) -> tuple[int, int]:
        """The distinct values at two standard deviations of the HLL sketch (exact: twice `distinct`)."""
        if self._hll is None:
            return len(self.counts), len(self.counts)
        sketch = self._hll.get_result()
        return (math.floor(sketch.get_lower_bound(2)) + self.has_empty,
                math.ceil(sketch.get_upper_bound(2)) + self.has_empty)

    def partial(self) -> BytesPartial:
        """The total as one partial (see `NumericTotal.partial`)."""
        keys = sorted(self.counts)
        hll = None if self._hll is None else self._hll.get_result().serialize_compact()
        return BytesPartial(self.count, self.length_min or 0, self.length_max or 0, self.length_total,
                            tuple(keys), np.array([self.counts[key] for key in keys], np.int64).tobytes(),
                            self.error, hll, self.has_empty, self.tracks_top)

    def top(self, limit: int) -> list[tuple[str, int]]:
        """The `limit` most frequent display texts with their counts (at most `error` below
        the truth), ties by text."""
        if not self.tracks_top:
            return []
        ranked = sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [(key[:BYTES_DISPLAY_CHARS], number) for key, number in ranked]


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
        self.formats.update(dict(part.formats))
        self.channels.update(dict(part.channels))
        self.labels.update(dict(part.labels))

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
            if part.name not in self.features:
                self.features[part.name] = FeatureTotal(part.name, part.kind)
            self.features[part.name].add(part)
        if stats.images is not None:
            self.images = self.images or ImageTotal()
            self.images.add(stats.images)

    def partial(self) -> BatchStats:
        return BatchStats(tuple(total.partial() for total in self.features.values()),
                          self.images.partial() if self.images is not None else None)
