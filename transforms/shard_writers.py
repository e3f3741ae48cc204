"""Writing a unit's RecordBatches into temporary shards: the sink's configuration
(`SinkConfig`), the one write path (`write_unit`) and the commit's resharding (`reshard`).

Each unit (a work unit, or a bucket of sequences) is written, in batch-key order, to its own
temporary files under `DIR/.tmp-<run id>/`, rolling at `max_shard_bytes` (framed, uncompressed)
or `max_shard_records`. A shard's place in the output follows from the first batch key it holds,
so shard boundaries and names depend on the plan alone, not on processes, workers or bundles.
A result never describes bytes that did not reach storage (files are closed and synced first);
a retried unit writes new, uniquely named files, and the failed attempt's result is discarded
by the runner, so its files vanish with the temp folder. With `num_shards=N` the commit deals
every record, in output order, round-robin into exactly N shards per split (a second pass)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.format.compression import Compression, shard_suffix
from transforms.format.tfrecord_format import FramedRecords, TFRecordWriter, frame_records, framed_size
from transforms.format.tfrecord_index import INDEX_SUFFIX, IndexWriter
from transforms.format.tfrecord_reader import iter_records
from transforms.records import RecordBatch, unit_of
from transforms.stats.dead_letters import batch_examples, first_examples
from transforms.stats.presence import add_presence, as_presence
from transforms.stats.sketches import BatchStats, StatsTotal
from transforms.unit_result import (
    DEAD_LETTER_KIND,
    TFRECORD_KIND,
    IndexFile,
    ShardFile,
    SplitResult,
    UnitResult,
)

__all__ = ["DEAD_LETTER_DIR", "DEFAULT_MAX_SHARD_BYTES", "RollingShardWriter", "ShardingConfig", "SinkConfig",
           "TEMP_PREFIX", "TempShard", "reshard", "write_unit"]

#: TensorFlow's performance guide recommends 100-200 MB per TFRecord file.
DEFAULT_MAX_SHARD_BYTES = 200 * 1024 * 1024

DEAD_LETTER_DIR = "dead_letter"

#: A run's temporary files live under `DIR/.tmp-<run id>/`.
TEMP_PREFIX = ".tmp-"


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """The whole sharding policy of an output: exactly `num_shards` per split, or the caps
    `max_shard_bytes`/`max_shard_records`; the two modes exclude each other. `skip_if_empty`: no
    shard for a declared split without records (by default one empty shard, so consumers
    globbing a split always find a file)."""

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
        return None if self.num_shards else (self.max_shard_bytes or DEFAULT_MAX_SHARD_BYTES)

    def to_manifest(self) -> dict[str, Any]:
        return {"num_shards": self.num_shards, "max_shard_bytes": self.byte_cap,
                "max_shard_records": self.max_shard_records, "skip_if_empty": self.skip_if_empty}


@dataclasses.dataclass(frozen=True)
class SinkConfig:
    """Configuration of `WriteToShardedTFRecord`; its docstring describes every field."""

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
    index: bool = False
    compare_to: str | None = None
    fail_on_drift: str | None = None
    append: bool = False

    def __post_init__(self):
        if self.append and self.sharding.num_shards:
            raise ValueError("num_shards cannot hold across appends: every generation adds shards")
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
    """Runs a shard's compress/hash/write calls in order on one background thread: they
    release the GIL, so the converter keeps the CPU meanwhile. At most `MAX_PENDING` writes
    wait (memory bounded by the batch size); a failed write is raised by the next call."""

    MAX_PENDING = 2

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-io")
        self._pending: deque = deque()

    def submit(self, fn, *args) -> None:
        while len(self._pending) >= self.MAX_PENDING:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def drain(self) -> None:
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pending.clear()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class TempShard:
    """One temporary output file and what the commit learns of it (`close()`)."""

    def __init__(self, config: SinkConfig, kind: str, split: str, first_key: str, path: str | None = None):
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
        self._writer = (TFRecordWriter(self._hashing, config.compression, config.compression_level)
                        if kind == TFRECORD_KIND else None)
        self.records = 0
        self.logical_bytes = 0
        self.dead_letters_by_split: dict[str, int] = defaultdict(int)
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
        self.records += len(payloads)
        self.logical_bytes += logical_bytes

    def close(self) -> ShardFile:
        """Closes and describes the file. A local file is synced here, by each writer in
        parallel, so that the commit's sync of every file it publishes costs nothing then."""
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
            index = IndexFile(self.path + INDEX_SUFFIX, self._index_file.bytes,
                              self._index_file.sha256.hexdigest())
        return ShardFile(
            temp_path=self.path, kind=self.kind, split=self.split, first_key=self.first_key,
            records=self.records, bytes=self._hashing.bytes,
            sha256=self._hashing.sha256.hexdigest(), index=index,
            dead_letters=tuple(sorted(self.dead_letters_by_split.items())))

    def abandon(self) -> None:
        if self._io is not None:
            self._io.shutdown()
        for handle in (self._raw, self._index_file):
            try:
                if handle is not None:
                    handle.close()
            except Exception:  # noqa: BLE001 - the unit fails with its own error
                pass


