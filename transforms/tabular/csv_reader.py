"""Reading CSV/TSV work units in chunks: `csv_chunks`.

The unit's text is read in blocks cut where a record ends (`byte_ranges.last_record_end`,
exact with quoted newlines), each parsed whole by Arrow's CSV reader into string columns (all
columns are strings, so every conversion error is ours, row by row; an empty unquoted cell is
null, a quoted "" the empty string). No thread reads ahead. A record longer than a block makes
the block grow until it holds it. Valid UTF-8 passes through undecoded; bytes invalid in the
spec's `csv.encoding` are carried as private-use escapes (`values.ESCAPE_BASE`), so only the
rows holding them become `invalid_encoding` dead letters. A ragged row (a field count other
than the header's) is a `Failure` of its own; blank lines are no rows. A file ending inside a
quoted field has every line from the one the quote opened on as an `unterminated_quote` dead
letter. A byte-range unit reads its column names from the file's header.
"""

from __future__ import annotations

import codecs
import csv
import io
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from transforms.records import WorkUnit
from transforms.tabular.byte_ranges import ReadStream, TextDialect, last_record_end, open_quote_start
from transforms.tabular.chunks import (
    MIN_BLOCK,
    Chunk,
    Failure,
    block_size,
    key_of,
    open_input,
    valid_utf8,
)
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.values import ESCAPE_BASE, unescape

__all__ = []


_ESCAPE_ERRORS = "tfrecord_pipeline.escape"


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


# Python's csv module refuses fields over 128 KiB; here it only reads a ragged row's text,
# already in memory. The limit is process-wide: only ever raised.
csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))


