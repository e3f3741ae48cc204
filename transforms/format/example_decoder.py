"""Batch tf.train.Example decoder: a list of serialized Examples in, one column per feature out
(numpy values with row offsets and presence, or Arrow arrays), without one protobuf object per
record. Beam-free. The wire layout read is the one `example_encoder` writes.

How: the payloads are joined into one buffer and walked in lockstep, all records at once: one
numpy pass reads the first map entry of every record, the next pass the second, and so on, so
the number of passes is the number of features per record, not of records. Names are matched
by a 64-bit hash of their bytes (collisions are checked, and resolved by a dict). Packed int64
and float lists are then decoded per feature in one pass over all their bytes; bytes lists are
walked in lockstep like the entries.

Only the canonical layout is read that way: one `features` field, each entry key then value,
packed numeric lists in one chunk, no unknown fields, no duplicate names. Any record laid out
otherwise (legal protobuf other writers may produce, e.g. unpacked int64s) or malformed is
parsed by the reference decoder `example_codec.decode_example`, re-encoded canonically and
decoded with the rest, so the result is always the reference decoder's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from transforms.format.example_codec import decode_example, encode_example_parts, encode_varint
from transforms.format.wire_scan import (
    bytes_at,
    exclusive_cumsum,
    gather_ranges,
    packed_varints,
    read_lengths,
)

__all__ = ["DecodedBatch", "DecodedColumn", "ExampleDecodeError", "MixedKindError", "decode_examples"]

_TAG_LENGTH_DELIMITED_1 = 0x0A  # field 1, length-delimited: features, map key, bytes value
_TAG_FEATURE_VALUE = 0x12  # field 2, length-delimited: the map entry's value
_KIND_OF_TAG = {0x0A: "bytes", 0x12: "float", 0x1A: "int64"}
_NO_KIND = 0  # a Feature with no list set
_HASH_MULTIPLIER = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime: mixes bytes well
# Names up to this long are matched byte by byte against a pass's first name (one numpy
# comparison per byte); longer ones (rare) by their hash.
_COMPARED_NAME_MAX = 64
# What the walk records of each map entry, in this order.
_ENTRY_FIELDS = ("entry_record", "name_start", "name_size", "tag", "list_start", "list_size",
                 "name_id")


class ExampleDecodeError(ValueError):
    """The payload of `index` in the batch is not a serialized tf.train.Example."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index

    def __reduce__(self):
        return (type(self), (self.index, str(self)))


class MixedKindError(ValueError):
    """Feature `name` holds values of different `kinds` in the batch (int64 here, float there);
    `index`: a payload holding the second kind."""

    def __init__(self, name: str, kinds: tuple[str, ...], index: int):
        super().__init__(f"feature {name!r} holds {' and '.join(kinds)} values in different "
                         f"records (record {index} of the batch)")
        self.name, self.kinds, self.index = name, kinds, index

    def __reduce__(self):
        return (type(self), (self.name, self.kinds, self.index))


@dataclasses.dataclass
class DecodedColumn:
    """One feature over a batch of records.

    Attributes:
      kind: "int64", "float" or "bytes"; None when every record holding it has no list set.
      present: bool per record: the record has the feature (possibly with no values).
      row_offsets: int64, len = records + 1: record r's values are values[row_offsets[r]:
        row_offsets[r + 1]] (none for absent records).
      values: int64 or float32 values; for "bytes" the values' bytes back to back (uint8),
        cut by `value_offsets`.
      value_offsets: "bytes" only: int64, len = number of values + 1.
      kindless: None, or bool per record: its Feature has no list set (it has no values and
        `decode_example` gives it kind None).
    """

    name: str
    kind: str | None
    present: np.ndarray
    row_offsets: np.ndarray
    values: np.ndarray
    value_offsets: np.ndarray | None = None
    kindless: np.ndarray | None = None

    @property
    def counts(self) -> np.ndarray:
        """Number of values in each record (0 where absent)."""
        return np.diff(self.row_offsets)

    def values_array(self, arrow_type: pa.DataType | None = None) -> pa.Array:
        """All values as one Arrow array (binary for bytes) without copying the buffers."""
        if self.kind == "bytes":
            offsets = self.value_offsets
            large = offsets.size and offsets[-1] >= 2**31
            array_type = pa.large_binary() if large else pa.binary()
            offset_buffer = pa.py_buffer(offsets.astype(np.int64 if large else np.int32))
            array = pa.Array.from_buffers(array_type, offsets.size - 1,
                                          [None, offset_buffer, pa.py_buffer(self.values)])
        elif self.kind is None:
            array = pa.nulls(0, arrow_type or pa.null())
        else:
            array = pa.array(self.values)
        return array if arrow_type is None or array.type == arrow_type else array.cast(arrow_type)


