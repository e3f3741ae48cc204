"""Shuffle buckets of the sequence conversion: how many, and one bucket -> its batches
within the memory cap (Beam-free).

Rows are shuffled by bucket (a hash of the group key), not by group: one shuffle key and one
encoder call then serve thousands of groups, where a key per group cost ~2.6 ms of encoder
overhead per group. `bucket_count` gives each bucket about half of `bucket_bytes` of input
(converted columns take up to ~2x the CSV text: 8-byte ints, string offsets).

`assemble_bucket` never holds more than `bucket_bytes` of a bucket's rows (Arrow bytes),
plus one group of at most `max_group_rows` rows. Usually the whole bucket fits and is
assembled at once; else (skewed keys, compressed input) it takes several passes over the
shuffled fragments: one counting rows and bytes per group (keys only), then one per set of
whole groups that fits, in group-key order. Groups larger than `max_group_rows` are
dead-lettered fragment by fragment, never held. Either way the output is the same but for
the batch keys, and the way is decided by the bucket's total size, not fragment order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.records import RecordBatch, dead_letter
from transforms.sequence.assemble import assemble_rows
from transforms.sequence.rows import KEY_COLUMN, ROW_COLUMN, SPLIT_COLUMN, SequenceRows
from transforms.tabular.sequence_spec import SequenceSpec
from transforms.tabular.spec import ConversionSpec

__all__ = ["assemble_bucket", "bucket_count"]


def bucket_count(input_bytes: int, sequence: SequenceSpec) -> int:
    """Buckets for `input_bytes` of input (unknown: 0, one bucket, still memory-bounded)."""
    return max(1, math.ceil(max(input_bytes, 0) / (sequence.bucket_bytes / 2)))


def _prefix(bucket: int, part: str) -> str:
    return f"seq:{bucket:08d}:{part}"


def assemble_bucket(bucket: int, fragments: Iterable[SequenceRows], spec: ConversionSpec,
                    split_names: Sequence[str]) -> Iterator[RecordBatch]:
    """The batches of every group of a bucket. `fragments` is iterated once when the bucket
    fits, else several times (as a GroupByKey result may be)."""
    cap = spec.sequence.bucket_bytes
    held, size = [], 0
    for fragment in fragments:
        size += fragment.nbytes
        if size > cap:
            break
        held.append(fragment)
    else:
        yield from assemble_rows(held, spec, split_names, _prefix(bucket, "0000"))
        return
    del held
    yield from _in_passes(bucket, fragments, spec, split_names)


def _group_sizes(fragments: Iterable[SequenceRows]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Every group key of the bucket, sorted, with its rows and (estimated) bytes."""
    parts = []
    for fragment in fragments:
        counts = pc.value_counts(fragment.batch.column(KEY_COLUMN))
        rows = np.asarray(counts.field("counts"), np.int64)
        parts.append(pa.record_batch({"key": counts.field("values"), "rows": rows,
                                      "bytes": rows * fragment.nbytes / fragment.num_rows}))
    table = pa.Table.from_batches(parts).group_by("key").aggregate([("rows", "sum"),
                                                                     ("bytes", "sum")])
    table = table.sort_by("key")
    return (table.column("key").combine_chunks(), np.asarray(table.column("rows_sum"), np.int64),
            np.asarray(table.column("bytes_sum"), np.float64))


def _in_passes(bucket: int, fragments: Iterable[SequenceRows], spec: ConversionSpec,
               split_names: Sequence[str]) -> Iterator[RecordBatch]:
    sequence = spec.sequence
    keys, rows, sizes = _group_sizes(fragments)
    too_large = rows > sequence.max_group_rows
    if too_large.any():
        yield from _too_large(bucket, fragments, keys.filter(pa.array(too_large)),
                              rows[too_large], sequence.max_group_rows, split_names)
    held = np.flatnonzero(~too_large)
    # Whole groups in key order, a new pass whenever the next group would pass the cap.
    passes, start, total = [], 0, 0.0
    for i, size in enumerate(sizes[held].tolist()):
        if total + size > sequence.bucket_bytes and i > start:
            passes.append((start, i))
            start, total = i, 0.0
        total += size
    if held.size:
        passes.append((start, held.size))
    for number, (a, b) in enumerate(passes):
        wanted = keys.take(pa.array(held[a:b]))
        chosen = []
        for fragment in fragments:
            mask = pc.is_in(fragment.batch.column(KEY_COLUMN), value_set=wanted)
            if pc.any(mask).as_py():
                chosen.append(SequenceRows(fragment.key, fragment.source,
                                           fragment.batch.filter(mask)))
        yield from assemble_rows(chosen, spec, split_names, _prefix(bucket, f"{number:04d}"))


def _too_large(bucket: int, fragments: Iterable[SequenceRows], keys: pa.Array, rows: np.ndarray,
               cap: int, split_names: Sequence[str]) -> Iterator[RecordBatch]:
    """The rows of the groups `keys` as dead letters, fragment by fragment."""
    size_of = dict(zip(keys.to_pylist(), rows.tolist(), strict=True))
    for fragment in fragments:
        batch = fragment.batch
        mask = np.asarray(pc.is_in(batch.column(KEY_COLUMN), value_set=keys), bool)
        if not mask.any():
            continue
        letters: dict[int, list[bytes]] = {}
        group_keys = batch.column(KEY_COLUMN).to_pylist()
        row_numbers = np.asarray(batch.column(ROW_COLUMN), np.int64)
        splits = np.asarray(batch.column(SPLIT_COLUMN), np.int64)
        for i in np.flatnonzero(mask).tolist():
            size = size_of[group_keys[i]]
            split = int(splits[i])
            letters.setdefault(split, []).append(dead_letter(
                source=fragment.source, reason="group_too_large",
                message=f"the group has {size} rows, more than max_group_rows {cap}",
                split=split_names[split], row=int(row_numbers[i]), group_rows=size))
        for split, mine in sorted(letters.items()):
            yield RecordBatch(key=_prefix(bucket, f"large:{fragment.key}:{split_names[split]}"),
                              split=split_names[split], dead_letters=mine, record_rows=0)
