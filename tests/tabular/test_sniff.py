"""Input that is not what --format says is refused before the run, naming the cause and the fix."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import run
from transforms.format.example_codec import decode_example
from transforms.tfrecord_io import read_tfrecord_file

ROWS = [{"id": i, "name": f"n{i}", "score": i / 4} for i in range(30)]


def _csv(delimiter: str = ",") -> str:
    lines = [delimiter.join(ROWS[0])] + [delimiter.join(str(v) for v in row.values()) for row in ROWS]
    return "\n".join(lines) + "\n"


def _write(folder, name: str, kind: str):
    path = folder / name
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(ROWS), path)
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    elif kind == "gzip-csv":
        path.write_bytes(gzip.compress(_csv().encode()))
    else:
        path.write_text(_csv({"csv": ",", "tsv": "\t", "semicolon": ";", "space": " "}[kind]))
    return path


@pytest.mark.parametrize("kind, name, fmt, first_line", [
    ("parquet", "data.csv", "csv", "is a Parquet file, not csv: use --format parquet"),
    ("jsonl", "data.csv", "csv", "holds JSON objects, not csv: use --format jsonl"),
    ("csv", "data.tsv", "tsv", "splits on ',' into 3 columns: use --format csv"),
    ("csv", "data.jsonl", "jsonl", "is not JSON Lines (its first line is not a JSON object): "
                                   "use --format csv"),
    ("csv", "data.parquet", "parquet", "is not a Parquet file (it does not start with PAR1): "
                                       "use --format csv"),
    ("semicolon", "data.csv", "csv", "splits on ';' into 3 columns: set the spec's csv delimiter"),
    ("space", "data.csv", "csv", "splits on space into 3 columns: set the spec's csv delimiter"),
    ("tsv", "data.csv", "csv", "splits on tab into 3 columns: use --format tsv"),
    ("gzip-csv", "data.csv", "csv", "is gzip-compressed but its name does not end in .gz"),
])
def test_the_wrong_format_is_refused_with_its_cause(tmp_path, capsys, kind, name, fmt, first_line):
    path = _write(tmp_path, name, kind)
    out = tmp_path / "out"
    code = run(["convert", "--input", str(path), "--format", fmt, "--output", str(out),
                "--direct_running_mode=in_memory", "--quiet"])
    assert code == 2
    message = capsys.readouterr().err.splitlines()[0]
    assert message.startswith(f"tfrecord-pipeline convert: error: {path}")
    assert first_line in message
    assert not out.exists()


@pytest.mark.parametrize("kind, name, fmt", [
    ("csv", "data.csv", "csv"), ("tsv", "data.tsv", "tsv"), ("jsonl", "data.jsonl", "jsonl"),
    ("parquet", "data.parquet", "parquet"), ("gzip-csv", "data.csv.gz", "csv"),
])
def test_the_right_format_passes(tmp_path, kind, name, fmt):
    path = _write(tmp_path, name, kind)
    assert run(["convert", "--input", str(path), "--format", fmt, "--output", str(tmp_path / "out"),
                "--direct_running_mode=in_memory", "--quiet"]) == 0


def test_a_one_column_csv_is_not_mistaken_for_another_delimiter(tmp_path):
    path = tmp_path / "names.csv"
    path.write_text("name\n" + "".join(f"person {i}\n" for i in range(20)))
    assert run(["convert", "--input", str(path), "--format", "csv", "--output", str(tmp_path / "out"),
                "--direct_running_mode=in_memory", "--quiet"]) == 0


def test_every_finite_text_beyond_float32_is_out_of_range(tmp_path):
    path = tmp_path / "floats.csv"
    values = ["1e39", "1e400", "-1e400", "3.5e38", "inf", "-Infinity", "nan", "2.5"]
    path.write_text("id,x\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values)))
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64}\n- {name: x, type: float}\n")
    out = tmp_path / "out"
    assert run(["convert", "--input", str(path), "--format", "csv", "--spec", str(spec),
                "--output", str(out), "--direct_running_mode=in_memory", "--quiet",
                "--max-error-rate", "1"]) == 0
    letters = [json.loads(line) for p in (out / "dead_letter").glob("*.jsonl")
               for line in p.read_text().splitlines()]
    assert sorted((letter["row"], letter["reason"]) for letter in letters) == [
        (1, "float_out_of_range"), (2, "float_out_of_range"), (3, "float_out_of_range"),
        (4, "float_out_of_range")]


@pytest.mark.parametrize("fmt, name, body", [
    ("csv", "ids.csv", "id,n\n9223372036854775808,1\n12,2\n-9223372036854775809,3\n"),
    ("jsonl", "ids.jsonl", '{"id": 9223372036854775808, "n": 1}\n{"id": 12, "n": 2}\n'
                           '{"id": -9223372036854775809, "n": 3}\n'),
])
def test_integers_beyond_int64_are_inferred_as_lossless_strings(tmp_path, fmt, name, body):
    path = tmp_path / name
    path.write_text(body)
    out = tmp_path / "out"
    assert run(["convert", "--input", str(path), "--format", fmt, "--output", str(out),
                "--direct_running_mode=in_memory", "--quiet"]) == 0
    spec = (out / "spec.yaml").read_text()
    assert "name: id\n  type: string" in spec and "name: n\n  type: int64" in spec
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["written"] == 3 and manifest["counts"]["dead_letter"] == 0
    ids = {decode_example(payload)["id"][1][0] for shard in manifest["shards"]
           for payload in read_tfrecord_file(str(out / shard["path"]))}
    assert ids == {b"9223372036854775808", b"12", b"-9223372036854775809"}
