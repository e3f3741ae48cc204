"""The sharded TFRecord sink: `WriteToShardedTFRecord`.

It consumes `RecordBatch` elements (serialized Examples plus dead letters, see
`transforms.records`) and commits a complete output folder:

    DIR/<split>-SSSSS-of-NNNNN.tfrecord[.gz|.zz]
    DIR/dead_letter/dead_letter-SSSSS-of-NNNNN.jsonl
    DIR/<extra files: spec.yaml, feature_spec.json, labels.txt ...>
    DIR/manifest.json                      <- written last: the commit marker

How it stays correct on every runner:

* Records are written to uniquely named temporary files under `DIR/.tmp-<run id>/`. Each
  temporary file gets a JSON sidecar (records, bytes, sha256, ...) when it is closed. A
  writer emits the temporary path from `process()` when it opens the file; it never emits
  from `finish_bundle`, whose outputs Beam 2.77's DaskRunner drops. Batches arrive framed
  (`FramedRecords`) from our converters, or as payload lists which are framed here; the
  framed bytes are compressed, hashed and written on a background thread per open file
  (`_BackgroundIO`), and closing a file waits for them, so a sidecar only ever describes
  bytes that reached storage.
* A failed and retried bundle leaves orphaned temporary files, but its outputs are
  discarded by the runner, so finalize never sees them; they vanish with the temp folder.
* Finalize runs once, on one key, downstream of everything (it is the graph's single
  terminal step, which is all DaskRunner computes). It reconciles the converters' counts
  with the records physically in the temporary files, renames them to their final names,
  writes the extra files, writes the manifest, and deletes the temp folder. Every step is
  idempotent, so a retried finalize neither loses nor duplicates a shard.

Sharding:

* Default: roll to a new shard when the next record would push the shard past
  `max_shard_bytes` (framed, uncompressed bytes) or `max_shard_records`. No shuffle: every
  bundle writes its own shards, so memory does not grow with the data. A record larger
  than the cap is written alone in its own shard, so no shard exceeds the cap by more than
  one record.
* `num_shards=N`: exactly N shards per split. Records are dealt round-robin (from a start
  derived from the batch key) into N groups and shuffled by shard, so this mode needs a
  GroupByKey of the data; prefer the byte cap for large data.

`skip_if_empty=False` (default) writes one empty shard for every declared split that
received no records, so consumers globbing a split always find a file; True writes none.
Dead letters are written only when there are some.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import re
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apache_beam as beam
import crc32c
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import manifest as manifest_lib
from transforms.format.compression import Compression, parse_compression, shard_suffix
from transforms.format.tfrecord_format import FramedRecords, TFRecordWriter, frame_records
from transforms.records import RecordBatch
from transforms.worker import prepare_worker

__all__ = [
    "DEAD_LETTER_DIR",
    "DEFAULT_MAX_SHARD_BYTES",
    "AccountingError",
    "ErrorRateExceededError",
    "SinkConfig",
    "WriteToShardedTFRecord",
    "finalize_output",
]

_LOG = logging.getLogger(__name__)

#: TensorFlow's performance guide recommends 100-200 MB per TFRecord file.
DEFAULT_MAX_SHARD_BYTES = 200 * 1024 * 1024
DEAD_LETTER_DIR = "dead_letter"
_DEAD_LETTER_KIND = "dead_letter"
_TFRECORD_KIND = "tfrecord"
_FILE, _COUNT, _TRIGGER = "file", "count", "trigger"
_SHARD_NAME = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})(?P<suffix>\..+)$")
_COUNTERS = "tfrecord_pipeline"


class AccountingError(RuntimeError):
    """The records in the written files do not reconcile with the converters' counts."""


class ErrorRateExceededError(RuntimeError):
    """More input records were dead-lettered than `max_error_rate` allows."""


