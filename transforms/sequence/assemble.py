"""One complete group of rows -> its SequenceExamples, as `RecordBatch`es (Beam-free).

Steps are ordered by the order_by value, ties by (source path, row number), so the output
does not depend on which worker read which file, or in which order fragments arrived. A
group larger than `max_group_rows` is counted first and never held: its rows become dead
letters (`group_too_large`) fragment by fragment. Context values must agree within a group
(`context_mismatch`), unless the spec takes the first step's. A group longer than
`max_length` is cut into consecutive chunks (each its own SequenceExample, the chunk index
in its context) or truncated (the rest dead-lettered as `sequence_truncated`).

Counts: the group's batch holds its SequenceExamples with `record_rows` = the rows in them,
and a dead letter per other row (see `transforms.records.RecordBatch`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np

from transforms.format.example_columns import column_from_values
from transforms.format.sequence_codec import encode_sequence_batch
from transforms.records import RecordBatch, dead_letter
from transforms.sequence.rows import SequenceRows
from transforms.tabular.spec import ConversionSpec

__all__ = ["assemble_sequences", "sequence_batch_key"]


def sequence_batch_key(group_key: bytes, part: int = 0) -> str:
    """The batch key of a group's output: sorts by group key bytes, after chunk keys."""
    return f"seq:{group_key.hex()}:{part:06d}"


def _comparable(value):
    """`value` made comparable for the context check (NaN equals NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return tuple(_comparable(v) for v in value)
    return value


def _letter(fragment: SequenceRows, row: int, reason: str, message: str, **details) -> bytes:
    return dead_letter(source=fragment.source, reason=reason, message=message,
                       split=fragment.split, row=row, **details)


def _too_large(group_key: bytes, fragments: Iterable[SequenceRows], size: int,
               cap: int) -> Iterator[RecordBatch]:
    message = f"the group has {size} rows, more than max_group_rows {cap}"
    for part, fragment in enumerate(fragments):
        letters = [_letter(fragment, row, "group_too_large", message, group_rows=size)
                   for row in fragment.rows]
        yield RecordBatch(key=sequence_batch_key(group_key, part), split=fragment.split,
                          dead_letters=letters, record_rows=0)


def assemble_sequences(group_key: bytes, fragments: Iterable[SequenceRows],
                       spec: ConversionSpec) -> Iterator[RecordBatch]:
    """The batches of one group (see the module docstring). `fragments` is iterated twice
    (as a GroupByKey result may be) when the group is too large, else once."""
    sequence = spec.sequence
    size = sum(len(fragment.rows) for fragment in fragments)
    if size > sequence.max_group_rows:
        yield from _too_large(group_key, fragments, size, sequence.max_group_rows)
        return
    fragments = list(fragments)
    steps = sorted(
        ((fragment.order[i], fragment.source, row, f, i)
         for f, fragment in enumerate(fragments) for i, row in enumerate(fragment.rows)),
        key=lambda step: step[:3] if sequence.order_by else step[1:3],
    )
    split = fragments[0].split
    names = [feature.name for feature in spec.features]

    def values(name: str, chosen) -> list:
        return [fragments[f].values[name][i] for _, _, _, f, i in chosen]

    context = {}
    for name in sequence.context:
        column = values(name, steps)
        first = _comparable(column[0])
        if any(_comparable(v) != first for v in column) and sequence.context_mismatch == "dead_letter":
            message = f"context feature {name!r} varies within the group"
            letters = [_letter(fragments[f], row, "context_mismatch", message, feature=name)
                       for _, _, row, f, _ in steps]
            yield RecordBatch(key=sequence_batch_key(group_key), split=split, dead_letters=letters,
                              record_rows=0)
            return
        context[name] = column[0]

    kept, letters = steps, []
    max_length = sequence.max_length
    if max_length is not None and len(steps) > max_length and sequence.overflow == "truncate":
        kept = steps[:max_length]
        message = f"the group has {len(steps)} rows; only the first {max_length} are written"
        letters = [_letter(fragments[f], row, "sequence_truncated", message)
                   for _, _, row, f, _ in steps[max_length:]]
    chunk = max_length if max_length is not None and sequence.overflow == "split" else len(kept)
    starts = list(range(0, len(kept), chunk))
    kinds = {feature.name: feature.kind for feature in spec.features}
    context_columns = [column_from_values(name, kinds[name], [context[name]] * len(starts))
                       for name in sequence.context]
    if sequence.writes_chunk_index:
        context_columns.append(column_from_values(sequence.chunk_feature, "int64",
                                                  list(range(len(starts)))))
    feature_lists = [column_from_values(name, kinds[name], values(name, kept))
                     for name in sequence.feature_list_names(names)]
    offsets = np.array([*starts, len(kept)], np.int64)
    records = encode_sequence_batch(len(starts), context_columns, offsets, feature_lists)
    yield RecordBatch(key=sequence_batch_key(group_key), split=split, records=records,
                      dead_letters=letters, record_rows=len(kept))
