"""`read_examples`: the records of one split (or of one part of it) as dicts of numpy
arrays, without TensorFlow, every CRC checked, from NONE, GZIP or ZLIB shards; shaped by
`features.feature_layout`, decoded by `decode.decode_record` (SequenceExamples: (context,
feature lists) pairs of such dicts)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from transforms.reading.decode import decode_record
from transforms.reading.features import RecordLayout, record_layout
from transforms.reading.output import SplitOutput, load_split
from transforms.reading.parts import ShardRange, select_part, whole_split
from transforms.reading.records import iter_payloads

__all__ = ["ExampleReader", "read_examples"]


class ExampleReader:
    """The decoded records of some ranges of a split: iterable (again and again, each time
    from the start), with an exact `len()`. `layout` is None when the output has no spec."""

    def __init__(self, output: SplitOutput, ranges: Sequence[ShardRange], *,
                 fill_defaults: bool = False, as_numpy: bool = True):
        self.output = output
        self.ranges = tuple(ranges)
        self.layout: RecordLayout | None = (record_layout(output.feature_spec)
                                            if output.feature_spec is not None else None)
        self._fill_defaults = fill_defaults
        self._as_numpy = as_numpy

    def __len__(self) -> int:
        return sum(piece.records for piece in self.ranges)

    def __iter__(self) -> Iterator[Any]:
        for payload in iter_payloads(self.ranges, self.output.compression):
            yield decode_record(payload, self.layout, fill_defaults=self._fill_defaults,
                                as_numpy=self._as_numpy)

    def part(self, part: tuple[int, int]) -> ExampleReader:
        """Part `(index, count)` of these records (see `parts`), read the same way."""
        return ExampleReader(self.output, select_part(self.ranges, part),
                             fill_defaults=self._fill_defaults, as_numpy=self._as_numpy)

    def __repr__(self) -> str:
        return (f"ExampleReader({self.output.output_dir!r}, split={self.output.split!r}, "
                f"records={len(self)}, shard ranges={len(self.ranges)})")


def read_examples(output_dir: str, split: str, *, shard: tuple[int, int] = (0, 1),
                  fill_defaults: bool = False, as_numpy: bool = True) -> ExampleReader:
    """The records of `split` in the committed output at `output_dir` (path or URI).

    `shard=(index, count)`: only part `index` of `count` disjoint parts that together hold
    every record once, balanced to one record (see `parts` and `records`). `fill_defaults`:
    give an absent feature its spec default (where it has one) instead of leaving it out.
    `as_numpy=False`: Python values (a scalar for a dense scalar, else a list; bytes for
    strings) instead of numpy arrays (0-d for a dense scalar).

    Raises FileNotFoundError (no manifest), ValueError (a malformed manifest or spec, an
    unknown split, a bad `shard`) and, while iterating, TFRecordCorruptError.
    """
    output = load_split(output_dir, split)
    whole = ExampleReader(output, whole_split(output), fill_defaults=fill_defaults,
                          as_numpy=as_numpy)
    return whole.part(shard)
