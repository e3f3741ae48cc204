"""Writing a conversion's RecordBatches into temporary shards: the sink's configuration
(`SinkConfig`), the writer DoFns and the files they leave for the commit step.

* Records are written to uniquely named temporary files under `DIR/.tmp-<run id>/`. Each
  temporary file gets a JSON sidecar (records, bytes, sha256, ...) when it is closed. A
  writer emits the temporary path from `process()` when it opens the file; it never emits
  from `finish_bundle`, whose outputs Beam 2.77's DaskRunner drops. Batches arrive framed
  (`FramedRecords`) from our converters, or as payload lists which are framed here; the
  framed bytes are compressed, hashed and written on a background thread per open file
  (`_BackgroundIO`), and closing a file waits for them, so a sidecar only ever describes
  bytes that reached storage.
* A failed and retried bundle leaves orphaned temporary files, but its outputs are
  discarded by the runner, so the commit never sees them; they vanish with the temp folder.
* Default sharding: roll to a new shard when the next record would push the shard past
  `max_shard_bytes` (framed, uncompressed bytes) or `max_shard_records`. No shuffle: every
  bundle writes its own shards, so memory does not grow with the data. A record larger than
  the cap is written alone in its own shard. `num_shards=N`: records are dealt round-robin
  (from a start derived from the batch key) into N groups and shuffled by shard
  (`WriteGroupedShard`), which needs a GroupByKey of the data.
* With `report_progress`, writers leave a small heartbeat file under the temp folder every
  few seconds, which the CLI reads to show progress."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import apache_beam as beam
import crc32c
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms import fs
from transforms.format.compression import Compression, shard_suffix
from transforms.format.tfrecord_format import (
    FramedRecords,
    TFRecordWriter,
    frame_records,
    framed_size,
)
from transforms.format.tfrecord_index import INDEX_SUFFIX, IndexWriter
from transforms.records import RecordBatch, with_batches
from transforms.stats.dead_letters import batch_examples
from transforms.stats.unit_counts import fold_counts
from transforms.worker import prepare_worker

__all__ = [
    "ShardingConfig",
    "COUNTERS",
    "COUNT_RESULT",
    "DEAD_LETTER_DIR",
    "DEAD_LETTER_KIND",
    "DEFAULT_MAX_SHARD_BYTES",
    "FILE_RESULT",
    "SinkConfig",
    "TFRECORD_KIND",
    "TEMP_PREFIX",
    "TRIGGER_RESULT",
    "TempShard",
    "WriteGroupedShard",
    "RollingShardWriter",
    "WriteRollingShards",
    "WrittenBatch",
    "batch_counts",
    "deal_to_shards",
    "write_results",
]


R = TypeVar("R")

#: TensorFlow's performance guide recommends 100-200 MB per TFRecord file.
DEFAULT_MAX_SHARD_BYTES = 200 * 1024 * 1024


DEAD_LETTER_DIR = "dead_letter"


#: A run's temporary files live under `DIR/.tmp-<run id>/`.
TEMP_PREFIX = ".tmp-"


DEAD_LETTER_KIND = "dead_letter"


TFRECORD_KIND = "tfrecord"


FILE_RESULT = "file"


COUNT_RESULT = "count"


TRIGGER_RESULT = "trigger"


COUNTERS = "tfrecord_pipeline"


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """The whole sharding policy of an output; the CLI, the writers and the manifest all take
    it from here.

    Either `num_shards`: exactly that many shards per split (records are dealt round-robin
    and shuffled by shard, so the data goes through a GroupByKey), or the caps: a shard rolls
    when the next record would push it past `max_shard_bytes` framed, uncompressed bytes
    (default `DEFAULT_MAX_SHARD_BYTES`) or `max_shard_records` records. The two modes exclude
    each other. `skip_if_empty`: write no shard for a declared split without records (by
    default one empty shard, so consumers globbing a split always find a file).
    """

    num_shards: int | None = None
    max_shard_bytes: int | None = None
    max_shard_records: int | None = None
    skip_if_empty: bool = False

    def __post_init__(self):
        for name in ("num_shards", "max_shard_bytes", "max_shard_records"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_shards and (self.max_shard_bytes or self.max_shard_records):
            raise ValueError("--num-shards (exactly N shards) cannot be combined with "
                             "--max-shard-bytes or --max-shard-records (rolling shards)")

    @property
    def byte_cap(self) -> int | None:
        """The byte size shards roll at; None with `num_shards`."""
        return None if self.num_shards else (self.max_shard_bytes or DEFAULT_MAX_SHARD_BYTES)

    @property
    def record_cap(self) -> int | None:
        """The record count shards roll at, if any; None with `num_shards`."""
        return None if self.num_shards else self.max_shard_records

    def to_manifest(self) -> dict[str, Any]:
        """The manifest's "sharding" entry."""
        return {"num_shards": self.num_shards, "max_shard_bytes": self.byte_cap,
                "max_shard_records": self.record_cap, "skip_if_empty": self.skip_if_empty}


