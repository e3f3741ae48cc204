"""Cutting large CSV/TSV and JSON Lines files into byte-range work units: `split_text_units`.

Every uncompressed text file larger than `work_unit_bytes` is cut at even byte targets into
raw ranges (`extra["cut"]` = {"range", "ranges", "file_size"}) whose record starts
`range_cuts` finds, here or in the workers. A range's unit has `start`/`end` (bytes) and
`extra = {"size", "row_offset", "line_offset"}`, so the readers number rows and lines as in
the whole file. A file's ranges keep their raw ranges' unit indices (a range joined to the
one before leaves a gap), so batch keys stay unique and in file order.

A plan with few units leaves workers idle at its end, so a plan asking for `balance` with
fewer than `BALANCE_UNITS` units cuts its files into ranges of about total input /
`BALANCE_UNITS` bytes, never smaller than `MIN_RANGE_BYTES`. The rule is a constant: the
units, hence the output's bytes, never depend on the processes, threads or runner.

Kept whole (one unit, with the reason in the plan summary): compressed files, encodings in
which a byte does not stand for one character on its own (UTF-16, Shift JIS...), a delimiter
or quote that is not ASCII, a CSV file ending inside a quoted field, and files that cannot be
read (the converter dead-letters them). Launcher side.
"""

from __future__ import annotations

import codecs
import collections
import dataclasses
import importlib
import itertools
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from apache_beam.io.filesystem import CompressionTypes

from transforms.ordered_pool import default_threads
from transforms.records import WorkUnit
from transforms.tabular.byte_ranges import TextDialect
from transforms.tabular.range_cuts import cut_now, cut_targets
from transforms.tabular.spec import CsvOptions

__all__ = ["BALANCE_UNITS", "DEFAULT_WORK_UNIT_BYTES", "MIN_RANGE_BYTES", "FileSplit",
           "SplitPlan", "split_text_units", "text_dialect"]

DEFAULT_WORK_UNIT_BYTES = 64 << 20

#: A plan of fewer units than this cuts its files for balance (module docstring).
BALANCE_UNITS = 8

#: The smallest range cut for balance: below it, a range's fixed cost (opening the file, the
#: reader's start) shows, and the launcher's scan would cost more than it saves.
MIN_RANGE_BYTES = 8 << 20

#: Files the plan summary names one by one.
_LISTED_FILES = 50


