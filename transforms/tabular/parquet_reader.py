"""Reading Parquet work units (a file, or a range of its row groups) in chunks of Arrow arrays
of the spec's columns: `parquet_chunks`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.records import WorkUnit
from transforms.tabular.chunks import Chunk, jsonable
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.temporal import python_values

__all__ = []


def parquet_chunks(unit: WorkUnit, spec: ConversionSpec, batch_rows: int,
                    whole_row: bool) -> Iterator[Chunk]:
    with ExitStack() as stack:
        raw_file = stack.enter_context(
            FileSystems.open(unit.path, compression_type=CompressionTypes.UNCOMPRESSED))
        parquet = pq.ParquetFile(raw_file)
        names = parquet.schema_arrow.names
        wanted = set(spec.source_columns) | set(spec.split_key)
        columns = names if whole_row else [n for n in names if n in wanted]
        if not columns and names:
            columns = names[:1]  # still read the row counts
        meta = parquet.metadata
        start = unit.start or 0
        end = meta.num_row_groups if unit.end is None else unit.end
        offset = sum(meta.row_group(g).num_rows for g in range(start))
        index = 0
        for group in range(start, end):
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group],
                                              columns=columns, use_threads=False):
                n = batch.num_rows
                arrays = dict(zip(batch.schema.names, batch.columns, strict=True))
                yield Chunk(
                    index=index, mode="typed", num_rows=n,
                    columns={k: v for k, v in arrays.items() if whole_row or k in wanted},
                    row_numbers=offset + np.arange(1, n + 1),
                    raw=_parquet_raw(batch),
                )
                offset += n
                index += 1


def _parquet_raw(batch: pa.RecordBatch):
    def raw(i: int) -> str:
        # python_values, not as_py(): some dates have no Python object (see `temporal`).
        row = {name: jsonable(python_values(batch.column(name).slice(i, 1))[0])
               for name in batch.schema.names}
        return json.dumps(row, ensure_ascii=False, default=str)

    return raw

