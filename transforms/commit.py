"""Committing a run's temporary shards as one complete output: `finalize_output` and its DoFn.

Finalize runs once, on one key, as the graph's single terminal step (all that DaskRunner
computes), over every unit's `transforms.unit_result.UnitResult`. It reconciles the
converters' counts with the records in the written files (input = rows written + dead
letters, per split), with `num_shards` deals the records into that many shards
(`transforms.shard_writers.reshard`), renames the files (and `.tfindex` sidecars) to
`<split>-SSSSS-of-NNNNN.tfrecord[.gz|.zz]`, ordered by the first batch key each holds (so no
name depends on processes, bundles or workers), writes the extra files, stats.json (and
drift.json), `manifest.json` last as the commit marker, and deletes the temp folder. With
`max_error_rate` exceeded, or drift that `fail_on_drift` refuses, only the dead letters are
committed."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs, output_files
from transforms import manifest as manifest_lib
from transforms.format.manifest_format import (
    FEATURE_SPEC_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    Counts,
    FileEntry,
    Manifest,
    ShardEntry,
    SplitCounts,
    shard_name,
)
from transforms.format.tfrecord_index import INDEX_SUFFIX
from transforms.generations import (
    CARRIED,
    carried_result,
    committed_side_file,
    link_committed,
    rejected_paths,
    stash_side_files,
    superseded,
    totals_result,
)
from transforms.resume import STATE_NAME, dump_result
from transforms.shard_writers import DEAD_LETTER_DIR, SinkConfig, TempShard, reshard
from transforms.splits import DEAD_LETTER_SPLIT
from transforms.stats.document import STATS_NAME, declared_kinds, merge_units, stats_document
from transforms.stats.drift import DRIFT_NAME, compare, drift_failure
from transforms.stats.presence import add_presence, with_presence
from transforms.tfds_metadata import tfds_side_files
from transforms.unit_result import (
    DEAD_LETTER_KIND,
    TFRECORD_KIND,
    ShardFile,
    UnitResult,
    count_by_split,
)

__all__ = [
    "AccountingError",
    "DriftDetectedError",
    "ErrorRateExceededError",
    "NothingConvertedError",
    "Finalize",
    "finalize_output",
]


_LOG = logging.getLogger(__name__)


class AccountingError(RuntimeError):
    """The records in the written files do not reconcile with the converters' counts."""


class ErrorRateExceededError(RuntimeError):
    """More input records were dead-lettered than `max_error_rate` allows."""


class NothingConvertedError(RuntimeError):
    """The input had records but not one was converted (a wrong format, every row bad, ...)."""


class DriftDetectedError(RuntimeError):
    """The statistics drifted from the previous run's more than `fail_on_drift` allows."""


class Finalize(beam.DoFn):
    def __init__(self, config: SinkConfig):
        self._config = config

    # Annotated: Beam would otherwise infer the output type by reading the bytecode of
    # everything `finalize_output` calls (0.2 s of every run's start, measured).
    def process(self, keyed) -> Iterator[str]:
        _, items = keyed
        yield finalize_output(self._config, [item for item in items if item is not None])


def _delete_quietly(paths: Iterable[str]) -> None:
    paths = [path for path in paths if FileSystems.exists(path)]
    if paths:
        fs.delete(paths)


