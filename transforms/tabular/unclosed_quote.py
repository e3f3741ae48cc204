"""A CSV quoted field never closed: `unterminated_tail`, the `unterminated_quote` dead
letters of the lines it would swallow, for `transforms.tabular.csv_reader`.

Arrow's CSV reader takes an unclosed quote for a field running to the end of the file; the
reader tells it apart from a closed field that spans lines, or from the rest of a last line
without a line break after it, by reading the file again with Python's csv module."""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterable
from contextlib import ExitStack

from transforms.records import WorkUnit
from transforms.tabular.chunks import KEY_SEPARATOR, Failure, open_input
from transforms.tabular.spec import ConversionSpec

__all__ = ["unterminated_tail"]


def _spans_lines(text: str | bytes | None) -> bool:
    if isinstance(text, bytes):
        return b"\n" in text or b"\r" in text
    return text is not None and ("\n" in text or "\r" in text)


def _last_record_spans_lines(held, trailing: list[Failure]) -> bool:
    """Whether the file's last parsed record (a row, or a ragged row) may hold a line
    break: the only way a quoted field left open can have swallowed the lines after it."""
    if trailing:
        return _spans_lines(trailing[-1].raw)
    if held is None:
        return False
    batch, _, rejected = held
    if rejected and _spans_lines(rejected[-1].raw):
        return True
    if batch is None or not batch.num_rows:
        return False
    last = batch.slice(batch.num_rows - 1)
    return any(_spans_lines(column[0].as_py()) for column in last.columns)


def _ends_inside_quotes(lines: Iterable[str], delimiter: str, quotechar: str) -> bool:
    """Whether CSV text ends inside a quoted field: Python's csv module tells it apart in
    strict mode alone."""
    try:
        list(csv.reader(iter(lines), delimiter=delimiter, quotechar=quotechar, strict=True))
    except csv.Error as error:
        return "unexpected end of data" in str(error)
    return False


def _last_line_opens_quote(last_line: bytes | None, delimiter: str, quotechar: str) -> bool:
    """Whether the file's last line (with its line breaks) may end inside a quoted field
    (None: a line too long to have been kept, which may)."""
    if last_line is None:
        return True
    return bool(last_line) and _ends_inside_quotes(
        [last_line.decode("utf-8", "replace")], delimiter, quotechar)


def unterminated_tail(unit: WorkUnit, spec: ConversionSpec, fmt: str, names: list[str], held,
                      trailing: list[Failure], last_line: bytes | None
                      ) -> tuple[str | None, list[Failure]]:
    """(the last record's text, dead letters) for a quoted field that is never closed, or
    (None, []) when there is none.

    `held`: (batch, names, ragged rows) of the last chunk read, `trailing`: ragged rows
    after it, `last_line`: the file's last line as UTF-8, with the line breaks after it
    (see `csv_reader._EscapingReader`).

    Arrow reads an unclosed quote to the end of the file as one field, so every later line
    would vanish into it. Only when the last record spans lines, or the last line opens a
    quoted field it does not close (Arrow's record of it need hold no line break: the file
    may end with none, a ragged row's text drops it), is the file read again, with Python's
    csv module: then the line where the quote opened and every line after it become
    `unterminated_quote` dead letters, one per line, so the counts still cover every row.
    """
    options = spec.csv
    delimiter = options.delimiter_for(fmt)
    if not options.quotechar:
        return None, []
    quotechar = options.quotechar
    if not (_last_record_spans_lines(held, trailing)
            or _last_line_opens_quote(last_line, delimiter, quotechar)):
        return None, []
    with ExitStack() as stack:
        text = io.TextIOWrapper(open_input(unit.path, stack),
                                encoding="utf-8-sig" if codecs.lookup(options.encoding).name == "utf-8"
                                else options.encoding, errors="replace", newline="")
        lines = text.read().splitlines(keepends=True)
    reader = csv.reader(iter(lines), delimiter=delimiter, quotechar=quotechar)
    before_last = consumed = 0  # lines before the last record; lines read so far
    try:
        for _ in reader:
            before_last, consumed = consumed, reader.line_num
    except csv.Error:
        before_last = consumed
    start = before_last
    tail = lines[start:]
    if not _ends_inside_quotes(tail, delimiter, quotechar):
        return None, []
    opened = start + 1
    failures = []
    for offset, line in enumerate(tail):
        line = line.rstrip("\r\n")
        where = (f"a quoted field opened on line {opened} is never closed" if offset == 0 else
                 f"line {opened + offset} follows a quoted field opened on line {opened} that is "
                 f"never closed")
        cells = line.split(delimiter)
        if spec.split_key:
            by_name = dict(zip(names, cells, strict=False))
            key = KEY_SEPARATOR.join(by_name.get(c, "").encode("utf-8") for c in spec.split_key)
        else:
            key = KEY_SEPARATOR.join(c.encode("utf-8") for c in cells)
        failures.append(Failure(row=None, reason="unterminated_quote",
                                message=f"{where} (quote character {quotechar!r})", raw=line,
                                key=key, details={"line": opened + offset}))
    record = "".join(tail)
    return record[:-1] if record.endswith("\n") else record, failures
