"""What one writer hands the commit: the `UnitResult` of one
`transforms.shard_writers.write_unit` call (a work unit, or a bucket of sequences). The commit
orders results by `UnitResult.owner` (the first batch key the unit wrote), so what it builds
does not depend on which worker or process wrote a unit, nor when. Beam-free and picklable.
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
    """A shard's `.tfindex` sidecar, written with it (uncompressed output with `index`)."""

    temp_path: str
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One closed temporary file: a TFRecord shard of `split`, or a dead-letter file.

    `first_key` orders a split's files for their final names: the batch key of its first
    record and the record's position in that batch. `dead_letters` counts a dead-letter file's
    letters per split ((split, count) pairs; empty for a shard)."""

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
    """One split's share of a unit.

    Attributes:
      input: input rows the converter read for the split.
      written: records written (SequenceExamples count once each).
      rows: input rows those records hold, when a record holds several (sequences); None:
        one each.
      dead_letters: rows dead-lettered.
      presence: (feature, records carrying it, min values, max values) per feature; None
        when some records were written without it being counted.
      stats: the records' statistics partial (`transforms.stats.sketches.BatchStats`); None
        when some records were written without statistics.
    """

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
    """Everything the commit learns of one written unit.

    Attributes:
      owner: the unit's first batch key ("" for a unit that read nothing).
      splits: per split, sorted by name.
      files: the temporary files written, in the order they were opened.
      dead_letter_reasons: (reason, count) pairs, sorted.
      examples: a few dead letters per reason (`transforms.stats.dead_letters`).
    """

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