def _reconcile(results: Sequence[UnitResult]) -> dict[str, Any]:
    """Checks the converters' counts against the files; returns the manifest `counts`.

    Input is counted in rows: input == rows written + dead letters. A record holds one row,
    except a SequenceExample (`SplitResult.rows`); the manifest then also counts
    `written_rows` beside `written` (records). Dead letters of no split (`DEAD_LETTER_SPLIT`)
    are reconciled like a split's and counted in the totals, but listed under no split.
    """
    owners = [result.owner for result in results if result.owner]
    if len(owners) != len(set(owners)):
        twice = sorted(owner for owner in set(owners) if owners.count(owner) > 1)
        raise AccountingError(f"unit {twice[0]!r} reached the commit twice")
    per_split: dict[str, dict[str, int]] = defaultdict(
        lambda: {"input": 0, "written": 0, "dead_letter": 0}
    )
    rows_per_split: dict[str, int] = defaultdict(int)
    holds_sequences = False
    reasons: Counter = Counter()
    for result in results:
        reasons.update(dict(result.dead_letter_reasons))
        for part in result.splits:
            entry = per_split[part.split]
            entry["input"] += part.input
            entry["written"] += part.written
            entry["dead_letter"] += part.dead_letters
            rows_per_split[part.split] += part.rows_written
            holds_sequences |= part.rows is not None
    if holds_sequences:
        for split, entry in per_split.items():
            entry["written_rows"] = rows_per_split[split]
    in_files, dead_in_files = count_by_split(file for result in results for file in result.files)
    problems = []
    for split in sorted(set(per_split) | set(in_files) | set(dead_in_files)):
        entry = per_split[split]
        written_rows = entry.get("written_rows", entry["written"])
        if entry["input"] != written_rows + entry["dead_letter"]:
            problems.append(
                f"split {split!r}: {entry['input']} input records but {written_rows} "
                f"written + {entry['dead_letter']} dead-lettered"
            )
        checks = ((entry["written"], in_files, "records converted", "written"),
                  (entry["dead_letter"], dead_in_files, "dead letters produced", "dead-letter"))
        for made, found, noun, files in checks:
            if found.get(split, 0) != made:
                problems.append(f"split {split!r}: {made} {noun} but {found.get(split, 0)} found in the "
                                f"{files} files")
        if split == DEAD_LETTER_SPLIT and entry["written"]:
            problems.append(f"{entry['written']} records written under no split")
    if problems:
        raise AccountingError("output does not reconcile: " + "; ".join(problems))
    totals = {name: sum(entry[name] for entry in per_split.values())
              for name in ("input", "written", "dead_letter") + ("written_rows",) * holds_sequences}
    totals["dead_letter_reasons"] = dict(sorted(reasons.items()))
    return {**totals, "splits": {split: dict(per_split[split]) for split in sorted(per_split)
                                 if split != DEAD_LETTER_SPLIT}}


@dataclasses.dataclass(frozen=True)
class _Planned:
    """A file to commit: the temporary file and its final path, relative to the output."""

    file: ShardFile
    path: str


def _final_names(config: SinkConfig, files: Sequence[ShardFile],
                 dead_letters: str = "dead_letter") -> list[_Planned]:
    """Assigns final names: per split, ordered by the first batch key each file holds (a
    committed generation's files first, `CARRIED`); dead-letter files named `dead_letters`."""
    by_split: dict[tuple[str, str], list[ShardFile]] = defaultdict(list)
    for file in files:
        by_split[(file.kind, file.split)].append(file)
    planned = []
    for (kind, split), group in sorted(by_split.items()):
        group.sort(key=lambda file: (file.first_key, file.temp_path))
        for index, file in enumerate(group):
            if kind == TFRECORD_KIND:
                relative = shard_name(split, index, len(group), config.suffix)
            else:
                relative = shard_name(f"{DEAD_LETTER_DIR}/{dead_letters}", index, len(group), ".jsonl")
            planned.append(_Planned(file, relative))
    return planned


def _empty_shards(config: SinkConfig, files: Sequence[ShardFile]) -> list[ShardFile]:
    """Creates the empty temp shards the sharding policy asks for: for a declared split
    without records, one (`num_shards` of them with that option); none with `skip_if_empty`."""
    present = Counter(file.split for file in files if file.kind == TFRECORD_KIND)
    created = []
    for split in config.splits:
        if present[split] or config.sharding.skip_if_empty:
            continue
        for index in range(config.sharding.num_shards or 1):
            # A stable name: a retried finalize writes the same (empty) file again.
            path = fs.join_path(config.temp_dir, split, f"empty-{index:05d}{config.suffix}")
            created.append(TempShard(config, TFRECORD_KIND, split, f"{index:05d}", path=path).close())
    return created


