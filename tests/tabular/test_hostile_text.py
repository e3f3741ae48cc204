"""CSV and JSON Lines text at the edges of what the readers take, through the CLI: a JSON
Lines line that is no object (a bare `null` included, which Arrow's reader took for a row and
could crash on) is that line's dead letter on the Arrow and the line-by-line path alike; so is
a line escaping a lone surrogate, whatever reads the value, and JSON -0 is -0.0 in a float
feature on both paths. A CSV file ending inside a quoted field dead-letters that record as
`unterminated_quote`, with or without a line break after it, read whole, in chunks, or from
gzip; characters of the range that escapes undecodable bytes are text."""

from __future__ import annotations

import base64
import collections
import gzip
import json
import math
import pathlib
import subprocess
import sys

import pytest

from tests.tabular.test_hostile_tabular import (
    ID_NAME,
    _convert,
    _counts,
    _dead,
    _ids,
    _records,
    _spec,
)
from tests.tabular.test_range_cuts import CSV, _cut, _raw_units
from tests.tabular.test_tabular import (
    convert,
    convert_line_by_line,
    dead_letters,
    json_chunk_modes,
    records,
)
from transforms.format.example_codec import decode_example
from transforms.tabular.chunks import MIN_BLOCK
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import parse_spec
from transforms.tabular.values import RowConverter


@pytest.mark.parametrize("arrow", [True, False])
def test_a_json_line_that_is_no_object_is_its_dead_letter_on_either_path(tmp_path, arrow):
    lines = ['{"id": 1, "name": "a"}', "null", '{"id": 2, "name": null}', "  null ",
             '{"id": 3, "name": "c"}']
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    if arrow:  # through the CLI
        out = tmp_path / "out"
        assert _convert(source, "jsonl", out, "--spec", _spec(tmp_path, ID_NAME)) == 0
        ids, letters, counts = _ids(out), _dead(out), _counts(out)
    else:  # every line parsed by json.loads: the reader's reference mode
        batches = convert_line_by_line(source, parse_spec(ID_NAME), batch_rows=100)
        ids = sorted(decode_example(record)["id"][1][0] for record in records(batches))
        letters = dead_letters(batches)
        counts = {"input": sum(batch.input_count for batch in batches),
                  "written": len(records(batches)), "dead_letter": len(letters)}
    assert ids == [1, 2, 3]
    dead = {d["line"]: (d["reason"], d["message"], d["raw"]) for d in letters}
    assert dead == {2: ("invalid_json", "a JSON null, not an object", "null"),
                    4: ("invalid_json", "a JSON null, not an object", "null")}
    assert counts["input"] == len(lines) == counts["written"] + counts["dead_letter"]


def test_null_lines_opening_a_chunk_do_not_crash_the_reader(tmp_path):
    """Arrow's JSON reader crashed the process (SIGSEGV) on a chunk whose first row is `null`:
    here every chunk after the first (chunks are MIN_BLOCK bytes: --batch-rows 64 of these
    1 KB lines is less; three of them). A `null` line padded with blanks is a `null` row (and
    its dead letter's raw is "null"): 200 rows fill the chunks where 39,000 bare ones did. In
    a process of its own, so a crash fails the test."""
    line = "null" + " " * 1015 + "\n"
    nulls = 3 * MIN_BLOCK // len(line) + 1
    assert 64 * len(line) < MIN_BLOCK < nulls * len(line) // 3
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "name": "a"}\n' + "null\n" + line * nulls)
    nulls += 1
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", "--input", str(source), "--format",
         "jsonl", "--output", str(out), "--spec", _spec(tmp_path, ID_NAME), "--quiet",
         "--max-error-rate", "1", "--batch-rows", "64"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (nulls + 1, 1, nulls)
    assert counts["dead_letter_reasons"] == {"invalid_json": nulls}


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_null_values_inside_objects_keep_the_arrow_path(tmp_path, separators):
    """Only a line that is `null` turns a chunk away from Arrow, not the null values JSON
    writers put in objects and lists (compact or spaced)."""
    spec = parse_spec("features: [{name: id, type: int64}, {name: v, type: float, list: true}]")
    rows = [{"id": n, "v": [n, None] if n % 3 == 0 else None, "w": None} for n in range(3000)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row, separators=separators) + "\n" for row in rows))
    modes = json_chunk_modes(source, spec, batch_rows=500)
    batches = convert(source, "jsonl", spec, batch_rows=500)
    assert set(modes) == {"typed"} and modes["typed"] >= 2, modes
    assert len(records(batches)) == 2000
    dead = dead_letters(batches)
    assert len(dead) == 1000 and {d["reason"] for d in dead} == {"wrong_type"}  # [n, null]


_SPLIT_BY_NAME = "features:\n  - {name: id, type: int64}\nsplits: {a: 1, b: 1}\nsplit_key: [name]\n"


