"""Reading JSON Lines work units in chunks: `JsonLinesReader`. Each line is one JSON object;
a line that is not (invalid JSON, not an object) is a `Failure` with its line number, and the
rest of the file converts. A unit may be a byte range of a file, cut after a newline (a JSON
string holds no raw newline). Column types are learned from the values of each chunk."""

from __future__ import annotations

import collections
import io
import json
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from transforms.format.example_codec import INT64_MAX, INT64_MIN
from transforms.records import WorkUnit
from transforms.tabular.chunks import (
    MIN_BLOCK,
    Chunk,
    Failure,
    block_size,
    open_input,
    valid_utf8,
)
from transforms.tabular.spec import ConversionSpec
from transforms.tabular.values import NumberBeyondFloat64

__all__ = ["JsonLineError", "JsonLinesReader", "parse_json_line"]


class JsonLineError(ValueError):
    """A JSON Lines line that is not one JSON object; `reason` is its dead-letter reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _number(text: str) -> float:
    number = float(text)
    return NumberBeyondFloat64(text) if math.isinf(number) else number


class _NegativeZero(int):
    """JSON `-0`: the int 0 (in an int64 feature, as text, in a split key), but -0.0 as a
    float, as Arrow's JSON reader and float("-0") give it; `json.loads` made it 0."""

    def __float__(self) -> float:
        return -0.0


_NEGATIVE_ZERO = _NegativeZero(0)


def _integer(text: str) -> int:
    return _NEGATIVE_ZERO if text == "-0" else int(text)