def _clear_earlier_output(config: SinkConfig, writes: set[str], owned: set[str],
                          moves: Sequence[tuple[str, str, int]], keep: bool, also: Sequence[str]) -> None:
    """Before a commit writes `writes`: journals them, every file it may create or replace
    (so that the next run can remove a half-done commit, see `output_files`) and which
    temporary file each of its renames moves (a resumed run moves them back). Then deletes
    what an earlier output left (`owned`) that it will not write, and the paths `also`. The
    old manifest goes first, so no reader can trust it while files change under it. `keep`:
    the committed output stays (an append: nothing it lists is rewritten), only `also` goes."""
    journal = {"run_id": config.run_id, "writes": sorted(writes), "replaces": sorted(owned),
               "moves": [[temp_path, path] for temp_path, path, _ in moves]}
    fs.write_bytes_atomically(fs.join_path(config.temp_dir, output_files.JOURNAL_NAME),
                              json.dumps(journal, sort_keys=True).encode("utf-8"))
    if keep:
        _delete_quietly(also)
        return
    _delete_quietly([fs.join_path(config.output_dir, MANIFEST_NAME)])
    _delete_quietly([fs.join_path(config.output_dir, name) for name in sorted(owned - writes)]
                    + list(also))


def _extra_files(config: SinkConfig, results: Sequence[UnitResult],
                 written: int) -> list[tuple[str, bytes]]:
    """The configured extra files, `feature_spec.json` with each feature's presence added up
    ({feature: [records, min, max]}) unless some records were written without it being
    counted (`transforms.stats.presence`)."""
    presence: dict[str, list[int]] = {}
    for part in (part for result in results for part in result.splits):
        if part.presence is None:
            return list(config.extra_files)
        add_presence(presence, part.presence)
    return [(name, with_presence(data, presence, written) if name == FEATURE_SPEC_NAME else data)
            for name, data in config.extra_files]


def _statistics(config: SinkConfig, results: Sequence[UnitResult], totals: Mapping[str, Any],
                existing: Manifest | None) -> tuple[list[tuple[str, bytes]], dict[str, Any] | None]:
    """stats.json (every unit's statistics merged, see `transforms.stats.document`) and,
    with `compare_to`, drift.json (see `transforms.stats.drift`): the files and the drift; an
    append's with the committed ones, wherever an interrupted commit kept them (`committed_side_file`)."""
    merged, examples = merge_units(results)
    feature_spec = dict(config.extra_files).get(FEATURE_SPEC_NAME)
    document = stats_document(merged, totals, config.splits, declared_kinds(feature_spec), examples)
    files = [(STATS_NAME, _json_bytes(document))]
    drift = None
    if config.compare_to:
        same_folder = existing is not None and config.compare_to.rstrip("/") == config.output_dir.rstrip("/")
        previous_path = (committed_side_file(config, existing, STATS_NAME) if same_folder
                         else fs.join_path(config.compare_to, STATS_NAME))
        try:
            with FileSystems.open(previous_path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                previous = json.loads(handle.read())
        except Exception:  # noqa: BLE001 - any filesystem's error: no comparison, said so
            _LOG.warning("no drift comparison: cannot read %s", previous_path, exc_info=True)
            previous = None
        if isinstance(previous, dict):
            drift = compare(previous, document, config.compare_to)
            files.append((DRIFT_NAME, _json_bytes(drift)))
    return files, drift


def _json_bytes(document: Any) -> bytes:
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False).encode("utf-8") + b"\n"