@dataclasses.dataclass(frozen=True)
class SinkConfig:
    """Configuration of `WriteToShardedTFRecord`; see its docstring."""

    output_dir: str
    compression: Compression = Compression.NONE
    compression_level: int | None = None
    sharding: ShardingConfig = dataclasses.field(default_factory=lambda: ShardingConfig())
    splits: tuple[str, ...] = ()
    max_error_rate: float | None = None
    extra_files: tuple[tuple[str, bytes], ...] = ()
    manifest_metadata: tuple[tuple[str, Any], ...] = ()
    run_id: str = ""
    report_progress: bool = False
    # Write `<shard>.tfindex` beside every shard (uncompressed output only).
    index: bool = False
    # A previous output folder whose stats.json the commit compares this run's with
    # (drift.json); `fail_on_drift` ("schema" or "distribution") fails the run on drift.
    compare_to: str | None = None
    fail_on_drift: str | None = None

    def __post_init__(self):
        if self.index and self.compression is not Compression.NONE:
            raise ValueError("index files need uncompressed shards: offsets in a "
                             f"{self.compression.value} stream are not seekable")
        if self.fail_on_drift not in (None, "schema", "distribution"):
            raise ValueError(f"fail_on_drift must be 'schema' or 'distribution', got {self.fail_on_drift!r}")
        if self.max_error_rate is not None and not 0 <= self.max_error_rate <= 1:
            raise ValueError(f"max_error_rate must be within [0, 1], got {self.max_error_rate}")
        for relative, _ in self.extra_files:
            if relative.startswith(("/", ".")) or ".." in relative.split("/"):
                raise ValueError(f"extra file path must be relative and plain: {relative!r}")

    @property
    def temp_dir(self) -> str:
        return fs.join_path(self.output_dir, f"{TEMP_PREFIX}{self.run_id}")

    @property
    def suffix(self) -> str:
        return shard_suffix(self.compression)


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

    def close(self) -> None:
        self._raw.close()


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


