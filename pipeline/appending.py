"""`convert --append` on the launcher: what a committed output lets an append do, and which
input it has not converted yet.

An append converts, with the committed spec and options, only the input the committed
manifest's `inputs` listing does not cover: files it does not list, and the rows a CSV/TSV
or JSON Lines file gained at its end since (read from the committed size on, numbered after
the committed rows). Refused, naming the file and what to do: a committed input that is
gone, or that changed other than by growing (a Parquet, compressed or image file changed
at all), a committed text file whose old bytes no longer end a record at the committed size,
different output options, a new label (unless `--extend-labels`: numbered after the
committed ones), a SequenceExample output (a new row may extend a committed
sequence), `--num-shards` (every generation adds shards) and an output committed without
the totals an append merges into (`transforms.resume.STATE_NAME`). The commit then lists the
old and new files as the output's next generation (`transforms.generations`).

Images: an image manifest's files are inputs as above (its rows read by the committed label
map and spec). A class-folder tree is covered image by image: a run with `--append` writes
the tree's listing, (relative path, size) of every file, as `LISTING_NAME`; an append
converts the files it lacks and refuses a listed one that is gone or changed size.

What it cannot see: an image rewritten at the same size; an edit inside a grown text file's
committed bytes that keeps a line end at the committed size (the bytes are not hashed: that
would read every input again).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.errors import UsageError
from transforms.format.manifest_format import Manifest
from transforms.images.labels import label_problem, sorted_labels
from transforms.records import WorkUnit
from transforms.resume import STATE_NAME
from transforms.tabular.byte_ranges import RangeReader, TextDialect, count_range

__all__ = ["LISTING_NAME", "check_appendable", "extended_labels", "image_items",
           "new_images", "numbered_after", "read_listing", "uncovered_units"]

#: The side file of an image tree converted with --append: [[relative path, size], ...].
LISTING_NAME = "image_listing.json"

_GROWABLE = ("csv", "tsv", "jsonl")
_REDO = "convert into a new --output, or again with --overwrite"


def check_appendable(committed: Manifest, output: str, options: Mapping[str, Any],
                     num_shards: int | None) -> None:
    """Refuses an append that `committed` (the output's manifest) cannot take."""
    if committed.side_file(STATE_NAME) is None:
        raise UsageError(f"{output} was committed without {STATE_NAME} (by an earlier version), "
                         f"so it cannot be appended to", hint=_REDO)
    if num_shards:
        raise UsageError("--append cannot keep --num-shards: every generation adds shards",
                         hint="use --max-shard-bytes or --max-shard-records")
    if (committed.metadata.get("spec") or {}).get("sequence"):
        raise UsageError(f"{output} holds SequenceExamples, which cannot be appended to: a new "
                         f"row may belong to a committed sequence", hint=_REDO)
    before = committed.metadata.get("options") or {}
    changed = [f"--{name.replace('_', '-')}" for name in sorted(set(before) | set(options))
               if name not in ("input", "output", "run_date", "spec")
               and (before.get(name) or None) != (options.get(name) or None)]
    if changed:
        raise UsageError(f"--append with other options than {output} was committed with "
                         f"({', '.join(changed)}): every generation is converted alike",
                         hint="give the committed options; `tfrecord-pipeline inspect` shows them")


def _refuse_gone(kind: str, gone: set[str]) -> None:
    """Refuses an append whose committed inputs (files, or a tree's images) are not all there."""
    if gone:
        first, more = sorted(gone)[0], f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
        raise UsageError(f"{kind} {first}{more} was converted into the committed output and is "
                         f"gone: an append only adds", hint=f"restore it, or {_REDO}")


def uncovered_units(units: Sequence[WorkUnit], committed_inputs: Sequence[Sequence[Any]],
                    listing: Sequence[Sequence[Any]], fmt: str,
                    dialect: TextDialect | None) -> tuple[list[WorkUnit], list[WorkUnit]]:
    """(units of input files the committed listing lacks, units of the new rows of grown
    text files) among the planned `units` (`plan_tabular`'s: one per file, or per Parquet
    row group); `listing`: the current (path, size, mtime) of every input."""
    was = {path: (size, mtime) for path, size, mtime in committed_inputs}
    now = {path: (size, mtime) for path, size, mtime in listing}
    _refuse_gone("input", set(was) - set(now))
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


def image_items(units: Iterable[WorkUnit], source: Any) -> Iterator[dict]:
    """The planned items of `units`: their own, or read by the plan's `source`."""
    for unit in units:
        yield from (unit.extra or {}).get("items") or source.items(unit)


def extended_labels(units: Sequence[WorkUnit], source: Any, labels: Sequence[str],
                    extend: bool) -> tuple[str, ...] | None:
    """The committed `labels` followed by the new ones the items of `units` use (sorted as
    the planner sorts a label map), None when they use none; refused unless `extend`."""
    if source is not None and hasattr(source, "survey"):  # a manifest read in the workers
        texts = {text for unit in units for text in source.survey(unit).label_texts}
    else:
        texts = {item["text"] for item in image_items(units, source)
                 if (item["reject"] or ("",))[0] == "unknown_label"}
    new = sorted_labels(text for text in texts - set(labels) if label_problem(text) is None)
    if new and not extend:
        raise UsageError(f"label {new[0]!r}{f' (and {len(new) - 1} more)' if len(new) > 1 else ''} "
                         f"is not in the committed label map, whose indices an append keeps",
                         hint="give --extend-labels to number new labels after the committed ones")
    return (*labels, *new) if new else None


def read_listing(output: str, committed: Manifest) -> dict[str, int | None]:
    """{relative path: size} of the images the committed tree conversion listed."""
    if committed.side_file(LISTING_NAME) is None:
        raise UsageError(f"{output} was converted without --append, so the image listing an "
                         f"append compares with ({LISTING_NAME}) was not written",
                         hint=f"convert the first generation with --append too: {_REDO}")
    with FileSystems.open(f"{output.rstrip('/')}/{LISTING_NAME}") as f:
        return {name: size for name, size in json.loads(f.read())}


def new_images(units: Sequence[WorkUnit], source: Any, committed: Mapping[str, int | None] | None,
               per_unit: int) -> tuple[list[WorkUnit], bytes]:
    """(units of `per_unit` items each of the files of a tree's `units` that `committed`
    lacks, the listing of every file as `LISTING_NAME`); refuses a committed file that is
    gone or changed size. `committed` None: the first generation (no units: its own)."""
    listing, new = [], []
    for item in image_items(units, source):
        listing.append([item["filename"], item["size"]])
        if committed is None:
            continue
        if item["filename"] not in committed:
            new.append(item)
        elif committed[item["filename"]] != item["size"]:
            raise UsageError(f"image {item['uri']} changed since it was converted "
                             f"({committed[item['filename']]} bytes then, {item['size']} now)",
                             hint=f"put new images in new files, or {_REDO}")
    _refuse_gone("image", set(committed or ()) - {name for name, _ in listing})
    roots = list(getattr(source, "roots", ()))
    chunks = [new[i:i + per_unit] for i in range(0, len(new), per_unit)]
    return ([WorkUnit(source.root, i, paths=tuple(item["uri"] for item in chunk),
                      extra={"items": chunk, "allowed_roots": roots}) for i, chunk in enumerate(chunks)],
            json.dumps(sorted(listing)).encode("utf-8"))
