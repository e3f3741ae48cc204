"""One chunk of tabular rows -> RecordBatches (one per split), Beam-free.

The good rows of a chunk are encoded together by the vectorised Example encoder; every
failing row becomes a dead letter; every row, good or bad, is assigned a split first, so
each split's `input_count` = its records + its dead letters.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from transforms.format.example_columns import column_from_arrow
from transforms.format.example_encoder import encode_framed
from transforms.ordered_pool import ordered_map
from transforms.records import DEFAULT_SPLIT, RecordBatch, WorkUnit, batch_key, dead_letter
from transforms.splits import SplitAssigner
from transforms.stats.columns import arrow_batch_stats
from transforms.stats.presence import arrow_presence
from transforms.stats.sketches import stats_enabled
from transforms.tabular.chunks import Chunk, split_keys
from transforms.tabular.columns import (
    FeatureColumn,
    finish_feature,
    python_feature,
    text_feature,
    typed_feature,
)
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec, FeatureSpec
from transforms.tabular.values import RowError, missing_tokens

__all__ = [
    "ChunkResult",
    "ReadFailure",
    "chunks_then_failure",
    "convert_chunk",
    "convert_unit",
    "feature_columns",
    "file_failure_batch",
    "split_assigner",
]


@dataclasses.dataclass
class ChunkResult:
    """The batches of one chunk, with its outcome counts (for metrics)."""

    batches: list[RecordBatch]
    rows: int
    written: int
    dead_letters: collections.Counter


def split_assigner(spec: ConversionSpec) -> SplitAssigner:
    """The spec's split assigner (one split named "data" when it declares none)."""
    return SplitAssigner(spec.split_weights or {DEFAULT_SPLIT: 1})


def feature_columns(chunk: Chunk, spec: ConversionSpec) -> list[tuple[FeatureSpec, FeatureColumn]]:
    """Every feature of the spec converted for the chunk's parsed rows."""
    n, limit = chunk.num_rows, spec.max_bytes_length
    out = []
    for feature in spec.features:
        values = chunk.columns.get(feature.source_column)
        if chunk.mode == "python":
            column = python_feature(feature, values if values is not None else [None] * n,
                                    max_length=limit)
        elif chunk.mode == "text":
            column = text_feature(feature, values if values is not None else pa.nulls(n, pa.string()),
                                  max_length=limit, escapes=chunk.escapes,
                                  missing=missing_tokens(feature, spec.csv))
        else:
            column = typed_feature(feature, values if values is not None else pa.nulls(n),
                                   max_length=limit)
        out.append((feature, finish_feature(feature, column)))
    return out


def convert_chunk(chunk: Chunk, spec: ConversionSpec, assigner: SplitAssigner,
                  unit: WorkUnit) -> ChunkResult:
    """Converts one chunk: a RecordBatch per split that received rows of it."""
    n = chunk.num_rows
    features = feature_columns(chunk, spec)
    errors: dict[int, tuple[FeatureSpec, RowError]] = {}
    for feature, column in features:
        for row, error in column.errors.items():
            errors.setdefault(row, (feature, error))
    good = np.ones(n, bool)
    if errors:
        good[list(errors)] = False

    names = list(assigner.names)
    index_of = {name: i for i, name in enumerate(names)}
    if len(names) == 1:
        row_split = np.zeros(n, np.int64)
        failure_split = [0] * len(chunk.failures)
    else:
        if spec.split_key or chunk.whole_row_keys is None:
            keys = split_keys(chunk, spec.split_key or list(chunk.columns)).to_pylist()
        else:
            keys = chunk.whole_row_keys()
        row_split = np.fromiter((index_of[s] for s in assigner.assign_many(keys)), np.int64, n)
        failure_split = [index_of[s] for s in assigner.assign_many([f.key for f in chunk.failures])]

    key = batch_key(unit.index, chunk.index)
    result = ChunkResult([], chunk.input_count, 0, collections.Counter())
    for s, split in enumerate(names):
        in_split = row_split == s
        rows = np.flatnonzero(in_split & good)
        records: Sequence[bytes] = []
        presence: tuple = ()
        stats = None
        if rows.size:
            take = None if rows.size == n else pa.array(rows)
            taken = [(f, c.values if take is None else c.values.take(take)) for f, c in features]
            records = encode_framed(rows.size, [column_from_arrow(f.name, f.kind, values)
                                                for f, values in taken])
            presence = arrow_presence((f.name, values) for f, values in taken)
            if stats_enabled():
                stats = arrow_batch_stats((f.name, f.kind, values) for f, values in taken)
        dead = []
        for i in np.flatnonzero(in_split & ~good).tolist():
            feature, error = errors[i]
            dead.append(dead_letter(
                source=unit.path, reason=error.reason, message=error.message, split=split,
                row=int(chunk.row_numbers[i]), column=error.column, raw=chunk.raw(i),
                feature=feature.name, **chunk.details(i)))
            result.dead_letters[error.reason] += 1
        for failure, where in zip(chunk.failures, failure_split, strict=True):
            if where == s:
                dead.append(dead_letter(
                    source=unit.path, reason=failure.reason, message=failure.message,
                    split=split, row=failure.row, raw=failure.raw, **failure.details))
                result.dead_letters[failure.reason] += 1
        count = int(in_split.sum()) + failure_split.count(s)
        if count:
            result.batches.append(RecordBatch(key=key, split=split, records=records,
                                              dead_letters=dead, input_count=count,
                                              feature_presence=presence,
                                              feature_stats=stats))
            result.written += len(records)
    return result