class TempShard:
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
            if kind == TFRECORD_KIND:
                path = fs.join_path(config.temp_dir, split, name + config.suffix)
            else:
                path = fs.join_path(config.temp_dir, DEAD_LETTER_DIR, name + ".jsonl")
        self.path = path
        self._raw = FileSystems.create(self.path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._hashing = _HashingWriter(self._raw)
        self._writer = (
            TFRecordWriter(self._hashing, config.compression, config.compression_level)
            if kind == TFRECORD_KIND
            else None
        )
        self.records = 0
        self.logical_bytes = 0
        self.dead_letters_by_split: dict[str, int] = defaultdict(int)
        self.dead_letters_by_reason: dict[str, int] = defaultdict(int)
        self._io = _BackgroundIO() if self._writer is not None else None
        self._index_file = self._index = None
        if self._writer is not None and config.index:
            # Indexed as the records are written: no second pass over the shard.
            self._index_file = _HashingWriter(FileSystems.create(
                self.path + INDEX_SUFFIX, compression_type=CompressionTypes.UNCOMPRESSED))
            self._index = IndexWriter(self._index_file)

    def write(self, payloads: Sequence[bytes], logical_bytes: int, split: str) -> None:
        if self._writer is not None:
            framed = payloads.data if isinstance(payloads, FramedRecords) else frame_records(payloads)
            self._io.submit(self._writer.write_framed, framed, len(payloads))
            if self._index is not None:
                self._index.add(payloads.framed_sizes() if isinstance(payloads, FramedRecords)
                                else [framed_size(len(payload)) for payload in payloads])
        else:
            self._hashing.write(b"".join(doc + b"\n" for doc in payloads))
            self.dead_letters_by_split[split] += len(payloads)
            for doc in payloads:
                self.dead_letters_by_reason[_reason_of(doc)] += 1
        self.records += len(payloads)
        self.logical_bytes += logical_bytes

    def close(self) -> dict[str, Any]:
        """Closes the file, writes and returns its sidecar metadata. A local file is synced
        first: the commit syncs every file it publishes, and a file synced here (by each
        writer, in parallel, while others convert) costs it nothing then."""
        if self._writer is not None:
            try:
                self._io.drain()
            finally:
                self._io.shutdown()
            self._writer.close()
        if "://" not in self.path:
            self._raw.flush()
            os.fsync(self._raw.fileno())
        self._raw.close()
        index = None
        if self._index_file is not None:
            self._index_file.close()
            index = {"temp_path": self.path + INDEX_SUFFIX, "bytes": self._index_file.bytes,
                     "sha256": self._index_file.sha256.hexdigest()}
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
            "dead_letters_by_reason": dict(self.dead_letters_by_reason),
        }
        if index is not None:
            sidecar["index"] = index
        with FileSystems.create(self.path + ".json") as handle:
            handle.write(json.dumps(sidecar, sort_keys=True).encode("utf-8"))
        return sidecar


def _reason_of(doc: bytes) -> str:
    """The `reason` of one dead-letter document (see `transforms.records.dead_letter`)."""
    try:
        reason = json.loads(doc).get("reason")
    except (ValueError, AttributeError):
        reason = None
    return reason if isinstance(reason, str) and reason else "unknown"


def _cumulative_sizes(kind: str, payloads: Sequence[bytes]) -> np.ndarray:
    """Running total of the bytes items occupy before compression, with a leading 0.

    An item is a framed TFRecord (payload + 16 bytes) or a JSON line (+ newline); the
    bytes of items [a, b) are `totals[b] - totals[a]`.
    """
    totals = np.zeros(len(payloads) + 1, dtype=np.int64)
    if isinstance(payloads, FramedRecords):
        totals[1:] = payloads.ends
        return totals
    overhead = 16 if kind == TFRECORD_KIND else 1
    np.cumsum(np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads)) + overhead,
              out=totals[1:])
    return totals


@dataclasses.dataclass(frozen=True)
class WrittenBatch:
    """Batches a converter wrote to temporary shards itself (`RollingShardWriter` in a forked
    child): what the writer would have emitted for them, file results and counts, which the
    sink passes on to the commit unchanged."""

    results: tuple[tuple[str, Any], ...]


