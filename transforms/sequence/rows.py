"""Reading side of the sequence conversion: a tabular work unit -> rows keyed by group.

Each chunk is read and its values converted exactly as for Examples (`transforms.tabular`:
same readers, same value rules, same dead letters). Then every good row gets its group key
(the `group_by` columns' key text, joined like split keys) and its split (assigned by the
group key, so a sequence never straddles splits), and the chunk yields:

* `(READ_COUNTS + batch key, RecordBatch)`: per split, the chunk's dead letters (bad values,
  rows without a group key or order value, rows the reader rejected) and its input row
  count: the sink's accounting of every row read;
* `(GROUP + group key, SequenceRows)`: per group, the chunk's good rows of that group,
  values converted, ready to be ordered and encoded once the group is complete.

Beam-free; `transforms.sequence.transform` wires it into the pipeline.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from transforms.records import DEFAULT_SPLIT, RecordBatch, WorkUnit, batch_key, dead_letter
from transforms.splits import SplitAssigner
from transforms.tabular.chunks import KEY_SEPARATOR, Chunk, join_keys
from transforms.tabular.columns import key_text_array
from transforms.tabular.convert import feature_columns, file_failure_batch
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.values import canonical_text

__all__ = ["GROUP", "READ_COUNTS", "SEQUENCE_REASONS", "SequenceRows", "read_sequence_rows",
           "sequence_assigner"]

#: First byte of the shuffle key of a read chunk's counts and dead letters (passed through).
READ_COUNTS = b"\x00"
#: First byte of the shuffle key of a group's rows.
GROUP = b"\x01"

#: Dead-letter reason codes of the sequence conversion, beyond the tabular ones.
SEQUENCE_REASONS = {
    "missing_group_key": "a row whose group_by column is missing",
    "missing_order_value": "a row whose order_by feature is missing or NaN",
    "context_mismatch": "a group whose context feature varies between rows",
    "sequence_truncated": "a row beyond max_length of its group with overflow: truncate",
    "group_too_large": "a row of a group with more rows than max_group_rows",
}


@dataclasses.dataclass
class SequenceRows:
    """The good rows of one group from one chunk (one shuffle value).

    Attributes:
      split: the group's split.
      source: the file the rows came from.
      rows: 1-based row number of each row in `source`.
      order: each row's order_by value (None for every row without order_by).
      values: feature name -> each row's converted value (None: missing; a list for list
        features; bytes for bytes/string, Python floats holding float32 values).
    """

    split: str
    source: str
    rows: list[int]
    order: list
    values: dict[str, list]


def sequence_assigner(spec: ConversionSpec) -> SplitAssigner:
    """The spec's split assigner (one split named "data" when it declares none)."""
    return SplitAssigner(spec.split_weights or {DEFAULT_SPLIT: 1})


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


def _key_text(value: Any) -> bytes:
    text = canonical_text(value)
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _group_keys(chunk: Chunk, spec: ConversionSpec) -> tuple[list[bytes], np.ndarray]:
    """Each row's group key bytes (joined like split keys), and which rows miss a value."""
    group_by, n = spec.sequence.group_by, chunk.num_rows
    missing = np.zeros(n, bool)
    for column in group_by:
        missing |= _source_missing(chunk, column)
    if chunk.mode == "python":
        columns = [chunk.columns.get(c) or [None] * n for c in group_by]
        return [KEY_SEPARATOR.join(_key_text(column[i]) for column in columns)
                for i in range(n)], missing
    arrays = [key_text_array(chunk.columns.get(c), n, text=chunk.mode == "text") for c in group_by]
    return join_keys(arrays, n), missing


def _order_values(values: list | None, num_rows: int) -> tuple[list, np.ndarray]:
    if values is None:
        return [None] * num_rows, np.zeros(num_rows, bool)
    missing = np.array([v is None or (isinstance(v, float) and math.isnan(v)) for v in values], bool)
    return values, missing


