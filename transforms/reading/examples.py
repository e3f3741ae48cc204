"""`read_examples`: the records of one split (or of one part of it) as dicts of numpy
arrays, without TensorFlow, every CRC checked, from NONE, GZIP or ZLIB shards.

    from transforms.reading.examples import read_examples

    records = read_examples("out/sample", "train", shard=(0, 4))  # part 0 of 4
    len(records)                                                  # exact, from the manifest
    for record in records:                                        # {"id": array(7), ...}
        ...

Shapes follow `features.feature_layout`, values `decode.decode_record`; SequenceExamples
come as (context, feature lists) pairs of such dicts."""

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
    from the start), with an exact `len()`.

    Attributes:
      output: the split read.
      ranges: the shard ranges read, in order.
      layout: how the features are shaped, or None when the output has no feature spec.
    """

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

    Args:
      shard: `(index, count)`: read only part `index` of `count` disjoint parts that
        together hold every record once, balanced to one record (see `parts`; entering a
        compressed shard inside costs decompressing the records before, see `records`).
      fill_defaults: give an absent feature its spec default (where it has one) instead of
        leaving it out of the record.
      as_numpy: numpy arrays (a 0-d array for a dense scalar); False: Python values (a
        scalar for a dense scalar, else a list; bytes for strings).

    Raises:
      FileNotFoundError: no manifest in `output_dir`.
      ValueError: a malformed manifest or spec, an unknown split, a bad `shard`.
      TFRecordCorruptError: while iterating, on a corrupt record.
    """
    output = load_split(output_dir, split)
    whole = ExampleReader(output, whole_split(output), fill_defaults=fill_defaults,
                          as_numpy=as_numpy)
    return whole.part(shard)