class RollingShardWriter:
    """Writes RecordBatches to temporary shards, rolling at the byte/record caps; returns,
    per batch, the writer's results for the commit: `(FILE_RESULT, temp path)` for every
    shard it opens, then the batch's counts (`batch_counts`).

    The writing half of the sink in plain Python: `WriteRollingShards` runs one per bundle,
    and a forked converter runs one per work unit, so that every process writes what it
    converts. `close()` closes the open shards (writing their sidecars); until then the
    commit must not run.
    """

    def __init__(self, config: SinkConfig):
        self._config = config
        self._open: dict[tuple[str, str], TempShard] = {}
        self._heartbeat = _Heartbeat(config) if config.report_progress else None
        self.shards_opened = 0

    def write(self, batch: RecordBatch) -> list[tuple[str, Any]]:
        results: list[tuple[str, Any]] = []
        if batch.records:
            self._write(TFRECORD_KIND, batch.split, batch.key, batch.records, results)
        if batch.dead_letters:
            self._write(DEAD_LETTER_KIND, batch.split, batch.key, batch.dead_letters, results)
        if self._heartbeat is not None:
            self._heartbeat.add(batch.key, len(batch.records), len(batch.dead_letters))
        results.append(batch_counts(batch))
        return results

    def _write(self, kind: str, split: str, key: str, payloads: Sequence[bytes],
               results: list[tuple[str, Any]]) -> None:
        slot = (kind, split if kind == TFRECORD_KIND else DEAD_LETTER_DIR)
        totals = _cumulative_sizes(kind, payloads)
        start = 0
        while start < len(payloads):
            shard = self._open.get(slot)
            if shard is None:
                # Ordered by (batch, offset in batch): deterministic however bundles fall.
                shard = TempShard(self._config, kind, slot[1], f"{key}#{start:010d}")
                self._open[slot] = shard
                self.shards_opened += 1
                results.append((FILE_RESULT, shard.path))
            take = self._how_many_fit(shard, totals, start)
            if take == 0:
                shard.close()
                del self._open[slot]
                continue
            end = start + take
            shard.write(payloads[start:end], int(totals[end] - totals[start]), split)
            start = end

    def _how_many_fit(self, shard: TempShard, totals: np.ndarray, start: int) -> int:
        """How many items from `start` fit in `shard` under the record and byte caps."""
        remaining = len(totals) - 1 - start
        config = self._config
        record_cap, byte_cap = config.sharding.record_cap, config.sharding.byte_cap
        if record_cap is not None:
            remaining = min(remaining, record_cap - shard.records)
        if byte_cap is not None and remaining > 0:
            budget = byte_cap - shard.logical_bytes
            # The last item index whose running total (from `start`) stays within budget.
            limit = int(np.searchsorted(totals, totals[start] + budget, side="right")) - 1
            remaining = min(remaining, limit - start)
        if remaining <= 0:
            # An empty shard always takes one record, however large: a single record is
            # never split and never refused here.
            return 1 if shard.records == 0 else 0
        return remaining

    def close(self) -> None:
        for shard in self._open.values():
            shard.close()
        self._open = {}
        if self._heartbeat is not None:
            # A work unit often converts within one heartbeat interval: without this its
            # file would keep the count of its first batch only.
            self._heartbeat.flush()


def write_results(config: SinkConfig, results: Iterable[R]) -> Iterator[R]:
    """A work unit's results, each with its `batches` written to temporary shards here and
    replaced by one `WrittenBatch` of what the writer reports (run in a forked converter:
    the parent then receives file names and counts, never records). `results` are
    dataclasses or named tuples with a `batches` field.

    The batches' counts are folded into one per split (`fold_counts`) and sent with the
    unit's last result, so what reaches the commit grows with the work units, not with
    the chunks (at 50M rows, 3,000 chunks' statistics held ~170 MB in the launcher)."""
    writer = RollingShardWriter(config)
    counts: list[tuple] = []
    held = None
    try:
        for result in results:
            written = []
            for batch in result.batches:
                for kind, value in writer.write(batch):
                    if kind == COUNT_RESULT:
                        counts.append(value)
                    else:
                        written.append((kind, value))
            if held is not None:
                yield with_batches(held[0], [WrittenBatch(tuple(held[1]))])
            held = (result, written)
        if held is not None:
            result, written = held
            written += [(COUNT_RESULT, c) for c in fold_counts(counts)]
            yield with_batches(result, [WrittenBatch(tuple(written))])
    finally:
        writer.close()


