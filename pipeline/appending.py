"""`convert --append` on the launcher: what a committed output lets an append do, and which
input it has not converted yet.

An append converts, with the committed spec and options, only the input the committed
manifest's `inputs` listing does not cover: files it does not list, and the rows a CSV/TSV
or JSON Lines file gained at its end since (read from the committed size on, numbered after
the committed rows). Refused, naming the file and what to do: a committed input that is
gone, or that changed other than by growing (a Parquet, compressed or image file changed
at all), a committed text file whose old bytes no longer end a record at the committed size,
different output options, a SequenceExample output (a new row may extend a committed
sequence), `--num-shards` (every generation adds shards) and an output committed without
the totals an append merges into (`transforms.resume.STATE_NAME`). The commit then lists the
old and new files as the output's next generation (`transforms.generations`).

What it cannot see: an edit inside a grown text file's committed bytes that keeps a line end
at the committed size (the bytes are not hashed: that would read every input again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.errors import UsageError
from transforms import fs
from transforms.records import WorkUnit
from transforms.resume import STATE_NAME
from transforms.tabular.byte_ranges import RangeReader, TextDialect, count_range
from transforms.tabular.spec import ConversionSpec, load_spec

__all__ = ["check_appendable", "committed_spec", "numbered_after", "uncovered_units"]

_GROWABLE = ("csv", "tsv", "jsonl")
_REDO = "convert into a new --output, or again with --overwrite"


def check_appendable(committed: Mapping[str, Any], output: str, options: Mapping[str, Any],
                     num_shards: int | None) -> None:
    """Refuses an append that `committed` (the output's manifest) cannot take."""
    if STATE_NAME not in (committed.get("files") or {}):
        raise UsageError(f"{output} was committed without {STATE_NAME} (by an earlier version), "
                         f"so it cannot be appended to", hint=_REDO)
    if num_shards:
        raise UsageError("--append cannot keep --num-shards: every generation adds shards",
                         hint="use --max-shard-bytes or --max-shard-records")
    if (committed.get("spec") or {}).get("sequence"):
        raise UsageError(f"{output} holds SequenceExamples, which cannot be appended to: a new "
                         f"row may belong to a committed sequence", hint=_REDO)
    before = committed.get("options") or {}
    changed = [f"--{name.replace('_', '-')}" for name in sorted(set(before) | set(options))
               if name not in ("input", "output", "run_date", "spec")
               and (before.get(name) or None) != (options.get(name) or None)]
    if changed:
        raise UsageError(f"--append with other options than {output} was committed with "
                         f"({', '.join(changed)}): every generation is converted alike",
                         hint="give the committed options; `tfrecord-pipeline inspect` shows them")


def committed_spec(output: str) -> ConversionSpec:
    """The spec `output` was converted with, from its spec.yaml: the manifest's copy has its
    keys sorted, which reorders the splits, and the order of the splits decides which split a
    key hashes to (`transforms.splits`)."""
    return load_spec(fs.join_path(output, "spec.yaml"))


def uncovered_units(units: Sequence[WorkUnit], committed_inputs: Sequence[Sequence[Any]],
                    listing: Sequence[Sequence[Any]], fmt: str,
                    dialect: TextDialect | None) -> tuple[list[WorkUnit], list[WorkUnit]]:
    """(units of input files the committed listing lacks, units of the new rows of grown
    text files) among the planned `units` (`plan_tabular`'s: one per file, or per Parquet
    row group); `listing`: the current (path, size, mtime) of every input."""
    was = {path: (size, mtime) for path, size, mtime in committed_inputs}
    now = {path: (size, mtime) for path, size, mtime in listing}
    gone = sorted(set(was) - set(now))
    if gone:
        more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
        raise UsageError(f"input {gone[0]}{more} was converted into the committed output and is "
                         f"gone: an append only adds", hint=f"restore it, or {_REDO}")
    grown = {}
    for path in sorted(set(was) & set(now)):
        if was[path] == now[path]:
            continue
        (old_size, _), (size, _) = was[path], now[path]
        if fmt not in _GROWABLE or dialect is None or size <= old_size or path.endswith(".gz"):
            raise UsageError(f"input {path} changed since it was converted ({old_size} bytes "
                             f"then, {size} now){'' if fmt in _GROWABLE else f'; a {fmt} file cannot grow'}",
                             hint=f"put new data in new files, or {_REDO}")
        grown[path] = (old_size, size)
    new = [unit for unit in units if unit.path not in was]
    return new, [_new_rows(path, old_size, size, dialect) for path, (old_size, size) in grown.items()]


def _new_rows(path: str, old_size: int, size: int, dialect: TextDialect) -> WorkUnit:
    """The unit reading what `path` gained past `old_size`, its rows and lines numbered after
    the committed ones (counted here, as `transforms.tabular.range_cuts` counts a range)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(old_size - 1)
        if f.read(1) != b"\n":
            raise UsageError(f"input {path} grew, but its committed {old_size} bytes no longer end "
                             f"a line: it was edited, not appended to", hint=_REDO)
        f.seek(0)
        counted, _ = count_range(RangeReader(f, 0, old_size).read, 0, dialect)
    if counted.quoted_at_end:
        raise UsageError(f"input {path} grew inside a quoted field of its committed rows", hint=_REDO)
    header = 1 if dialect.kind == "csv" and dialect.header else 0
    return WorkUnit(path, 0, start=old_size, end=size,
                    extra={"size": size - old_size, "row_offset": counted.records - header,
                           "line_offset": counted.lines})


def numbered_after(units: Sequence[WorkUnit], more: Sequence[WorkUnit]) -> list[WorkUnit]:
    """`units` then `more`, renumbered after the last of `units` (batch keys stay unique)."""
    start = max((unit.index for unit in units), default=-1) + 1
    return [*units, *(dataclasses.replace(unit, index=start + i) for i, unit in enumerate(more))]
