"""`grain_source`: one split as a random-access Grain data source (`MapDataset.source(...)`,
`DataLoader(data_source=...)`): `source[i]` is record i in manifest order, as `read_examples`.

Random access needs uncompressed shards with index sidecars; anything else is refused up
front with what to do, never read slowly. Grain itself is not imported: the source only
implements its protocol, and pickles (for Grain's workers) without its loaded sidecars."""

from __future__ import annotations

import bisect
import itertools
import operator
from typing import Any

from transforms.format.compression import Compression
from transforms.reading.decode import decode_record
from transforms.reading.features import record_layout
from transforms.reading.output import SplitOutput, load_split
from transforms.reading.records import read_payload_at
from transforms.reading.sidecars import SIDECAR_SUFFIX, RecordIndex

__all__ = ["TFRecordSource", "grain_source"]


class TFRecordSource:
    """Record `i` of a split, read at its indexed offset (see the module docstring)."""

    def __init__(self, output: SplitOutput, *, fill_defaults: bool = False, as_numpy: bool = True):
        if output.compression is not Compression.NONE:
            raise ValueError(
                f"{output.output_dir}: random access needs uncompressed shards, and this output "
                f"is {output.compression.value}-compressed; convert again with --compression "
                "none, then index it with `tfrecord-pipeline index DIR`")
        missing = [shard.path for shard in output.shards if shard.sidecar is None]
        if missing:
            raise ValueError(
                f"{output.output_dir}: random access needs an index sidecar beside every shard; "
                f"{len(missing)} of {len(output.shards)} have none (e.g. {missing[0]}"
                f"{SIDECAR_SUFFIX}); write them with `tfrecord-pipeline index DIR`")
        self.output = output
        self._layout = record_layout(output.feature_spec) if output.feature_spec else None
        self._fill_defaults = fill_defaults
        self._as_numpy = as_numpy
        # The first record of each shard, then the total.
        self._starts = list(itertools.accumulate((s.records for s in output.shards), initial=0))
        self._indexes: dict[int, RecordIndex] = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, record: int) -> Any:
        record = operator.index(record)
        if record < 0:
            record += len(self)
        if not 0 <= record < len(self):
            raise IndexError(f"record {record} of a split of {len(self)} records")
        shard_number = bisect.bisect_right(self._starts, record) - 1
        shard = self.output.shards[shard_number]
        if shard_number not in self._indexes:
            self._indexes[shard_number] = shard.record_index()  # checked against the manifest
        index = self._indexes[shard_number]
        position = record - self._starts[shard_number]
        payload = read_payload_at(shard.path, int(index.offsets[position]),
                                  int(index.lengths[position]))
        return decode_record(payload, self._layout, fill_defaults=self._fill_defaults,
                             as_numpy=self._as_numpy)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_indexes"] = {}  # reloaded by each worker, as it needs them
        return state

    def __repr__(self) -> str:
        return (f"TFRecordSource({self.output.output_dir!r}, split={self.output.split!r}, "
                f"records={len(self)}, shards={len(self.output.shards)})")


def grain_source(output_dir: str, split: str, *, fill_defaults: bool = False,
                 as_numpy: bool = True) -> TFRecordSource:
    """The random-access source of `split` in the committed output at `output_dir`;
    ValueError for a compressed output or a shard without a sidecar (see `load_split` too)."""
    return TFRecordSource(load_split(output_dir, split), fill_defaults=fill_defaults,
                          as_numpy=as_numpy)