class WriteRollingShards(beam.DoFn):
    """Writes each bundle's records to temp shards, rolling at the byte/record caps; passes
    on what converters wrote themselves (`WrittenBatch`)."""

    def __init__(self, config: SinkConfig):
        self._config = config
        self._writer: RollingShardWriter | None = None

    def setup(self):
        prepare_worker()
        self._records_written = Metrics.counter(COUNTERS, "records_written")
        self._dead_lettered = Metrics.counter(COUNTERS, "records_dead_lettered")
        self._shards_opened = Metrics.counter(COUNTERS, "temp_shards_opened")

    def start_bundle(self):
        self._writer = RollingShardWriter(self._config)

    def process(self, batch: RecordBatch | WrittenBatch):
        if isinstance(batch, WrittenBatch):
            yield from batch.results
            return
        opened = self._writer.shards_opened
        yield from self._writer.write(batch)
        self._records_written.inc(len(batch.records))
        self._dead_lettered.inc(len(batch.dead_letters))
        self._shards_opened.inc(self._writer.shards_opened - opened)

    def finish_bundle(self):
        self._writer.close()


class _Heartbeat:
    """Progress of one writer instance, rewritten to a small file every few seconds and
    when the writer closes."""

    INTERVAL_SECONDS = 2.0

    def __init__(self, config: SinkConfig):
        self._path = fs.join_path(config.temp_dir, "_progress", uuid.uuid4().hex + ".json")
        self._records = self._dead_letters = 0
        self._units: set[str] = set()
        self._last = 0.0
        self._unwritten = False

    def add(self, key: str, records: int, dead_letters: int) -> None:
        self._records += records
        self._dead_letters += dead_letters
        self._units.add(key.split(":", 1)[0])  # the work unit part of a `batch_key`
        self._unwritten = True
        if time.monotonic() - self._last >= self.INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Writes the totals so far, if anything was added since the last write."""
        if not self._unwritten:
            return
        self._last = time.monotonic()
        self._unwritten = False
        beat = {"records": self._records, "dead_letters": self._dead_letters,
                "units": sorted(self._units)}
        with FileSystems.create(self._path) as handle:
            handle.write(json.dumps(beat).encode("utf-8"))


def deal_to_shards(batch: RecordBatch, num_shards: int):
    """Deals a batch's records round-robin over `num_shards` shard keys (fixed-count mode)."""
    if batch.records:
        start = crc32c.crc32c(batch.key.encode("utf-8")) % num_shards
        for offset in range(min(num_shards, len(batch.records))):
            shard = (start + offset) % num_shards
            records = list(batch.records[offset::num_shards])
            yield (TFRECORD_KIND, batch.split, shard), (batch.key, batch.split, records)
    if batch.dead_letters:
        dead_letters = list(batch.dead_letters)
        yield (DEAD_LETTER_KIND, DEAD_LETTER_DIR, 0), (batch.key, batch.split, dead_letters)


class WriteGroupedShard(beam.DoFn):
    """Writes one whole shard (fixed-count mode) from its grouped record lists."""

    def __init__(self, config: SinkConfig):
        self._config = config

    def setup(self):
        prepare_worker()

    def process(self, keyed):
        (kind, split, shard_index), groups = keyed
        groups = sorted(groups, key=lambda group: group[0])  # deterministic record order
        shard = TempShard(self._config, kind, split, f"shard-{shard_index:05d}")
        yield (FILE_RESULT, shard.path)
        for _, record_split, payloads in groups:
            shard.write(payloads, int(_cumulative_sizes(kind, payloads)[-1]), record_split)
        shard.close()


def batch_counts(batch: RecordBatch):
    """What the commit learns of a batch: its counts, its feature presence and statistics,
    and a few of its dead letters per reason (see `transforms.stats`)."""
    examples = batch_examples(batch.dead_letters) if batch.dead_letters else ()
    return (
        COUNT_RESULT,
        (batch.key, batch.split, batch.input_count, len(batch.records), len(batch.dead_letters),
         batch.record_rows, batch.feature_presence, batch.feature_stats, examples),
    )
