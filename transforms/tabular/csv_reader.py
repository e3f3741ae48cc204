"""Reading CSV/TSV work units in chunks: `csv_chunks`.

Arrow's CSV reader parses the bytes (quotes, escaped quotes, quoted newlines) into string
columns; the value rules then apply to whole columns. Bytes are decoded with the spec's
`csv.encoding`: valid UTF-8 passes through undecoded; bytes invalid in the encoding are
carried as private-use escapes (`transforms.tabular.values.ESCAPE_BASE`) so that only the
rows holding them become `invalid_encoding` dead letters. Arrow reads at most
`_READAHEAD_BLOCKS` blocks ahead of the batches taken, so memory stays bounded; closing the
reader early (a sample) stops Arrow's reading thread before the file closes. A ragged row
(a field count other than the header's) is a `Failure` of its own. A unit may be a byte range
of a file cut at record boundaries (`transforms.tabular.split_units`): it reads its column
names from the file's header and numbers its rows on from the rows before it."""

from __future__ import annotations

import codecs
import collections
import csv
import dataclasses
import io
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from transforms.records import WorkUnit
from transforms.tabular.chunks import (
    KEY_SEPARATOR,
    MIN_BLOCK,
    Chunk,
    Failure,
    block_size,
    join_keys,
    open_input,
    valid_utf8,
)
from transforms.tabular.columns import key_text_array
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.unclosed_quote import unterminated_tail
from transforms.tabular.values import ESCAPE_BASE, unescape

__all__ = []


_MAX_RETRY_BLOCK = 1 << 30  # pyarrow block sizes are 32-bit


# Blocks Arrow's CSV reader may read ahead of the batches taken from it (see _ReadAhead).
_READAHEAD_BLOCKS = 4


_ESCAPE_ERRORS = "tfrecord_pipeline.escape"


# The longest last line `_EscapingReader` keeps; a longer one is looked at by reading the
# file again (it may end inside a quoted field).
_MAX_LAST_LINE = 16 << 20


# Whether the error handler escaped bytes in the current thread's decode call: only then
# does a stream hold escapes. A real character of the escapes' range (valid UTF-8, or one
# the encoding decodes to) is text, so it must not say so.
_escaped = threading.local()


def _escape_invalid(error: UnicodeError):
    if isinstance(error, UnicodeDecodeError):
        _escaped.any = True
        bad = error.object[error.start:error.end]
        return "".join(chr(ESCAPE_BASE + b) for b in bad), error.end
    raise error


codecs.register_error(_ESCAPE_ERRORS, _escape_invalid)


# Python's csv module refuses fields over 128 KiB; here it only reads text already in memory
# (a ragged row, the tail an unclosed quote swallowed, reported line by line), at most one of
# Arrow's blocks. The limit is process-wide: only ever raised.
csv.field_size_limit(max(csv.field_size_limit(), _MAX_RETRY_BLOCK))


