"""Vectorised tf.train.SequenceExample encoder: many sequences per call, numpy only, in the
layout of `example_codec` (byte-identical to the protobuf reference, tests/format/reference_codec.py,
on random schemas). Beam-free.

How: a step's FeatureList element `0a len(Feature) tag len(list) [0a len(packed)] values`
depends only on its values, and a sequence's lengths are sums over its steps, so every length
of every record is known before a byte is written. Records are then laid out back to back in
one buffer and each part written where it goes (the context from the vectorised Example
encoder, the FeatureLists header, per feature list its entry head and its steps' elements),
each field as one array write over all sequences or all steps. Encoding each step as an
Example and stripping its head cost ~10x more, and a Python loop per sequence dominates when
sequences are short.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transforms.format.example_codec import encode_varint, feature_sort_key
from transforms.format.example_columns import Column, NormalisedColumn, exclusive_cumsum, normalise
from transforms.format.example_encoder import (
    KIND_TAG,
    encode_columns,
    feature_body,
    list_and_feature_lengths,
    put_bytes_values,
    split_records,
    within_row,
)
from transforms.format.tfrecord_format import (
    DEFAULT_CRC,
    FOOTER_SIZE,
    HEADER_SIZE,
    CrcFn,
    FramedRecords,
    framing_headers,
)
from transforms.format.wire_scan import put_varints, segment_counts, varint_sizes

__all__ = ["encode_sequence_batch", "encode_sequence_framed"]

class _FeatureList:
    """One feature list's step elements: their lengths, and how to write them."""

    def __init__(self, norm: NormalisedColumn):
        self.norm = norm
        body = feature_body(norm)
        if norm.kind == "float":
            self.value_sizes = np.full(norm.num_values, 4, np.int64)
        elif norm.kind == "int64":
            self.value_sizes = body.value_sizes
        else:
            self.len_sizes = body.value_sizes
            self.value_sizes = 1 + self.len_sizes + norm.value_lengths
        self.body = body.lengths
        self.list_len, self.feature_len = list_and_feature_lengths(norm.kind, self.body)
        self.element_len = 1 + varint_sizes(self.feature_len) + self.feature_len
        name = norm.name
        self.key = b"\x0a" + encode_varint(len(name)) + name + b"\x12"

    def write_steps(self, out: np.ndarray, starts: np.ndarray) -> None:
        """Writes every step's element, step i's at `starts[i]`."""
        norm = self.norm
        out[starts] = 0x0A
        at = starts + 1
        at += put_varints(out, at, self.feature_len)
        out[at] = KIND_TAG[norm.kind]
        at += 1
        at += put_varints(out, at, self.list_len)
        if norm.kind != "bytes":
            packed = np.flatnonzero(self.body > 0)
            if packed.size < at.size:
                at_packed = at[packed]
                out[at_packed] = 0x0A
                at[packed] += 1 + put_varints(out, at_packed + 1, self.body[packed])
            else:
                out[at] = 0x0A
                at += 1 + put_varints(out, at + 1, self.body)
        if norm.num_values == 0:
            return
        rows, offsets = within_row(norm, self.value_sizes)
        positions = at[rows] + offsets
        if norm.kind == "float":
            out[positions[:, None] + np.arange(4)] = norm.values.view(np.uint8).reshape(-1, 4)
        elif norm.kind == "int64":
            put_varints(out, positions, norm.values, self.value_sizes)
        else:
            put_bytes_values(out, positions, norm, self.len_sizes)


def _check(num_sequences: int, step_offsets, feature_lists: Sequence[Column]) -> np.ndarray:
    step_offsets = np.asarray(step_offsets, np.int64)
    if step_offsets.shape != (num_sequences + 1,) or (num_sequences and step_offsets[0] != 0) \
            or np.any(np.diff(step_offsets) < 0):
        raise ValueError("step_offsets must be num_sequences + 1 ascending offsets from 0")
    names = [column.name for column in feature_lists]
    if len(set(names)) != len(names):
        raise ValueError(f"feature lists given more than once: {sorted(names)}")
    num_steps = int(step_offsets[-1])
    for column in feature_lists:
        if len(column.row_offsets) != num_steps + 1:
            raise ValueError(f"feature list {column.name!r}: {len(column.row_offsets) - 1} rows, "
                             f"expected {num_steps} steps")
    return step_offsets