@dataclasses.dataclass(frozen=True)
class SinkConfig:
    """Configuration of `WriteToShardedTFRecord`; see its docstring."""

    output_dir: str
    compression: Compression = Compression.NONE
    compression_level: int | None = None
    num_shards: int | None = None
    max_shard_bytes: int | None = DEFAULT_MAX_SHARD_BYTES
    max_shard_records: int | None = None
    splits: tuple[str, ...] = ()
    skip_if_empty: bool = False
    max_error_rate: float | None = None
    extra_files: tuple[tuple[str, bytes], ...] = ()
    manifest_metadata: tuple[tuple[str, Any], ...] = ()
    run_id: str = ""
    report_progress: bool = False

    def __post_init__(self):
        if self.num_shards is not None and self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}")
        if self.max_shard_bytes is not None and self.max_shard_bytes < 1:
            raise ValueError(f"max_shard_bytes must be >= 1, got {self.max_shard_bytes}")
        if self.max_shard_records is not None and self.max_shard_records < 1:
            raise ValueError(f"max_shard_records must be >= 1, got {self.max_shard_records}")
        if self.max_error_rate is not None and not 0 <= self.max_error_rate <= 1:
            raise ValueError(f"max_error_rate must be within [0, 1], got {self.max_error_rate}")
        for relative, _ in self.extra_files:
            if relative.startswith(("/", ".")) or ".." in relative.split("/"):
                raise ValueError(f"extra file path must be relative and plain: {relative!r}")

    @property
    def temp_dir(self) -> str:
        return manifest_lib.join_path(self.output_dir, f".tmp-{self.run_id}")

    @property
    def suffix(self) -> str:
        return shard_suffix(self.compression)


class WriteToShardedTFRecord(beam.PTransform):
    """Writes `RecordBatch`es as sharded TFRecord files, dead letters and a manifest.

    Args:
      output_dir: the output root, on any Beam filesystem.
      compression: "none" (default), "gzip" or "zlib"; anything else is refused.
      compression_level: codec level (see `transforms.format.tfrecord_format`).
      num_shards: exactly this many shards per split (needs a shuffle of the data).
      max_shard_bytes: roll shards at this many framed, uncompressed bytes (default
        200 MiB); ignored when `num_shards` is set.
      max_shard_records: also roll shards at this many records.
      splits: the declared split names; used to write empty shards (see module docs).
      skip_if_empty: write no shard for a declared split without records.
      max_error_rate: fail the job, after committing the dead letters, when more than
        this fraction of input records was dead-lettered.
      extra_files: {relative path: bytes} written next to the shards before the manifest.
      manifest_metadata: extra top-level manifest keys (e.g. "options", "fingerprint").
      run_id: names the temp folder; a fresh one by default.
      report_progress: writers leave a small heartbeat file under the temp folder every
        few seconds (records so far), which the CLI reads to show progress.

    Returns a PCollection with one element: the path of the committed manifest.
    """

    def __init__(
        self,
        output_dir: str,
        *,
        compression: str | Compression = Compression.NONE,
        compression_level: int | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = DEFAULT_MAX_SHARD_BYTES,
        max_shard_records: int | None = None,
        splits: Sequence[str] = (),
        skip_if_empty: bool = False,
        max_error_rate: float | None = None,
        extra_files: Mapping[str, bytes] | None = None,
        manifest_metadata: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        report_progress: bool = False,
    ):
        super().__init__()
        self._config = SinkConfig(
            output_dir=output_dir.rstrip("/") or "/",
            compression=parse_compression(compression),
            compression_level=compression_level,
            num_shards=num_shards,
            max_shard_bytes=None if num_shards else max_shard_bytes,
            max_shard_records=None if num_shards else max_shard_records,
            splits=tuple(splits),
            skip_if_empty=skip_if_empty,
            max_error_rate=max_error_rate,
            extra_files=tuple(sorted((extra_files or {}).items())),
            manifest_metadata=tuple(sorted((manifest_metadata or {}).items())),
            run_id=run_id or uuid.uuid4().hex[:16],
            report_progress=report_progress,
        )

    @property
    def config(self) -> SinkConfig:
        return self._config

    def expand(self, batches):
        config = self._config
        if config.num_shards:
            temp_files = (
                batches
                | "DealRecordsToShards" >> beam.FlatMap(_deal_to_shards, config.num_shards)
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteFixedShards" >> beam.ParDo(_WriteGroupedShard(config))
            )
            results = [temp_files, batches | "CountBatches" >> beam.Map(_batch_counts)]
        else:
            # The writer reports each batch's counts itself: with a single consumer the
            # converter's batches stay in the fused stage and are never serialized.
            results = [batches | "WriteRollingShards" >> beam.ParDo(_WriteRollingShards(config))]
        # Guarantees finalize runs (and writes a manifest) even when there is no input.
        trigger = batches.pipeline | "FinalizeTrigger" >> beam.Create([(_TRIGGER, None)])
        return (
            (*results, trigger)
            | "CollectWriteResults" >> beam.Flatten()
            | "KeyForFinalize" >> beam.Map(lambda item: (None, item))
            | "GroupForFinalize" >> beam.GroupByKey()
            | "Finalize" >> beam.ParDo(_Finalize(config))
        )