class _EscapingReader(io.RawIOBase):
    """A binary stream of the UTF-8 text of `raw` decoded with `encoding`, invalid bytes
    escaped as private-use code points (see `tabular_values.unescape`).

    UTF-8 input that is valid passes through as it is: Arrow validates each block (about
    ten times faster than decoding it to `str` and encoding it back), and only blocks
    holding invalid bytes go through the escaping decoder.
    """

    def __init__(self, raw, encoding: str, read_size: int = 1 << 20, bom: bool = True):
        super().__init__()
        self._raw = raw
        self._utf8 = codecs.lookup(encoding).name == "utf-8"
        if self._utf8 and bom:  # not for a byte range within a file: U+FEFF there is text
            encoding = "utf-8-sig"  # drops the byte order mark some tools write
        self._decoder = codecs.getincrementaldecoder(encoding)(errors=_ESCAPE_ERRORS)
        self._started = False
        self._buffer = bytearray()
        self._tail = b""  # an incomplete UTF-8 sequence ending the last valid block
        self._read_size = read_size
        self._eof = False
        self._position = 0
        #: Bytes invalid in the encoding were escaped (see `tabular_values.unescape`).
        self.escapes = False
        #: Set while Arrow reads this stream: paces its reads (see `_ReadAhead`).
        self.read_ahead: _ReadAhead | None = None
        self._finished = False
        #: The last line read, with the line breaks after it (None: too long to keep):
        #: the only trace of a quote left open on the last line when Arrow's record of it
        #: holds no line break (see `unclosed_quote.unterminated_tail`).
        self.last_line: bytearray | None = bytearray()

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
                if valid_utf8(memoryview(data)[:cut]):
                    self._buffer += memoryview(data)[:cut]
                    self._tail = data[cut:]
                    continue
            self._started = True
            _escaped.any = False
            text = self._decoder.decode(data, final=not data or self._eof)
            self.escapes = self.escapes or _escaped.any
            self._buffer += text.encode("utf-8")

    def peek(self, size: int) -> bytes:
        self._fill(size)
        return bytes(self._buffer[:size])

    def finish(self) -> None:
        """Ends the stream early: every later read is at its end (see `_stop_reading`)."""
        self._finished = True

    def read(self, size: int = -1) -> bytes:
        if self._finished:
            return b""
        if self.read_ahead is not None:
            self.read_ahead.before_read()
        self._fill(size)
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = bytes(self._buffer), bytearray()
        else:
            out = bytes(self._buffer[:size])
            del self._buffer[:size]
        self._position += len(out)
        self._keep_last_line(out)
        return out

    def _keep_last_line(self, out: bytes) -> None:
        stop = len(out)
        while stop and out[stop - 1] in b"\r\n":
            stop -= 1
        cut = out.rfind(b"\n", 0, stop)
        cut = max(cut, out.rfind(b"\r", cut + 1, stop))
        if cut >= 0:
            self.last_line = bytearray(out[cut + 1:])
        elif self.last_line is not None:
            self.last_line += out
            if len(self.last_line) > _MAX_LAST_LINE:
                self.last_line = None

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


def _stop_reading(reader, stream: _EscapingReader, read_ahead: _ReadAhead) -> None:
    """Stops Arrow's reading of `stream` and waits until it is over: Arrow reads on a thread
    of its own, which neither dropping nor closing its reader waits for, and a read under way
    at interpreter exit aborted it ("Fatal Python error: PyGILState_Release"). The stream
    ends at once and the reader is drained (one call when it was read to its end)."""
    stream.finish()
    read_ahead.close()  # a read held back for the consumer would wait for the drain
    while True:
        try:
            reader.read_next_batch()
        except StopIteration:
            return
        except Exception:  # noqa: BLE001 - a failed reader has stopped reading too
            return


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


def _parse_options(spec: ConversionSpec, fmt: str, handler) -> pacsv.ParseOptions:
    return pacsv.ParseOptions(
        delimiter=spec.csv.delimiter_for(fmt),
        quote_char=spec.csv.quotechar or False,
        double_quote=True,
        newlines_in_values=True,
        ignore_empty_lines=True,
        invalid_row_handler=handler,
    )


def _probe_csv(stream: _EscapingReader, spec: ConversionSpec, fmt: str, batch_rows: int,
               names: list[str] | None = None) -> tuple[list[str] | None, int]:
    """(column names in the file, block size) from the start of the stream.

    Names are None for an empty input. The head read grows until the header and one
    complete data row are in it (or the input ends). `names`: the stream has no header
    row, its columns are these (default: the spec's `column_names` without a header).
    """
    size = 1 << 16
    if names is None and not spec.csv.header:
        names = list(spec.csv.column_names)
    while True:
        head = stream.peek(size)
        if not head.strip():
            return None, MIN_BLOCK
        complete = len(head) < size
        if not complete:
            # Whole lines only: a head cut inside a multi-byte character would hand Arrow's
            # row callback bytes it cannot decode.
            end = head.rfind(b"\n")
            if end < 0:
                size *= 4
                continue
            head = head[:end + 1]
        try:
            probe = pacsv.open_csv(
                pa.BufferReader(head),  # native: no Python call on Arrow's reading thread
                read_options=pacsv.ReadOptions(use_threads=False, block_size=len(head) + 1,
                                               column_names=names),
                parse_options=_parse_options(spec, fmt, lambda row: "skip"),
            )
            rows = sum(batch.num_rows for batch in probe)
            if complete or rows >= 2:
                return probe.schema.names, block_size(batch_rows, len(head) / max(rows, 1))
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
    row_offset: int = 0  # data rows of the file before the unit (a byte range: see split_units)