@dataclasses.dataclass
class DecodedBatch:
    """A batch of decoded Examples: `num_rows` records, one column per feature seen, by name."""

    num_rows: int
    columns: dict[str, DecodedColumn]


def decode_examples(payloads: Sequence[bytes]) -> DecodedBatch:
    """Decodes a batch of serialized tf.train.Examples into one column per feature. Raises
    ExampleDecodeError (with the reference parser's message) or MixedKindError."""
    payloads = list(payloads)
    scan = _Scan(payloads)
    batch = scan.result()
    if batch is None:  # some records are not in the canonical layout: rewrite them, rescan
        payloads = [_canonical(payload, index) if bad else payload
                    for index, (payload, bad) in enumerate(zip(payloads, scan.bad.tolist(), strict=True))]
        scan = _Scan(payloads)
        batch = scan.result()
        if batch is None:  # pragma: no cover - canonical bytes always scan
            raise AssertionError(f"canonical Examples did not scan: {np.flatnonzero(scan.bad)[:5]}")
    return batch


def _canonical(payload: bytes, index: int) -> bytes:
    """The reference decoder's reading of `payload`, written in the layout the scan reads."""
    try:
        decoded = decode_example(payload)
    except (TypeError, ValueError) as error:
        raise ExampleDecodeError(index, f"record {index} of the batch: {error}") from None
    entries = []
    for name, (kind, values) in decoded.items():
        if kind is None:  # a Feature with no list set: an empty value message
            key = name.encode("utf-8")
            entry = b"\x0a" + encode_varint(len(key)) + key + b"\x12\x00"
            entries.append(b"\x0a" + encode_varint(len(entry)) + entry)
        else:  # the feature's map entry: its Example without the `0a len(Features)` head
            entries += encode_example_parts({name: (kind, values)})[2:]
    body = b"".join(entries)
    return b"\x0a" + encode_varint(len(body)) + body