# ---------------------------------------------------------------------------------------
# Writing temporary shards.


class _HashingWriter:
    """A write-only file wrapper that counts and hashes the bytes that reach storage."""

    def __init__(self, raw):
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def write(self, data) -> int:
        self._raw.write(data)
        self.sha256.update(data)
        self.bytes += len(data)
        return len(data)

    def flush(self) -> None:
        flush = getattr(self._raw, "flush", None)
        if flush:
            flush()


class _BackgroundIO:
    """Runs a shard's compress/hash/write calls in order on one background thread.

    Those calls release the GIL, so the converter keeps the CPU while the previous batch
    is compressed, hashed and written. At most `MAX_PENDING` writes wait, so memory stays
    bounded by the batch size; a failed write is raised by the next `submit` or `drain`.
    """

    MAX_PENDING = 2

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-io")
        self._pending: deque = deque()

    def submit(self, fn, *args) -> None:
        while len(self._pending) >= self.MAX_PENDING:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def drain(self) -> None:
        """Waits for every submitted write; raises the first failure."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pending.clear()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class _TempShard:
    """One temporary output file plus the bookkeeping that goes into its sidecar.

    TFRecord payloads are compressed, hashed and written on a background thread (see
    `_BackgroundIO`); `close()` waits for them before the file is closed.
    """

    def __init__(
        self, config: SinkConfig, kind: str, split: str, first_key: str, path: str | None = None
    ):
        self.kind = kind
        self.split = split
        self.first_key = first_key
        if path is None:
            name = uuid.uuid4().hex  # unique per attempt: a retried bundle never collides
            if kind == _TFRECORD_KIND:
                path = manifest_lib.join_path(config.temp_dir, split, name + config.suffix)
            else:
                path = manifest_lib.join_path(config.temp_dir, DEAD_LETTER_DIR, name + ".jsonl")
        self.path = path
        self._raw = FileSystems.create(self.path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._hashing = _HashingWriter(self._raw)
        self._writer = (
            TFRecordWriter(self._hashing, config.compression, config.compression_level)
            if kind == _TFRECORD_KIND
            else None
        )
        self.records = 0
        self.logical_bytes = 0
        self.dead_letters_by_split: dict[str, int] = defaultdict(int)
        self._io = _BackgroundIO() if self._writer is not None else None

    def write(self, payloads: Sequence[bytes], logical_bytes: int, split: str) -> None:
        if self._writer is not None:
            framed = payloads.data if isinstance(payloads, FramedRecords) else frame_records(payloads)
            self._io.submit(self._writer.write_framed, framed, len(payloads))
        else:
            self._hashing.write(b"".join(doc + b"\n" for doc in payloads))
            self.dead_letters_by_split[split] += len(payloads)
        self.records += len(payloads)
        self.logical_bytes += logical_bytes

    def close(self) -> dict[str, Any]:
        """Closes the file, writes and returns its sidecar metadata."""
        if self._writer is not None:
            try:
                self._io.drain()
            finally:
                self._io.shutdown()
            self._writer.close()
        self._raw.close()
        sidecar = {
            "temp_path": self.path,
            "kind": self.kind,
            "split": self.split,
            "first_key": self.first_key,
            "records": self.records,
            "bytes": self._hashing.bytes,
            "logical_bytes": self.logical_bytes,
            "sha256": self._hashing.sha256.hexdigest(),
            "dead_letters_by_split": dict(self.dead_letters_by_split),
        }
        with FileSystems.create(self.path + ".json") as handle:
            handle.write(json.dumps(sidecar, sort_keys=True).encode("utf-8"))
        return sidecar


def _cumulative_sizes(kind: str, payloads: Sequence[bytes]) -> np.ndarray:
    """Running total of the bytes items occupy before compression, with a leading 0.

    An item is a framed TFRecord (payload + 16 bytes) or a JSON line (+ newline); the
    bytes of items [a, b) are `totals[b] - totals[a]`.
    """
    totals = np.zeros(len(payloads) + 1, dtype=np.int64)
    if isinstance(payloads, FramedRecords):
        totals[1:] = payloads.ends
        return totals
    overhead = 16 if kind == _TFRECORD_KIND else 1
    np.cumsum(np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads)) + overhead,
              out=totals[1:])
    return totals


class _WriteRollingShards(beam.DoFn):
    """Writes each bundle's records to temp shards, rolling at the byte/record caps."""

    def __init__(self, config: SinkConfig):
        self._config = config
        self._open: dict[tuple[str, str], _TempShard] = {}

    def setup(self):
        prepare_worker()
        self._records_written = Metrics.counter(_COUNTERS, "records_written")
        self._dead_lettered = Metrics.counter(_COUNTERS, "records_dead_lettered")
        self._shards_opened = Metrics.counter(_COUNTERS, "temp_shards_opened")
        self._heartbeat = _Heartbeat(self._config) if self._config.report_progress else None

    def start_bundle(self):
        self._open = {}

    def process(self, batch: RecordBatch):
        if batch.records:
            yield from self._write(_TFRECORD_KIND, batch.split, batch.key, batch.records)
            self._records_written.inc(len(batch.records))
        if batch.dead_letters:
            yield from self._write(_DEAD_LETTER_KIND, batch.split, batch.key, batch.dead_letters)
            self._dead_lettered.inc(len(batch.dead_letters))
        if self._heartbeat is not None:
            self._heartbeat.add(batch.key, len(batch.records), len(batch.dead_letters))
        yield _batch_counts(batch)

    def _write(self, kind: str, split: str, key: str, payloads: Sequence[bytes]):
        slot = (kind, split if kind == _TFRECORD_KIND else DEAD_LETTER_DIR)
        totals = _cumulative_sizes(kind, payloads)
        start = 0
        while start < len(payloads):
            shard = self._open.get(slot)
            if shard is None:
                # Ordered by (batch, offset in batch): deterministic however bundles fall.
                shard = _TempShard(self._config, kind, slot[1], f"{key}#{start:010d}")
                self._open[slot] = shard
                self._shards_opened.inc()
                yield (_FILE, shard.path)
            take = self._how_many_fit(shard, totals, start)
            if take == 0:
                shard.close()
                del self._open[slot]
                continue
            end = start + take
            shard.write(payloads[start:end], int(totals[end] - totals[start]), split)
            start = end

    def _how_many_fit(self, shard: _TempShard, totals: np.ndarray, start: int) -> int:
        """How many items from `start` fit in `shard` under the record and byte caps."""
        remaining = len(totals) - 1 - start
        config = self._config
        if config.max_shard_records is not None:
            remaining = min(remaining, config.max_shard_records - shard.records)
        if config.max_shard_bytes is not None and remaining > 0:
            budget = config.max_shard_bytes - shard.logical_bytes
            # The last item index whose running total (from `start`) stays within budget.
            limit = int(np.searchsorted(totals, totals[start] + budget, side="right")) - 1
            remaining = min(remaining, limit - start)
        if remaining <= 0:
            # An empty shard always takes one record, however large: a single record is
            # never split and never refused here.
            return 1 if shard.records == 0 else 0
        return remaining

    def finish_bundle(self):
        for shard in self._open.values():
            shard.close()
        self._open = {}


