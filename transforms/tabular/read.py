"""Reading a tabular work unit in columnar chunks: `read_chunks` dispatches to the reader of
the format family (`csv_reader`, `json_reader`, `parquet_reader`).

A reader yields `Chunk`s (`transforms.tabular.chunks`): the parsed rows of a few tens of
thousands of input rows, as columns (Arrow arrays, or Python values for JSON lines that Arrow
cannot read), plus the rows that failed while reading (ragged CSV rows, invalid JSON lines)
as `Failure`s. Every file is opened through Beam's `FileSystems` (gs:// and the other Beam
filesystems work); `.gz` inputs are decompressed transparently (with `isal` when installed).
A CSV or JSON Lines unit may be a byte range of a file (`split_units`): its rows keep their
numbers within the whole file.

CSV specifics:
* All columns are read as strings, so that every conversion error is ours, row by row.
  An empty unquoted cell is missing (null); a quoted "" is the empty string.
* Valid UTF-8 passes through to pyarrow undecoded; bytes invalid in the spec's encoding are
  carried as private-use code points (see `transforms.tabular.values.unescape`), so a row
  with bad bytes becomes an `invalid_encoding` dead letter, not a crash.
* Rows with the wrong number of fields are skipped by pyarrow's invalid_row_handler and
  become `ragged_row` failures; pyarrow reports their position, from which the 1-based
  data row number of every row is recomputed. Blank lines are not rows.
"""

from __future__ import annotations

from collections.abc import Iterator

from transforms.input_formats import check_tabular_format
from transforms.records import WorkUnit
from transforms.tabular.chunks import Chunk
from transforms.tabular.csv_reader import csv_chunks
from transforms.tabular.json_reader import JsonLinesReader
from transforms.tabular.parquet_reader import parquet_chunks
from transforms.tabular.spec import ConversionSpec

__all__ = ["read_chunks"]


def read_chunks(unit: WorkUnit, fmt: str, spec: ConversionSpec, batch_rows: int,
                *, whole_row: bool = False) -> Iterator[Chunk]:
    """Reads one work unit in chunks of roughly `batch_rows` rows.

    `whole_row`: the split key is the whole row (all columns must be read).
    """
    if fmt in ("csv", "tsv"):
        return csv_chunks(unit, fmt, spec, batch_rows)
    if fmt == "jsonl":
        return JsonLinesReader(spec, batch_rows).chunks(unit)
    if fmt == "parquet":
        return parquet_chunks(unit, spec, batch_rows, whole_row)
    check_tabular_format(fmt)
    raise AssertionError(f"no reader for {fmt!r}")