def _name_hashes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each name's bytes and length (collisions are checked by the caller)."""
    flat = gather_ranges(data, starts, lengths)
    offsets = exclusive_cumsum(lengths)
    place = np.arange(flat.size, dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    # sum(byte_i * M^(i+1)) + length, modulo 2^64 (numpy integer arrays wrap silently).
    powers = np.cumprod(np.full(int(lengths.max(initial=0)) + 1, _HASH_MULTIPLIER, np.uint64))
    terms = (flat.astype(np.uint64) + np.uint64(1)) * powers[place]
    sums = np.zeros(lengths.size, np.uint64)
    nonempty = lengths > 0
    if flat.size:
        sums[nonempty] = np.add.reduceat(terms, offsets[:-1][nonempty])
    return sums ^ lengths.astype(np.uint64)


class _Scan:
    """One lockstep walk over a batch; `bad` marks records not in the canonical layout."""

    def __init__(self, payloads: list[bytes]):
        self.num_rows = len(payloads)
        lengths = np.fromiter(map(len, payloads), np.int64, self.num_rows)
        # Zero padding: a read past a record's end sees 0 (a checked limit stops it anyway).
        self.data = np.frombuffer(b"".join([*payloads, bytes(16)]), np.uint8)
        offsets = exclusive_cumsum(lengths)
        self.bad = np.zeros(self.num_rows, bool)
        starts, ends = offsets[:-1], offsets[1:]
        tag_ok = (lengths >= 2) & (self.data[starts] == _TAG_LENGTH_DELIMITED_1)
        size, width, ok = read_lengths(self.data, starts + 1, ends)
        body_starts = starts + 1 + width
        ok &= tag_ok & (body_starts + size == ends)
        self.bad |= ~ok
        self._walk_entries(np.flatnonzero(ok), body_starts, ends)

    def _walk_entries(self, records: np.ndarray, body_starts: np.ndarray, ends: np.ndarray) -> None:
        data = self.data
        self.name_table: dict[bytes, int] = {}
        found: list[tuple[np.ndarray, ...]] = []
        cursor = body_starts.copy()
        active = records[cursor[records] < ends[records]]
        while active.size:
            at, end = cursor[active], ends[active]
            ok = bytes_at(data, at) == _TAG_LENGTH_DELIMITED_1
            size, width, fine = read_lengths(data, at + 1, end)
            entry_start = at + 1 + width
            entry_end = entry_start + size
            ok &= fine & (bytes_at(data, entry_start) == _TAG_LENGTH_DELIMITED_1)  # fine: fits in end
            size, width, fine = read_lengths(data, entry_start + 1, entry_end)
            name_start = entry_start + 1 + width
            name_end = name_start + size
            ok &= fine & (name_end < entry_end) & (bytes_at(data, name_end) == _TAG_FEATURE_VALUE)
            size, width, fine = read_lengths(data, name_end + 1, entry_end)
            feature_start = name_end + 1 + width
            ok &= fine & (feature_start + size == entry_end)
            has_list = feature_start < entry_end
            tag = np.where(has_list, bytes_at(data, feature_start), _NO_KIND)
            ok &= ~has_list | (tag == 0x0A) | (tag == 0x12) | (tag == 0x1A)
            size, width, fine = read_lengths(data, feature_start + 1, entry_end)
            list_start = np.where(has_list, feature_start + 1 + width, entry_end)
            list_size = np.where(has_list, size, 0)
            ok &= ~has_list | (fine & (list_start + list_size == entry_end))
            self.bad[active[~ok]] = True
            name_size = (name_end - name_start)[ok]
            found.append((active[ok], name_start[ok], name_size, tag[ok], list_start[ok],
                          list_size[ok], self._pass_name_ids(name_start[ok], name_size)))
            cursor[active] = entry_end
            active = active[ok & (entry_end < end)]
        parts = list(zip(*found, strict=True)) or [()] * len(_ENTRY_FIELDS)
        keep = None
        for field, part in zip(_ENTRY_FIELDS, parts, strict=True):
            joined = np.concatenate(part) if part else np.zeros(0, np.int64)
            if keep is None:  # entry_record comes first: drop the entries of bad records
                keep = ~self.bad[joined]
            setattr(self, field, joined[keep])

    def _pass_name_ids(self, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Ids of the names of one pass's entries, -1 where not known yet.

        Records of a dataset mostly list the same features, so the entries of one pass
        mostly share a name: every entry is compared with the pass's first name, byte by
        byte over the whole pass. The others are left to `_name_ids`.
        """
        ids = np.full(starts.size, -1, np.int64)
        if starts.size == 0 or sizes[0] > _COMPARED_NAME_MAX:
            return ids
        size = int(sizes[0])
        reference = self.data[starts[0] : starts[0] + size]
        same = sizes == size
        for place in range(size):
            same &= bytes_at(self.data, starts + place) == reference[place]
        ids[same] = self._id_of(reference.tobytes())
        return ids

    def _id_of(self, raw_name: bytes) -> int:
        return self.name_table.setdefault(raw_name, len(self.name_table))

    def _name_ids(self) -> tuple[np.ndarray, list[str | None]]:
        """An id per entry, and the name of each id (None: not UTF-8, records marked bad)."""
        ids = self.name_id
        unknown = np.flatnonzero(ids < 0)
        if unknown.size:
            starts, sizes = self.name_start[unknown], self.name_size[unknown]
            hashes = _name_hashes(self.data, starts, sizes)
            _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
            # Every entry's name must equal the first name with its hash: compare the bytes.
            same_size = sizes == sizes[first][inverse]
            mine = gather_ranges(self.data, starts[same_size], sizes[same_size])
            theirs = gather_ranges(self.data, starts[first][inverse][same_size], sizes[same_size])
            if same_size.all() and np.array_equal(mine, theirs):
                firsts = zip(starts[first].tolist(), sizes[first].tolist(), strict=True)
                table = np.array([self._id_of(self.data[a : a + n].tobytes()) for a, n in firsts],
                                 np.int64)
                ids[unknown] = table[inverse]
            else:  # a hash collision (never seen): name by name
                ids[unknown] = [self._id_of(self.data[a : a + n].tobytes())
                                for a, n in zip(starts.tolist(), sizes.tolist(), strict=True)]
        names: list[str | None] = []
        for raw in self.name_table:
            try:
                names.append(raw.decode("utf-8"))
            except UnicodeDecodeError:  # protobuf refuses such a key: let it say so
                names.append(None)
        return ids, names

    def result(self) -> DecodedBatch | None:
        """The columns of the batch, or None when some record is not in the canonical layout
        (`bad` says which). Every check runs even after a record failed one, so one rescan
        of the rewritten records is enough."""
        ids, names = self._name_ids()
        bad_name = np.array([name is None for name in names], bool)
        if bad_name.any():
            self.bad[self.entry_record[bad_name[ids]]] = True
        # A name twice in one record: protobuf keeps the last; the reference decides.
        key = self.entry_record * max(len(names), 1) + ids
        ordered = np.sort(key)
        twice = ordered[1:][ordered[1:] == ordered[:-1]]
        if twice.size:
            self.bad[twice // max(len(names), 1)] = True
        columns: dict[str, DecodedColumn] = {}
        self.mixed: list[MixedKindError] = []
        order = np.argsort(ids, kind="stable")
        bounds = np.searchsorted(ids[order], np.arange(len(names) + 1))
        for feature_id, name in enumerate(names):
            if name is None:
                continue
            entries = order[bounds[feature_id] : bounds[feature_id + 1]]
            # Entries of a feature were found in pass order: sort them by record.
            entries = entries[np.argsort(self.entry_record[entries], kind="stable")]
            columns[name] = self._column(name, entries)
        if self.bad.any():
            return None
        if self.mixed:  # only now: a bad record's kind is what the reference decoder says
            raise self.mixed[0]
        return DecodedBatch(self.num_rows, columns)

    def _column(self, name: str, entries: np.ndarray) -> DecodedColumn:
        records = self.entry_record[entries]
        tags = self.tag[entries]
        kinds = sorted({_KIND_OF_TAG[t] for t in np.unique(tags).tolist() if t != _NO_KIND})
        if len(kinds) > 1:
            kinded = np.flatnonzero(tags != _NO_KIND)
            second = kinded[tags[kinded] != tags[kinded[0]]][0]
            self.mixed.append(MixedKindError(name, tuple(kinds), int(records[second])))
            kinds = []  # raised once the batch is known to be canonical; values not read
            tags = np.full_like(tags, _NO_KIND)
        kind = kinds[0] if kinds else None
        starts, sizes = self.list_start[entries], self.list_size[entries]
        value_offsets = None
        if kind is None:
            counts, values = np.zeros(entries.size, np.int64), np.zeros(0, np.uint8)
        elif kind == "bytes":
            counts, values, value_offsets = self._bytes_values(records, starts, sizes)
        else:
            counts, values = self._numeric_values(kind, records, starts, sizes)
        present = np.zeros(self.num_rows, bool)
        present[records] = True
        per_row = np.zeros(self.num_rows, np.int64)
        per_row[records] = counts
        kindless = None
        if kind is not None and (tags == _NO_KIND).any():
            kindless = np.zeros(self.num_rows, bool)
            kindless[records[tags == _NO_KIND]] = True
        return DecodedColumn(name, kind, present, exclusive_cumsum(per_row), values, value_offsets,
                             kindless)

    def _numeric_values(self, kind, records, starts, sizes) -> tuple[np.ndarray, np.ndarray]:
        """Counts per entry and values of packed int64/float lists: `0a len packed` or empty."""
        data = self.data
        has_values = sizes > 0
        ends = starts + sizes
        ok = ~has_values | (bytes_at(data, starts) == _TAG_LENGTH_DELIMITED_1)
        size, width, fine = read_lengths(data, starts + 1, ends)
        packed_start = starts + 1 + width
        packed_size = np.where(has_values, size, 0)
        ok &= ~has_values | (fine & (packed_start + packed_size == ends))
        if kind == "float":
            ok &= packed_size % 4 == 0
            counts = packed_size // 4
        chunk = gather_ranges(data, packed_start[ok], packed_size[ok])
        if kind == "float":
            values = chunk.view("<f4").astype(np.float32, copy=False)
        else:
            decoded, chunk_counts, fine = packed_varints(chunk, exclusive_cumsum(packed_size[ok]))
            counts = np.zeros(sizes.size, np.int64)
            counts[ok] = chunk_counts
            ok[np.flatnonzero(ok)[~fine]] = False
            values = decoded.view(np.int64)
        if not ok.all():
            self.bad[records[~ok]] = True
        return counts, values

    def _bytes_values(self, records, starts, sizes):
        """Counts per entry, bytes and value offsets of bytes lists: (`0a len value`)*."""
        data = self.data
        ends = starts + sizes
        found = []
        cursor = starts.copy()
        active = np.flatnonzero(cursor < ends)
        while active.size:
            at, end = cursor[active], ends[active]
            size, width, ok = read_lengths(data, at + 1, end)
            value_start = at + 1 + width
            value_end = value_start + size
            ok &= bytes_at(data, at) == _TAG_LENGTH_DELIMITED_1  # ok: value_end <= end
            if not ok.all():
                self.bad[records[active[~ok]]] = True
            found.append((active[ok], value_start[ok], (value_end - value_start)[ok]))
            cursor[active] = value_end
            active = active[ok & (value_end < end)]
        parts = list(zip(*found, strict=True)) or [()] * 3
        entry, value_start, value_size = (np.concatenate(p) if p else np.zeros(0, np.int64)
                                          for p in parts)
        # Values were found one per entry per pass: order them by entry (stable keeps order
        # inside an entry).
        order = np.argsort(entry, kind="stable")
        value_start, value_size = value_start[order], value_size[order]
        counts = np.bincount(entry, minlength=sizes.size).astype(np.int64)
        return counts, gather_ranges(data, value_start, value_size), exclusive_cumsum(value_size)