class _EscapingReader(ReadStream):
    """A binary stream of the UTF-8 text of `raw` decoded with `encoding`, invalid bytes
    escaped as private-use code points (see `values.unescape`).

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
        #: Bytes invalid in the encoding were escaped.
        self.escapes = False

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

    def read(self, size: int = -1) -> bytes:
        self._fill(size)
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = bytes(self._buffer), bytearray()
        else:
            out = bytes(self._buffer[:size])
            del self._buffer[:size]
        self._position += len(out)
        return out

    def tell(self) -> int:
        return self._position


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
        elif not head.endswith((b"\n", b"\r")):
            head += b"\n"  # the input's last line ends at its end: Arrow needs the line ended
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


def csv_chunks(unit: WorkUnit, fmt: str, spec: ConversionSpec, batch_rows: int) -> Iterator[Chunk]:
    options = spec.csv
    delimiter = options.delimiter_for(fmt)
    # A byte range after the file's first starts at a record boundary, past the header
    # (which names its columns all the same).
    later_range = bool(unit.start)
    with ExitStack() as stack:
        given = None
        if later_range and options.header:  # the column names in the file's header
            with ExitStack() as header_stack:
                header = _EscapingReader(open_input(unit.path, header_stack), options.encoding)
                given, _ = _probe_csv(header, spec, fmt, batch_rows)
            if given is None:
                return
        stream = _EscapingReader(open_input(unit.path, stack, unit.start, unit.end),
                                 options.encoding, bom=not later_range)
        file_names, block_bytes = _probe_csv(stream, spec, fmt, batch_rows, given)
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
        reading = _Reading(spec, fmt, names, file_names, stream,
                           header=options.header and not later_range)
        quote = options.quotechar
        dialect = TextDialect("csv", quote=ord(quote) if quote else None, delimiter=ord(delimiter))
        pending = b""
        while True:
            data = stream.read(block_bytes)
            block = pending + data if pending else data
            if not data:
                break
            cut = last_record_end(block, dialect)
            if not cut:  # a record longer than the block: read on until it ends
                pending, block_bytes = block, block_bytes * 2
                continue
            pending = block[cut:]
            yield from reading.chunk(block, cut)
        if not block:
            return
        opened = open_quote_start(block, dialect) if quote else None
        if opened is None:
            if not block.endswith((b"\n", b"\r")):
                block += b"\n"  # the last line ends at the input's end: Arrow needs it ended
            yield from reading.chunk(block, len(block))
            return
        yield from reading.chunk(block, opened)
        yield reading.unterminated(block[opened:], quote)


class _Reading:
    """The rows of a unit's blocks, each parsed whole by Arrow, numbered on from the
    blocks before (ragged rows among them)."""

    def __init__(self, spec: ConversionSpec, fmt: str, names: list[str], file_names: list[str],
                 stream: _EscapingReader, header: bool):
        self.spec, self.fmt, self.names, self.file_names = spec, fmt, names, file_names
        self.stream = stream
        self.header = header  # the next block opens with the header row
        self.rows = 0  # data rows (ragged ones included) in the blocks read
        self.lines = 0  # line breaks in the blocks read
        self.chunks = 0

    def chunk(self, block: bytes, end: int) -> Iterator[Chunk]:
        """The chunk of the whole records `block[:end]` (none for a block without data rows)."""
        if not end:
            return
        options, delimiter = self.spec.csv, self.spec.csv.delimiter_for(self.fmt)
        self.lines += int(np.count_nonzero(np.frombuffer(block, np.uint8, end) == 0x0A))
        if block.find(b"\r", 0, end) >= 0:  # lone CRs end lines too
            self.lines += block.count(b"\r", 0, end) - block.count(b"\r\n", 0, end)
        data = pa.py_buffer(block).slice(0, end)  # no copy
        if block.startswith(b"\xef\xbb\xbf") and not self.header:
            # Arrow drops a byte order mark opening its input: here it is text.
            data = pa.py_buffer(b"\n" + block[:end])
        ragged: list[tuple[int, str]] = []

        def on_invalid_row(row) -> str:
            ragged.append((row.number, row.text))
            return "skip"

        header_rows = int(self.header)
        table = pacsv.read_csv(
            data,
            read_options=pacsv.ReadOptions(
                use_threads=False, block_size=data.size + 1,
                column_names=None if header_rows else self.file_names),
            parse_options=_parse_options(self.spec, self.fmt, on_invalid_row),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in self.file_names},
                strings_can_be_null=True, null_values=[""],
                quoted_strings_can_be_null=False,
                check_utf8=False),  # `_EscapingReader` only ever yields valid UTF-8
        )
        self.header = False
        failures = []
        for number, text in ragged:
            cells = _csv_cells(text, delimiter, options.quotechar)
            failures.append(Failure(
                row=self.rows + number - header_rows, reason="ragged_row",
                message=f"expected {len(self.names)} fields, got {len(cells)}",
                raw=_raw_text(text, options.encoding, self.stream.escapes),
                key=self._key(cells)))
        n = table.num_rows
        if not n and not failures:
            return
        numbers = np.arange(1, n + len(failures) + 1)
        if failures:
            numbers = np.setdiff1d(numbers, [number - header_rows for number, _ in ragged])
        columns = dict(zip(self.names, (c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()
                                        for c in table.columns), strict=True))
        escapes = self.stream.escapes
        yield Chunk(
            index=self.chunks, mode="text", num_rows=n, columns=columns,
            row_numbers=self.rows + numbers,
            raw=_csv_raw(columns, self.names, delimiter, options.quotechar, options.encoding,
                         escapes),
            failures=failures, escapes=escapes,
        )
        self.rows += n + len(failures)
        self.chunks += 1

    def _key(self, cells: Sequence[str]) -> bytes:
        if self.spec.split_key:
            by_name = dict(zip(self.names, cells, strict=False))
            return key_of(by_name.get(c, "") for c in self.spec.split_key)
        return key_of(cells)

    def unterminated(self, tail: bytes, quotechar: str) -> Chunk:
        """The `unterminated_quote` dead letters of the lines a quoted field never closed
        swallows (`tail`: from the record it opened in to the file's end), one per line."""
        options, delimiter = self.spec.csv, self.spec.csv.delimiter_for(self.fmt)
        opened = self.lines + 1
        failures = []
        for offset, line in enumerate(tail.decode("utf-8").splitlines()):
            where = (f"a quoted field opened on line {opened} is never closed" if offset == 0 else
                     f"line {opened + offset} follows a quoted field opened on line {opened} "
                     f"that is never closed")
            failures.append(Failure(
                row=self.rows + offset + 1, reason="unterminated_quote",
                message=f"{where} (quote character {quotechar!r})",
                raw=_raw_text(line, options.encoding, self.stream.escapes),
                key=self._key(line.split(delimiter)), details={"line": opened + offset}))
        chunk = Chunk(index=self.chunks, mode="text", num_rows=0,
                      columns={},
                      row_numbers=np.zeros(0, np.int64), raw=lambda i: None, failures=failures,
                      escapes=self.stream.escapes)
        self.chunks += 1
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

