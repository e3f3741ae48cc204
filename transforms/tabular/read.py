"""Planning and reading tabular inputs (CSV/TSV, JSON Lines, Parquet) in columnar chunks.

Beam-free except for `apache_beam.io.filesystems.FileSystems`, through which every file
is opened (so gs:// and the other Beam filesystems work). `.gz` inputs are decompressed
transparently (with `isal` when installed).

A reader yields `Chunk`s: the parsed rows of a few tens of thousands of input rows, as
columns (Arrow arrays, or Python values for JSON lines that Arrow cannot read), plus the
rows that failed while reading (ragged CSV rows, invalid JSON lines) as `Failure`s.

CSV specifics:
* All columns are read as strings, so that every conversion error is ours, row by row.
  An empty unquoted cell is missing (null); a quoted "" is the empty string.
* The bytes are decoded with the spec's encoding before pyarrow sees them; bytes that are
  invalid in it are carried as private-use code points (see `tabular_values.unescape`),
  so a row with bad bytes becomes an `invalid_encoding` dead letter, not a crash.
* Rows with the wrong number of fields are skipped by pyarrow's invalid_row_handler and
  become `ragged_row` failures; pyarrow reports their position, from which the 1-based
  data row number of every row is recomputed. Blank lines are not rows.
"""

from __future__ import annotations

import base64
import codecs
import collections
import csv
import dataclasses
import gzip
import io
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.records import WorkUnit
from transforms.tabular.columns import key_text_array
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.values import ESCAPE_BASE, canonical_text, unescape

try:  # isal decompresses gzip several times faster than the stdlib.
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gzip = gzip

__all__ = [
    "FORMATS",
    "Chunk",
    "Failure",
    "open_input",
    "plan_tabular",
    "read_chunks",
]

FORMATS = ("csv", "tsv", "jsonl", "parquet")
KEY_SEPARATOR = b"\x1f"  # ASCII unit separator: joins split-key values
_MIN_BLOCK, _MAX_BLOCK = 1 << 16, 64 << 20
_MAX_RETRY_BLOCK = 1 << 30  # pyarrow block sizes are 32-bit
# Blocks Arrow's CSV reader may read ahead of the batches taken from it (see _ReadAhead).
_READAHEAD_BLOCKS = 4
_ESCAPE_ERRORS = "tfrecord_pipeline.escape"
# UTF-8 of U+10FF00..U+10FFFF starts with these bytes.
_ESCAPE_PREFIX = chr(ESCAPE_BASE).encode("utf-8")[:2]


def _holds_escape_prefix(data: bytes | bytearray) -> bool:
    """Whether `data` holds `_ESCAPE_PREFIX`.

    The one-byte search is `memchr` (~10x faster than a two-byte `in`); its byte, 0xF4,
    leads only code points from U+100000, which real text almost never holds.
    """
    return _ESCAPE_PREFIX[:1] in data and _ESCAPE_PREFIX in data


def _escape_invalid(error: UnicodeError):
    if isinstance(error, UnicodeDecodeError):
        bad = error.object[error.start:error.end]
        return "".join(chr(ESCAPE_BASE + b) for b in bad), error.end
    raise error


codecs.register_error(_ESCAPE_ERRORS, _escape_invalid)


# ---------------------------------------------------------------------------------------
# Planning.


def _expand(patterns: str | Sequence[str]) -> list:
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    found = {}
    for pattern, result in zip(patterns, FileSystems.match(patterns), strict=True):
        if not result.metadata_list:
            raise FileNotFoundError(f"no input file matches {pattern!r}")
        for metadata in result.metadata_list:
            found[metadata.path] = metadata
    return [found[path] for path in sorted(found)]


