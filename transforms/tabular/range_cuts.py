"""Making the raw byte ranges of large text files (`split_units`) exact, the same wherever it
runs: `cut_now` (launcher threads or Dask tasks, before the run) or `CutRangesInWorkers` (the
graph's first steps, on runners whose workers read the files: ScanRanges counts each raw range
in parallel; PlaceRanges chains each file's counts, a side input of one small record per range,
into units [record start, next record start) with their row and line offsets).

Each range is counted in both quote states its start can be in (`scan_range`), and the chain
of counts (`cuts_of`) puts each cut at the first record start at or after its target
(`cut_targets`, a function of the size and range count only): the cut depends on the file's
bytes alone. A range in which no record starts joins the one before (it yields no unit). A
file that ends inside a quoted field, or could not be read, becomes one unit (its first
range's index) read whole, named in a warning. Other units pass unchanged. `cut_now` exists
for runners whose side inputs cost more (Beam 2.77's DaskRunner computes a side input inside
each task that reads it: the task leaves its thread while waiting, so every conversion task
starts at once and stays on the worker it started on, whatever their balance).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.records import WorkUnit
from transforms.tabular.byte_ranges import (
    BLOCK_BYTES,
    Boundary,
    RangeCount,
    RangeReader,
    Scan,
    TextDialect,
    count_range,
)

__all__ = ["CutRangesInWorkers", "RangeScan", "cut_now", "cut_targets", "cuts_of", "scan_range",
           "scan_ranges"]

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RangeScan:
    """Range `range` (k) of a file, counted without knowing what comes before it: from
    `start`, the byte after the first LF at or after target k - 1 (range 0: the file's
    start), to `end`, the next range's `start` (or the file's size). `outside`: the counts
    when that LF ended a record; `inside`: when it lay inside a quoted field (None where
    none can be: JSON Lines, CSV without quoting, the first range)."""

    range: int
    start: int
    end: int
    outside: RangeCount
    inside: RangeCount | None = None


#: Bytes read at once looking for the LF after a cut target.
_SEEK_BYTES = 64 << 10


def _candidate_start(f, target: int, size: int) -> int:
    """The byte after the first LF at or after `target` - 1 in the seekable file `f`
    (`size`: there is none)."""
    position = target - 1
    f.seek(position)
    while position < size:
        chunk = f.read(min(_SEEK_BYTES, size - position))
        if not chunk:
            break
        at = chunk.find(b"\n")
        if at >= 0:
            return position + at + 1
        position += len(chunk)
    return size


def scan_range(f, k: int, cuts: Sequence[int], dialect: TextDialect,
               block_bytes: int = BLOCK_BYTES) -> RangeScan:
    """The `RangeScan` of range `k` of the seekable binary file `f` cut at `cuts` (0, the
    targets, then the file's size)."""
    size = cuts[-1]
    start = 0 if k == 0 else _candidate_start(f, cuts[k], size)
    end = size if k + 2 >= len(cuts) else max(_candidate_start(f, cuts[k + 1], size), start)
    f.seek(start)  # finding `end` moved it (and RangeReader seeks only past 0)
    outside, inside = count_range(RangeReader(f, start, end).read, start, dialect, block_bytes)
    return RangeScan(k, start, end, outside, inside)


def cuts_of(scans: Sequence[RangeScan], size: int, dialect: TextDialect
            ) -> tuple[Scan, dict[int, int]]:
    """The record starts of a file, chained from its start over its ranges' counts: (a
    `Scan` of the file, {boundary offset: the range it starts}).

    A range's candidate start is its boundary when the true state there is outside quotes
    and the CSV header lies before it; otherwise its boundary is the first record start its
    counts found after that (the first record start at or after its cut target, as a
    sequential reading of the file finds it), and where they found none it joins the range
    before. `scans` must be every range of the file, in any order.
    """
    header = 1 if dialect.kind == "csv" and dialect.header else 0
    records = lines = 0
    quoted = False
    boundaries: list[Boundary] = []
    owners: dict[int, int] = {}
    for scan in sorted(scans, key=lambda scan: scan.range):
        counted = scan.inside if quoted else scan.outside
        if scan.range:
            found = (scan.start, 0, 0) if not quoted and records >= header else counted.first_start
            if found is not None and found[0] < min(scan.end, size):  # else the next range's
                boundaries.append(Boundary(found[0], records + found[1] - header, lines + found[2]))
                owners[found[0]] = scan.range
        records += counted.records
        lines += counted.lines
        quoted = counted.quoted_at_end
    return Scan(size=size, boundaries=tuple(boundaries), open_quote=quoted), owners


def cut_targets(size: int, count: int) -> list[int]:
    """Evenly spread cut targets for `count` ranges of a file of `size` bytes."""
    return [size * k // count for k in range(1, count)]


def scan_ranges(scan: Scan) -> list[tuple[int, int, dict]]:
    """(start, end, extra) of the byte ranges a scan's boundaries cut its file into, in file
    order; extra holds the unit's `size`, `row_offset` and `line_offset`."""
    ranges = []
    start, rows, lines = 0, 0, 0
    for boundary in (*scan.boundaries, None):
        end = scan.size if boundary is None else boundary.offset
        ranges.append((start, end, {"size": end - start, "row_offset": rows, "line_offset": lines}))
        if boundary is not None:
            start, rows, lines = boundary.offset, boundary.rows_before, boundary.lines_before
    return ranges


def _cut_of(unit: WorkUnit) -> dict | None:
    """A raw range's `extra["cut"]`: {"range", "ranges", "file_size"}; None: not a raw range."""
    return (unit.extra or {}).get("cut")


def _cuts(cut: dict) -> list[int]:
    size = int(cut["file_size"])
    return [0, *cut_targets(size, int(cut["ranges"])), size]


_Scanned = tuple[str, int, RangeScan | str]  # (path, range index, its scan or why unread)
_Placed = dict[int, tuple[int, int, dict]]  # raw range index -> (start, end, extra) it becomes
_Placements = dict[str, tuple[_Placed | None, str]]  # path -> (its placed ranges, or why whole)


def _scan_unit(unit: WorkUnit, dialect: TextDialect) -> _Scanned | None:
    """A raw range's `_Scanned`; None for other units."""
    cut = _cut_of(unit)
    if cut is None:
        return None
    try:
        with FileSystems.open(unit.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            scan = scan_range(f, int(cut["range"]), _cuts(cut), dialect)
    except Exception as error:  # noqa: BLE001 - the converter dead-letters the file
        scan = f"{type(error).__name__}: {error}"
    return unit.path, int(cut["range"]), scan


def _placements(scans: Sequence[_Scanned], dialect: TextDialect) -> _Placements:
    """Every cut file's placed ranges, from all its ranges' scans."""
    by_path: dict[str, list[RangeScan | str]] = {}
    for path, _, scan in scans:
        by_path.setdefault(path, []).append(scan)
    return {path: _place_file(found, dialect) for path, found in by_path.items()}


def _place_file(scans: list[RangeScan | str], dialect: TextDialect) -> tuple[_Placed | None, str]:
    """(the units the file's raw ranges become, or None and why it is read whole)."""
    errors = [scan for scan in scans if isinstance(scan, str)]
    if errors:
        return None, f"it could not be read ({errors[0]})"
    scan, owners = cuts_of(scans, max(scan.end for scan in scans), dialect)
    if scan.open_quote:
        return None, "it ends inside a quoted field (an unclosed quote)"
    if not scan.boundaries:
        return None, "no range starts at a record start"
    owners[0] = 0
    return {owners[start]: (start, end, extra) for start, end, extra in scan_ranges(scan)}, ""


def _placed_unit(unit: WorkUnit, placements: _Placements) -> WorkUnit | None:
    """What `unit` becomes: a raw range its exact byte range (None: it joins the range
    before), the first range of a file read whole that whole file; other units as they are."""
    cut = _cut_of(unit)
    if cut is None:
        return unit
    placed, why = placements[unit.path]
    k = int(cut["range"])
    kept = {key: value for key, value in (unit.extra or {}).items() if key != "cut"}
    if placed is None:  # read whole, as its first range
        if k != 0:
            return None
        return dataclasses.replace(unit, start=None, end=None,
                                   extra={**kept, "size": int(cut["file_size"])})
    if k not in placed:
        return None
    start, end, extra = placed[k]
    return dataclasses.replace(unit, start=start, end=end, extra={**kept, **extra})


class _PlaceRange(beam.DoFn):
    """A raw range -> its exact byte range (or nothing, when it joins the range before);
    other units as they are. Takes every range's scan as a side input."""

    def __init__(self, dialect: TextDialect):
        self._dialect = dialect
        self._placements: _Placements | None = None

    def process(self, unit: WorkUnit, scans: Sequence[_Scanned]) -> Iterator[WorkUnit]:
        if _cut_of(unit) is not None and self._placements is None:
            # The side input is the same for every unit of the run.
            self._placements = _placements(scans, self._dialect)
        placed = _placed_unit(unit, self._placements or {})
        if placed is not None:
            if placed.start is None and placed is not unit:
                _LOG.warning("%s: read whole, as one unit: %s", unit.path,
                             self._placements[unit.path][1])
            yield placed


class CutRangesInWorkers(beam.PTransform):
    """Work units -> the same units, raw byte ranges replaced by exact ones."""

    def __init__(self, dialect: TextDialect):
        super().__init__()
        self._dialect = dialect

    def expand(self, units):
        scans = units | "ScanRanges" >> beam.FlatMap(
            lambda unit, dialect: filter(None, [_scan_unit(unit, dialect)]), self._dialect)
        return units | "PlaceRanges" >> beam.ParDo(_PlaceRange(self._dialect),
                                                   beam.pvalue.AsList(scans))

    def cut_now(self, units: Sequence[WorkUnit],
                map_scans: Callable[[Callable[[WorkUnit], Any], list[WorkUnit]], list]
                ) -> list[WorkUnit]:
        """The same cut outside a pipeline (`cut_now`), each file read whole named in a
        warning."""
        cut, whole = cut_now(units, self._dialect, map_scans)
        for path, why in whole.items():
            _LOG.warning("%s: read whole, as one unit: %s", path, why)
        return cut


def cut_now(units: Sequence[WorkUnit], dialect: TextDialect,
            map_scans: Callable[[Callable[[WorkUnit], Any], list[WorkUnit]], list]
            ) -> tuple[list[WorkUnit], dict[str, str]]:
    """What `CutRangesInWorkers` gives for `units`, outside a pipeline, in plan order, the raw
    ranges' scans run by `map_scans(fn, raw_ranges)` (a thread pool's map on the launcher, a
    Dask client's map, so that the workers read the files and the caller gets one small
    summary per range), the placing done here; and {path: why it is read whole}."""
    raw = [unit for unit in units if _cut_of(unit) is not None]
    scans = list(map_scans(functools.partial(_scan_unit, dialect=dialect), raw))
    placements = _placements(scans, dialect)
    whole = {path: why for path, (placed, why) in placements.items() if placed is None}
    return [placed for unit in units if (placed := _placed_unit(unit, placements)) is not None], whole
