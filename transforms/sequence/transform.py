"""The Beam side of the sequence conversion: `ConvertToSequences`.

    work units -> ReadRows (ParDo) -> GroupRows (GroupByKey) -> AssembleSequences (ParDo)
               -> RecordBatches for the sharded sink

The shuffle brings every row of a group together, whichever file and work unit it came
from. The reading step's count batches ride through the same shuffle under keys of their
own (`rows.READ_COUNTS`), so the transform has a single output and a single path, which
every runner (Dask's included) runs alike. Each group's output is deterministic (see
`transforms.sequence.assemble`).

Metrics (namespace "tfrecord_pipeline", as the Example conversion): `rows_read`,
`sequences_written`, `dead_letter`.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.coders import RecordBatchCoder  # noqa: F401 - registers the coder
from transforms.records import RecordBatch, WorkUnit
from transforms.sequence.assemble import assemble_sequences
from transforms.sequence.rows import GROUP, READ_COUNTS, read_sequence_rows, sequence_assigner
from transforms.tabular.transform import METRICS_NAMESPACE, TabularConfig
from transforms.worker import prepare_worker

__all__ = ["AssembleSequences", "ConvertToSequences", "ReadSequenceRows"]


@beam.typehints.with_output_types(beam.typehints.Tuple[bytes, Any])
class ReadSequenceRows(beam.DoFn):
    """Reads a tabular WorkUnit into keyed group rows and count batches (`rows`)."""

    def __init__(self, config: TabularConfig):
        super().__init__()
        if config.spec.sequence is None:
            raise ValueError("ReadSequenceRows needs a spec with a 'sequence:' section")
        self.config = config
        self._assigner = None

    def setup(self):
        prepare_worker()
        self._assigner = sequence_assigner(self.config.spec)

    def process(self, element: WorkUnit):
        if self._assigner is None:
            self.setup()
        config = self.config
        for key, value in read_sequence_rows(element, config.spec, config.fmt, config.batch_rows,
                                             self._assigner):
            if key.startswith(READ_COUNTS):
                Metrics.counter(METRICS_NAMESPACE, "rows_read").inc(value.input_count)
            yield key, value


@beam.typehints.with_output_types(RecordBatch)  # encoded by RecordBatchCoder
class AssembleSequences(beam.DoFn):
    """One shuffled key -> RecordBatches: count batches pass, groups are assembled."""

    def __init__(self, config: TabularConfig):
        super().__init__()
        self.config = config

    def setup(self):
        prepare_worker()

    def process(self, element):
        key, values = element
        if key.startswith(READ_COUNTS):
            batches = values
        else:
            batches = assemble_sequences(key[len(GROUP):], values, self.config.spec)
        for batch in batches:
            if batch.records:
                Metrics.counter(METRICS_NAMESPACE, "sequences_written").inc(len(batch.records))
            if batch.dead_letters:
                Metrics.counter(METRICS_NAMESPACE, "dead_letter").inc(len(batch.dead_letters))
            yield batch


class ConvertToSequences(beam.PTransform):
    """Work units in, RecordBatches of serialized SequenceExamples out (module docstring)."""

    def __init__(self, config: TabularConfig):
        super().__init__()
        self.config = config
        self._read = ReadSequenceRows(config)  # fails fast on a spec without `sequence:`

    def expand(self, units):
        return (
            units
            | "ReadRows" >> beam.ParDo(self._read)
            | "GroupRows" >> beam.GroupByKey()
            | "AssembleSequences" >> beam.ParDo(AssembleSequences(self.config))
        )
