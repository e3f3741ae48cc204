"""What one `transforms.shard_writers.write_unit` call hands the commit: a `UnitResult`.
The commit orders results by `owner` (the unit's first batch key), so what it builds does not
depend on which worker or process wrote a unit, nor when. Beam-free and picklable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

__all__ = ["DEAD_LETTER_KIND", "TFRECORD_KIND", "IndexFile", "ShardFile", "SplitResult", "UnitResult",
           "count_by_split"]

TFRECORD_KIND = "tfrecord"
DEAD_LETTER_KIND = "dead_letter"


@dataclasses.dataclass(frozen=True)
class IndexFile:
    """A shard's `.tfindex` sidecar."""

    temp_path: str
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One closed temporary file: a TFRecord shard of `split`, or a dead-letter file.
    `first_key` (its first record's batch key and position in that batch) orders a split's
    files for their final names; `dead_letters`: a dead-letter file's (split, count) pairs."""

    temp_path: str
    kind: str
    split: str
    first_key: str
    records: int
    bytes: int
    sha256: str
    index: IndexFile | None = None
    dead_letters: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class SplitResult:
    """One split's share of a unit, summed over its `RecordBatch`es (see there): `rows` is
    None when each record holds one row; `presence` and `stats` (a `BatchStats` partial) are
    None when some records were written without them."""

    split: str
    input: int = 0
    written: int = 0
    rows: int | None = None
    dead_letters: int = 0
    presence: tuple[tuple[str, int, int, int], ...] | None = ()
    stats: Any = None

    @property
    def rows_written(self) -> int:
        return self.written if self.rows is None else self.rows


@dataclasses.dataclass(frozen=True)
class UnitResult:
    """Everything the commit learns of one written unit: `owner` is its first batch key (""
    when it read nothing), `splits` sorted by name, `files` in the order opened, `examples` a
    few dead letters per reason (`transforms.stats.dead_letters`)."""

    owner: str
    splits: tuple[SplitResult, ...] = ()
    files: tuple[ShardFile, ...] = ()
    dead_letter_reasons: tuple[tuple[str, int], ...] = ()
    examples: tuple = ()


def count_by_split(files: Iterable[ShardFile]) -> tuple[dict[str, int], dict[str, int]]:
    """(records in shards, dead letters in dead-letter files) per split."""
    records: dict[str, int] = {}
    dead: dict[str, int] = {}
    for file in files:
        if file.kind == TFRECORD_KIND:
            records[file.split] = records.get(file.split, 0) + file.records
        for split, count in file.dead_letters:
            dead[split] = dead.get(split, 0) + count
    return records, dead
