"""Cutting large CSV/TSV and JSON Lines files into byte-range work units: `split_text_units`.

One file is one work unit by default, so a large file converts on one core. Here every
uncompressed text file larger than `work_unit_bytes` is scanned once on the launcher
(`transforms.tabular.byte_ranges.find_boundaries`: sequential, vectorised, exact with quoted
newlines) and cut into about size / work_unit_bytes ranges at record starts. A range's unit
has `start`/`end` (bytes) and `extra = {"size", "row_offset", "line_offset"}`: the data rows
and lines of the file before it, so the readers number rows (and JSON Lines lines) as in the
whole file and every dead letter keeps its true `row`. Ranges of one file get consecutive unit
indices, so batch keys stay unique and in file order.

Kept whole (one unit, with the reason in the plan summary): compressed files (a compressed
stream is read from its start), encodings in which a byte value does not stand for one
character on its own (UTF-16, Shift JIS...), a delimiter or quote that is not ASCII, a CSV
file ending inside a quoted field (its reader reports every line the unclosed quote
swallows), and files that cannot be scanned (the converter dead-letters them). Launcher side.
"""

from __future__ import annotations

import codecs
import dataclasses
import importlib
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.records import WorkUnit
from transforms.tabular.byte_ranges import Scan, TextDialect, find_boundaries
from transforms.tabular.spec import CsvOptions

__all__ = ["DEFAULT_WORK_UNIT_BYTES", "FileSplit", "SplitPlan", "scan_ranges", "split_text_units",
           "text_dialect"]

DEFAULT_WORK_UNIT_BYTES = 64 << 20

#: Files scanned at once (the scan is mostly I/O on remote filesystems).
_SCAN_THREADS = 4

#: Files the plan summary names one by one.
_LISTED_FILES = 50


@dataclasses.dataclass(frozen=True)
class FileSplit:
    """How one file larger than the target was planned.

    Attributes:
      path: the file.
      size: its size in bytes.
      work_units: how many byte ranges it became (1: read whole).
      kept_whole: why it is one unit, when it is.
    """

    path: str
    size: int
    work_units: int
    kept_whole: str | None = None


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The work units after splitting, and how each large file was cut."""

    units: tuple[WorkUnit, ...]
    files: tuple[FileSplit, ...]
    work_unit_bytes: int

    def summary(self) -> dict[str, Any]:
        """For the plan summary (`--dry-run` prints it)."""
        split = [f for f in self.files if f.kept_whole is None]
        whole = [f for f in self.files if f.kept_whole is not None]
        out: dict[str, Any] = {
            "work_unit_bytes": self.work_unit_bytes,
            "files_split": len(split),
            "byte_range_units": sum(f.work_units for f in split),
            "files_kept_whole": len(whole),
            "files": {f.path: (f"{f.work_units} byte ranges" if f.kept_whole is None
                               else f"one unit: {f.kept_whole}")
                      for f in self.files[:_LISTED_FILES]},
        }
        if len(self.files) > _LISTED_FILES:
            out["files_not_listed"] = len(self.files) - _LISTED_FILES
        return out


def _single_byte_text(encoding: str, characters: str) -> str | None:
    """Why text in `encoding` cannot be cut at the bytes of `characters`, or None: every
    byte must stand for one character on its own (UTF-8: ASCII bytes only ever are ASCII)
    and each of `characters` must be the one byte of its ASCII code."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return f"unknown encoding {encoding!r}"
    if name not in ("utf-8", "ascii", "iso8859-1"):
        # Charmap codecs (cp1252, iso8859-x, koi8-r, ...) map each byte alone.
        module = importlib.import_module(f"encodings.{name.replace('-', '_')}") \
            if name.replace("-", "_").isidentifier() else None
        if getattr(module, "decoding_table", None) is None:
            return f"the encoding {encoding} is not cut at byte offsets (multi-byte or stateful)"
    for ch in characters:
        if ord(ch) >= 0x80:
            return f"{ch!r} is not ASCII"
        try:
            same = ch.encode(name) == bytes([ord(ch)]) and bytes([ord(ch)]).decode(name) == ch
        except UnicodeError:
            same = False
        if not same:
            return f"{ch!r} is not one byte in {encoding}"
    return None


