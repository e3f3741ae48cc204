"""Reading the index sidecars of uncompressed shards (`<shard>.tfindex`, one "OFFSET LENGTH"
line per framed record; format in `transforms.format.tfrecord_index`).

A sidecar is only trusted when it agrees with the manifest: one line per record, records
back to back from offset 0, ending at the shard's size. Anything else belongs to another
file (or run) and is refused, never used to seek."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from transforms.format.tfrecord_index import INDEX_SUFFIX
from transforms.reading.files import open_binary

__all__ = ["SIDECAR_SUFFIX", "RecordIndex", "read_sidecar"]

#: The sidecar of `x.tfrecord` is `x.tfrecord.tfindex` (what `tfrecord_index` writes).
SIDECAR_SUFFIX = INDEX_SUFFIX
# Every number of a line fits in 20 digits; a sidecar far longer than that per record is
# not one, and is refused before it is read whole.
_MAX_LINE_BYTES = 48


class RecordIndex(NamedTuple):
    """Where each record of a shard lies: int64 arrays, one entry per record."""

    offsets: np.ndarray
    lengths: np.ndarray


def read_sidecar(path: str, shard_path: str, records: int, size: int) -> RecordIndex:
    """The record index in the sidecar at `path` of the shard at `shard_path`, which the
    manifest says holds `records` records in `size` bytes; ValueError naming both files
    when the sidecar is not "OFFSET LENGTH" lines describing exactly that shard."""
    with open_binary(path) as handle:
        raw = handle.read(_MAX_LINE_BYTES * max(records, 1) + 1)
    where = f"index sidecar {path} of {shard_path}"
    try:  # an odd count of numbers does not reshape either
        pairs = np.array(raw.split(), dtype=np.int64).reshape(-1, 2)
    except (ValueError, OverflowError):
        raise ValueError(f"{where}: not lines of two integers (OFFSET LENGTH)") from None
    offsets, lengths = pairs[:, 0].copy(), pairs[:, 1].copy()
    if len(offsets) != records:
        raise ValueError(f"{where}: {len(offsets)} records indexed, the manifest lists {records}")
    ends = offsets + lengths
    back_to_back = records == 0 or (offsets[0] == 0 and np.array_equal(offsets[1:], ends[:-1]))
    if not back_to_back or np.any(lengths <= 0) or (records and ends[-1] != size):
        raise ValueError(f"{where}: the records indexed do not tile the shard's {size} bytes "
                         "back to back: it indexes another file")
    return RecordIndex(offsets, lengths)
