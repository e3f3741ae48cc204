"""Appending to a committed output: its generations, for `transforms.commit`.

An append commits the output's next generation: the committed shards and dead-letter files
stay where they are and are listed again, under the names their splits' grown shard counts
give them (`<split>-SSSSS-of-NNNNN`: `link_committed`); an old name stays, listed in the new
manifest's `superseded`, so a reader holding the previous manifest reads on, until the
generation after next deletes it.

The committed totals (counts, presence, statistics partials, dead-letter examples) come back
from the output's `transforms.resume.STATE_NAME`, which every commit writes (`totals_result`),
as one result sorted before every unit (`CARRIED`): the commit merges them as it merges
units, so an appended output's statistics are those of one conversion of all its inputs
while they are exact (see `transforms.stats.document`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs, output_files
from transforms.format.manifest_format import FileEntry, Manifest, ShardEntry, is_plain_relative
from transforms.resume import STATE_NAME, load_result
from transforms.shard_writers import DEAD_LETTER_DIR, SinkConfig
from transforms.stats.dead_letters import first_examples
from transforms.stats.document import STATS_NAME, merge_units
from transforms.stats.presence import add_presence, as_presence
from transforms.unit_result import (
    DEAD_LETTER_KIND,
    TFRECORD_KIND,
    IndexFile,
    ShardFile,
    SplitResult,
    UnitResult,
)

__all__ = ["CARRIED", "carried_result", "committed_side_file", "link_committed", "rejected_paths",
           "stash_side_files", "superseded", "totals_result"]

#: The `first_key` of a committed generation's files in an append: before every batch key,
#: so they keep their order at the head of each split.
CARRIED = ""


def carried_result(config: SinkConfig, existing: Manifest) -> UnitResult:
    """The committed generation of `config.output_dir` as one result: its totals, and its
    files with their final paths as their temporary ones."""
    state_path = committed_side_file(config, existing, STATE_NAME)
    try:
        with FileSystems.open(state_path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            data = handle.read()
        # Totals the manifest does not list are an interrupted append's, its units in them.
        listed = hashlib.sha256(data).hexdigest() == _listed_sha256(existing, STATE_NAME)
        state = load_result(data) if listed else None
    except Exception:  # noqa: BLE001 - any filesystem's error: said below
        state = None
    if state is None:
        raise ValueError(f"{state_path} cannot be read, or is not the one the manifest lists: the "
                         f"committed output cannot be appended to")

    def committed(entry: ShardEntry, kind: str, dead_letters=()) -> ShardFile:
        index = entry.index and IndexFile(fs.join_path(config.output_dir, entry.index.path),
                                          entry.index.bytes, entry.index.sha256)
        return ShardFile(fs.join_path(config.output_dir, entry.path), kind, entry.split or DEAD_LETTER_DIR,
                         CARRIED, entry.records, entry.bytes, entry.sha256, index, dead_letters)

    # Dead letters are reconciled per split over all files: the state holds them per split.
    dead_by_split = tuple((part.split, part.dead_letters) for part in state.splits if part.dead_letters)
    files = [committed(entry, TFRECORD_KIND) for entry in existing.shards]
    files += [committed(entry, DEAD_LETTER_KIND, dead_by_split if position == 0 else ())
              for position, entry in enumerate(existing.dead_letter_files)]
    return dataclasses.replace(state, owner=CARRIED, files=tuple(files))


def _listed_sha256(existing: Manifest, name: str) -> str:
    entry = existing.side_file(name)
    return entry.sha256 if entry is not None else ""


def _stash_path(config: SinkConfig, existing: Manifest, name: str) -> str:
    # Named as a writer's temporary file (`output_files` leaves other names in a run's folder).
    return fs.join_path(config.temp_dir, "committed", _listed_sha256(existing, name)[:32].ljust(32, "0"))


def committed_side_file(config: SinkConfig, existing: Manifest, name: str) -> str:
    """The committed side file `name` (`STATE_NAME`, `STATS_NAME`): its copy `stash_side_files`
    kept, once an interrupted commit of this run may have written the next over it."""
    stash = _stash_path(config, existing, name)
    return stash if FileSystems.exists(stash) else fs.join_path(config.output_dir, name)


def stash_side_files(config: SinkConfig, existing: Manifest) -> None:
    """Keeps the committed `STATE_NAME` and `STATS_NAME` in the run's temporary folder before
    the commit writes the next over them: a commit killed before its manifest resumes from the
    committed totals, and compares its statistics with the committed ones (drift.json)."""
    for name in (STATE_NAME, STATS_NAME):
        stash = _stash_path(config, existing, name)
        if existing.side_file(name) is not None and not FileSystems.exists(stash):
            with FileSystems.open(fs.join_path(config.output_dir, name),
                                  compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                fs.write_bytes_atomically(stash, handle.read())


def totals_result(results: Sequence[UnitResult]) -> UnitResult:
    """Every result merged into one, without files (what an append carries: `carried_result`)."""
    merged, _ = merge_units(results)
    parts: dict[str, dict[str, Any]] = {}
    for result in results:
        for part in result.splits:
            entry = parts.setdefault(part.split, {"input": 0, "written": 0, "rows": None,
                                                  "dead_letters": 0, "presence": {}})
            entry["input"] += part.input
            entry["written"] += part.written
            entry["dead_letters"] += part.dead_letters
            if part.rows is not None:
                entry["rows"] = (entry["rows"] or 0) + part.rows
            if part.presence is None or entry["presence"] is None:
                entry["presence"] = None
            else:
                add_presence(entry["presence"], part.presence)
    splits = []
    for split, entry in sorted(parts.items()):
        stats = merged.get(split)
        presence = entry.pop("presence")
        if presence is not None:
            presence = as_presence(dict(sorted(presence.items())))
        splits.append(SplitResult(split, **entry, presence=presence,
                                  stats=stats.partial() if stats is not None and stats.known else None))
    reasons: Counter = Counter()
    for result in results:
        reasons.update(dict(result.dead_letter_reasons))
    return UnitResult(owner=CARRIED, splits=tuple(splits),
                      dead_letter_reasons=tuple(sorted(reasons.items())),
                      examples=first_examples(result.examples for result in results))


def rejected_paths(config: SinkConfig) -> list[str]:
    """The dead-letter files a rejected append left beside the committed output (its
    `failed_run.json` names them)."""
    failed = output_files.read_failed_run(config.output_dir) or {}
    return [fs.join_path(config.output_dir, name) for name in failed.get("files") or ()
            if is_plain_relative(name) and name.startswith(f"{DEAD_LETTER_DIR}/rejected")]


def superseded(existing: Manifest, listed: set[str]) -> tuple[FileEntry, ...]:
    """The files of the generation `existing` that its next, listing `listed`, no longer
    lists, kept for readers of `existing` until the generation after next is committed."""
    not_records = {*existing.files, *existing.superseded}  # the rest: shards, dead letters, indexes
    return tuple(entry for entry in existing.listed_files()
                 if entry not in not_records and entry.path not in listed)


def link_committed(config: SinkConfig, committed_path: str, path: str, size: int) -> None:
    """Gives a committed file its name `path` in the next generation as well: a hard link, or
    a copy where the filesystem has none. A no-op where a retry did it already."""
    final = fs.join_path(config.output_dir, path)
    if final == committed_path:
        return
    if FileSystems.exists(final):
        found = fs.match([fs.literal(final)])[0].metadata_list[0].size_in_bytes
        if found == size:
            return
        fs.delete([final])
    fs.ensure_parent(final)
    if "://" in final:
        FileSystems.copy([committed_path], [final])
        return
    try:
        os.link(committed_path, final)
    except OSError:  # no hard links here (some network filesystems): a copy
        shutil.copyfile(committed_path, final)