def plan_tabular(input_glob: str | Sequence[str], fmt: str) -> list[WorkUnit]:
    """The work units of a tabular input, in a deterministic order.

    One unit per file (sorted by path); for Parquet one unit per row group
    (start/end = row group range, extra = {"size", "rows", "row_offset"}). CSV and JSON
    units carry extra = {"size": bytes}. Raises FileNotFoundError when a pattern matches
    nothing and ValueError for an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown tabular format {fmt!r}; expected one of {FORMATS}")
    units: list[WorkUnit] = []
    for metadata in _expand(input_glob):
        if fmt != "parquet":
            units.append(WorkUnit(metadata.path, len(units), extra={"size": metadata.size_in_bytes}))
            continue
        try:
            with FileSystems.open(metadata.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                meta = pq.ParquetFile(f).metadata
        except Exception:  # noqa: BLE001 - the converter dead-letters the unreadable file
            units.append(WorkUnit(metadata.path, len(units), extra={"size": metadata.size_in_bytes}))
            continue
        offset = 0
        for group in range(meta.num_row_groups):
            rows = meta.row_group(group).num_rows
            size = meta.row_group(group).total_byte_size
            units.append(WorkUnit(metadata.path, len(units), start=group, end=group + 1,
                                  extra={"size": size, "rows": rows, "row_offset": offset}))
            offset += rows
        if meta.num_row_groups == 0:
            units.append(WorkUnit(metadata.path, len(units), start=0, end=0,
                                  extra={"size": 0, "rows": 0, "row_offset": 0}))
    return units


def open_input(path: str, stack: ExitStack) -> Any:
    """Opens `path` for binary reading through Beam FileSystems; .gz is decompressed."""
    if path.endswith(".gz"):
        raw = stack.enter_context(
            FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))
        return stack.enter_context(_gzip.GzipFile(fileobj=raw, mode="rb"))
    return stack.enter_context(FileSystems.open(path, compression_type=CompressionTypes.AUTO))


# ---------------------------------------------------------------------------------------
# Chunks.


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
    """The rows of one chunk of input.

    Attributes:
      index: position of the chunk within its work unit.
      mode: "text" (CSV cells as Arrow strings), "typed" (Arrow arrays) or "python"
        (lists of parsed JSON values).
      num_rows: number of parsed rows (failures excluded).
      columns: column name -> values of the parsed rows; a column absent from the chunk
        is missing in every row.
      row_numbers: 1-based row number of each parsed row within its file.
      raw: raw record of parsed row i, for dead letters.
      whole_row_keys: split key bytes of every parsed row when the spec has no split_key.
      failures: rows rejected while reading.
      escapes: CSV only: the input held bytes invalid in its encoding.
      details: extra dead-letter fields of parsed row i (e.g. the JSON line number).
    """

    index: int
    mode: str
    num_rows: int
    columns: Mapping[str, Any]
    row_numbers: np.ndarray
    raw: Callable[[int], str | bytes | None]
    whole_row_keys: Callable[[], list[bytes]]
    failures: list[Failure] = dataclasses.field(default_factory=list)
    escapes: bool = False
    details: Callable[[int], dict] = lambda i: {}

    @property
    def input_count(self) -> int:
        return self.num_rows + len(self.failures)


def read_chunks(unit: WorkUnit, fmt: str, spec: ConversionSpec, batch_rows: int,
                *, whole_row: bool = False) -> Iterator[Chunk]:
    """Reads one work unit in chunks of roughly `batch_rows` rows.

    `whole_row`: the split key is the whole row (all columns must be read).
    """
    if fmt in ("csv", "tsv"):
        return _csv_chunks(unit, fmt, spec, batch_rows)
    if fmt == "jsonl":
        return _JsonLinesReader(spec, batch_rows).chunks(unit)
    if fmt == "parquet":
        return _parquet_chunks(unit, spec, batch_rows, whole_row)
    raise ValueError(f"unknown tabular format {fmt!r}; expected one of {FORMATS}")


def _block_size(batch_rows: int, bytes_per_row: float) -> int:
    return int(min(max(batch_rows * bytes_per_row, _MIN_BLOCK), _MAX_BLOCK))


# ---------------------------------------------------------------------------------------
# CSV.


class _EscapingReader(io.RawIOBase):
    """A binary stream of the UTF-8 text of `raw` decoded with `encoding`, invalid bytes
    escaped as private-use code points (see `tabular_values.unescape`).

    UTF-8 input that is valid passes through as it is: Arrow validates each block (about
    ten times faster than decoding it to `str` and encoding it back), and only blocks
    holding invalid bytes go through the escaping decoder.
    """

    def __init__(self, raw, encoding: str, read_size: int = 1 << 20):
        super().__init__()
        self._raw = raw
        self._utf8 = codecs.lookup(encoding).name == "utf-8"
        if self._utf8:
            encoding = "utf-8-sig"  # drops the byte order mark some tools write
        self._decoder = codecs.getincrementaldecoder(encoding)(errors=_ESCAPE_ERRORS)
        self._started = False
        self._buffer = bytearray()
        self._tail = b""  # an incomplete UTF-8 sequence ending the last valid block
        self._read_size = read_size
        self._eof = False
        self._position = 0
        self.escapes = False
        #: Set while Arrow reads this stream: paces its reads (see `_ReadAhead`).
        self.read_ahead: _ReadAhead | None = None

    def readable(self) -> bool:
        return True

    def _fill(self, size: int) -> None:
        while (size < 0 or len(self._buffer) < size) and not self._eof:
            data = self._raw.read(self._read_size)
            if not data:
                self._eof = True
            if self._utf8 and self._started and not self._decoder.getstate()[0]:
                if self._tail:
                    data, self._tail = self._tail + data, b""
                if data.isascii():
                    self._buffer += data  # ASCII is UTF-8 as it is
                    continue
                cut = len(data) if self._eof else _complete_utf8(data)
                if _valid_utf8(memoryview(data)[:cut]):
                    self._buffer += memoryview(data)[:cut]
                    self._tail = data[cut:]
                    if not self.escapes and _holds_escape_prefix(data):
                        self.escapes = True
                    continue
            self._started = True
            text = self._decoder.decode(data, final=not data or self._eof)
            encoded = text.encode("utf-8")
            if not self.escapes and _holds_escape_prefix(encoded):
                self.escapes = True
            self._buffer += encoded

    def peek(self, size: int) -> bytes:
        self._fill(size)
        return bytes(self._buffer[:size])

    def read(self, size: int = -1) -> bytes:
        if self.read_ahead is not None:
            self.read_ahead.before_read()
        self._fill(size)
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = bytes(self._buffer), bytearray()
        else:
            out = bytes(self._buffer[:size])
            del self._buffer[:size]
        self._position += len(out)
        return out

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def tell(self) -> int:
        return self._position


class _ReadAhead:
    """Paces Arrow's streaming CSV reader to a few blocks ahead of the batches taken.

    The reader reads its input on a background thread up to 32 blocks ahead of the
    batches it has handed out (not configurable, ARROW-12090), so a converter held up to
    32 blocks of every file it read: a whole 16 MB file, or 140 MB of a 20-column table's
    4 MB blocks. The stream calls `before_read()` on that thread before each block, which
    waits while `blocks` more blocks have been read than batches taken.

    Batch k needs blocks up to about k + 2 (the header's block, and the next block to
    know whether a block is the last), so `blocks` = 4 never holds back a read that the
    batch being waited for needs. Should some input need more (e.g. batches with no
    rows), a read the consumer has waited `stall_seconds` for goes through anyway: a
    pause, never a deadlock.
    """

    def __init__(self, blocks: int = _READAHEAD_BLOCKS, stall_seconds: float = 0.05):
        self._blocks = blocks
        self._stall_seconds = stall_seconds
        self._condition = threading.Condition()
        self._reads = 0
        self._taken = 0
        self._consumer_waiting = False
        self._closed = False

    def _may_read(self) -> bool:
        return self._closed or self._reads - self._taken < self._blocks

    def before_read(self) -> None:
        with self._condition:
            while not self._condition.wait_for(self._may_read, self._stall_seconds):
                if self._consumer_waiting:
                    break
            self._reads += 1

    @contextmanager
    def consumer_waiting(self):
        with self._condition:
            self._consumer_waiting = True
        try:
            yield
        finally:
            with self._condition:
                self._consumer_waiting = False

    def batches(self, reader) -> Iterator[pa.RecordBatch]:
        """The batches of `reader`, counted as taken."""
        while True:
            with self.consumer_waiting():
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
            with self._condition:
                self._taken += 1
                self._condition.notify_all()
            yield batch

    def close(self) -> None:
        """Lets every read through: the consumer is gone."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()