def _header_names(path: str, spec: ConversionSpec, fmt: str, batch_rows: int) -> list[str] | None:
    """The column names in the header at the start of the file `path`."""
    with ExitStack() as stack:
        names, _ = _probe_csv(_EscapingReader(open_input(path, stack), spec.csv.encoding),
                              spec, fmt, batch_rows)
    return names


def csv_chunks(unit: WorkUnit, fmt: str, spec: ConversionSpec,
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
            progress.block_size = min((progress.block_size or MIN_BLOCK) * 4, _MAX_RETRY_BLOCK)


def _csv_pass(unit: WorkUnit, fmt: str, spec: ConversionSpec, batch_rows: int,
              progress: _CsvProgress) -> Iterator[Chunk]:
    options = spec.csv
    delimiter = options.delimiter_for(fmt)
    # A byte range after the file's first starts at a record boundary, past the header
    # (which names its columns all the same); its rows are numbered on from `row_offset`.
    later_range = bool(unit.start)
    if later_range:
        progress.row_offset = int((unit.extra or {}).get("row_offset", 0))
    header_rows = 1 if options.header and not later_range else 0
    # Arrow reports ragged rows as it parses, blocks ahead of the batches taken (on its
    # reading thread): each waits here until the good rows before it are taken, so that it
    # joins the chunk it lies in (the last record of the file, which an unclosed quote may
    # have made ragged, then is in the last chunk, where `unterminated_tail` finds it).
    ragged: collections.deque[tuple[int, str]] = collections.deque()

    def on_invalid_row(row) -> str:
        if row.number > progress.ragged_number:
            ragged.append((row.number, row.text))
        return "skip"

    def failures(taken: float) -> list[Failure]:
        """The ragged rows after no more than `taken` good rows of the unit."""
        out = []
        while ragged and ragged[0][0] - header_rows - 1 - len(progress.ragged_before) <= taken:
            number, text = ragged.popleft()
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
            out.append(Failure(row=data_row + progress.row_offset, reason="ragged_row",
                               message=f"expected {len(names)} fields, got {len(cells)}",
                               raw=_raw_text(text, options.encoding, stream.escapes), key=key))
        return out

    with ExitStack() as stack:
        given = None
        if later_range and options.header:
            given = _header_names(unit.path, spec, fmt, batch_rows)
            if given is None:
                return
        # A later range is read from the newline before it: Arrow drops a byte order mark
        # opening its input, and U+FEFF opening a later line is text. The empty line is no row.
        start = unit.start - 1 if later_range else unit.start
        stream = _EscapingReader(open_input(unit.path, stack, start, unit.end),
                                 options.encoding, bom=not later_range)
        file_names, block_size = _probe_csv(stream, spec, fmt, batch_rows, given)
        if file_names is None:
            return
        # A header cell without a name (R's row names) is the column's 1-based position.
        names = list(options.column_names or (n or f"column_{i}" for i, n in enumerate(file_names, 1)))
        if len(names) != len(file_names):
            raise ValueError(f"csv.column_names names {len(names)} columns but the header has "
                             f"{len(file_names)}: {file_names}")
        if len(set(names)) != len(names):
            duplicates = sorted({name for name in names if names.count(name) > 1})
            raise ValueError(f"duplicate column names {duplicates} in {unit.path}: give the "
                             f"columns distinct names in the spec's csv.column_names")
        read_ahead = stream.read_ahead = _ReadAhead(_READAHEAD_BLOCKS)
        stack.callback(read_ahead.close)  # before the file closes: no read may stay waiting
        stack.callback(stream.finish)  # an open that fails reads no further either
        with read_ahead.consumer_waiting():  # opening reads the first block(s)
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(
                    use_threads=False, block_size=progress.block_size or block_size,
                    column_names=None if header_rows else file_names),
                parse_options=_parse_options(spec, fmt, on_invalid_row),
                convert_options=pacsv.ConvertOptions(
                    column_types={name: pa.string() for name in file_names},
                    strings_can_be_null=True, null_values=[""],
                    quoted_strings_can_be_null=False,
                    check_utf8=False),  # `_EscapingReader` only ever yields valid UTF-8
            )
        # Before the file closes: Arrow's reading thread must be done with the stream.
        stack.callback(_stop_reading, reader, stream, read_ahead)
        skip = progress.good_rows  # good rows a previous pass emitted
        held = None  # the latest chunk's rows: the file's last record may need a second look
        taken = 0  # good rows of the batches taken in this pass
        for batch in read_ahead.batches(reader):
            taken += batch.num_rows
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                batch = batch.slice(batch.num_rows)
            elif skip:
                batch, skip = batch.slice(skip), 0
            rejected = failures(taken)
            if not batch.num_rows and not rejected:
                continue
            if held is not None:
                yield _csv_chunk(*held, progress, stream.escapes, options, delimiter)
            held = (batch, names, rejected)
        trailing = failures(math.inf)
        # A file split into byte ranges has no unclosed quote (its planning made sure).
        record, swallowed = (None, []) if unit.start is not None else unterminated_tail(
            unit, spec, fmt, names, held, trailing, stream.last_line)
        first_row = None
        if swallowed:  # take the record that swallowed the lines out of the output
            rejected = held[2] if held is not None else []
            if trailing and trailing[-1].raw == record:
                first_row = trailing.pop().row
            elif rejected and rejected[-1].raw == record:
                first_row = rejected.pop().row
            else:
                batch, _, rejected = held
                held = (batch.slice(0, batch.num_rows - 1), names, rejected)
        if held is not None:
            yield _csv_chunk(*held, progress, stream.escapes, options, delimiter)
        if trailing:
            yield _csv_chunk(None, names, trailing, progress, stream.escapes, options, delimiter)
        if swallowed:
            if first_row is None:
                first_row = progress.good_rows + len(progress.ragged_before) + 1
            for offset, failure in enumerate(swallowed):
                failure.row = first_row + offset
            yield _csv_chunk(None, names, swallowed, progress, stream.escapes, options, delimiter)