def _render(num_sequences: int, context: Sequence[Column], step_offsets, feature_lists:
            Sequence[Column], framed: bool) -> tuple[np.ndarray, np.ndarray]:
    """The records laid out back to back (with framing slots when `framed`: header written,
    footer zero), and each payload's length."""
    step_offsets = _check(num_sequences, step_offsets, feature_lists)
    num_steps = int(step_offsets[-1])
    contexts = encode_columns(num_sequences, context)
    context_data = np.frombuffer(b"".join(contexts), np.uint8)
    context_len = np.fromiter(map(len, contexts), np.int64, num_sequences)
    lists = [_FeatureList(normalise(column, num_steps))
             for column in sorted(feature_lists, key=lambda column: feature_sort_key(column.name))]
    entries = []  # (feature list, FeatureList length, entry length) per sequence
    lists_len = np.zeros(num_sequences, np.int64)
    for feature_list in lists:
        body = segment_counts(feature_list.element_len, step_offsets)
        entry_len = len(feature_list.key) + varint_sizes(body) + body
        lists_len += 1 + varint_sizes(entry_len) + entry_len
        entries.append((feature_list, body, entry_len))
    payload_len = context_len + 1 + varint_sizes(lists_len) + lists_len
    slot = HEADER_SIZE + FOOTER_SIZE if framed else 0
    record_start = exclusive_cumsum(payload_len + slot)
    out = np.zeros(int(record_start[-1]), np.uint8)
    start = record_start[:-1]
    if framed:
        out[start[:, None] + np.arange(HEADER_SIZE)] = framing_headers(payload_len)
        start = start + HEADER_SIZE
    if context_data.size:
        context_offsets = exclusive_cumsum(context_len)
        target = np.repeat(start - context_offsets[:-1], context_len)
        target += np.arange(context_data.size)
        out[target] = context_data
    at = start + context_len
    out[at] = 0x12  # SequenceExample.feature_lists
    at += 1
    at += put_varints(out, at, lists_len)
    step_sequence = np.repeat(np.arange(num_sequences), np.diff(step_offsets))
    for feature_list, body, entry_len in entries:
        out[at] = 0x0A  # FeatureLists.feature_list map entry
        at += 1
        at += put_varints(out, at, entry_len)
        key = feature_list.key  # never one byte: a tag, a length, a name and a tag
        out[at[:, None] + np.arange(len(key))] = np.frombuffer(key, np.uint8)
        at += len(feature_list.key)
        at += put_varints(out, at, body)
        if num_steps:
            before = exclusive_cumsum(feature_list.element_len)
            starts = at[step_sequence] + before[:-1] - before[step_offsets[:-1]][step_sequence]
            feature_list.write_steps(out, starts)
        at += body
    return out, payload_len


def encode_sequence_batch(num_sequences: int, context: Sequence[Column],
                          step_offsets: np.ndarray, feature_lists: Sequence[Column]) -> list[bytes]:
    """Serialize `num_sequences` SequenceExamples from columns (layout: `example_codec`).

    Args:
      context: one Column per context feature, one row per sequence (an absent row leaves
        the feature out of that sequence's context).
      step_offsets: int64, num_sequences + 1 entries: sequence s has the steps
        step_offsets[s]..step_offsets[s+1] of the feature-list columns.
      feature_lists: one Column per feature list, one row per step (an absent row is a
        step without a value: an empty list).

    Raises ValueError, naming the feature, for what `example_encoder.encode_columns` refuses,
    duplicated names, or offsets that do not fit.
    """
    buffer, lengths = _render(num_sequences, context, step_offsets, feature_lists, framed=False)
    return split_records(buffer, lengths).tolist()


def encode_sequence_framed(num_sequences: int, context: Sequence[Column],
                           step_offsets: np.ndarray, feature_lists: Sequence[Column],
                           crc_fn: CrcFn = DEFAULT_CRC) -> FramedRecords:
    """`FramedRecords.frame(encode_sequence_batch(...))` (what the sink writes), without a bytes
    object per record. Raises what `encode_sequence_batch` raises."""
    buffer, lengths = _render(num_sequences, context, step_offsets, feature_lists, framed=True)
    return FramedRecords.complete(buffer, lengths, crc_fn)