def _side_files(config: SinkConfig, extra_files: Sequence[tuple[str, bytes]],
                shards: Sequence[ShardEntry], owned: set[str]) -> list[tuple[str, bytes]]:
    """The extra files, plus TFDS's `dataset_info.json` and `features.json` for an output
    TFDS can read (see `tfds_metadata`); those are left out rather than replace a file of
    the same name that no record of this tool names (a TFDS dataset's own, say)."""
    tfds_files = tfds_side_files(config.output_dir, config.compression.value, shards, extra_files)
    taken = {name for name, _ in extra_files} | {
        name for name in tfds_files if name not in owned
        and FileSystems.exists(fs.join_path(config.output_dir, name))}
    if taken & set(tfds_files):
        _LOG.warning("no TFDS metadata written to %s: %s taken by an extra file or a file "
                     "this tool did not write", config.output_dir,
                     ", ".join(sorted(taken & set(tfds_files))))
        tfds_files = {}
    return list(extra_files) + sorted(tfds_files.items())


def _commit_file(config: SinkConfig, temp_path: str, path: str, size: int) -> None:
    """Moves one temp file to its final name `path`; a no-op if a retry already did."""
    final = fs.join_path(config.output_dir, path)
    if FileSystems.exists(temp_path):
        if FileSystems.exists(final):
            fs.delete([final])
        fs.ensure_parent(final)
        FileSystems.rename([temp_path], [final])
        return
    if not FileSystems.exists(final):
        raise AccountingError(f"temporary file {temp_path} vanished before it was committed")
    found = fs.match([fs.literal(final)])[0].metadata_list[0].size_in_bytes
    if found != size:
        raise AccountingError(
            f"{final} has {found} bytes, expected {size}: it is not the file this run wrote")


def _moves(planned: Sequence[_Planned]) -> list[tuple[str, str, int]]:
    """(temp path, final path, bytes) of every file to commit: the files and their indexes."""
    moves = []
    for entry in planned:
        moves.append((entry.file.temp_path, entry.path, entry.file.bytes))
        if entry.file.index is not None:
            index = entry.file.index
            moves.append((index.temp_path, entry.path + INDEX_SUFFIX, index.bytes))
    return moves


def _content(result: UnitResult) -> tuple:
    """What a unit wrote, its temporary file names aside: two attempts of one unit that both
    reached the commit (a runner delivering a retried unit's result twice, as Beam's
    DaskRunner on threads does) wrote the same, as conversion is deterministic."""
    return (tuple((file.kind, file.split, file.first_key, file.records, file.sha256)
                  for file in result.files),
            tuple((part.split, part.input, part.written, part.rows, part.dead_letters)
                  for part in result.splits), result.dead_letter_reasons)


def _once_each(results: Sequence[UnitResult]) -> list[UnitResult]:
    """`results` (in owner order) with each repeated attempt of a unit dropped; its files
    go with the temporary folder. Attempts that wrote different things are refused."""
    kept = []
    for result in results:
        if kept and result.owner and result.owner == kept[-1].owner:
            if _content(result) != _content(kept[-1]):
                raise AccountingError(f"unit {result.owner!r} reached the commit twice, "
                                      f"with different contents")
            _LOG.info("unit %r reached the commit twice: one attempt kept", result.owner)
            continue
        kept.append(result)
    return kept


def _describe(entry: _Planned) -> ShardEntry:
    """A file's manifest entry."""
    file, index = entry.file, entry.file.index
    return ShardEntry(entry.path, file.records, file.bytes, file.sha256,
                      file.split if file.kind == TFRECORD_KIND else None,
                      index and FileEntry(entry.path + INDEX_SUFFIX, index.bytes, index.sha256))