def _cumulative_sizes(kind: str, payloads: Sequence[bytes]) -> np.ndarray:
    """Running total of the uncompressed bytes of framed records (payload + 16) or JSON
    lines (+ newline), from 0: items [a, b) take `totals[b] - totals[a]`."""
    totals = np.zeros(len(payloads) + 1, dtype=np.int64)
    if isinstance(payloads, FramedRecords):
        totals[1:] = payloads.ends
        return totals
    overhead = 16 if kind == TFRECORD_KIND else 1
    np.cumsum(np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads)) + overhead,
              out=totals[1:])
    return totals


class RollingShardWriter:
    """Writes one unit's RecordBatches to temporary shards, rolling at the caps; `close()`
    returns every file written, in the order opened (none may be committed before)."""

    def __init__(self, config: SinkConfig):
        self._config = config
        self._open: dict[tuple[str, str], TempShard] = {}
        self._closed: list[ShardFile] = []
        self._heartbeat = _Heartbeat(config) if config.report_progress else None

    def write(self, batch: RecordBatch) -> None:
        if batch.records:
            self._write(TFRECORD_KIND, batch.split, batch.key, batch.records)
        if batch.dead_letters:
            self._write(DEAD_LETTER_KIND, batch.split, batch.key, batch.dead_letters)
        if self._heartbeat is not None:
            self._heartbeat.add(batch.key, len(batch.records), len(batch.dead_letters))

    def _write(self, kind: str, split: str, key: str, payloads: Sequence[bytes]) -> None:
        slot = (kind, split if kind == TFRECORD_KIND else DEAD_LETTER_DIR)
        totals = _cumulative_sizes(kind, payloads)
        start = 0
        while start < len(payloads):
            shard = self._open.get(slot)
            if shard is None:
                # Ordered by (batch, offset in batch): deterministic however units fall.
                shard = self._open[slot] = TempShard(self._config, kind, slot[1], f"{key}#{start:010d}")
            take = self._how_many_fit(shard, totals, start)
            if take == 0:
                self._closed.append(self._open.pop(slot).close())
                continue
            end = start + take
            shard.write(payloads[start:end], int(totals[end] - totals[start]), split)
            start = end

    def _how_many_fit(self, shard: TempShard, totals: np.ndarray, start: int) -> int:
        remaining = len(totals) - 1 - start
        if shard.kind != TFRECORD_KIND:
            return remaining  # a unit's dead letters go to one file
        record_cap, byte_cap = self._config.sharding.max_shard_records, self._config.sharding.byte_cap
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

    def close(self) -> tuple[ShardFile, ...]:
        for shard in self._open.values():
            self._closed.append(shard.close())
        self._open = {}
        if self._heartbeat is not None:
            # A work unit often converts within one heartbeat interval: without this its
            # file would keep the count of its first batch only.
            self._heartbeat.flush()
        return tuple(self._closed)

    def abandon(self) -> None:
        for shard in self._open.values():
            shard.abandon()
        self._open = {}