@dataclasses.dataclass(frozen=True)
class FileSplit:
    """How one file larger than the target was planned: `work_units` byte ranges (1: read
    whole, `kept_whole` saying why), or `cut_in_workers`: that many raw ranges whose record
    starts the workers find (some may join the one before)."""

    path: str
    size: int
    work_units: int
    kept_whole: str | None = None
    cut_in_workers: bool = False

    def described(self) -> str:
        if self.kept_whole is not None:
            return f"one unit: {self.kept_whole}"
        if self.cut_in_workers:
            return f"{self.work_units} byte ranges, cut at record starts by the workers"
        return f"{self.work_units} byte ranges"


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The work units after splitting, and how each large file was cut."""

    units: tuple[WorkUnit, ...]
    files: tuple[FileSplit, ...]
    work_unit_bytes: int
    balance_bytes: int | None = None  # the range size cut for balance, when one was
    dialect: TextDialect | None = None  # how the files' bytes delimit records (text formats)

    @property
    def cut_in_workers(self) -> bool:
        """Some units are raw ranges whose record starts the workers find."""
        return any(f.cut_in_workers for f in self.files)

    def summary(self) -> dict[str, Any]:
        """For the plan summary (`--dry-run` prints it)."""
        split = [f for f in self.files if f.kept_whole is None]
        whole = [f for f in self.files if f.kept_whole is not None]
        out: dict[str, Any] = {
            "work_unit_bytes": self.work_unit_bytes,
            **({"balance_range_bytes": self.balance_bytes} if self.balance_bytes else {}),
            "files_split": len(split),
            "byte_range_units": sum(f.work_units for f in split),
            "files_kept_whole": len(whole),
            "files": {f.path: f.described() for f in self.files[:_LISTED_FILES]},
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


def _range_count(size: int, work_unit_bytes: int, balance_bytes: int | None) -> int:
    """How many ranges a file of `size` bytes is cut into: ranges of at most
    `work_unit_bytes`, and of about `balance_bytes` (module docstring) when that is more."""
    count = math.ceil(size / work_unit_bytes)
    if balance_bytes:
        count = max(count, size // balance_bytes)
    return max(count, 1)


def _file_ranges(unit: WorkUnit, why: str | None, count: int
                 ) -> tuple[list[tuple[int, int, dict]], FileSplit | None]:
    """(start, end, extra) of each of the `count` raw ranges wanted of the file of `unit`
    ([] = keep the unit), and its FileSplit when more than one is wanted."""
    size = unit.size
    if count <= 1:
        return [], None
    compression = _compression(unit.path)
    if compression:
        why = f"compressed ({compression}): a compressed stream is read from its start"
    if why:
        return [], FileSplit(unit.path, size, 1, why)
    cuts = [0, *cut_targets(size, count), size]
    ranges = [(start, end, {"size": end - start,
                            "cut": {"range": k, "ranges": count, "file_size": size}})
              for k, (start, end) in enumerate(itertools.pairwise(cuts))]
    return ranges, FileSplit(unit.path, size, count, cut_in_workers=True)


def split_text_units(units: Sequence[WorkUnit], fmt: str, csv: CsvOptions | None = None,
                     work_unit_bytes: int = DEFAULT_WORK_UNIT_BYTES, *, balance: bool = False,
                     cut_in_workers: bool = False) -> SplitPlan:
    """The work units of `plan_tabular`, text files cut into byte ranges (module docstring),
    in plan order. `cut_in_workers`: cut at byte targets only, leaving the record starts to
    the workers. `csv`: the resolved spec's CSV options. Parquet units come back as they are.
    """
    if work_unit_bytes < 1:
        raise ValueError(f"work_unit_bytes must be positive, got {work_unit_bytes}")
    if fmt not in ("csv", "tsv", "jsonl"):
        return SplitPlan(tuple(units), (), work_unit_bytes)
    dialect, why = text_dialect(fmt, csv)
    balance_bytes = None
    if balance and len(units) < BALANCE_UNITS:
        balance_bytes = max(sum(u.size for u in units) // BALANCE_UNITS, MIN_RANGE_BYTES)
    out: list[WorkUnit] = []
    files = []
    for unit in units:
        ranges, file_split = _file_ranges(
            unit, why, _range_count(unit.size, work_unit_bytes, balance_bytes))
        if file_split is not None:
            files.append(file_split)
        if not ranges:
            out.append(dataclasses.replace(unit, index=len(out)))
            continue
        for start, end, extra in ranges:
            out.append(dataclasses.replace(unit, index=len(out), start=start, end=end,
                                           extra={**(unit.extra or {}), **extra}))
    if cut_in_workers or not any(f.cut_in_workers for f in files):
        return SplitPlan(tuple(out), tuple(files), work_unit_bytes, balance_bytes, dialect)
    with ThreadPoolExecutor(default_threads()) as pool:  # numpy releases the GIL
        cut, whole = cut_now(out, dialect, lambda fn, raw: list(pool.map(fn, raw)))
    ranges_of = collections.Counter(unit.path for unit in cut)
    files = [f if not f.cut_in_workers else
             FileSplit(f.path, f.size, 1, f"{whole[f.path]}: read whole") if f.path in whole else
             FileSplit(f.path, f.size, ranges_of[f.path]) for f in files]
    return SplitPlan(tuple(cut), tuple(files), work_unit_bytes, balance_bytes, dialect)
