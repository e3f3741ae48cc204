"""Tabular input nobody here prepared, through the CLI: every row ends in a shard or a dead
letter with its reason (an unclosed CSV quote, however long the rest of the file; a ragged
row with a field over 128 KiB; JSON Lines lines that are not UTF-8 or nest too
deep, numbers beyond float64), a quoted "" in a number column is missing, Parquet durations
keep their unit, a spec column the input lacks is refused by name, and valid UTF-8 never
makes the CSV probe print an ignored exception."""

from __future__ import annotations

import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.format.example_codec import decode_example


def _convert(source, fmt: str, out, *extra: str) -> int:
    """Converts hostile input, whose dead letters are the point: any share is allowed."""
    return run(["convert", "--input", str(source), "--format", fmt, "--output", str(out),
                "--max-error-rate", "1", *extra, *in_memory_args()])


def _records(out: pathlib.Path) -> list[dict]:
    from transforms.format.tfrecord_reader import iter_records

    manifest = json.loads((out / "manifest.json").read_text())
    records = []
    for shard in manifest["shards"]:
        with open(out / shard["path"], "rb") as handle:
            records += [decode_example(info.payload) for info in iter_records(handle)]
    return records


def _dead(out: pathlib.Path) -> list[dict]:
    return [json.loads(line) for path in sorted((out / "dead_letter").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def _ids(out: pathlib.Path) -> list[int]:
    """Each record's one id, sorted (decoded by the batch decoder: outputs of 20,000 rows)."""
    from transforms.format.example_decoder import decode_examples
    from transforms.format.tfrecord_reader import iter_records

    manifest = json.loads((out / "manifest.json").read_text())
    payloads = []
    for shard in manifest["shards"]:
        with open(out / shard["path"], "rb") as handle:
            payloads += [info.payload for info in iter_records(handle)]
    if not payloads:
        return []
    ids = decode_examples(payloads).columns["id"]
    assert ids.kind == "int64" and (ids.counts == 1).all()
    return sorted(ids.values.tolist())


def _counts(out: pathlib.Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["counts"]


def _spec(tmp_path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


ID_NAME = "features:\n  - {name: id, type: int64}\n  - {name: name, type: string}\n"


def test_an_unclosed_quote_dead_letters_every_line_it_would_swallow(tmp_path):
    source = tmp_path / "in.csv"
    source.write_bytes(b'id,name\n1,"ok"\n2,"never closed\n3,c\n4,d\n5,e\n')
    out = tmp_path / "out"
    assert _convert(source, "csv", out, "--spec", _spec(tmp_path, ID_NAME)) == 0
    assert _ids(out) == [1]
    dead = _dead(out)
    assert [d["reason"] for d in dead] == ["unterminated_quote"] * 4
    assert [d["line"] for d in dead] == [3, 4, 5, 6]
    assert [d["row"] for d in dead] == [2, 3, 4, 5]
    assert [d["raw"] for d in dead] == ['2,"never closed', "3,c", "4,d", "5,e"]
    assert dead[0]["message"].startswith("a quoted field opened on line 3 is never closed")
    counts = _counts(out)
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (5, 1, 4)


def test_an_unclosed_quote_in_a_ragged_row_is_found_too(tmp_path):
    source = tmp_path / "in.csv"
    source.write_bytes(b'id,name,x\n1,a,b\n2,"open\n3,c,d\n')
    out = tmp_path / "out"
    spec = _spec(tmp_path, ID_NAME + "  - {name: x, type: string}\n")
    assert _convert(source, "csv", out, "--spec", spec) == 0
    assert _ids(out) == [1]
    assert [(d["reason"], d["line"]) for d in _dead(out)] == [("unterminated_quote", 3),
                                                               ("unterminated_quote", 4)]
    assert _counts(out)["input"] == 3


# More than Python's csv module takes in one field by default (128 KiB).
_PAST_FIELD_LIMIT = 200_000


@pytest.mark.parametrize("extra", [["--spec"], ["--spec", "--work-unit-bytes", "64KB"], []],
                         ids=["spec", "byte-ranges", "inferred"])
def test_an_unclosed_quote_swallowing_over_128_kib_still_dead_letters_each_line(tmp_path, extra):
    # The lines an unclosed quote swallows are one runaway field: past the csv module's
    # field limit the whole file became one unreadable_file and the rows before it were lost.
    # Lines of 130 bytes: 1,700 dead letters, not the 15,000 of short lines, fill the field.
    source = tmp_path / "in.csv"
    lines = [f"{i},n{i:06d}{'x' * 120}" for i in range(1, _PAST_FIELD_LIMIT // 120)]
    lines[4] = '5,"never closed'
    assert len("\n".join(lines[4:])) > _PAST_FIELD_LIMIT  # the runaway field, past the limit
    source.write_text("id,name\n" + "\n".join(lines) + "\n")
    out = tmp_path / "out"
    if extra[:1] == ["--spec"]:
        extra = ["--spec", _spec(tmp_path, ID_NAME), *extra[1:]]
    assert _convert(source, "csv", out, *extra) == 0
    assert _ids(out) == [1, 2, 3, 4]
    dead = _dead(out)
    assert {d["reason"] for d in dead} == {"unterminated_quote"}
    assert [d["line"] for d in dead] == list(range(6, len(lines) + 2))
    assert [d["row"] for d in dead] == list(range(5, len(lines) + 1))
    assert dead[0]["raw"] == '5,"never closed'
    counts = _counts(out)
    assert (counts["input"], counts["written"]) == (len(lines), 4)


def test_a_ragged_row_with_a_quoted_field_over_128_kib_is_a_dead_letter_of_its_own(tmp_path):
    source = tmp_path / "in.csv"
    big = "x" * _PAST_FIELD_LIMIT
    source.write_text(f'id,name\n1,a\n2,"{big}",extra\n3,"{big}\nmore"\n4,d\n')
    out = tmp_path / "out"
    assert _convert(source, "csv", out, "--spec", _spec(tmp_path, ID_NAME)) == 0
    assert _ids(out) == [1, 3, 4]
    dead = _dead(out)
    assert [(d["reason"], d["row"]) for d in dead] == [("ragged_row", 2)]
    assert dead[0]["raw"] == f'2,"{big}",extra'


def test_a_closed_quoted_field_spanning_lines_at_the_end_is_a_value(tmp_path):
    source = tmp_path / "in.csv"
    source.write_bytes(b'id,name\n1,a\n2,"two\nlines ""quoted"""\n')
    out = tmp_path / "out"
    assert _convert(source, "csv", out, "--spec", _spec(tmp_path, ID_NAME)) == 0
    assert _ids(out) == [1, 2]
    assert not (out / "dead_letter").exists()
    names = sorted(record["name"][1][0] for record in _records(out))
    assert names == [b"a", b'two\nlines "quoted"']


def test_jsonl_lines_that_are_not_utf8_or_nest_too_deep_are_dead_letters_of_their_own(tmp_path):
    source = tmp_path / "in.jsonl"
    deep = b'{"id": 3, "name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    source.write_bytes(b'{"id": 1, "name": "a"}\n{"id": 2, "name": "\xff\xfe"}\n' + deep
                       + b'\n{"id": 4, "name": "d"}\n')
    out = tmp_path / "out"
    assert _convert(source, "jsonl", out, "--spec", _spec(tmp_path, ID_NAME)) == 0
    assert _ids(out) == [1, 4]
    dead = {d["line"]: d for d in _dead(out)}
    assert dead[2]["reason"] == "invalid_encoding" and dead[2]["raw_encoding"] == "base64"
    assert dead[3]["reason"] == "invalid_json" and "nested deeper" in dead[3]["message"]
    assert _counts(out)["input"] == 4


@pytest.mark.parametrize("arrow_path", [True, False])
def test_a_json_number_beyond_float64_is_out_of_range_not_infinity(tmp_path, arrow_path):
    lines = ['{"id": 1, "v": 1e400, "t": 1e400}', '{"id": 2, "v": 1.5, "t": 2}']
    if not arrow_path:
        lines.append('{"id": 3, "v": 2.5, "t": 3, "odd": [1, "x"}')  # invalid: per-line path
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: v, type: float}\n")
    out = tmp_path / "out"
    assert _convert(source, "jsonl", out, "--spec", spec) == 0
    assert _ids(out) == [2]
    reasons = {d["row"]: d["reason"] for d in _dead(out)}
    assert reasons[1] == "float_out_of_range"
    as_text = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: t, type: string}\n")
    out2 = tmp_path / "out2"
    assert _convert(source, "jsonl", out2, "--spec", as_text) == 0
    texts = {r["id"][1][0]: r["t"][1][0] for r in _records(out2)}
    assert texts[1] == b"1e400" and texts[2] == b"2"


def test_a_quoted_empty_cell_in_a_number_column_is_missing_and_keeps_the_type(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text('id,v,s\n1,2,x\n2,"",""\n3,4,z\n')
    out = tmp_path / "out"
    assert _convert(source, "csv", out) == 0
    spec = (out / "spec.yaml").read_text()
    assert "- name: v\n  type: int64" in spec
    by_id = {r["id"][1][0]: r for r in _records(out)}
    assert by_id[1]["v"] == ("int64", [2]) and "v" not in by_id[2] and by_id[3]["v"] == ("int64", [4])
    assert by_id[2]["s"] == ("bytes", [b""])  # a string column keeps the empty string
    assert not (out / "dead_letter").exists()


def test_parquet_durations_keep_their_unit(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "d": pa.array([1, 1500], pa.duration("ms"))}),
                   folder / "a.parquet")
    pq.write_table(pa.table({"id": [3], "d": pa.array([1], pa.duration("s"))}), folder / "b.parquet")
    out = tmp_path / "inferred"
    assert _convert(folder, "parquet", out) == 0
    assert "- name: d\n  type: int64\n  unit: ms" in (out / "spec.yaml").read_text()
    assert json.loads((out / "feature_spec.json").read_text())["features"]["d"]["unit"] == "ms"
    assert {r["id"][1][0]: r["d"][1][0] for r in _records(out)} == {1: 1, 2: 1500, 3: 1000}

    seconds = tmp_path / "seconds"
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n"
                           "  - {name: d, type: int64, unit: s}\n")
    assert _convert(folder, "parquet", seconds, "--spec", spec) == 0
    assert {r["id"][1][0]: r["d"][1][0] for r in _records(seconds)} == {3: 1}
    dead = {d["row"]: d for d in _dead(seconds) if d["source"].endswith("a.parquet")}
    assert dead[1]["reason"] == "wrong_type" and "not a whole number of s" in dead[1]["message"]

    unitless = tmp_path / "unitless"
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: d, type: int64}\n")
    assert _convert(folder, "parquet", unitless, "--spec", spec) == 5
    dead = _dead(unitless)
    assert len(dead) == 3 and {d["reason"] for d in dead} == {"wrong_type"}
    assert "need an int64 feature with 'unit'" in dead[0]["message"]


def test_a_spec_column_the_input_lacks_is_refused_with_a_did_you_mean(tmp_path, capsys):
    source = tmp_path / "in.csv"
    source.write_text("id,name\n1,a\n")
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: nmae, type: string}\n")
    assert _convert(source, "csv", tmp_path / "out", "--spec", spec) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first == ("tfrecord-pipeline convert: error: spec: feature 'nmae': column 'nmae' is not "
                     "in the input (did you mean 'name'? columns: ['id', 'name'])")
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"id": 1, "name": "a"}\n')
    assert _convert(jsonl, "jsonl", tmp_path / "out2", "--spec", spec) == 2
    assert "column 'nmae' is not in the input" in capsys.readouterr().err


def test_valid_utf8_cut_by_the_csv_probe_prints_no_ignored_exception(tmp_path, capsys):
    source = tmp_path / "in.csv"
    line = "é" * 50 + ",1\n"  # the probe's 64 KiB head ends inside a two-byte character
    source.write_text("name,v\n" + line * 3000, encoding="utf-8")
    out = tmp_path / "out"
    assert _convert(source, "csv", out) == 0
    assert _counts(out)["written"] == 3000
    assert "Exception ignored" not in capsys.readouterr().err