def _complete_utf8(data: bytes) -> int:
    """The length of `data` without an incomplete UTF-8 sequence at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)  # ends with ASCII
        if byte >= 0xC0:  # the lead byte of the last sequence
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= needed else len(data) - back
    return len(data)  # continuation bytes only: invalid, the validator decides


def _valid_utf8(data: bytes | memoryview) -> bool:
    """Whether `data` is valid UTF-8 (checked by Arrow, without decoding to `str`)."""
    offsets = pa.py_buffer(np.array([0, len(data)], np.int64))
    array = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _parse_options(spec: ConversionSpec, fmt: str, handler) -> pacsv.ParseOptions:
    return pacsv.ParseOptions(
        delimiter=spec.csv.delimiter_for(fmt),
        quote_char=spec.csv.quotechar or False,
        double_quote=True,
        newlines_in_values=True,
        ignore_empty_lines=True,
        invalid_row_handler=handler,
    )


def _probe_csv(stream: _EscapingReader, spec: ConversionSpec, fmt: str,
               batch_rows: int) -> tuple[list[str] | None, int]:
    """(column names in the file, block size) from the start of the stream.

    Names are None for an empty input. The head read grows until the header and one
    complete data row are in it (or the input ends).
    """
    size = 1 << 16
    names = list(spec.csv.column_names) if not spec.csv.header else None
    while True:
        head = stream.peek(size)
        if not head.strip():
            return None, _MIN_BLOCK
        complete = len(head) < size
        try:
            probe = pacsv.open_csv(
                io.BytesIO(head),
                read_options=pacsv.ReadOptions(use_threads=False, block_size=len(head) + 1,
                                               column_names=names),
                parse_options=_parse_options(spec, fmt, lambda row: "skip"),
            )
            rows = sum(batch.num_rows for batch in probe)
            if complete or rows >= 2:
                return probe.schema.names, _block_size(batch_rows, len(head) / max(rows, 1))
        except pa.ArrowInvalid:
            if complete:
                raise
        size *= 4


def _csv_text(cells: Sequence[str | None], delimiter: str, quotechar: str | None) -> str:
    """One CSV record (no newline) of `cells`; None is an empty unquoted cell."""
    out = []
    for cell in cells:
        if cell is None:
            out.append("")
        elif quotechar and (cell == "" or delimiter in cell or quotechar in cell
                            or "\n" in cell or "\r" in cell):
            out.append(quotechar + cell.replace(quotechar, quotechar * 2) + quotechar)
        else:
            out.append(cell)
    return delimiter.join(out)


def _csv_cells(text: str, delimiter: str, quotechar: str | None) -> list[str]:
    reader = csv.reader(io.StringIO(text), delimiter=delimiter, quotechar=quotechar or '"',
                        quoting=csv.QUOTE_MINIMAL if quotechar else csv.QUOTE_NONE)
    return next(reader, [])


@dataclasses.dataclass
class _CsvProgress:
    """What earlier passes over a CSV file emitted (a pass restarts with a bigger block
    when a row does not fit in one)."""

    good_rows: int = 0  # good rows emitted
    ragged_number: int = 0  # pyarrow row number of the last ragged row emitted
    # For ragged row i (in file order): how many good rows precede it. A good row's
    # 0-based data index is its good index plus the ragged rows before it.
    ragged_before: list[int] = dataclasses.field(default_factory=list)
    chunks: int = 0
    block_size: int | None = None


def _csv_chunks(unit: WorkUnit, fmt: str, spec: ConversionSpec,
                batch_rows: int) -> Iterator[Chunk]:
    progress = _CsvProgress()
    while True:
        try:
            yield from _csv_pass(unit, fmt, spec, batch_rows, progress)
            return
        except pa.ArrowInvalid as error:
            # A row larger than the block: read again with bigger blocks, skipping what
            # was already emitted.
            if "straddl" not in str(error) or (progress.block_size or 0) >= _MAX_RETRY_BLOCK:
                raise
            progress.block_size = min((progress.block_size or _MIN_BLOCK) * 4, _MAX_RETRY_BLOCK)


def _csv_pass(unit: WorkUnit, fmt: str, spec: ConversionSpec, batch_rows: int,
              progress: _CsvProgress) -> Iterator[Chunk]:
    options = spec.csv
    delimiter = options.delimiter_for(fmt)
    header_rows = 1 if options.header else 0
    ragged: list[tuple[int, str]] = []

    def on_invalid_row(row) -> str:
        if row.number > progress.ragged_number:
            ragged.append((row.number, row.text))
        return "skip"

    def failures() -> list[Failure]:
        out = []
        for number, text in ragged:
            data_row = number - header_rows
            progress.ragged_before.append(data_row - 1 - len(progress.ragged_before))
            progress.ragged_number = number
            cells = _csv_cells(text, delimiter, options.quotechar)
            if spec.split_key:
                by_name = dict(zip(names, cells, strict=False))
                key = KEY_SEPARATOR.join(by_name.get(c, "").encode("utf-8")
                                         for c in spec.split_key)
            else:
                key = KEY_SEPARATOR.join(c.encode("utf-8") for c in cells)
            out.append(Failure(row=data_row, reason="ragged_row",
                               message=f"expected {len(names)} fields, got {len(cells)}",
                               raw=unescape(text, options.encoding), key=key))
        ragged.clear()
        return out

    with ExitStack() as stack:
        stream = _EscapingReader(open_input(unit.path, stack), options.encoding)
        file_names, block_size = _probe_csv(stream, spec, fmt, batch_rows)
        if file_names is None:
            return
        names = list(options.column_names) if options.column_names else file_names
        if len(names) != len(file_names):
            raise ValueError(f"csv.column_names names {len(names)} columns but the header has "
                             f"{len(file_names)}: {file_names}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate column names {file_names}; set csv.column_names")
        read_ahead = stream.read_ahead = _ReadAhead(_READAHEAD_BLOCKS)
        stack.callback(read_ahead.close)  # before the file closes: no read may stay waiting
        with read_ahead.consumer_waiting():  # opening reads the first block(s)
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(
                    use_threads=False, block_size=progress.block_size or block_size,
                    column_names=None if options.header else names),
                parse_options=_parse_options(spec, fmt, on_invalid_row),
                convert_options=pacsv.ConvertOptions(
                    column_types={name: pa.string() for name in file_names},
                    strings_can_be_null=True, null_values=[""],
                    quoted_strings_can_be_null=False,
                    check_utf8=False),  # `_EscapingReader` only ever yields valid UTF-8
            )
        skip = progress.good_rows  # good rows a previous pass emitted
        for batch in read_ahead.batches(reader):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                batch = batch.slice(batch.num_rows)
            elif skip:
                batch, skip = batch.slice(skip), 0
            rejected = failures()
            if not batch.num_rows and not rejected:
                continue
            yield _csv_chunk(batch, names, rejected, progress, stream.escapes, options, delimiter)
        rejected = failures()
        if rejected:
            yield _csv_chunk(None, names, rejected, progress, stream.escapes, options, delimiter)


def _csv_chunk(batch: pa.RecordBatch | None, names: list[str], rejected: list[Failure],
               progress: _CsvProgress, escapes: bool, options, delimiter: str) -> Chunk:
    n = batch.num_rows if batch is not None else 0
    good = progress.good_rows + np.arange(n)
    if progress.ragged_before:
        good = good + np.searchsorted(np.asarray(progress.ragged_before), good, side="right")
    columns = dict(zip(names, batch.columns, strict=True)) if batch is not None else {}
    chunk = Chunk(
        index=progress.chunks, mode="text", num_rows=n, columns=columns,
        row_numbers=good + 1,
        raw=_csv_raw(columns, names, delimiter, options.quotechar, options.encoding),
        whole_row_keys=_joined_keys(columns, names),
        failures=rejected, escapes=escapes,
    )
    progress.good_rows += n
    progress.chunks += 1
    return chunk


def _csv_raw(columns, names, delimiter, quotechar, encoding):
    def raw(i: int) -> str | bytes:
        cells = [columns[name][i].as_py() for name in names]
        return unescape(_csv_text(cells, delimiter, quotechar), encoding)

    return raw


def _joined_keys(columns: Mapping[str, pa.Array], names: Sequence[str]):
    def keys() -> list[bytes]:
        n = len(columns[names[0]]) if columns else 0
        return join_keys([key_text_array(columns[name], n, text=True) for name in names], n)

    return keys


# ---------------------------------------------------------------------------------------
# JSON Lines.


def _arrow_type_for(feature_type: str, is_list: bool) -> pa.DataType:
    scalar = {"int64": pa.int64(), "float": pa.float64()}.get(feature_type, pa.string())
    return pa.list_(scalar) if is_list else scalar


# Arrow's JSON reader converts a value to the declared type only in one case: an int to
# a double. Every other mismatch fails the chunk (which then takes the line-by-line
# path), so both paths see the same values. A double column is therefore declared only
# for columns that nothing but float features read: an int64 feature would reject 1.0
# where the line-by-line path takes 1, and text would lose the digits of a large int.
_ARROW_TYPES = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}


def _value_kinds(values: Sequence[Any]) -> set:
    kinds: set = set()
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool):
            kinds.add("bool")
        elif isinstance(value, int):
            kinds.add("int" if -(2**63) <= value < 2**63 else "big")
        elif isinstance(value, float):
            kinds.add("float")
        elif isinstance(value, str):
            kinds.add("str")
        elif isinstance(value, list):
            kinds.add("list")
        else:
            kinds.add("other")
    return kinds


def _learned_type(values: Sequence[Any], uses: set[tuple[str, bool]]) -> pa.DataType | None:
    """The Arrow type under which Arrow's JSON reader reads these parsed values as the
    line-by-line path sees them, for the column's uses (feature type, is_list); None if
    there is none."""
    kinds = _value_kinds(values)
    is_list = kinds == {"list"}
    if is_list:
        items = [item for value in values if value for item in value]
        if None in items:
            return None
        kinds = _value_kinds(items)
    if kinds == {"int", "float"}:
        kinds = {"float"}
    if len(kinds) > 1 or not kinds <= set(_ARROW_TYPES):
        return None
    kind = kinds.pop() if kinds else "str"
    if kind == "float" and any(use != "float" for use, _ in uses):
        return None
    return pa.list_(_ARROW_TYPES[kind]) if is_list else _ARROW_TYPES[kind]


class _JsonLinesReader:
    """Reads JSON Lines: Arrow's JSON reader for clean chunks, `json.loads` per line for
    the others. The Arrow schema starts from the spec and adapts to what the lines hold
    (e.g. booleans in an int64 feature), so one odd chunk does not slow the rest."""

    def __init__(self, spec: ConversionSpec, batch_rows: int):
        self.spec = spec
        self.batch_rows = batch_rows
        self.types: dict[str, pa.DataType] = {}
        self.uses: dict[str, set[tuple[str, bool]]] = collections.defaultdict(set)
        for feature in spec.features:
            self.types.setdefault(feature.source_column,
                                  _arrow_type_for(feature.type, feature.is_list))
            self.uses[feature.source_column].add((feature.type, feature.is_list))
        for column in spec.split_key:
            self.types.setdefault(column, pa.string())
            self.uses[column].add(("key", False))
        for column, uses in self.uses.items():
            if any(use != "float" for use, _ in uses) and pa.float64() in (
                    self.types[column], getattr(self.types[column], "value_type", None)):
                self.types[column] = pa.string()

    def chunks(self, unit: WorkUnit) -> Iterator[Chunk]:
        with ExitStack() as stack:
            stream = open_input(unit.path, stack)
            target = _MIN_BLOCK  # adapted to batch_rows after the first chunk
            pending: list[bytes] = []
            rows_before = lines_before = index = 0
            while True:
                data = stream.read(target)
                if data:
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        pending.append(data)
                        continue
                    body = b"".join([*pending, data[: cut + 1]])
                    pending = [data[cut + 1:]] if cut + 1 < len(data) else []
                else:
                    body = b"".join(pending)
                    pending = []
                    if not body:
                        return
                chunk = self._chunk(unit, body, index, rows_before, lines_before)
                if chunk.input_count:
                    rows_before += chunk.input_count
                    if index == 0:
                        target = _block_size(self.batch_rows, len(body) / chunk.input_count)
                    yield chunk
                    index += 1
                lines_before += body.count(b"\n")
                if not data:
                    return

    def _chunk(self, unit: WorkUnit, body: bytes, index: int, rows_before: int,
               lines_before: int) -> Chunk:
        lines: list[bytes] | None = None
        records: list[int] | None = None  # index in `lines` of every non-blank line

        def split_lines() -> tuple[list[bytes], list[int]]:
            nonlocal lines, records
            if lines is None:
                lines = body.split(b"\n")
                records = [k for k, line in enumerate(lines) if line.strip()]
            return lines, records

        table = self._read_arrow(body)
        if table is not None and table.num_rows != len(split_lines()[1]):
            table = None  # e.g. two objects on one line: the lines decide
        if table is None:
            return self._python_chunk(unit, index, *split_lines(), rows_before, lines_before)

        n = table.num_rows

        def raw(i: int) -> bytes:
            all_lines, nonblank = split_lines()
            return all_lines[nonblank[i]].strip()

        def details(i: int) -> dict:
            return {"line": lines_before + split_lines()[1][i] + 1}

        return Chunk(
            index=index, mode="typed", num_rows=n,
            columns={name: table.column(name).combine_chunks() for name in table.column_names},
            row_numbers=rows_before + np.arange(1, n + 1),
            raw=raw,
            whole_row_keys=lambda: [raw(i) for i in range(n)],
            details=details,
        )

    def _read_arrow(self, body: bytes) -> pa.Table | None:
        schema = pa.schema(list(self.types.items()))
        try:
            return pajson.read_json(
                io.BytesIO(body),
                read_options=pajson.ReadOptions(use_threads=False, block_size=len(body) + 1),
                parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                  unexpected_field_behavior="ignore"),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError):
            return None

    def _python_chunk(self, unit: WorkUnit, index: int, lines: list[bytes], nonblank: list[int],
                      rows_before: int, lines_before: int) -> Chunk:
        objects: list[dict] = []
        positions: list[int] = []  # index in `nonblank` of each parsed object
        failures: list[Failure] = []
        for position, k in enumerate(nonblank):
            line = lines[k].strip()
            row, where = rows_before + position + 1, {"line": lines_before + k + 1}
            try:
                obj = json.loads(line)
            except UnicodeDecodeError as e:
                failures.append(Failure(row, "invalid_encoding", f"line is not UTF-8: {e}",
                                        line, line, where))
                continue
            except ValueError as e:
                failures.append(Failure(row, "invalid_json", f"invalid JSON: {e}",
                                        line, line, where))
                continue
            if not isinstance(obj, dict):
                failures.append(Failure(row, "invalid_json",
                                        f"a JSON {type(obj).__name__}, not an object",
                                        line, line, where))
                continue
            objects.append(obj)
            positions.append(position)
        columns = {name: [obj.get(name) for obj in objects] for name in self.types}
        for name, values in columns.items():
            learned = _learned_type(values, self.uses[name])
            if learned is not None:
                self.types[name] = learned
        return Chunk(
            index=index, mode="python", num_rows=len(objects), columns=columns,
            row_numbers=rows_before + np.asarray(positions, np.int64) + 1,
            raw=lambda i: lines[nonblank[positions[i]]].strip(),
            whole_row_keys=lambda: [lines[nonblank[p]].strip() for p in positions],
            failures=failures,
            details=lambda i: {"line": lines_before + nonblank[positions[i]] + 1},
        )


# ---------------------------------------------------------------------------------------
# Parquet.


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float):
        return value if np.isfinite(value) else canonical_text(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _parquet_chunks(unit: WorkUnit, spec: ConversionSpec, batch_rows: int,
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
                    whole_row_keys=_typed_joined_keys(arrays, list(arrays), n),
                )
                offset += n
                index += 1


def _parquet_raw(batch: pa.RecordBatch):
    def raw(i: int) -> str:
        row = {name: _jsonable(batch.column(name)[i].as_py()) for name in batch.schema.names}
        return json.dumps(row, ensure_ascii=False, default=str)

    return raw


def _typed_joined_keys(columns: Mapping[str, pa.Array], names: Sequence[str], num_rows: int):
    def keys() -> list[bytes]:
        return join_keys([key_text_array(columns.get(n), num_rows, text=False) for n in names],
                         num_rows)

    return keys


def join_keys(arrays: Sequence[pa.Array], num_rows: int) -> list[bytes]:
    """Joins per-column key texts (binary arrays) with KEY_SEPARATOR, row by row."""
    if not arrays:
        return [b""] * num_rows
    if len(arrays) == 1:
        return arrays[0].to_pylist()
    return pc.binary_join_element_wise(*arrays, pa.scalar(KEY_SEPARATOR)).to_pylist()