def _csv_chunk(batch: pa.RecordBatch | None, names: list[str], rejected: list[Failure],
               progress: _CsvProgress, escapes: bool, options, delimiter: str) -> Chunk:
    n = batch.num_rows if batch is not None else 0
    good = progress.good_rows + np.arange(n)
    if progress.ragged_before:
        good = good + np.searchsorted(np.asarray(progress.ragged_before), good, side="right")
    columns = dict(zip(names, batch.columns, strict=True)) if batch is not None else {}
    chunk = Chunk(
        index=progress.chunks, mode="text", num_rows=n, columns=columns,
        row_numbers=good + 1 + progress.row_offset,
        raw=_csv_raw(columns, names, delimiter, options.quotechar, options.encoding, escapes),
        whole_row_keys=_joined_keys(columns, names),
        failures=rejected, escapes=escapes,
    )
    progress.good_rows += n
    progress.chunks += 1
    return chunk


def _raw_text(text: str, encoding: str, escapes: bool) -> str | bytes:
    """The input a record's text was read from: with escapes undone if the stream escaped
    bytes (else a character of their range is one of the text's)."""
    return unescape(text, encoding) if escapes else text


def _csv_raw(columns, names, delimiter, quotechar, encoding, escapes: bool):
    def raw(i: int) -> str | bytes:
        cells = [columns[name][i].as_py() for name in names]
        return _raw_text(_csv_text(cells, delimiter, quotechar), encoding, escapes)

    return raw


def _joined_keys(columns: Mapping[str, pa.Array], names: Sequence[str]):
    def keys() -> list[bytes]:
        n = len(columns[names[0]]) if columns else 0
        return join_keys([key_text_array(columns[name], n, text=True) for name in names], n)

    return keys