def finalize_output(config: SinkConfig, results: Iterable[UnitResult]) -> str:
    """Commits a run; returns the manifest path. Idempotent: called again with the same
    arguments after a failure at any point, or after success, it leaves exactly one complete
    output (a retry neither loses nor duplicates a shard). With `config.append` and a committed
    output in the folder, commits its next generation (`transforms.generations`)."""
    manifest_path = fs.join_path(config.output_dir, MANIFEST_NAME)
    # A damaged manifest (the CLI replaces one only when it vouched for no other file)
    # vouches for itself alone.
    existing = output_files.committed_manifest(config.output_dir)
    if existing is not None and existing.metadata.get("run_id") == config.run_id:
        return manifest_path  # this run was committed by an earlier attempt

    # In owner order: what is merged below does not depend on which process wrote a unit.
    results = _once_each(sorted(results, key=lambda result: result.owner))
    own_totals = _reconcile(results)  # this run's input alone: what the error budget weighs
    carried = carried_result(config, existing) if config.append and existing else None
    everything = [carried, *results] if carried else results
    totals = _reconcile(everything) if carried else own_totals
    files = [file for result in everything for file in result.files]
    shards = [file for file in files if file.kind == TFRECORD_KIND]
    if config.sharding.num_shards and shards:
        shards = reshard(config, shards)
    shards += _empty_shards(config, shards)
    dead = [file for file in files if file.kind == DEAD_LETTER_KIND]
    planned = _final_names(config, shards + dead)

    # Only files a record of this tool names are ever replaced or deleted (the CLI refuses
    # to start over foreign ones); the journal names them before anything changes.
    owned = output_files.owned_paths(config.output_dir, existing)
    stats_files, drift = _statistics(config, everything, totals, existing)
    failure = _failure(config, own_totals, drift)
    failed_run = fs.join_path(config.output_dir, output_files.FAILED_RUN_NAME)
    if failure is None:
        shard_entries = [_describe(entry) for entry in planned if entry.file.kind == TFRECORD_KIND]
        side_files = _side_files(config, _extra_files(config, everything, totals["written"]) + stats_files
                                 + [(STATE_NAME, dump_result(totals_result(everything)))],
                                 shard_entries, owned)
    elif carried:
        # What an earlier output of this folder left goes (--overwrite asked for it), but
        # not on an append: the committed generation stands, and this run's dead letters
        # go beside it, under names of their own.
        planned = _final_names(config, [file for file in dead if file.first_key != CARRIED], "rejected")
    else:
        planned = [entry for entry in planned if entry.file.kind == DEAD_LETTER_KIND]
    moves = _moves([entry for entry in planned if entry.file.first_key != CARRIED])
    links = _moves([entry for entry in planned if entry.file.first_key == CARRIED])
    listed = {path for _, path, _ in moves + links}
    writes = listed | {output_files.FAILED_RUN_NAME}
    if failure is None:
        writes |= {name for name, _ in side_files} | {MANIFEST_NAME}
    # A rejected append's dead letters go too, those this run does not write again; with
    # `keep`, every listed file stays.
    rejected = [path for path in rejected_paths(config) if failure is None or path not in
                {fs.join_path(config.output_dir, name) for name in writes}] if carried else []
    _clear_earlier_output(config, writes, owned, moves, keep=bool(carried),
                          also=rejected if failure else [failed_run, *rejected])

    for temp_path, path, size in moves:
        _commit_file(config, temp_path, path, size)
    if failure is not None:  # a failed run: its dead letters for diagnosis, and why (FAILED_RUN_NAME)
        fs.sync_files([fs.join_path(config.output_dir, entry.path) for entry in planned])
        outcome, message, error = failure
        record = {"run_id": config.run_id, "outcome": outcome, "message": message,
                  "counts": dict(own_totals), "files": [entry.path for entry in planned],
                  "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        if error is DriftDetectedError:
            record["drift"] = dict(drift)
        fs.write_bytes_atomically(failed_run, _json_bytes(record))
        _delete_temp_dir(config)
        raise error(message)
    for committed_path, path, size in links:
        link_committed(config, committed_path, path, size)
    if carried:
        stash_side_files(config, existing)  # before the side files below write over it
    for relative, data in side_files:
        fs.write_bytes_atomically(fs.join_path(config.output_dir, relative), data)
        listed.add(relative)

    manifest = Manifest(
        shards=tuple(shard_entries),
        counts=Counts(**{**totals, "splits": {split: SplitCounts(**entry)
                                              for split, entry in totals["splits"].items()}}),
        compression=config.compression.value,
        dead_letter_files=tuple(_describe(entry) for entry in planned if entry.file.kind == DEAD_LETTER_KIND),
        files=tuple(FileEntry(name, len(data), hashlib.sha256(data).hexdigest())
                    for name, data in side_files),
        generation=existing.generation + 1 if carried else 0,
        superseded=superseded(existing, listed) if carried else (),
        metadata={
            "format_version": FORMAT_VERSION,
            "tool_version": manifest_lib.tool_version(),
            "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "run_id": config.run_id,
            "splits": sorted({entry.split for entry in shard_entries} | set(config.splits)),
            "sharding": config.sharding.to_manifest(),
            "options": {},
            **dict(config.manifest_metadata),
        },
    )
    data = manifest.to_json()
    Manifest.from_json(data, manifest_path)  # what it writes is sound
    # Durable before it is visible: every file the manifest names, and the folder entries
    # of their new names, reach the disk before the manifest is renamed into place.
    fs.sync_files([fs.join_path(config.output_dir, path) for path in sorted(listed)])
    fs.write_bytes_atomically(manifest_path, data)
    if carried:  # what neither this generation nor its predecessor's readers need goes
        _delete_quietly([fs.join_path(config.output_dir, path) for path in sorted(
            {entry.path for entry in existing.superseded + existing.files} - listed)])
    _delete_temp_dir(config)
    _LOG.info("committed %d shards (%d records, %d dead letters) to %s",
              len(shard_entries), totals["written"], totals["dead_letter"], config.output_dir)
    return manifest_path


def _reasons_text(totals: Mapping[str, Any]) -> str:
    """" (dead letters: 3 invalid_int, 1 ragged_row)", most frequent first; "" when none."""
    reasons = totals.get("dead_letter_reasons") or {}
    if not reasons:
        return ""
    ordered = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{count} {reason}" for reason, count in ordered[:5])
    more = f", {len(ordered) - 5} more reasons" if len(ordered) > 5 else ""
    return f" (dead letters: {shown}{more})"


def _failure(config: SinkConfig, totals: Mapping[str, Any], drift: Mapping[str, Any] | None
             ) -> tuple[str, str, type[Exception]] | None:
    """Why the run must commit only its dead letters (its `failed_run.json` outcome, the
    message, the exception to raise), or None when it commits."""
    dead_letter_dir = fs.join_path(config.output_dir, DEAD_LETTER_DIR)
    reasons = _reasons_text(totals)
    if totals["input"] and not totals["written"]:
        return (output_files.NOTHING_CONVERTED,
                f"none of the {totals['input']} input records was converted{reasons}; no "
                f"shard was committed. The dead letters (one per record, with the reason) "
                f"are in {dead_letter_dir}", NothingConvertedError)
    error_rate = totals["dead_letter"] / totals["input"] if totals["input"] else 0.0
    if config.max_error_rate is not None and error_rate > config.max_error_rate:
        return (output_files.ERROR_RATE_EXCEEDED,
                f"{totals['dead_letter']} of {totals['input']} input records "
                f"({error_rate:.2%}) were dead-lettered{reasons}, more than --max-error-rate "
                f"{config.max_error_rate:.2%}; no shard was committed. The dead letters are "
                f"in {dead_letter_dir}", ErrorRateExceededError)
    drifted = drift_failure(drift, config.fail_on_drift) if drift is not None else None
    if drifted is not None:
        return (output_files.DRIFT_DETECTED,
                f"{drifted}; no shard was committed (--fail-on-drift {config.fail_on_drift}). "
                f"The comparison is in {config.output_dir}/{output_files.FAILED_RUN_NAME}",
                DriftDetectedError)
    return None


def _delete_temp_dir(config: SinkConfig) -> None:
    """Removes the run's temp folder (on object stores: every object under its prefix)."""
    temp_dir = config.temp_dir
    try:
        fs.delete_tree(temp_dir)
    except Exception:  # noqa: BLE001 - leftover temp files are harmless; never fail a commit
        _LOG.warning("could not delete temporary folder %s", temp_dir, exc_info=True)