class _SplitTotals:
    """One split's counts, presence and statistics so far in a unit (None: unknown)."""

    def __init__(self):
        self.input = self.written = self.rows = self.dead = 0
        self.grouped = False
        self.presence: dict[str, list[int]] | None = {}
        self.stats: StatsTotal | None = StatsTotal()

    def add(self, batch: RecordBatch) -> None:
        self.input += batch.input_count
        self.written += len(batch.records)
        self.rows += batch.rows_written
        self.dead += len(batch.dead_letters)
        self.grouped |= batch.record_rows is not None
        if batch.feature_presence is not None and self.presence is not None:
            add_presence(self.presence, batch.feature_presence)
        elif batch.records:
            self.presence = None  # records whose features were not counted
        if isinstance(batch.feature_stats, BatchStats) and self.stats is not None:
            self.stats.add(batch.feature_stats)
        elif batch.records:
            self.stats = None

    def result(self, split: str) -> SplitResult:
        return SplitResult(
            split=split, input=self.input, written=self.written,
            rows=self.rows if self.grouped else None, dead_letters=self.dead,
            presence=as_presence(self.presence) if self.presence is not None else None,
            stats=self.stats.partial() if self.stats is not None else None)


def write_unit(config: SinkConfig, batches: Iterable[RecordBatch]) -> UnitResult:
    """The sink's one write path: one unit's batches, in batch-key order, to its own shards."""
    writer = RollingShardWriter(config)
    splits: dict[str, _SplitTotals] = {}
    reasons: Counter = Counter()
    examples = []
    owner = ""
    try:
        for batch in batches:
            owner = owner or batch.key
            writer.write(batch)
            splits.setdefault(batch.split, _SplitTotals()).add(batch)
            if batch.dead_letters:
                examples.append(batch_examples(batch.dead_letters, reasons))
    except BaseException:
        writer.abandon()
        raise
    files = writer.close()
    return UnitResult(owner, tuple(totals.result(split) for split, totals in sorted(splits.items())),
                      files, tuple(sorted(reasons.items())), first_examples(examples))


_RESHARD_BATCH = 1024  # records written to a resharded shard at once


def reshard(config: SinkConfig, files: Sequence[ShardFile]) -> list[ShardFile]:
    """`num_shards`: a split's records, in output order, dealt round-robin into exactly
    `num_shards` new temporary shards (some maybe empty), which replace the split's files."""
    by_split: dict[str, list[ShardFile]] = defaultdict(list)
    for file in files:
        by_split[file.split].append(file)
    out = []
    for split, group in sorted(by_split.items()):
        group.sort(key=lambda file: (file.first_key, file.temp_path))
        out += _deal(config, split, group)
        fs.delete([file.temp_path for file in group])
    return out


def _deal(config: SinkConfig, split: str, group: Sequence[ShardFile]) -> list[ShardFile]:
    count = config.sharding.num_shards
    targets = [TempShard(config, TFRECORD_KIND, split, f"{index:05d}") for index in range(count)]
    pending: list[list[bytes]] = [[] for _ in range(count)]
    position = 0
    for file in group:
        with FileSystems.open(file.temp_path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            for record in iter_records(handle, config.compression, path=file.temp_path):
                target = position % count
                pending[target].append(record.payload)
                position += 1
                if len(pending[target]) >= _RESHARD_BATCH:
                    _write_payloads(targets[target], pending[target])
    for target, payloads in zip(targets, pending, strict=True):
        _write_payloads(target, payloads)
    return [target.close() for target in targets]


def _write_payloads(shard: TempShard, payloads: list[bytes]) -> None:
    """Writes `payloads` to `shard` (framed at once) and empties the list for reuse."""
    if payloads:
        shard.write(payloads, sum(framed_size(len(p)) for p in payloads), shard.split)
        payloads.clear()


class _Heartbeat:
    """One writer's progress, rewritten to a small file every few seconds and at close."""

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
        self._units.add(unit_of(key))
        self._unwritten = True
        if time.monotonic() - self._last >= self.INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._unwritten:
            return
        self._last = time.monotonic()
        self._unwritten = False
        beat = {"records": self._records, "dead_letters": self._dead_letters,
                "units": sorted(self._units)}
        with FileSystems.create(self._path) as handle:
            handle.write(json.dumps(beat).encode("utf-8"))