@pytest.mark.parametrize("spec", [
    ID_NAME,
    "features:\n  - {name: id, type: int64}\n  - {name: name, type: bytes}\n",
    _SPLIT_BY_NAME,
    None,  # inferred
])
def test_a_json_escape_of_a_lone_surrogate_is_its_lines_dead_letter(tmp_path, spec):
    lines = [r'{"id": 1, "name": "a"}', r'{"id": 2, "name": "\udc80"}',
             r'{"id": 3, "name": "\ud83d\ude00"}', r'{"id": 4, "name": "x\ud800y"}',
             r'{"id": 5, "\udfff": 1}', r'{"id": 6, "name": "\\udc80"}']
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert _convert(source, "jsonl", out, *(["--spec", _spec(tmp_path, spec)] if spec else [])) == 0
    assert _ids(out) == [1, 3, 6]
    dead = {d["line"]: (d["reason"], d["message"], d["raw"]) for d in _dead(out)}
    assert dead == {
        2: ("invalid_encoding", r"a \u escape of a lone surrogate (U+DC80) is no character",
            lines[1]),
        4: ("invalid_encoding", r"a \u escape of a lone surrogate (U+D800) is no character",
            lines[3]),
        5: ("invalid_encoding", r"a \u escape of a lone surrogate (U+DFFF) is no character",
            lines[4]),
    }
    if spec != _SPLIT_BY_NAME:
        names = {r["id"][1][0]: r["name"][1][0] for r in _records(out)}
        assert names == {1: b"a", 3: "\U0001f600".encode(), 6: rb"\udc80"}
    counts = _counts(out)
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (6, 3, 3)


_OPEN_ENDINGS = ['2,"y', '"2,y', '2,"y\n', '"2,y\n', '2,"y""', '2,"y\r\n', '"2,y\n3,z\n']


def test_a_csv_ending_inside_a_quoted_field_dead_letters_it_with_or_without_a_newline(tmp_path):
    """Each ending inside quotes is the end of a file of its own (with ids of its own), plain
    and gzip, after 1 row and after 2,000 rows of 100 bytes (200 KB: read in chunks of
    MIN_BLOCK, as --batch-rows 200 asks for less, and planned in ranges): the 28 files
    converted in one run."""
    folder = tmp_path / "in"
    folder.mkdir()
    cases = [(rows, gz, last) for rows in (1, 2_000) for gz in (False, True) for last in _OPEN_ENDINGS]
    for n, (rows, gz, last) in enumerate(cases):
        first = 1000 + 100_000 * n
        data = b"id,name\n" + b"".join(b"%d,%s\n" % (first + i, b"x" * 92) for i in range(rows)) \
            + last.encode()
        assert rows == 1 or len(data) > 3 * MIN_BLOCK > 3 * 200 * 100
        (folder / f"in{n}.csv{'.gz' if gz else ''}").write_bytes(gzip.compress(data) if gz else data)
    out = tmp_path / "out"
    assert _convert(folder, "csv", out, "--spec", _spec(tmp_path, ID_NAME),
                    "--work-unit-bytes", "20000", "--batch-rows", "200") == 0
    ids, dead = _ids(out), _dead(out)
    assert {pathlib.Path(d["source"]).name for d in dead} == {path.name for path in folder.iterdir()}
    for n, (rows, gz, last) in enumerate(cases):
        first = 1000 + 100_000 * n
        assert [i for i in ids if first <= i < first + 100_000] == [first + i for i in range(rows)]
        lines = last.splitlines()  # the line the quote opens and every line after it
        mine = sorted((d for d in dead if pathlib.Path(d["source"]).name.startswith(f"in{n}.")),
                      key=lambda d: d["row"])
        assert [(d["reason"], d["row"], d["line"], d["raw"]) for d in mine] == [
            ("unterminated_quote", rows + 1 + j, rows + 2 + j, line) for j, line in enumerate(lines)
        ], (rows, gz, last)
    swallowed = sum(len(last.splitlines()) for *_, last in cases)
    written = sum(rows for rows, *_ in cases)
    counts = _counts(out)
    assert len(ids) == written and len(dead) == swallowed
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (
        written + swallowed, written, swallowed)


@pytest.mark.parametrize("where", ["beam", "now"])
def test_a_csv_ending_inside_a_quoted_field_stays_one_unit_when_workers_cut_it(tmp_path, where):
    path = tmp_path / "open.csv"
    path.write_bytes(b"id,name\n" + b"".join(b"%d,x\n" % i for i in range(400)) + b'400,"y')
    (unit,) = _cut(_raw_units(path, "csv", 4), CSV, tmp_path / "units", where)
    assert (unit.start, unit.end) == (None, None)
    spec = parse_spec(ID_NAME)
    failures = [f for chunk in read_chunks(unit, "csv", spec, 64) for f in chunk.failures]
    assert [(f.reason, f.row, f.details, f.raw) for f in failures] == [
        ("unterminated_quote", 401, {"line": 402}, '400,"y')]


