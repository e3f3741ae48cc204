"""The sharded TFRecord sink: `WriteToShardedTFRecord`, write then commit.

It consumes `RecordBatch` elements (serialized Examples plus dead letters, see
`transforms.records`) and commits a complete output folder:

    DIR/<split>-SSSSS-of-NNNNN.tfrecord[.gz|.zz]
    DIR/dead_letter/dead_letter-SSSSS-of-NNNNN.jsonl
    DIR/<extra files: spec.yaml, feature_spec.json, labels.txt ...>
    DIR/manifest.json                      <- written last: the commit marker

Writing temporary shards (and the sharding policy) is `transforms.shard_writers`; the commit
protocol (reconcile, rename, side files, manifest last) is `transforms.commit`.
`skip_if_empty=False` (default) writes one empty shard for every declared split that
received no records, so consumers globbing a split always find a file; True writes none.
Dead letters are written only when there are some.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.commit import Finalize
from transforms.format.compression import Compression, parse_compression
from transforms.shard_writers import (
    TRIGGER_RESULT,
    ShardingConfig,
    SinkConfig,
    WriteGroupedShard,
    WriteRollingShards,
    batch_counts,
    deal_to_shards,
)

__all__ = ["WriteToShardedTFRecord"]


class WriteToShardedTFRecord(beam.PTransform):
    """Writes `RecordBatch`es as sharded TFRecord files, dead letters and a manifest.

    Args:
      output_dir: the output root, on any Beam filesystem.
      compression: "none" (default), "gzip" or "zlib"; anything else is refused.
      compression_level: codec level (see `transforms.format.tfrecord_format`).
      num_shards, max_shard_bytes, max_shard_records, skip_if_empty: build the
        `ShardingConfig` (see there) when `sharding` is not given.
      splits: the declared split names; used to write empty shards (see module docs).
      max_error_rate: fail the job, after committing the dead letters, when more than
        this fraction of input records was dead-lettered.
      extra_files: {relative path: bytes} written next to the shards before the manifest.
      manifest_metadata: extra top-level manifest keys (e.g. "options", "fingerprint").
      run_id: names the temp folder; a fresh one by default.
      sharding: the whole sharding policy (`transforms.shard_writers.ShardingConfig`).
      report_progress: writers leave a small heartbeat file under the temp folder every
        few seconds (records so far), which the CLI reads to show progress.
      index: write `<shard>.tfindex` (the `tfrecord` package's and DALI's index: offset
        and length per record) beside every shard, computed while writing, listed in the
        manifest; uncompressed output only (ValueError otherwise).
      compare_to: a previous output folder; the commit compares this run's stats.json with
        its own and writes drift.json (see `transforms.stats.drift`).
      fail_on_drift: "schema" or "distribution": such drift fails the job, after committing
        the dead letters, with no shard committed.

    Returns a PCollection with one element: the path of the committed manifest.
    """

    def __init__(
        self,
        output_dir: str,
        *,
        compression: str | Compression = Compression.NONE,
        compression_level: int | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_shard_records: int | None = None,
        splits: Sequence[str] = (),
        skip_if_empty: bool = False,
        max_error_rate: float | None = None,
        extra_files: Mapping[str, bytes] | None = None,
        manifest_metadata: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        report_progress: bool = False,
        sharding: ShardingConfig | None = None,
        index: bool = False,
        compare_to: str | None = None,
        fail_on_drift: str | None = None,
    ):
        super().__init__()
        self._config = SinkConfig(
            output_dir=output_dir.rstrip("/") or "/",
            compression=parse_compression(compression),
            compression_level=compression_level,
            sharding=sharding or ShardingConfig(num_shards, max_shard_bytes, max_shard_records,
                                                skip_if_empty),
            splits=tuple(splits),
            max_error_rate=max_error_rate,
            extra_files=tuple(sorted((extra_files or {}).items())),
            manifest_metadata=tuple(sorted((manifest_metadata or {}).items())),
            run_id=run_id or uuid.uuid4().hex[:16],
            report_progress=report_progress,
            index=index,
            compare_to=compare_to,
            fail_on_drift=fail_on_drift,
        )

    @property
    def config(self) -> SinkConfig:
        return self._config

    def expand(self, batches):
        config = self._config
        if config.sharding.num_shards:
            temp_files = (
                batches
                | "DealRecordsToShards" >> beam.FlatMap(deal_to_shards, config.sharding.num_shards)
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteFixedShards" >> beam.ParDo(WriteGroupedShard(config))
            )
            results = [temp_files, batches | "CountBatches" >> beam.Map(batch_counts)]
        else:
            # The writer reports each batch's counts itself: with a single consumer the
            # converter's batches stay in the fused stage and are never serialized.
            results = [batches | "WriteRollingShards" >> beam.ParDo(WriteRollingShards(config))]
        # Guarantees finalize runs (and writes a manifest) even when there is no input.
        trigger = batches.pipeline | "FinalizeTrigger" >> beam.Create([(TRIGGER_RESULT, None)])
        return (
            (*results, trigger)
            | "CollectWriteResults" >> beam.Flatten()
            | "KeyForFinalize" >> beam.Map(lambda item: (None, item))
            | "GroupForFinalize" >> beam.GroupByKey()
            | "Finalize" >> beam.ParDo(Finalize(config))
        )
