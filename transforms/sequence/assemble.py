"""Held rows of many complete groups -> their SequenceExamples, as `RecordBatch`es (Beam-free).

All rows are ordered at once with numpy: by group key bytes, then steps by the order_by
value, ties by (source path, row number), so the output does not depend on which worker
read which file, the order fragments arrived in, or the input's chunks. Then, with array
operations over all groups: a group larger than `max_group_rows` is dead-lettered
(`group_too_large`); context values must agree within a group (`context_mismatch`, naming
the first context feature that varies) unless the spec takes the first step's; a group
longer than `max_length` is cut into chunks (each its own SequenceExample, the chunk index
in its context) or truncated (the rest `sequence_truncated`). Kept steps are encoded many
groups per call, in pieces of about `PIECE_ROWS` steps (whole groups), bounding the output
held at once.

Batches, keyed from the caller's `prefix`: per split and piece, SequenceExamples in
group-key order; per split, one batch of the dead letters, in group-key and step order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.format.example_columns import column_from_arrow, exclusive_cumsum
from transforms.format.sequence_encoder import encode_sequence_framed
from transforms.records import RecordBatch, dead_letter
from transforms.sequence.rows import KEY_COLUMN, ROW_COLUMN, SPLIT_COLUMN, SequenceRows
from transforms.tabular.spec import ConversionSpec

__all__ = ["PIECE_ROWS", "assemble_rows"]

#: Steps encoded per call (whole groups): large enough that numpy's per-call costs vanish,
#: small enough that a piece's output (a few MB) is soon handed to the sink.
PIECE_ROWS = 1 << 17


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices start..start+length of every range, concatenated."""
    return np.repeat(starts - exclusive_cumsum(lengths)[:-1], lengths) + np.arange(int(lengths.sum()))


def _rank(array: pa.Array) -> np.ndarray:
    """Each value's rank among the distinct values (bytes compare bytewise, as Python's)."""
    encoded = array.dictionary_encode()
    order = np.asarray(pc.sort_indices(encoded.dictionary), np.int64)
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    return rank[np.asarray(encoded.indices, np.int64)]


def _sort_order(keys: Sequence[np.ndarray]) -> np.ndarray:
    """The permutation sorting rows by `keys` (first key first), all int64 or float.

    The keys end in source and row number, so they are unique per row and any sort gives
    the same order. When the integer keys' ranges multiply to under 2**63 they are packed
    into one int64 (mixed radix): numpy's sort of that is ~8x faster than `np.lexsort`.
    """
    if all(key.dtype.kind in "iu" for key in keys) and keys[0].size:
        lows = [int(key.min()) for key in keys]
        spans = [int(key.max()) - low + 1 for key, low in zip(keys, lows, strict=True)]
        if math.prod(spans) < 1 << 63:
            packed = np.zeros(keys[0].size, np.int64)
            for key, low, span in zip(keys, lows, spans, strict=True):
                packed *= span
                packed += key - low
            return np.argsort(packed)
    return np.lexsort(keys[::-1])  # lexsort sorts by its last key first


def _pairs_equal(values: pa.Array, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """values[a] == values[b] elementwise, where null equals null and NaN equals NaN."""
    valid = np.asarray(values.is_valid(), bool)
    both_valid = valid[a] & valid[b]
    if pa.types.is_list(values.type):
        offsets = np.asarray(values.offsets, np.int64)
        lengths = np.diff(offsets)
        same = both_valid & (lengths[a] == lengths[b])
        rows = np.flatnonzero(same)
        count = lengths[a[rows]]
        inner = _pairs_equal(values.values, _ranges(offsets[a[rows]], count),
                             _ranges(offsets[b[rows]], count))
        differing = np.diff(exclusive_cumsum(~inner)[exclusive_cumsum(count)])
        same[rows] &= differing == 0
        equal = same
    elif pa.types.is_floating(values.type):
        x = values.fill_null(0).to_numpy(zero_copy_only=False)
        equal = both_valid & ((x[a] == x[b]) | (np.isnan(x[a]) & np.isnan(x[b])))
    elif pa.types.is_integer(values.type):
        x = values.fill_null(0).to_numpy(zero_copy_only=False)
        equal = both_valid & (x[a] == x[b])
    else:
        left, right = values.take(pa.array(a)), values.take(pa.array(b))
        equal = both_valid & np.asarray(pc.fill_null(pc.equal(left, right), False), bool)
    return equal | (~valid[a] & ~valid[b])


class _Held:
    """The held fragments as one sorted table of steps."""

    def __init__(self, fragments: Sequence[SequenceRows], spec: ConversionSpec):
        sources = sorted({fragment.source for fragment in fragments})
        rank = {source: i for i, source in enumerate(sources)}
        table = pa.Table.from_batches([fragment.batch for fragment in fragments]).combine_chunks()
        self.sources = sources
        self.source = np.repeat(np.array([rank[f.source] for f in fragments], np.int64),
                                [f.num_rows for f in fragments])
        self.rows = np.asarray(table.column(ROW_COLUMN).chunk(0), np.int64)
        self.splits = np.asarray(table.column(SPLIT_COLUMN).chunk(0), np.int64)
        self.columns = {name: table.column(name).chunk(0) for name in table.column_names}
        code = _rank(self.columns[KEY_COLUMN])
        order = []  # the order_by values as a sort key (no nulls: those rows are dead letters)
        if spec.sequence.order_by is not None:
            values = self.columns[spec.sequence.order_by]
            numeric = pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
            order.append(values.to_numpy(zero_copy_only=False) if numeric else _rank(values))
        self.perm = _sort_order([code, *order, self.source, self.rows])
        code = code[self.perm]
        self.starts = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]]))
        self.sizes = np.diff(np.append(self.starts, code.size))


