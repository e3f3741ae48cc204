"""Reading a tabular work unit in columnar chunks: `read_chunks` dispatches to the reader of
the format (`csv_reader`, `json_reader`, Parquet's here), each yielding `Chunk`s
(`transforms.tabular.chunks`): the parsed rows of a few tens of thousands of input rows as
columns, plus the rows that failed while reading as `Failure`s. Files are opened through
Beam's `FileSystems`; `.gz` inputs are decompressed. A CSV or JSON Lines unit may be a byte
range of a file (`split_units`): its reader numbers rows (and lines) from its start, and
`read_chunks` adds those of the file before it (`extra["row_offset"]`, `["line_offset"]`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.input_formats import check_tabular_format
from transforms.records import WorkUnit
from transforms.tabular.chunks import Chunk, jsonable
from transforms.tabular.csv_reader import csv_chunks
from transforms.tabular.json_reader import JsonLinesReader
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.temporal import python_values

__all__ = ["read_chunks"]


def read_chunks(unit: WorkUnit, fmt: str, spec: ConversionSpec, batch_rows: int,
                *, whole_row: bool = False) -> Iterator[Chunk]:
    """Reads one work unit in chunks of roughly `batch_rows` rows.

    `whole_row`: the split key is the whole row (all columns must be read).
    """
    if fmt in ("csv", "tsv"):
        return _in_file(csv_chunks(unit, fmt, spec, batch_rows), unit)
    if fmt == "jsonl":
        return _in_file(JsonLinesReader(spec, batch_rows).chunks(unit), unit)
    if fmt == "parquet":
        return _parquet_chunks(unit, spec, batch_rows, whole_row)
    check_tabular_format(fmt)
    raise AssertionError(f"no reader for {fmt!r}")


def _in_file(chunks: Iterator[Chunk], unit: WorkUnit) -> Iterator[Chunk]:
    """The chunks of a text unit numbered within its file: a byte range's rows and lines
    follow those of the file before it (see `split_units`)."""
    placed = (unit.extra or {}) if unit.start else {}
    rows, lines = int(placed.get("row_offset", 0)), int(placed.get("line_offset", 0))
    if not rows and not lines:
        return chunks
    return _shifted(chunks, rows, lines)


def _shifted(chunks: Iterator[Chunk], rows: int, lines: int) -> Iterator[Chunk]:
    def in_file(details: dict) -> dict:
        return {**details, "line": details["line"] + lines} if "line" in details else details

    with contextlib.closing(chunks):
        for chunk in chunks:
            for failure in chunk.failures:
                failure.row = None if failure.row is None else failure.row + rows
                failure.details = in_file(failure.details)
            yield dataclasses.replace(chunk, row_numbers=chunk.row_numbers + rows,
                                      details=lambda i, of=chunk.details: in_file(of(i)))


def _parquet_chunks(unit: WorkUnit, spec: ConversionSpec, batch_rows: int,
                    whole_row: bool) -> Iterator[Chunk]:
    """A Parquet work unit (a file, or a range of its row groups) in chunks of Arrow arrays."""
    with FileSystems.open(unit.path, compression_type=CompressionTypes.UNCOMPRESSED) as raw_file:
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
