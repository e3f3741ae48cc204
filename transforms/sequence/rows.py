"""Reading side of the sequence conversion: a tabular work unit -> rows keyed by bucket (Beam-free).

Each chunk is read and converted exactly as for Examples (same readers, value rules and dead
letters). Every good row gets its group key (the `group_by` columns joined like split keys),
its split (by group key, so a sequence never straddles splits) and its bucket (a hash of the
group key), and the chunk yields:

* `(READ_COUNTS + work unit, RecordBatch)`: per split, the chunk's dead letters (bad values,
  rows without a group key or order value, rows the reader rejected) and its input row
  count, for the sink's accounting of every row read;
* `(bucket_key(b), SequenceRows)`: per bucket, the chunk's good rows of that bucket as Arrow
  columns, grouped, ordered and encoded once the bucket is complete.

Everything is computed over whole columns; Python runs per bad row and, when there are
several splits or buckets, per distinct group key of a chunk.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.records import DEFAULT_SPLIT, RecordBatch, WorkUnit, batch_key, dead_letter, unit_of
from transforms.splits import SplitAssigner
from transforms.tabular.chunks import Chunk, split_keys
from transforms.tabular.columns import feature_type
from transforms.tabular.convert import (
    ReadFailure,
    chunks_then_failure,
    feature_columns,
    file_failure_batch,
    split_assigner,
)
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec, FeatureSpec

__all__ = ["GROUP", "READ_COUNTS", "SequenceRows", "bucket_key",
           "read_sequence_rows", "sequence_assigner", "shipped_features"]

#: First byte of the shuffle key of a read chunk's counts and dead letters (passed through).
READ_COUNTS = b"\x00"
#: First byte of the shuffle key of a bucket's rows.
GROUP = b"\x01"

# Columns of a `SequenceRows` batch beside the features (a feature cannot be named so:
# feature names do not start with a NUL byte).
KEY_COLUMN, ROW_COLUMN, SPLIT_COLUMN = "\0key", "\0row", "\0split"


def bucket_key(bucket: int) -> bytes:
    """The shuffle key of bucket `bucket`."""
    return GROUP + bucket.to_bytes(4, "big")


@dataclasses.dataclass(frozen=True)
class SequenceRows:
    """The good rows of one chunk that fall in one bucket (one shuffle value), pickled as an
    Arrow IPC stream: compact (only this fragment's bytes) and cheap.

    `key`, the chunk's batch key, names the batches of its dead letters when the rows cannot
    be held (deterministically, whichever order the shuffle delivers fragments in). `batch`
    has one row per input row: KEY_COLUMN (group key bytes), ROW_COLUMN (1-based row number
    in `source`), SPLIT_COLUMN (index into the split names) and the `shipped_features`.
    """

    key: str
    source: str
    batch: pa.RecordBatch

    @property
    def num_rows(self) -> int:
        return self.batch.num_rows

    @property
    def nbytes(self) -> int:
        """Bytes the fragment holds in memory."""
        return self.batch.get_total_buffer_size()

    def __reduce__(self):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.batch.schema) as writer:
            writer.write_batch(self.batch)
        return _from_ipc, (self.key, self.source, sink.getvalue())


def _from_ipc(key: str, source: str, data) -> SequenceRows:
    return SequenceRows(key, source, pa.ipc.open_stream(data).read_next_batch())


sequence_assigner = split_assigner  # the spec's split assigner, as in the Example conversion


def shipped_features(spec: ConversionSpec) -> list[FeatureSpec]:
    """The features a fragment carries: those a SequenceExample holds (context and feature
    lists) and the order_by feature, in spec order."""
    sequence = spec.sequence
    names = [feature.name for feature in spec.features]
    wanted = {*sequence.context, *sequence.feature_list_names(names), sequence.order_by}
    return [feature for feature in spec.features if feature.name in wanted]


def _reading_spec(spec: ConversionSpec) -> ConversionSpec:
    """The spec the readers get: the group_by columns read like split-key columns."""
    return dataclasses.replace(spec, sequence=None, split_key=spec.sequence.group_by,
                               splits=spec.splits or ((DEFAULT_SPLIT, 1),))


def _source_missing(chunk: Chunk, column: str) -> np.ndarray:
    values = chunk.columns.get(column)
    if values is None:
        return np.ones(chunk.num_rows, bool)
    if chunk.mode == "python":
        return np.array([value is None for value in values], bool)
    return np.asarray(values.is_null(), bool)


def _splits_and_buckets(keys: pa.Array, assigner: SplitAssigner,
                        buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's split index and bucket, computed once per distinct key of the chunk. The
    bucket hash (CRC-32) is independent of the split hash (CRC-32C): buckets hold every split alike."""
    n = len(keys)
    if len(assigner.names) == 1 and buckets == 1:
        return np.zeros(n, np.int8), np.zeros(n, np.int64)
    encoded = keys.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    index = np.asarray(encoded.indices, np.int64)
    names = {name: i for i, name in enumerate(assigner.names)}
    splits = np.fromiter((names[s] for s in assigner.assign_many(distinct)), np.int8, len(distinct))
    if buckets == 1:
        bucket = np.zeros(len(distinct), np.int64)
    else:
        bucket = np.fromiter((zlib.crc32(k) % buckets for k in distinct), np.int64, len(distinct))
    return splits[index], bucket[index]


def read_sequence_rows(unit: WorkUnit, spec: ConversionSpec, fmt: str, batch_rows: int,
                       assigner: SplitAssigner, buckets: int = 1) -> Iterator[tuple[bytes, Any]]:
    """Reads one work unit into keyed counts batches and bucket rows. A file that cannot be
    read (or fails midway) yields one dead letter counting one input row, as for Examples;
    rows read before the failure stay read."""
    # Closed with this generator, so a reader stopped early is done with its file then.
    with closing(read_chunks(unit, fmt, _reading_spec(spec), batch_rows)) as chunks:
        for item in chunks_then_failure(chunks):
            if isinstance(item, ReadFailure):
                batch = file_failure_batch(unit, item.error, assigner, item.chunks, item.rows)[0]
                yield READ_COUNTS + unit_of(batch.key).encode(), batch
                return
            yield from _chunk_outputs(item, spec, assigner, unit, buckets)


def _bad_rows(chunk: Chunk, spec: ConversionSpec, features, values: dict[str, pa.Array]) -> dict[int, tuple]:
    """Row -> (reason, message, column, feature) of each row that cannot join a group."""
    sequence = spec.sequence
    bad: dict[int, tuple[str, str, str | None, str | None]] = {}
    for feature, column in features:
        for row, error in column.errors.items():
            bad.setdefault(row, (error.reason, error.message, error.column, feature.name))
    missing_key = np.zeros(chunk.num_rows, bool)
    for column in sequence.group_by:
        missing_key |= _source_missing(chunk, column)
    for row in np.flatnonzero(missing_key).tolist():
        bad.setdefault(row, ("missing_group_key", f"group_by column(s) {list(sequence.group_by)} "
                             f"missing", None, None))
    order = values.get(sequence.order_by)
    missing_order = np.zeros(chunk.num_rows, bool) if order is None else np.asarray(order.is_null(), bool)
    if order is not None and pa.types.is_floating(order.type):
        missing_order |= np.asarray(pc.fill_null(pc.is_nan(order), True), bool)
    for row in np.flatnonzero(missing_order).tolist():
        bad.setdefault(row, ("missing_order_value", f"order_by feature {sequence.order_by!r} is "
                             f"missing or NaN", None, sequence.order_by))
    return bad


def _chunk_outputs(chunk: Chunk, spec: ConversionSpec, assigner: SplitAssigner,
                   unit: WorkUnit, buckets: int) -> Iterator[tuple[bytes, Any]]:
    n = chunk.num_rows
    features = feature_columns(chunk, spec)
    values = {feature.name: column.values for feature, column in features}
    keys = split_keys(chunk, spec.sequence.group_by)  # group key bytes, joined like split keys
    bad = _bad_rows(chunk, spec, features, values)
    splits, bucket = _splits_and_buckets(keys, assigner, buckets)
    names = assigner.names
    key = batch_key(unit.index, chunk.index)
    dead: dict[int, list[bytes]] = {}
    for row in sorted(bad):
        reason, message, column, feature = bad[row]
        split = int(splits[row])
        dead.setdefault(split, []).append(dead_letter(
            source=unit.path, reason=reason, message=message, split=names[split],
            row=int(chunk.row_numbers[row]), column=column, raw=chunk.raw(row),
            feature=feature, **chunk.details(row)))
    counts = np.bincount(splits, minlength=len(names)) if n else np.zeros(len(names), np.int64)
    failure_splits = assigner.assign_many([failure.key for failure in chunk.failures])
    for failure, name in zip(chunk.failures, failure_splits, strict=True):
        split = names.index(name)
        counts[split] += 1
        dead.setdefault(split, []).append(dead_letter(
            source=unit.path, reason=failure.reason, message=failure.message, split=name,
            row=failure.row, raw=failure.raw, **failure.details))
    for split in np.flatnonzero(counts).tolist():
        yield READ_COUNTS + unit_of(key).encode(), RecordBatch(
            key=key, split=names[split], dead_letters=dead.get(split, []),
            input_count=int(counts[split]))
    good = np.ones(n, bool)
    good[list(bad)] = False
    rows = np.flatnonzero(good)
    if not rows.size:
        return
    # Good rows grouped by bucket (row order kept within a bucket), each column taken once.
    rows = rows[np.argsort(bucket[rows], kind="stable")]
    bounds = np.searchsorted(bucket[rows], np.arange(buckets + 1))
    take = pa.array(rows)
    columns = {KEY_COLUMN: keys.take(take).cast(pa.binary()),
               ROW_COLUMN: pa.array(np.asarray(chunk.row_numbers, np.int64)[rows]),
               SPLIT_COLUMN: pa.array(splits[rows])}
    for feature in shipped_features(spec):
        array = values[feature.name].take(take)
        wanted = feature_type(feature)
        columns[feature.name] = array if array.type == wanted else array.cast(wanted)
    batch = pa.RecordBatch.from_pydict(columns)
    for b in np.flatnonzero(np.diff(bounds)).tolist():
        start, stop = int(bounds[b]), int(bounds[b + 1])
        yield bucket_key(b), SequenceRows(key, unit.path, batch.slice(start, stop - start))