def parse_json_line(line: bytes) -> dict:
    """The object on one JSON Lines line: the one rule for the reader and for inference.

    Raises JsonLineError: `invalid_encoding` for bytes that are not UTF-8 (JSON Lines is
    UTF-8) or a `\\u` escape of a lone surrogate (no character, so no UTF-8 either),
    `invalid_json` for text that is not JSON, nests deeper than the parser can follow, or
    holds something other than an object. A number beyond float64 (1e400) is a
    `NumberBeyondFloat64`, never an infinity; `-0` is an int 0 that is -0.0 as a float.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JsonLineError("invalid_encoding", f"line is not UTF-8: {error}") from None
    try:
        # A Python call per int slows `json.loads`: only a line that may hold -0 makes them.
        obj = json.loads(text.lstrip("\ufeff"), parse_float=_number,
                         parse_int=_integer if b"-0" in line else None)
    except RecursionError:
        raise JsonLineError("invalid_json", "invalid JSON: nested deeper than the parser "
                                            "follows") from None
    except ValueError as error:
        raise JsonLineError("invalid_json", f"invalid JSON: {error}") from None
    if not isinstance(obj, dict):
        kind = "null" if obj is None else _JSON_KINDS.get(type(obj), "number")
        raise JsonLineError("invalid_json", f"a JSON {kind}, not an object")
    if _SURROGATE_ESCAPE.search(line):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as error:
            raise JsonLineError("invalid_encoding", f"a \\u escape of a lone surrogate "
                                f"(U+{ord(error.object[error.start]):04X}) is no character") from None
    return obj


# `json.loads` turns "\udc80" (an escape of half a UTF-16 pair, standing alone) into a
# str that no encoder takes: in a value, a key or a split key it failed the whole job. Arrow
# refuses the chunk ("surrogate pair ... invalid"), so only this path meets one, and only
# lines holding such an escape (a pair is one as well) are checked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


_JSON_KINDS = {bool: "boolean", str: "string", list: "array"}


# Arrow's JSON reader takes a top-level `null` for a row of nulls (a record, where the line
# is no object), and a chunk whose first row is one crashes the process (SIGSEGV in pyarrow
# 25), so such a chunk is never handed to it; every other top-level value fails the read.
# A `null` value follows `:`, `,` or `[`; one opening a line (or the chunk, after a byte
# order mark) or after a closing `}`/`]` stands on its own. The regex, one pass searching
# for "null", finds those right after that byte or one space/tab, and nulls after longer
# runs of blanks for a look back. A "null" in a string may pass for one: that chunk then
# only takes the slower line-by-line path.
_CHUNK_NULL = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*null")
_BARE_NULL = re.compile(rb"null(?:(?<=[\n\r}\]]null)|(?<=[\n\r}\]][ \t]null)|(?<=[ \t][ \t]null))")


def _holds_bare_null(body: bytes) -> bool:
    """Whether a `null` in `body` may stand outside an object."""
    if _CHUNK_NULL.match(body):
        return True
    for found in _BARE_NULL.finditer(body):
        before = body[max(0, found.start() - 256):found.start()].rstrip(b" \t")
        if not before or before[-1] in b"\n\r}]":
            return True
    return False


# An int -0 (not -0.5, -0e1): see `JsonLinesReader._signs_lost`.
_INT_NEGATIVE_ZERO = re.compile(rb"-0(?![0-9.eE])")


def _arrow_type_for(feature_type: str, is_list: bool) -> pa.DataType:
    scalar = {"int64": pa.int64(), "float": pa.float64()}.get(feature_type, pa.string())
    return pa.list_(scalar) if is_list else scalar


# Arrow's JSON reader converts a value to the declared type only in one case: an int to
# a double. Every other mismatch fails the chunk (which then takes the line-by-line
# path), so both paths see the same values. A double column is therefore declared only
# for columns that nothing but float features read: an int64 feature would reject 1.0
# where the line-by-line path takes 1, and text would lose the digits of a large int.
_ARROW_TYPES = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}


_KINDS = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list"))


def _value_kinds(values: Sequence[Any]) -> set:
    kinds = {next((kind for t, kind in _KINDS if isinstance(value, t)), "other")
             for value in values if value is not None}
    # An int beyond int64 adds "big", for which no Arrow type reads the column.
    if "int" in kinds and not all(INT64_MIN <= v <= INT64_MAX for v in values
                                  if isinstance(v, int) and not isinstance(v, bool)):
        kinds.add("big")
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
    # Ints a double column reads as they are, but read as int64 a JSON -0 loses its sign,
    # which a float feature keeps: a column only float features read stays double.
    if kinds == {"int", "float"} or kinds == {"int"} and all(use == "float" for use, _ in uses):
        kinds = {"float"}
    if len(kinds) > 1 or not kinds <= set(_ARROW_TYPES):
        return None
    kind = kinds.pop() if kinds else "str"
    if kind == "float" and any(use != "float" for use, _ in uses):
        return None
    return pa.list_(_ARROW_TYPES[kind]) if is_list else _ARROW_TYPES[kind]


def _holds_infinity(column: pa.ChunkedArray) -> bool:
    if pa.types.is_list(column.type):
        column = pc.list_flatten(column)
    return pc.any(pc.is_inf(column)).as_py() or False


class JsonLinesReader:
    """Reads JSON Lines: Arrow's JSON reader for clean chunks, `json.loads` per line for
    the others. The Arrow schema starts from the spec and adapts to what the lines hold
    (e.g. booleans in an int64 feature), so one odd chunk does not slow the rest.
    `arrow=False` parses every line with `json.loads`: the reference the Arrow path is checked against."""

    def __init__(self, spec: ConversionSpec, batch_rows: int, *, arrow: bool = True):
        self.spec = spec
        self.batch_rows = batch_rows
        self.arrow = arrow
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
            stream = open_input(unit.path, stack, unit.start, unit.end)
            target = MIN_BLOCK  # adapted to batch_rows after the first chunk
            pending: list[bytes] = []
            rows_before = lines_before = 0  # in the unit (`read.read_chunks` adds the file's)
            index = 0
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
                chunk = self._chunk(body, index, rows_before, lines_before)
                if chunk.input_count:
                    rows_before += chunk.input_count
                    if index == 0:
                        target = block_size(self.batch_rows, len(body) / chunk.input_count)
                    yield chunk
                    index += 1
                lines_before += body.count(b"\n")
                if not data:
                    return

    def _chunk(self, body: bytes, index: int, rows_before: int, lines_before: int) -> Chunk:
        lines: list[bytes] | None = None
        records: list[int] | None = None  # index in `lines` of every non-blank line

        def split_lines() -> tuple[list[bytes], list[int]]:
            nonlocal lines, records
            if lines is None:
                lines = body.split(b"\n")
                records = [k for k, line in enumerate(lines) if line.strip()]
            return lines, records

        table = self._read_arrow(body) if self.arrow else None
        if table is not None and table.num_rows != len(split_lines()[1]):
            table = None  # e.g. two objects on one line: the lines decide
        if table is None:
            return self._python_chunk(index, *split_lines(), rows_before, lines_before)

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
        """The chunk read by Arrow, or None where the lines must decide one by one: bytes
        that are not UTF-8 (Arrow passes them through), a line that is `null`, an infinity
        (only a number beyond float64 reads as one), or anything Arrow cannot read under
        the learned schema."""
        if not body.isascii() and not valid_utf8(body):
            return None
        if _holds_bare_null(body):
            return None
        if self._signs_lost() and _INT_NEGATIVE_ZERO.search(body):
            return None
        schema = pa.schema(list(self.types.items()))
        try:
            table = pajson.read_json(
                io.BytesIO(body),
                read_options=pajson.ReadOptions(use_threads=False, block_size=len(body) + 1),
                parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                  unexpected_field_behavior="ignore"),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError):
            return None
        for column in table.columns:
            values = column.type.value_type if pa.types.is_list(column.type) else column.type
            if pa.types.is_floating(values) and _holds_infinity(column):
                return None
        return table

    def _signs_lost(self) -> bool:
        """Whether a column read as int64 is also read by a float feature (as an int64
        feature or a split key read it too), which would take a JSON -0 for 0.0."""
        return any(("float", True) in self.uses[name] or ("float", False) in self.uses[name]
                   for name, arrow_type in self.types.items()
                   if pa.int64() in (arrow_type, getattr(arrow_type, "value_type", None)))

    def _python_chunk(self, index: int, lines: list[bytes], nonblank: list[int],
                      rows_before: int, lines_before: int) -> Chunk:
        objects: list[dict] = []
        positions: list[int] = []  # index in `nonblank` of each parsed object
        failures: list[Failure] = []
        for position, k in enumerate(nonblank):
            line = lines[k].strip()
            row, where = rows_before + position + 1, {"line": lines_before + k + 1}
            try:
                obj = parse_json_line(line)
            except JsonLineError as error:
                failures.append(Failure(row, error.reason, str(error), line, line, where))
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
