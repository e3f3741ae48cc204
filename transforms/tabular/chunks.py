"""What every tabular reader yields and shares: the `Chunk` of parsed rows with its `Failure`s
(rows rejected while reading), opening an input file (decompressed by its suffix), the one
definition of a row's split key (`key_of`, `split_keys`: column texts joined by
`KEY_SEPARATOR`), the Arrow block size for a chunk's rows, and the JSON-compatible view of a
value."""

from __future__ import annotations

import base64
import dataclasses
import gzip
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.tabular.byte_ranges import RangeReader
from transforms.tabular.columns import key_text_array
from transforms.tabular.values import canonical_text

try:  # isal decompresses gzip several times faster than the stdlib.
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gzip = gzip

__all__ = [
    "Chunk",
    "Failure",
    "KEY_SEPARATOR",
    "MAX_BLOCK",
    "MIN_BLOCK",
    "block_size",
    "jsonable",
    "key_of",
    "open_input",
    "split_keys",
    "valid_utf8",
]


KEY_SEPARATOR = b"\x1f"  # ASCII unit separator: joins split-key values
MIN_BLOCK = 1 << 16
MAX_BLOCK = 64 << 20


def open_input(path: str, stack: ExitStack, start: int | None = None,
               end: int | None = None) -> Any:
    """Opens `path` for binary reading through Beam FileSystems; .gz is decompressed.

    `start`/`end`: only the bytes [start, end) of an uncompressed file (a byte-range work
    unit, see `transforms.tabular.split_units`)."""
    if start is not None:
        raw = stack.enter_context(
            FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))
        return stack.enter_context(RangeReader(raw, start, end))
    if path.endswith(".gz"):
        raw = stack.enter_context(
            FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))
        return stack.enter_context(_gzip.GzipFile(fileobj=raw, mode="rb"))
    return stack.enter_context(FileSystems.open(path, compression_type=CompressionTypes.AUTO))


@dataclasses.dataclass
class Failure:
    """An input row rejected while reading (e.g. ragged_row, invalid_json)."""

    row: int | None
    reason: str
    message: str
    raw: str | bytes | None
    key: bytes
    details: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Chunk:
    """The rows of one chunk of input (the `index`th of its work unit).

    Attributes:
      mode: "text" (CSV cells as Arrow strings), "typed" (Arrow arrays) or "python"
        (lists of parsed JSON values).
      num_rows: parsed rows (failures excluded).
      columns: column name -> values of the parsed rows; an absent column is missing in
        every row.
      row_numbers: 1-based row number of each parsed row within its file.
      raw, details: the raw record and extra dead-letter fields (e.g. the JSON line number)
        of parsed row i.
      whole_row_keys: split key bytes of every parsed row when the spec has no split_key;
        None: the `split_keys` of all the chunk's columns.
      escapes: CSV only: the input held bytes invalid in its encoding.
    """

    index: int
    mode: str
    num_rows: int
    columns: Mapping[str, Any]
    row_numbers: np.ndarray
    raw: Callable[[int], str | bytes | None]
    whole_row_keys: Callable[[], list[bytes]] | None = None
    failures: list[Failure] = dataclasses.field(default_factory=list)
    escapes: bool = False
    details: Callable[[int], dict] = lambda i: {}

    @property
    def input_count(self) -> int:
        return self.num_rows + len(self.failures)


def block_size(batch_rows: int, bytes_per_row: float) -> int:
    return int(min(max(batch_rows * bytes_per_row, MIN_BLOCK), MAX_BLOCK))


def jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float):
        return value if np.isfinite(value) else canonical_text(value)
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def key_of(values: Iterable[Any]) -> bytes:
    """One row's split key: the `canonical_text` of each key value, joined by KEY_SEPARATOR."""
    return KEY_SEPARATOR.join(_utf8(canonical_text(value)) for value in values)


def split_keys(chunk: Chunk, names: Sequence[str]) -> pa.Array:
    """Every parsed row's split key over columns `names` (binary; `key_of`, column by column)."""
    n = chunk.num_rows
    if chunk.mode == "python":
        columns = [chunk.columns.get(name) or [None] * n for name in names]
        return pa.array([key_of(column[i] for column in columns) for i in range(n)], pa.binary())
    arrays = [key_text_array(chunk.columns.get(name), n, text=chunk.mode == "text")
              for name in names] or [key_text_array(None, n, text=True)]
    if len(arrays) == 1:
        return arrays[0]
    return pc.binary_join_element_wise(*arrays, pa.scalar(KEY_SEPARATOR))


def _utf8(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def valid_utf8(data: bytes | memoryview) -> bool:
    """Whether `data` is valid UTF-8 (checked by Arrow, without decoding to `str`)."""
    offsets = pa.py_buffer(np.array([0, len(data)], np.int64))
    array = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True
