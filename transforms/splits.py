"""Stable assignment of records to splits by hashing a key.

The hash must give the same split for the same key on every run, runner, machine and
Python version, so it is a fixed function of the key's bytes (CRC32C), never Python's
salted `hash()`. Beam-free.

The keys tabular conversions hash: the UTF-8 text of the spec's `split_key` columns joined
by the byte 0x1F (`transforms.tabular.chunks.key_of`, `split_keys`): for CSV the cell text as
written, for JSON and Parquet the value's text (strings as they are, numbers without a
trailing `.0`, `true`/`false`, dates and times as Python writes them (see
`transforms.tabular.temporal`), missing as empty), so an id written as `17` in CSV and `17` in
JSON lands in the same split. Without `split_key` the key is the whole row: all cells joined
by 0x1F (CSV), the line (JSON Lines), all columns' text (Parquet). Rows that become dead
letters are assigned a split too (rows that cannot be parsed, by their raw text), so each
split's counts reconcile. Images: the `split_key` columns of a manifest, else the image URI.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import crc32c

__all__ = ["DEAD_LETTER_SPLIT", "SplitAssigner", "check_split_name"]

#: Reserved: the folder of the dead letters, and the split of a batch of dead letters that
#: belong to no split (an image manifest row naming an undeclared split, a file beside the
#: split folders): the commit counts them in the run's totals, never as a split, so a typo
#: in a split column does not make a split appear (and, next run, vanish).
DEAD_LETTER_SPLIT = "dead_letter"


def check_split_name(name: object, dead_letters: bool = False) -> str:
    """Returns `name` when it can name a split, else raises ValueError: the one rule of
    split names. A name becomes a file name prefix (`<split>-00000-of-00001.tfrecord`), so it
    is not hidden nor the dead letters' folder (`dead_letters`: a batch of dead letters may
    carry it, as their split of no split)."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith(".") \
            or (name == DEAD_LETTER_SPLIT and not dead_letters) or name.strip() != name:
        raise ValueError(f"invalid split name {name!r}: use a non-empty name without '/', "
                         f"leading '.', surrounding spaces, or the reserved {DEAD_LETTER_SPLIT!r}")
    return name


@dataclasses.dataclass(frozen=True)
class SplitAssigner:
    """Maps a key to a split with probability proportional to the split's weight, e.g.
    `{"train": 80, "validation": 10, "test": 10}`; splits keep the order given (as YAML does)."""

    weights: Mapping[str, float]

    def __post_init__(self):
        if not self.weights:
            raise ValueError("at least one split is required")
        for name, weight in self.weights.items():
            check_split_name(name)
            if not weight > 0:
                raise ValueError(f"split {name!r} needs a positive weight, got {weight!r}")

    @property
    def names(self) -> Sequence[str]:
        return tuple(self.weights)

    def assign(self, key: bytes) -> str:
        return self.assign_many([key])[0]

    def assign_many(self, keys: Sequence[bytes]) -> list[str]:
        """The split of each key: the one whose share of [0, 2**32) holds the key's CRC32C."""
        names = self.names
        if len(names) == 1:
            return [names[0]] * len(keys)
        weights = [float(weight) for weight in self.weights.values()]
        total = sum(weights)
        bounds = [int(round(acc / total * 2**32)) for acc in itertools.accumulate(weights)]
        bounds[-1] = 2**32
        return [names[bisect.bisect_right(bounds, crc32c.crc32c(k))] for k in keys]
