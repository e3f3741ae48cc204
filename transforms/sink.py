"""The sharded TFRecord sink: `WriteToShardedTFRecord`, write then commit.

It consumes `RecordBatch` elements (serialized Examples plus dead letters, see
`transforms.records`) and commits a complete output folder:

    DIR/<split>-SSSSS-of-NNNNN.tfrecord[.gz|.zz]
    DIR/dead_letter/dead_letter-SSSSS-of-NNNNN.jsonl
    DIR/<extra files: spec.yaml, feature_spec.json, labels.txt ...>
    DIR/manifest.json                      <- written last: the commit marker

A work unit's batches are written, in key order, by one `shard_writers.write_unit` call, and
the commit (`transforms.commit`) takes every unit's result, so the output depends on the work
units alone. `WriteToShardedTFRecord` groups batches by work unit first; `ConvertAndWrite`
writes what a converter makes of each element without that shuffle.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from transforms.commit import Finalize
from transforms.format.compression import Compression, parse_compression
from transforms.records import unit_of
from transforms.resume import record_unit
from transforms.shard_writers import ShardingConfig, SinkConfig, write_unit
from transforms.unit_result import UnitResult

__all__ = ["Commit", "ConvertAndWrite", "WriteToShardedTFRecord"]


class WriteToShardedTFRecord(beam.PTransform):
    """Writes `RecordBatch`es as sharded TFRecord files, dead letters and a manifest.

    Returns a PCollection with one element: the path of the committed manifest.

    Args:
      output_dir: the output root, on any Beam filesystem.
      compression: "none" (default), "gzip" or "zlib".
      num_shards, max_shard_bytes, max_shard_records, skip_if_empty: the `ShardingConfig`
        when `sharding` is not given.
      splits: the declared split names: each gets a shard, unless `skip_if_empty`.
      max_error_rate: fail the job, after committing the dead letters, when more than this
        fraction of input records was dead-lettered.
      extra_files: {relative path: bytes} written next to the shards before the manifest.
      manifest_metadata: extra top-level manifest keys (e.g. "options", "fingerprint").
      run_id: names the temp folder; a fresh one by default.
      report_progress: writers leave heartbeat files for the CLI's progress.
      index: write `<shard>.tfindex` (the `tfrecord` package's and DALI's index: offset and
        length per record) beside every shard, while writing; uncompressed output only.
      compare_to: a previous output folder whose stats.json this run's is compared with in
        drift.json (`transforms.stats.drift`).
      fail_on_drift: "schema" or "distribution": such drift fails the job, after committing
        the dead letters, with no shard committed.
      append: commit the next generation of the output in `output_dir`: its shards stay,
        listed with the new ones (`transforms.commit`); no `num_shards`.
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
        append: bool = False,
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
            append=append,
        )

    @property
    def config(self) -> SinkConfig:
        return self._config

    def expand(self, batches):
        return (
            batches
            | "KeyByWorkUnit" >> beam.Map(lambda batch: (unit_of(batch.key), batch))
            | "GroupByWorkUnit" >> beam.GroupByKey()
            | "WriteWorkUnits" >> beam.Map(_write_group, self._config)
            | "Commit" >> Commit(self._config)
        )


def _write_group(keyed, config: SinkConfig):
    return write_unit(config, sorted(keyed[1], key=lambda batch: (batch.key, batch.split)))


class ConvertAndWrite(beam.DoFn):
    """Each element through `converter` (a DoFn yielding one unit's RecordBatches in key
    order) and `write_unit`: yields one `UnitResult` per element. `record_units`: the elements
    are work units, each recorded once written (`transforms.resume`), so that an interrupted
    run can be resumed."""

    def __init__(self, converter: beam.DoFn, config: SinkConfig, record_units: bool = False):
        self._converter = converter
        self._config = config
        self._record_units = record_units

    def setup(self):
        self._converter.setup()

    def process(self, element) -> Iterator[UnitResult]:  # annotated: see `commit.Finalize`
        result = write_unit(self._config, self._converter.process(element))
        if self._record_units:
            record_unit(self._config.temp_dir, element, result)
        yield result


class Commit(beam.PTransform):
    """Every `UnitResult` to one committed output; returns a PCollection of the manifest path."""

    def __init__(self, config: SinkConfig):
        super().__init__()
        self._config = config

    def expand(self, results):
        # The trigger makes the commit run (and write a manifest) even when there is no input.
        trigger = results.pipeline | "CommitTrigger" >> beam.Create([None])
        return (
            (results, trigger)
            | "CollectResults" >> beam.Flatten()
            | "KeyForCommit" >> beam.Map(lambda item: (None, item))
            | "GroupForCommit" >> beam.GroupByKey()
            | "Finalize" >> beam.ParDo(Finalize(self._config))
        )
