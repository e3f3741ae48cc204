"""Tabular sources to tf.train.Example batches: the Beam DoFn `ConvertTabular` (a work unit
-> one `RecordBatch` per chunk and split, `convert.convert_unit`) and its `TabularConfig`.
Metrics (namespace "tfrecord_pipeline"): `rows_read`, `records_written`, `dead_letter` and
`dead_letter_<reason>` per reason code.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.input_formats import check_tabular_format
from transforms.ordered_pool import check_threads, default_threads
from transforms.records import RecordBatch, WorkUnit
from transforms.tabular.convert import convert_unit, split_assigner
from transforms.tabular.spec import ConversionSpec

__all__ = ["DEFAULT_BATCH_ROWS", "METRICS_NAMESPACE", "ConvertTabular", "TabularConfig"]

DEFAULT_BATCH_ROWS = 16384  # measured: peak memory flat from 200k to 2M rows, no loss of speed
METRICS_NAMESPACE = "tfrecord_pipeline"


@dataclasses.dataclass(frozen=True)
class TabularConfig:
    """Configuration of `ConvertTabular` (frozen and picklable).

    Attributes:
      spec: the resolved conversion spec (see `resolve_spec`).
      fmt: "csv", "tsv", "jsonl" or "parquet".
      batch_rows: target rows per chunk (CSV and JSON chunk by bytes, so roughly).
      threads: chunks of one work unit converted at once; 0 means one per CPU the worker
        may use (`transforms.ordered_pool.default_threads`). Default 1 (Beam's thread): on
        2 cores a second thread gained under 0.2 s per 2M rows (the GIL) and held two
        more chunks in memory.
    """

    spec: ConversionSpec
    fmt: str
    batch_rows: int = DEFAULT_BATCH_ROWS
    threads: int = 1

    def __post_init__(self):
        check_tabular_format(self.fmt)
        if not isinstance(self.batch_rows, int) or self.batch_rows < 1:
            raise ValueError(f"batch_rows must be a positive integer, got {self.batch_rows!r}")
        check_threads(self.threads)
        if self.spec.include_unlisted:
            raise ValueError("the spec has include_unlisted: true; resolve it with "
                             "transforms.tabular.resolve_spec() before converting")
        if self.fmt in ("csv", "tsv"):
            for feature in self.spec.features:
                if feature.is_list and not feature.separator:
                    raise ValueError(f"spec: feature {feature.name!r}: list features read from "
                                     f"{self.fmt.upper()} need a 'separator'")


@beam.typehints.with_output_types(RecordBatch)
class ConvertTabular(beam.DoFn):
    """Reads a tabular WorkUnit and yields RecordBatches (one per chunk and split), in key
    order."""

    def __init__(self, config: TabularConfig):
        super().__init__()
        self.config = config
        self._assigner = None
        self._threads = 1

    def setup(self):
        self._assigner = split_assigner(self.config.spec)
        self._threads = self.config.threads or default_threads()

    def process(self, unit: WorkUnit):
        if self._assigner is None:
            self.setup()
        config = self.config
        for result in convert_unit(unit, config.spec, config.fmt, config.batch_rows,
                                   self._assigner, self._threads):
            Metrics.counter(METRICS_NAMESPACE, "rows_read").inc(result.rows)
            Metrics.counter(METRICS_NAMESPACE, "records_written").inc(result.written)
            if result.dead_letters:
                Metrics.counter(METRICS_NAMESPACE, "dead_letter").inc(
                    sum(result.dead_letters.values()))
                for reason, count in result.dead_letters.items():
                    Metrics.counter(METRICS_NAMESPACE, f"dead_letter_{reason}").inc(count)
            yield from result.batches