def read_sequence_rows(unit: WorkUnit, spec: ConversionSpec, fmt: str, batch_rows: int,
                       assigner: SplitAssigner) -> Iterator[tuple[bytes, Any]]:
    """Reads one work unit: yields its keyed counts batches and group rows (module docstring).

    A file that cannot be read (or fails midway) yields one dead letter counting one input
    row, as in the Example conversion; rows read before the failure stay read.
    """
    chunk_index = rows_read = 0
    chunks = read_chunks(unit, fmt, _reading_spec(spec), batch_rows)
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except Exception as error:  # noqa: BLE001 - any read failure is this file's failure
            yield READ_COUNTS + batch_key(unit.index, chunk_index).encode(), \
                file_failure_batch(unit, error, assigner, chunk_index, rows_read)[0]
            return
        yield from _chunk_outputs(chunk, spec, assigner, unit)
        chunk_index, rows_read = chunk.index + 1, rows_read + chunk.input_count


def _chunk_outputs(chunk: Chunk, spec: ConversionSpec, assigner: SplitAssigner,
                   unit: WorkUnit) -> Iterator[tuple[bytes, Any]]:
    n = chunk.num_rows
    sequence = spec.sequence
    features = feature_columns(chunk, spec)
    values = {feature.name: column.values.to_pylist() for feature, column in features}
    bad: dict[int, tuple[str, str, str | None, str | None]] = {}  # row -> reason, message, ...
    for feature, column in features:
        for row, error in column.errors.items():
            bad.setdefault(row, (error.reason, error.message, error.column, feature.name))
    keys, missing_key = _group_keys(chunk, spec)
    order, missing_order = _order_values(values.get(sequence.order_by), n)
    for row in np.flatnonzero(missing_key).tolist():
        bad.setdefault(row, ("missing_group_key", f"group_by column(s) {list(sequence.group_by)} "
                             f"missing", None, None))
    for row in np.flatnonzero(missing_order).tolist():
        bad.setdefault(row, ("missing_order_value", f"order_by feature {sequence.order_by!r} is "
                             f"missing or NaN", None, sequence.order_by))
    splits = assigner.assign_many(keys)
    key = batch_key(unit.index, chunk.index)
    dead: dict[str, list[bytes]] = {}
    counts: dict[str, int] = {}
    groups: dict[bytes, list[int]] = {}
    for row in range(n):
        split = splits[row]
        counts[split] = counts.get(split, 0) + 1
        if row in bad:
            reason, message, column, feature = bad[row]
            dead.setdefault(split, []).append(dead_letter(
                source=unit.path, reason=reason, message=message, split=split,
                row=int(chunk.row_numbers[row]), column=column, raw=chunk.raw(row),
                feature=feature, **chunk.details(row)))
        else:
            groups.setdefault(keys[row], []).append(row)
    failure_splits = assigner.assign_many([failure.key for failure in chunk.failures])
    for failure, split in zip(chunk.failures, failure_splits, strict=True):
        counts[split] = counts.get(split, 0) + 1
        dead.setdefault(split, []).append(dead_letter(
            source=unit.path, reason=failure.reason, message=failure.message, split=split,
            row=failure.row, raw=failure.raw, **failure.details))
    for split in sorted(counts):
        yield READ_COUNTS + f"{key}:{split}".encode(), RecordBatch(
            key=key, split=split, dead_letters=dead.get(split, []), input_count=counts[split])
    written = _written_features(spec)
    for group_key, rows in groups.items():
        yield GROUP + group_key, SequenceRows(
            split=splits[rows[0]], source=unit.path,
            rows=[int(chunk.row_numbers[row]) for row in rows],
            order=[order[row] for row in rows],
            values={name: [values[name][row] for row in rows] for name in written})


def _written_features(spec: ConversionSpec) -> list[str]:
    """The features a SequenceExample holds (context and feature lists), in spec order."""
    sequence = spec.sequence
    names = [feature.name for feature in spec.features]
    written = set(sequence.context) | set(sequence.feature_list_names(names))
    return [name for name in names if name in written]