class _Heartbeat:
    """Progress of one writer instance, rewritten to a small file every few seconds."""

    INTERVAL_SECONDS = 2.0

    def __init__(self, config: SinkConfig):
        self._path = manifest_lib.join_path(config.temp_dir, "_progress", uuid.uuid4().hex + ".json")
        self._records = self._dead_letters = 0
        self._units: set[str] = set()
        self._last = 0.0

    def add(self, key: str, records: int, dead_letters: int) -> None:
        self._records += records
        self._dead_letters += dead_letters
        self._units.add(key.split(":", 1)[0])  # the work unit part of a `batch_key`
        now = time.monotonic()
        if now - self._last >= self.INTERVAL_SECONDS:
            self._last = now
            beat = {"records": self._records, "dead_letters": self._dead_letters,
                    "units": sorted(self._units)}
            with FileSystems.create(self._path) as handle:
                handle.write(json.dumps(beat).encode("utf-8"))


def _deal_to_shards(batch: RecordBatch, num_shards: int):
    """Deals a batch's records round-robin over `num_shards` shard keys (fixed-count mode)."""
    if batch.records:
        start = crc32c.crc32c(batch.key.encode("utf-8")) % num_shards
        for offset in range(min(num_shards, len(batch.records))):
            shard = (start + offset) % num_shards
            records = list(batch.records[offset::num_shards])
            yield (_TFRECORD_KIND, batch.split, shard), (batch.key, batch.split, records)
    if batch.dead_letters:
        dead_letters = list(batch.dead_letters)
        yield (_DEAD_LETTER_KIND, DEAD_LETTER_DIR, 0), (batch.key, batch.split, dead_letters)