def _varying(held: _Held, spec: ConversionSpec, checked: np.ndarray) -> dict[int, str]:
    """Group -> the first context feature (spec order) varying in it, for `checked` groups;
    each feature compared once, step against previous step."""
    sequence = spec.sequence
    out: dict[int, str] = {}
    if sequence.context_mismatch != "dead_letter" or not checked.any() or held.perm.size < 2:
        return out
    inside = np.ones(held.perm.size, bool)  # a step after another step of its group
    inside[held.starts] = False
    for name in sequence.context:
        equal = _pairs_equal(held.columns[name], held.perm[1:], held.perm[:-1])
        changes = np.flatnonzero(~equal & inside[1:]) + 1
        groups = np.searchsorted(held.starts, changes, side="right") - 1
        for g in np.unique(groups[checked[groups]]).tolist():
            out.setdefault(g, name)
    return out


def assemble_rows(fragments: Sequence[SequenceRows], spec: ConversionSpec,
                  split_names: Sequence[str], prefix: str) -> Iterator[RecordBatch]:
    """The batches of every group whose rows `fragments` hold, all of them."""
    fragments = [fragment for fragment in fragments if fragment.num_rows]
    if not fragments:
        return
    sequence = spec.sequence
    held = _Held(fragments, spec)
    del fragments
    starts, sizes = held.starts, held.sizes
    letters: list[tuple[int, int, bytes]] = []  # (group, split, letter)

    def add(group: int, positions: np.ndarray, reason: str, message: str, **details) -> None:
        """Dead letters of the steps at sorted `positions` of `group`."""
        for i in held.perm[positions].tolist():
            split = int(held.splits[i])
            letters.append((group, split, dead_letter(
                source=held.sources[held.source[i]], reason=reason, message=message,
                split=split_names[split], row=int(held.rows[i]), **details)))

    too_large = sizes > sequence.max_group_rows
    for g in np.flatnonzero(too_large).tolist():
        add(g, np.arange(starts[g], starts[g] + sizes[g]), "group_too_large",
            f"the group has {sizes[g]} rows, more than max_group_rows {sequence.max_group_rows}",
            group_rows=int(sizes[g]))
    varying = _varying(held, spec, ~too_large)
    for g, name in varying.items():
        add(g, np.arange(starts[g], starts[g] + sizes[g]), "context_mismatch",
            f"context feature {name!r} varies within the group", feature=name)
    ok = ~too_large
    ok[list(varying)] = False
    kept = sizes.copy()
    max_length = sequence.max_length
    if max_length is not None and sequence.overflow == "truncate":
        kept = np.minimum(sizes, max_length)
        for g in np.flatnonzero(ok & (sizes > max_length)).tolist():
            add(g, np.arange(starts[g] + max_length, starts[g] + sizes[g]), "sequence_truncated",
                f"the group has {sizes[g]} rows; only the first {max_length} are written")
    group_split = held.splits[held.perm[starts]]
    for split, name in enumerate(split_names):
        groups = np.flatnonzero(ok & (group_split == split))
        if groups.size:
            yield from _encode(held, spec, groups, kept[groups], name, f"{prefix}:{name}")
    if letters:
        letters.sort(key=lambda item: item[0])  # group order; steps stay in order (stable)
        for split, name in enumerate(split_names):
            mine = [letter for _, s, letter in letters if s == split]
            if mine:
                yield RecordBatch(key=f"{prefix}:{name}:dead", split=name, dead_letters=mine,
                                  record_rows=0)


def _encode(held: _Held, spec: ConversionSpec, groups: np.ndarray, kept: np.ndarray,
            split: str, prefix: str) -> Iterator[RecordBatch]:
    """The SequenceExamples of `groups` (their first `kept` steps), piece by piece."""
    sequence = spec.sequence
    kinds = {feature.name: feature.kind for feature in spec.features}
    names = [feature.name for feature in spec.features]
    chunk = np.full(groups.size, sequence.max_length) if sequence.writes_chunk_index else kept
    chunks = -(-kept // chunk)
    before = exclusive_cumsum(kept)
    piece_of_group = before[:-1] // PIECE_ROWS
    bounds = np.flatnonzero(np.diff(piece_of_group, prepend=-1, append=-1)).tolist()

    def piece(number: int) -> RecordBatch:
        a, b = bounds[number], bounds[number + 1]
        k, c, size = kept[a:b], chunks[a:b], chunk[a:b]
        steps = held.perm[_ranges(held.starts[groups[a:b]], k)]
        seq_group = np.repeat(np.arange(b - a), c)
        index = np.arange(seq_group.size) - np.repeat(exclusive_cumsum(c)[:-1], c)
        lengths = np.minimum(size[seq_group], k[seq_group] - index * size[seq_group])
        firsts = pa.array(held.perm[held.starts[groups[a:b]]][seq_group])
        context = [column_from_arrow(name, kinds[name], held.columns[name].take(firsts))
                   for name in sequence.context]
        if sequence.writes_chunk_index:
            context.append(column_from_arrow(sequence.chunk_feature, "int64", pa.array(index)))
        take = pa.array(steps)
        lists = [column_from_arrow(name, kinds[name], held.columns[name].take(take))
                 for name in sequence.feature_list_names(names)]
        records = encode_sequence_framed(seq_group.size, context, exclusive_cumsum(lengths), lists)
        return RecordBatch(key=f"{prefix}:{number:06d}", split=split, records=records,
                           record_rows=int(steps.size))

    # One piece after another: encoding pieces on a second thread gained nothing measurable
    # end to end on 2 cores (the sink compresses on one) and held more pieces in memory.
    yield from map(piece, range(len(bounds) - 1))
