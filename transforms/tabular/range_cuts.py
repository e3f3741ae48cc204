"""Making raw byte ranges of large text files exact: `CutRangesInWorkers`.

The planner cuts a large file at even byte targets into raw ranges
(`split_units.split_text_units`); this step makes them exact byte ranges, with the
formulation of `transforms.tabular.byte_ranges`, wherever it runs: on the launcher's
threads before the run (`cut_now`: the local runner), as tasks of a Dask cluster before the
run (`cut_now` too), or as the graph's first step on runners whose workers read the files:

    work units -> ScanRanges: each raw range counts its own bytes, in parallel, in both
                  states its candidate record start can be in (`scan_range`)
               -> PlaceRanges: each unit, with every range's counts as a side input,
                  chains its file's states from the file's start (`cuts_of`)
                  and becomes [record start, next record start) with its row and line
                  offsets, as if the launcher had scanned the file

A candidate start that is not a record start (inside a quoted field, or in the CSV header)
joins its range to the one before: the raw range yields no unit. A file that ends inside a
quoted field, or that could not be read, becomes one unit (its first range's index) that
the converter reads whole, as on the launcher (a warning names it). Units that are not raw
ranges pass unchanged. The side input is one small record per raw range, never data.

`CutRangesInWorkers.cut_now` is the same cut run before the pipeline, its scans mapped over
the raw ranges by the caller, for runners that can run them as tasks and whose side inputs
cost more (Beam 2.77's DaskRunner computes a side input inside each task that reads it:
the task leaves its thread while waiting, so every conversion task of the run starts at
once and stays on the worker it started on, whatever their balance).
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
    RangeScan,
    TextDialect,
    cut_targets,
    cuts_of,
    scan_range,
    scan_ranges,
)

__all__ = ["CutRangesInWorkers", "cut_now"]

_LOG = logging.getLogger(__name__)


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
    """A raw range's (path, range index, `RangeScan` or why the file could not be read);
    None for other units."""
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


class _ScanRange(beam.DoFn):
    """A raw range -> (path, its range index, its `RangeScan`, or why the file could not be
    read)."""

    def __init__(self, dialect: TextDialect):
        self._dialect = dialect

    def process(self, unit: WorkUnit) -> Iterator[_Scanned]:
        scanned = _scan_unit(unit, self._dialect)
        if scanned is not None:
            yield scanned


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
    """Work units -> the same units, raw byte ranges replaced by exact ones (module
    docstring). `dialect`: how the files' bytes delimit records."""

    def __init__(self, dialect: TextDialect):
        super().__init__()
        self._dialect = dialect

    def expand(self, units):
        scans = units | "ScanRanges" >> beam.ParDo(_ScanRange(self._dialect))
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