class _WriteGroupedShard(beam.DoFn):
    """Writes one whole shard (fixed-count mode) from its grouped record lists."""

    def __init__(self, config: SinkConfig):
        self._config = config

    def setup(self):
        prepare_worker()

    def process(self, keyed):
        (kind, split, shard_index), groups = keyed
        groups = sorted(groups, key=lambda group: group[0])  # deterministic record order
        shard = _TempShard(self._config, kind, split, f"shard-{shard_index:05d}")
        yield (_FILE, shard.path)
        for _, record_split, payloads in groups:
            shard.write(payloads, int(_cumulative_sizes(kind, payloads)[-1]), record_split)
        shard.close()


def _batch_counts(batch: RecordBatch):
    return (
        _COUNT,
        (batch.key, batch.split, batch.input_count, len(batch.records), len(batch.dead_letters),
         batch.record_rows),
    )


# ---------------------------------------------------------------------------------------
# Finalize.


class _Finalize(beam.DoFn):
    def __init__(self, config: SinkConfig):
        self._config = config

    def process(self, keyed):
        _, items = keyed
        temp_paths, counts = [], []
        for kind, value in items:
            if kind == _FILE:
                temp_paths.append(value)
            elif kind == _COUNT:
                counts.append(tuple(value))
        yield finalize_output(self._config, temp_paths, counts)


def _read_json(path: str) -> Any:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return json.loads(handle.read())


def _delete_quietly(paths: Iterable[str]) -> None:
    paths = [path for path in paths if FileSystems.exists(path)]
    if paths:
        FileSystems.delete(paths)


def _reconcile(sidecars: Sequence[Mapping[str, Any]], counts: Sequence[tuple]) -> dict[str, Any]:
    """Checks the converters' counts against the files; returns the manifest `counts`.

    Input is counted in rows: input == rows written + dead letters. A record holds one row,
    except a SequenceExample (`RecordBatch.record_rows`); the manifest then also counts
    `written_rows` beside `written` (records).
    """
    seen = set()
    per_split: dict[str, dict[str, int]] = defaultdict(
        lambda: {"input": 0, "written": 0, "dead_letter": 0}
    )
    rows_per_split: dict[str, int] = defaultdict(int)
    holds_sequences = False
    for key, split, input_count, written, dead, record_rows in counts:
        if (key, split) in seen:
            raise AccountingError(f"batch {key!r} of split {split!r} reached the sink twice")
        seen.add((key, split))
        entry = per_split[split]
        entry["input"] += input_count
        entry["written"] += written
        entry["dead_letter"] += dead
        rows_per_split[split] += written if record_rows is None else record_rows
        holds_sequences |= record_rows is not None
    if holds_sequences:
        for split, entry in per_split.items():
            entry["written_rows"] = rows_per_split[split]
    in_files: dict[str, int] = defaultdict(int)
    dead_in_files: dict[str, int] = defaultdict(int)
    for sidecar in sidecars:
        if sidecar["kind"] == _TFRECORD_KIND:
            in_files[sidecar["split"]] += sidecar["records"]
        else:
            for split, number in sidecar["dead_letters_by_split"].items():
                dead_in_files[split] += number
    problems = []
    for split in sorted(set(per_split) | set(in_files) | set(dead_in_files)):
        entry = per_split[split]
        written_rows = entry.get("written_rows", entry["written"])
        if entry["input"] != written_rows + entry["dead_letter"]:
            problems.append(
                f"split {split!r}: {entry['input']} input records but {written_rows} "
                f"written + {entry['dead_letter']} dead-lettered"
            )
        if in_files[split] != entry["written"]:
            problems.append(
                f"split {split!r}: {entry['written']} records converted but "
                f"{in_files[split]} found in the written files"
            )
        if dead_in_files[split] != entry["dead_letter"]:
            problems.append(
                f"split {split!r}: {entry['dead_letter']} dead letters produced but "
                f"{dead_in_files[split]} found in the dead-letter files"
            )
    if problems:
        raise AccountingError("output does not reconcile: " + "; ".join(problems))
    totals = {
        name: sum(entry[name] for entry in per_split.values())
        for name in ("input", "written", "dead_letter")
    }
    if any("written_rows" in entry for entry in per_split.values()):
        totals["written_rows"] = sum(entry["written_rows"] for entry in per_split.values())
    return {**totals, "splits": {split: dict(per_split[split]) for split in sorted(per_split)}}