def file_failure_batch(unit: WorkUnit, error: Exception, assigner: SplitAssigner, chunk_index: int,
                       rows_read: int) -> tuple[RecordBatch, str]:
    """The batch of the one dead letter (counting as one input row) of a work unit whose file
    could not be opened or read to its end, and its reason (`missing_file`/`unreadable_file`)."""
    try:
        reason = "unreadable_file" if FileSystems.exists(unit.path) else "missing_file"
    except Exception:  # noqa: BLE001 - the file system itself failed
        reason = "unreadable_file"
    split = assigner.assign(unit.path.encode("utf-8"))
    message = f"{type(error).__name__}: {error}"
    if rows_read:
        message += f" (after {rows_read} rows of this work unit were read)"
    letter = dead_letter(source=unit.path, reason=reason, message=message, split=split,
                         rows_read=rows_read, work_unit=[unit.start, unit.end])
    return RecordBatch(key=batch_key(unit.index, chunk_index), split=split,
                       dead_letters=[letter], input_count=1), reason


@dataclasses.dataclass
class ReadFailure:
    """The work unit's reader failed after `chunks` chunks holding `rows` input rows."""

    error: Exception
    chunks: int
    rows: int


def chunks_then_failure(chunks: Iterator[Chunk]) -> Iterator[Chunk | ReadFailure]:
    """The chunks, then a `ReadFailure` instead of raising if reading fails."""
    index = rows = 0
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except Exception as error:  # noqa: BLE001 - any read failure is this file's failure
            yield ReadFailure(error, index, rows)
            return
        yield chunk
        index, rows = chunk.index + 1, rows + chunk.input_count


def convert_unit(unit: WorkUnit, spec: ConversionSpec, fmt: str, batch_rows: int,
                 assigner: SplitAssigner | None = None, threads: int = 1) -> Iterator[ChunkResult]:
    """Reads and converts one work unit, chunk by chunk, in order.

    The unit is read on the calling thread; with `threads` > 1 that many chunks are
    converted at once (see `transforms.ordered_pool`). A file that cannot be opened or
    parsed (or fails midway) yields one dead letter (`missing_file` / `unreadable_file`)
    counting as one input row; rows already converted from it stay converted.
    """
    assigner = assigner or split_assigner(spec)
    whole_row = not spec.split_key and len(assigner.names) > 1
    chunks = read_chunks(unit, fmt, spec, batch_rows, whole_row=whole_row)

    def convert(item: Chunk | ReadFailure) -> ChunkResult:
        if isinstance(item, ReadFailure):
            batch, reason = file_failure_batch(unit, item.error, assigner, item.chunks, item.rows)
            return ChunkResult([batch], 1, 0, collections.Counter({reason: 1}))
        return convert_chunk(item, spec, assigner, unit)

    yield from ordered_map(convert, chunks_then_failure(chunks), threads)
