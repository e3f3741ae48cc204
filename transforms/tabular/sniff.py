"""Refusing input that is not what `--format` says, from its first bytes, before any run.

A Parquet file read as CSV, JSON Lines read as CSV, a CSV read as TSV or JSON Lines, or a
`;`-separated CSV read with `,` all "convert" into garbage one-column tables, or fail later
with a message that hides the cause. `check_format` reads the start of a file (at most
`SNIFF_BYTES`, decompressed when the name ends in `.gz`) and raises `InputFormatError`
naming the real cause and the fix: Parquet (`PAR1`) or gzip (`1f 8b`) magic where the format
or the name says otherwise; a first line that is a JSON object for csv/tsv, or one that is
not for jsonl; for csv/tsv, an expected delimiter giving one column where another common one
(`,` tab `;` `|` space) splits every sampled line into the same 2+ fields (quotes respected).

It only refuses what it is sure of: a file it cannot tell apart (one column, ragged rows that
no delimiter explains) is left to the readers, which dead-letter bad rows one by one.
"""

from __future__ import annotations

import csv
import io
import json
import zlib

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.tabular.spec import CsvOptions

__all__ = ["SNIFF_BYTES", "InputFormatError", "check_format"]

#: How much of a file's start is read (after decompression).
SNIFF_BYTES = 64 * 1024
_PARQUET_MAGIC = b"PAR1"
_GZIP_MAGIC = b"\x1f\x8b"
_CANDIDATE_DELIMITERS = (",", "\t", ";", "|", " ")
_DELIMITER_NAMES = {",": "','", "\t": "tab", ";": "';'", "|": "'|'", " ": "space"}
_SAMPLE_LINES = 50


class InputFormatError(ValueError):
    """An input file is not in the format the run was told to read."""


def _start(path: str) -> tuple[bytes, bool]:
    """The first bytes of `path` as stored, and whether the file ends before SNIFF_BYTES."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        data = handle.read(SNIFF_BYTES + 1)
    return data[:SNIFF_BYTES], len(data) <= SNIFF_BYTES


def _inflated(data: bytes) -> bytes:
    """The decompressed start of a gzip stream (as much as `data` yields)."""
    try:
        return zlib.decompressobj(31).decompress(data, SNIFF_BYTES)
    except zlib.error:
        return b""


def _text_lines(data: bytes, complete: bool) -> list[str]:
    """Whole lines of the sample (a line cut by the sample's end is dropped)."""
    if not complete:
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else b""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    return [line for line in text.splitlines() if line.strip()][:_SAMPLE_LINES]


def _field_counts(lines: list[str], delimiter: str, quotechar: str | None) -> list[int]:
    quoting = csv.QUOTE_MINIMAL if quotechar else csv.QUOTE_NONE
    reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter,
                        quotechar=quotechar or '"', quoting=quoting, strict=False)
    try:
        return [len(row) for row in reader]
    except csv.Error:
        return []


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _consistent_delimiter(lines: list[str], quotechar: str | None, exclude: str) -> tuple[str, int] | None:
    """A candidate delimiter splitting every sampled line into the same 2+ fields."""
    for delimiter in _CANDIDATE_DELIMITERS:
        if delimiter == exclude:
            continue
        counts = _field_counts(lines, delimiter, quotechar)
        if len(counts) >= 1 and counts[0] >= 2 and len(set(counts)) == 1:
            return delimiter, counts[0]
    return None


def check_format(path: str, fmt: str, csv_options: CsvOptions | None = None) -> None:
    """Raises `InputFormatError` when the start of `path` shows it is not `fmt` (see above)."""
    try:
        raw, complete = _start(path)
    except OSError:
        return  # unreadable: the readers dead-letter it (`unreadable_file`), with the others
    if not raw:
        return  # an empty file: nothing to tell; the readers report it
    gz_name = path.lower().endswith(".gz")
    if raw.startswith(_GZIP_MAGIC) and not gz_name:
        raise InputFormatError(f"{path} is gzip-compressed but its name does not end in .gz: "
                               f"rename it to end in .gz (or decompress it)")
    data = _inflated(raw) if gz_name and raw.startswith(_GZIP_MAGIC) else raw
    if fmt == "parquet":
        if not data.startswith(_PARQUET_MAGIC):
            raise InputFormatError(f"{path} is not a Parquet file (it does not start with PAR1): "
                                   f"{_guess(data, complete)}")
        return
    if data.startswith(_PARQUET_MAGIC):
        raise InputFormatError(f"{path} is a Parquet file, not {fmt}: use --format parquet")
    lines = _text_lines(data, complete or gz_name)
    if not lines:
        return
    if fmt == "jsonl":
        if not lines[0].lstrip().startswith("{") or not _is_json_object(lines[0]):
            raise InputFormatError(f"{path} is not JSON Lines (its first line is not a JSON "
                                   f"object): {_guess(data, complete)}")
        return
    if _is_json_object(lines[0]):
        raise InputFormatError(f"{path} holds JSON objects, not {fmt}: use --format jsonl")
    options = csv_options or CsvOptions()
    delimiter = options.delimiter_for(fmt)
    counts = _field_counts(lines, delimiter, options.quotechar)
    if counts and counts[0] >= 2:
        return  # the expected delimiter splits the header: the readers judge the rows
    other = _consistent_delimiter(lines, options.quotechar, exclude=delimiter)
    if other is None or len(lines) < 2:
        return
    found, columns = other
    if fmt == "tsv" and found == ",":
        fix = "use --format csv"
    elif fmt == "csv" and found == "\t":
        fix = "use --format tsv"
    else:
        fix = f"set the spec's csv delimiter (csv: {{delimiter: {json.dumps(found)}}})"
    raise InputFormatError(
        f"{path}: no line splits on the {_DELIMITER_NAMES[delimiter]} delimiter of --format {fmt}, "
        f"but every sampled line splits on {_DELIMITER_NAMES[found]} into {columns} columns: {fix}")


def _guess(data: bytes, complete: bool) -> str:
    """What the bytes look like instead, as advice."""
    if data.startswith(_PARQUET_MAGIC):
        return "use --format parquet"
    lines = _text_lines(data, complete)
    if lines and _is_json_object(lines[0]):
        return "use --format jsonl"
    if lines:
        found = _consistent_delimiter(lines, '"', exclude="")
        if found is not None:
            return "use --format tsv" if found[0] == "\t" else "use --format csv"
    return "check --format"
