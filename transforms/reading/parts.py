"""A split cut into `count` disjoint parts that together hold every record once, for
readers on several hosts, ranks or workers: contiguous ranges of the records in manifest
order whose sizes differ by at most one record, however many the shards (a part may start
or end inside a shard, see `records`). A part can be cut again (a rank's part among its
DataLoader workers): every reader computes the same cut from the manifest alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from transforms.reading.output import Shard, SplitOutput

__all__ = ["ShardRange", "check_part", "select_part", "whole_split"]


@dataclasses.dataclass(frozen=True)
class ShardRange:
    """Records `start` (included) to `stop` (excluded) of a shard."""

    shard: Shard
    start: int
    stop: int

    @property
    def records(self) -> int:
        return self.stop - self.start


def whole_split(output: SplitOutput) -> list[ShardRange]:
    """Every record of the split, shard by shard in the manifest's order."""
    return [ShardRange(shard, 0, shard.records) for shard in output.shards]


def check_part(part: tuple[int, int]) -> tuple[int, int]:
    """`part` as `(index, count)` integers with 0 <= index < count; else ValueError."""
    try:
        index, count = part
    except (TypeError, ValueError):
        raise ValueError(f"a part is (index, count), got {part!r}") from None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (index, count)) \
            or count < 1 or not 0 <= index < count:
        raise ValueError(f"a part is (index, count) with 0 <= index < count, got {part!r}")
    return index, count


def select_part(ranges: Sequence[ShardRange], part: tuple[int, int]) -> list[ShardRange]:
    """Part `(index, count)` of `ranges` (a split or a part of one): records
    `index * total // count` to `(index + 1) * total // count` of them."""
    index, count = check_part(part)
    total = sum(piece.records for piece in ranges)
    low, high = index * total // count, (index + 1) * total // count
    chosen, position = [], 0
    for piece in ranges:
        start, stop = max(low, position), min(high, position + piece.records)
        if start < stop:
            offset = piece.start - position
            chosen.append(ShardRange(piece.shard, start + offset, stop + offset))
        position += piece.records
    return chosen