@pytest.mark.parametrize("spec_text", [
    # Columns only float features read: a chunk read line by line leaves them double.
    "features:\n  - {name: f, type: float}\n  - {name: fl, type: float, list: true}\n",
    # Columns also read as int64 (a feature, a split key): a chunk with -0 is read line by line.
    "features:\n  - {name: f, type: float}\n  - {name: fi, type: int64, column: f}\n"
    "  - {name: fl, type: float, list: true}\nsplits: {p: 1, q: 1}\nsplit_key: [fl]\n",
])
def test_json_minus_zero_is_negative_zero_in_a_float_feature_on_either_path(
        tmp_path, spec_text):
    spec = parse_spec(spec_text)
    lines = ['{"f": 1, "fl": [1], "odd": [}']  # invalid: a first chunk read line by line
    rows = 2_500  # lines of ~90 bytes (blanks inside the object): chunks of MIN_BLOCK, 3 or more
    for n in range(1, rows):
        f = "-0" if n % 7 == 0 else n
        fl = f"[{n}, -0]" if n % 5 == 0 else f"[{n}]"
        lines.append(f'{{{" " * 64}"f": {f}, "fl": {fl}}}')
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")

    modes = json_chunk_modes(source, spec, batch_rows=300)
    assert sum(modes.values()) >= 3, modes
    if "fi" not in spec_text:
        assert modes["typed"] >= 2, modes
    with_arrow = convert(source, "jsonl", spec, batch_rows=300)
    line_by_line = convert_line_by_line(source, spec, batch_rows=300)
    for split in {b.split for b in with_arrow}:
        assert records(with_arrow, split) == records(line_by_line, split)
    assert len(dead_letters(with_arrow)) == 1
    signs = collections.Counter()
    for record in map(decode_example, records(with_arrow)):
        for name in ("f", "fl"):
            signs[name] += sum(math.copysign(1, v) < 0 for v in record[name][1])
    assert signs == {"f": len(range(7, rows, 7)), "fl": len(range(5, rows, 5))}


_TOP = "\U0010ff41\U0010ffff"  # valid characters, in the range escaping invalid bytes


@pytest.mark.parametrize("encoding", ["utf-8", "gb18030"])
def test_characters_of_the_escape_range_are_text_and_invalid_bytes_still_dead_letters(
        tmp_path, encoding):
    folder = tmp_path / "in"
    folder.mkdir()
    good = f"id,name,tags\n1,{_TOP},a|{_TOP}\n2,x,b\nbad,{_TOP},c\n3,{_TOP}\n"
    (folder / "a.csv").write_bytes(good.encode(encoding))
    (folder / "b.csv").write_bytes(b"id,name,tags\n4,\xff\xfe,d\n5,y,e\n")  # invalid in both
    spec = _spec(tmp_path, ID_NAME + "  - {name: tags, type: string, list: true, separator: '|'}\n"
                 f"csv: {{encoding: {encoding}}}\n")
    out = tmp_path / "out"
    assert _convert(folder, "csv", out, "--spec", spec) == 0
    by_id = {r["id"][1][0]: r for r in _records(out)}
    assert sorted(by_id) == [1, 2, 5]
    assert by_id[1]["name"] == ("bytes", [_TOP.encode()])
    assert by_id[1]["tags"] == ("bytes", [b"a", _TOP.encode()])
    dead = {(d["source"][-5:], d["row"]): d for d in _dead(out)}
    assert {key: d["reason"] for key, d in dead.items()} == {
        ("a.csv", 3): "invalid_int", ("a.csv", 4): "ragged_row", ("b.csv", 1): "invalid_encoding"}
    assert dead["a.csv", 3]["raw"] == f"bad,{_TOP},c" and dead["a.csv", 4]["raw"] == f"3,{_TOP}"
    invalid = dead["b.csv", 1]
    assert (invalid["raw_encoding"], base64.b64decode(invalid["raw"])) == ("base64", b"4,\xff\xfe,d")


def test_inferred_types_and_the_row_converter_take_characters_of_the_escape_range(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text(f"id,name\n1,{_TOP}\n2,{_TOP}\n", encoding="utf-8")
    out = tmp_path / "out"
    assert _convert(source, "csv", out) == 0
    assert "- name: name\n  type: string" in (out / "spec.yaml").read_text()
    assert [r["name"] for r in _records(out)] == [("bytes", [_TOP.encode()])] * 2
    spec = parse_spec("features: [{name: name, type: string}]")
    assert RowConverter(spec, "csv").convert({"name": _TOP}) == {"name": ("bytes", [_TOP.encode()])}