def _final_names(config: SinkConfig, sidecars: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Assigns final names: per split, ordered by the first batch key each file holds."""
    by_split: dict[tuple[str, str], list] = defaultdict(list)
    for sidecar in sidecars:
        by_split[(sidecar["kind"], sidecar["split"])].append(sidecar)
    planned = []
    for (kind, split), group in sorted(by_split.items()):
        group.sort(key=lambda sidecar: (sidecar["first_key"], sidecar["temp_path"]))
        for index, sidecar in enumerate(group):
            if kind == _TFRECORD_KIND:
                relative = f"{split}-{index:05d}-of-{len(group):05d}{config.suffix}"
            else:
                relative = f"{DEAD_LETTER_DIR}/dead_letter-{index:05d}-of-{len(group):05d}.jsonl"
            planned.append({**sidecar, "path": relative})
    return planned


def _empty_shards(config: SinkConfig, sidecars: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Creates one empty temp shard per declared split that got no records."""
    if config.skip_if_empty:
        return []
    present = {s["split"] for s in sidecars if s["kind"] == _TFRECORD_KIND}
    created = []
    for split in config.splits:
        if split in present:
            continue
        path = manifest_lib.join_path(config.temp_dir, split, f"empty-{split}{config.suffix}")
        sidecar_path = path + ".json"
        if FileSystems.exists(sidecar_path):  # a retried finalize made it already
            created.append(_read_json(sidecar_path))
            continue
        # A stable name, so that a retried finalize finds it instead of making another.
        created.append(_TempShard(config, _TFRECORD_KIND, split, "", path=path).close())
    return created


def _stale_outputs(config: SinkConfig, keep: set[str]) -> list[str]:
    """Files under final names left by an earlier, uncommitted or replaced run."""
    patterns = [
        manifest_lib.join_path(config.output_dir, "*-?????-of-?????.tfrecord*"),
        manifest_lib.join_path(config.output_dir, DEAD_LETTER_DIR, "*"),
    ]
    stale = []
    for result in FileSystems.match(patterns):
        for metadata in result.metadata_list:
            relative = metadata.path[len(config.output_dir) :].lstrip("/")
            name = relative.rsplit("/", 1)[-1]
            if relative not in keep and (
                _SHARD_NAME.match(name) or relative.startswith(DEAD_LETTER_DIR + "/")
            ):
                stale.append(metadata.path)
    return stale


def _commit_file(config: SinkConfig, planned: Mapping[str, Any]) -> None:
    """Moves one temp file to its final name; a no-op if a retry already did."""
    final = manifest_lib.join_path(config.output_dir, planned["path"])
    source = planned["temp_path"]
    if FileSystems.exists(source):
        if FileSystems.exists(final):
            FileSystems.delete([final])
        manifest_lib.ensure_parent(final)
        FileSystems.rename([source], [final])
        return
    if not FileSystems.exists(final):
        raise AccountingError(f"temporary file {source} vanished before it was committed")
    size = FileSystems.match([final])[0].metadata_list[0].size_in_bytes
    if size != planned["bytes"]:
        raise AccountingError(
            f"{final} has {size} bytes, expected {planned['bytes']}: it is not the file "
            f"this run wrote"
        )


def finalize_output(
    config: SinkConfig, temp_paths: Iterable[str], counts: Iterable[tuple]
) -> str:
    """Commits a run: reconcile, rename temp files, write extras and the manifest last.

    Idempotent: calling it again with the same arguments after a failure at any point, or
    after success, leaves exactly one complete output. Returns the manifest path.
    """
    manifest_path = manifest_lib.join_path(config.output_dir, manifest_lib.MANIFEST_NAME)
    existing = manifest_lib.read_manifest(config.output_dir)
    if existing is not None and existing.get("run_id") == config.run_id:
        return manifest_path  # this run was committed by an earlier attempt

    temp_paths = sorted(set(temp_paths))
    missing = [path for path in temp_paths if not FileSystems.exists(path + ".json")]
    if missing:
        raise AccountingError(f"temporary shards were never closed: {missing[:5]}")
    sidecars = [_read_json(path + ".json") for path in temp_paths]
    totals = _reconcile(sidecars, list(counts))
    sidecars += _empty_shards(config, sidecars)
    planned = _final_names(config, sidecars)
    dead_files = [entry for entry in planned if entry["kind"] == _DEAD_LETTER_KIND]
    shard_files = [entry for entry in planned if entry["kind"] == _TFRECORD_KIND]

    # The old manifest goes first, so no reader can trust it while files change under it.
    _delete_quietly([manifest_path])
    _delete_quietly(_stale_outputs(config, {entry["path"] for entry in planned}))

    error_rate = totals["dead_letter"] / totals["input"] if totals["input"] else 0.0
    if config.max_error_rate is not None and error_rate > config.max_error_rate:
        for entry in dead_files:
            _commit_file(config, entry)
        _delete_temp_dir(config)
        raise ErrorRateExceededError(
            f"{totals['dead_letter']} of {totals['input']} input records "
            f"({error_rate:.2%}) were dead-lettered, more than --max-error-rate "
            f"{config.max_error_rate:.2%}; no shard was committed. The dead letters are in "
            f"{manifest_lib.join_path(config.output_dir, DEAD_LETTER_DIR)}"
        )

    for entry in planned:
        _commit_file(config, entry)
    extra = {}
    for relative, data in config.extra_files:
        target = manifest_lib.join_path(config.output_dir, relative)
        manifest_lib.write_bytes_atomically(target, data)
        extra[relative] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def describe(entry, with_split=True):
        described = {"path": entry["path"]}
        if with_split:
            described["split"] = entry["split"]
        described.update(
            records=entry["records"], bytes=entry["bytes"], sha256=entry["sha256"]
        )
        return described

    manifest = {
        "format_version": manifest_lib.FORMAT_VERSION,
        "tool_version": manifest_lib.tool_version(),
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "run_id": config.run_id,
        "compression": config.compression.value,
        "splits": sorted({entry["split"] for entry in shard_files} | set(config.splits)),
        "shards": [describe(entry) for entry in shard_files],
        "dead_letter_files": [describe(entry, with_split=False) for entry in dead_files],
        "counts": totals,
        "files": extra,
        "sharding": {
            "num_shards": config.num_shards,
            "max_shard_bytes": config.max_shard_bytes,
            "max_shard_records": config.max_shard_records,
            "skip_if_empty": config.skip_if_empty,
        },
        "options": {},
    }
    manifest.update(dict(config.manifest_metadata))
    manifest_lib.write_bytes_atomically(
        manifest_path, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    )
    _delete_temp_dir(config)
    _LOG.info(
        "committed %d shards (%d records, %d dead letters) to %s",
        len(shard_files), totals["written"], totals["dead_letter"], config.output_dir,
    )
    return manifest_path


def _delete_temp_dir(config: SinkConfig) -> None:
    """Removes the run's temp folder (on object stores: every object under its prefix)."""
    temp_dir = config.temp_dir
    try:
        manifest_lib.delete_tree(temp_dir)
    except Exception:  # noqa: BLE001 - leftover temp files are harmless; never fail a commit
        _LOG.warning("could not delete temporary folder %s", temp_dir, exc_info=True)