def text_dialect(fmt: str, csv: CsvOptions | None = None) -> tuple[TextDialect | None, str | None]:
    """(the dialect of `fmt` files under `csv`, None) or (None, why they are not split)."""
    if fmt == "jsonl":
        return TextDialect("jsonl"), None  # JSON Lines is UTF-8, read as bytes
    if fmt not in ("csv", "tsv"):
        return None, f"{fmt} is not a text format"
    csv = csv or CsvOptions()
    delimiter, quote = csv.delimiter_for(fmt), csv.quotechar
    why = _single_byte_text(csv.encoding, "\n\r" + delimiter + (quote or ""))
    if why:
        return None, why
    utf8 = codecs.lookup(csv.encoding).name == "utf-8"
    return TextDialect("csv", quote=ord(quote) if quote else None, delimiter=ord(delimiter),
                       header=csv.header, bom=utf8), None


def _compression(path: str) -> str | None:
    if path.endswith(".gz"):
        return "gzip"
    detected = CompressionTypes.detect_compression_type(path)
    return None if detected == CompressionTypes.UNCOMPRESSED else str(detected)


def _targets(size: int, work_unit_bytes: int) -> list[int]:
    """Evenly spread cut targets: ranges of at most about `work_unit_bytes`."""
    count = math.ceil(size / work_unit_bytes)
    return [size * k // count for k in range(1, count)]


def _scan(path: str, targets: Sequence[int], dialect: TextDialect) -> Scan:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return find_boundaries(f.read, targets, dialect)


def _file_ranges(unit: WorkUnit, dialect: TextDialect | None, why: str | None,
                 work_unit_bytes: int) -> tuple[list[tuple[int, int, dict]], FileSplit | None]:
    """(start, end, extra) of each range of the file of `unit` ([] = keep the unit), and its
    FileSplit when the file is larger than the target."""
    size = int((unit.extra or {}).get("size") or 0)
    if size <= work_unit_bytes:
        return [], None
    compression = _compression(unit.path)
    if compression:
        why = f"compressed ({compression}): a compressed stream is read from its start"
    if why:
        return [], FileSplit(unit.path, size, 1, why)
    try:
        scan = _scan(unit.path, _targets(size, work_unit_bytes), dialect)
    except Exception as error:  # noqa: BLE001 - the converter dead-letters an unreadable file
        return [], FileSplit(unit.path, size, 1, f"not scanned ({type(error).__name__}: "
                                                 f"{error}); converted as one unit")
    if scan.open_quote:
        return [], FileSplit(unit.path, size, 1, "it ends inside a quoted field (an unclosed "
                             "quote): read whole, every line it swallows is a dead letter")
    if not scan.boundaries:
        return [], FileSplit(unit.path, size, 1, "no record starts after the cut targets "
                             "(a record longer than --work-unit-bytes)")
    ranges = scan_ranges(scan)
    return ranges, FileSplit(unit.path, size, len(ranges))


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


def split_text_units(units: Sequence[WorkUnit], fmt: str, csv: CsvOptions | None = None,
                     work_unit_bytes: int = DEFAULT_WORK_UNIT_BYTES) -> SplitPlan:
    """The work units of `plan_tabular` with every CSV/TSV/JSON Lines file larger than
    `work_unit_bytes` cut into byte ranges (module docstring), re-indexed in plan order.

    `csv`: the resolved spec's CSV options (delimiter, quote, header, encoding). Other
    formats (Parquet: a unit per row group) come back as they are.
    """
    if work_unit_bytes < 1:
        raise ValueError(f"work_unit_bytes must be positive, got {work_unit_bytes}")
    if fmt not in ("csv", "tsv", "jsonl"):
        return SplitPlan(tuple(units), (), work_unit_bytes)
    dialect, why = text_dialect(fmt, csv)
    with ThreadPoolExecutor(_SCAN_THREADS) as pool:
        planned = list(pool.map(lambda u: _file_ranges(u, dialect, why, work_unit_bytes), units))
    out: list[WorkUnit] = []
    files = []
    for unit, (ranges, file_split) in zip(units, planned, strict=True):
        if file_split is not None:
            files.append(file_split)
        if not ranges:
            out.append(dataclasses.replace(unit, index=len(out)))
            continue
        for start, end, extra in ranges:
            out.append(dataclasses.replace(unit, index=len(out), start=start, end=end,
                                           extra={**(unit.extra or {}), **extra}))
    return SplitPlan(tuple(out), tuple(files), work_unit_bytes)
