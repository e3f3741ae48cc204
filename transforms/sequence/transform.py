"""The Beam side of the sequence conversion: `ConvertToSequences`.

    work units -> ReadRows (ParDo) -> GroupRows (GroupByKey) -> AssembleSequences (ParDo)
               -> RecordBatches for the sharded sink

The shuffle is keyed by bucket (`transforms.sequence.buckets`), so it brings every row of a
group together, whichever work unit it came from, and thousands of groups per key. The
reading step's count batches ride through the same shuffle under keys of their own
(`rows.READ_COUNTS`): one output and one path, which every runner (Dask's included) runs
alike. Shuffled values are bytes we pickle ourselves (a fragment as an Arrow IPC stream), so
Beam's coder neither pickles nor samples objects. Metrics (as the Example conversion's):
`rows_read`, `sequences_written`, `dead_letter`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.records import RecordBatch, WorkUnit
from transforms.sequence.buckets import assemble_bucket
from transforms.sequence.rows import GROUP, READ_COUNTS, SequenceRows, read_sequence_rows, sequence_assigner
from transforms.tabular.transform import METRICS_NAMESPACE, TabularConfig

__all__ = ["AssembleSequences", "ConvertToSequences", "ReadSequenceRows"]


class _Unpickled(Iterable[SequenceRows]):
    """A GroupByKey's values unpickled, as re-iterable as the values are."""

    def __init__(self, values: Iterable[bytes]):
        self._values = values

    def __iter__(self) -> Iterator[SequenceRows]:
        return map(pickle.loads, self._values)


@beam.typehints.with_output_types(beam.typehints.Tuple[bytes, bytes])
class ReadSequenceRows(beam.DoFn):
    """Reads a tabular WorkUnit into keyed bucket rows and count batches (`rows`), pickled."""

    def __init__(self, config: TabularConfig, buckets: int = 1):
        super().__init__()
        if config.spec.sequence is None:
            raise ValueError("ReadSequenceRows needs a spec with a 'sequence:' section")
        if not isinstance(buckets, int) or buckets < 1:
            raise ValueError(f"buckets must be a positive integer, got {buckets!r}")
        self.config = config
        self.buckets = buckets
        self._assigner = None

    def setup(self):
        self._assigner = sequence_assigner(self.config.spec)

    def process(self, unit: WorkUnit):
        if self._assigner is None:
            self.setup()
        config = self.config
        for key, value in read_sequence_rows(unit, config.spec, config.fmt, config.batch_rows,
                                             self._assigner, self.buckets):
            if key.startswith(READ_COUNTS) and value.input_count:
                Metrics.counter(METRICS_NAMESPACE, "rows_read").inc(value.input_count)
            yield key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


@beam.typehints.with_output_types(RecordBatch)
class AssembleSequences(beam.DoFn):
    """One shuffled key -> RecordBatches: count batches pass, buckets are assembled."""

    def __init__(self, config: TabularConfig):
        super().__init__()
        self.config = config
        self._split_names = None

    def setup(self):
        self._split_names = sequence_assigner(self.config.spec).names

    def process(self, element):
        if self._split_names is None:
            self.setup()
        key, values = element
        if key.startswith(READ_COUNTS):  # a work unit's counts, in batch-key order
            batches = sorted(map(pickle.loads, values), key=lambda batch: (batch.key, batch.split))
        else:
            bucket = int.from_bytes(key[len(GROUP):], "big")
            batches = assemble_bucket(bucket, _Unpickled(values), self.config.spec,
                                      self._split_names)
        for batch in batches:
            if batch.records:
                Metrics.counter(METRICS_NAMESPACE, "sequences_written").inc(len(batch.records))
            if batch.dead_letters:
                Metrics.counter(METRICS_NAMESPACE, "dead_letter").inc(len(batch.dead_letters))
            yield batch


class ConvertToSequences(beam.PTransform):
    """Work units in, RecordBatches of serialized SequenceExamples out (module docstring)."""

    def __init__(self, config: TabularConfig, buckets: int = 1):
        super().__init__()
        self.config = config
        # Fails fast on a spec without `sequence:`; `buckets`: `buckets.bucket_count`.
        self._read = ReadSequenceRows(config, buckets)

    def expand(self, units):
        return (
            units
            | "ReadRows" >> beam.ParDo(self._read)
            | "GroupRows" >> beam.GroupByKey()
            | "AssembleSequences" >> beam.ParDo(AssembleSequences(self.config))
        )
