"""Tabular conversion end to end through the CLI (`pipeline.cli.run`), read back by TF."""

from __future__ import annotations

import glob
import json
import os
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipeline
from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.tabular import tabular_samples as samples
from tests.tabular.tabular_samples import ISSUE_CSV, ISSUE_GOOD, load_split, reference, rows_from_tf
from transforms.format.example_codec import decode_example
from transforms.tfrecord_io import read_tfrecord_file

SAMPLE = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"
ISSUE_SPEC_YAML = samples.ISSUE_SPEC_YAML + "splits: {train: 50, test: 50}\nsplit_key: [id]\n"


def convert(*args: str) -> int:
    return run(["convert", *args, *in_memory_args()])


def shard_records(output: pathlib.Path, split: str) -> list[bytes]:
    manifest = json.loads((output / "manifest.json").read_text())
    paths = [s["path"] for s in manifest["shards"] if s["split"] == split]
    return [r for path in sorted(paths) for r in read_tfrecord_file(str(output / path))]


def dead_letter_docs(output: pathlib.Path) -> list[dict]:
    docs = []
    for path in sorted(glob.glob(str(output / "dead_letter" / "*.jsonl"))):
        docs += [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]
    return docs


def test_sample_data_end_to_end(tmp_path, tf):
    out = tmp_path / "out"
    code = convert("--input", str(SAMPLE / "customers.csv"), "--format", "csv",
                   "--output", str(out), "--spec", str(SAMPLE / "customers.spec.yaml"),
                   "--compression", "gzip")
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["input"] == manifest["counts"]["written"] == 240
    assert manifest["counts"]["dead_letter"] == 0
    assert {s["split"] for s in manifest["shards"]} == {"train", "validation", "test"}
    feature_spec = json.loads((out / "feature_spec.json").read_text())["features"]
    assert feature_spec["customer_id"] == {
        "dtype": "int64", "kind": "fixed", "shape": [], "default": None,
        "presence": {"records": 240, "of": 240, "min_values": 1, "max_values": 1}}

    import csv

    with open(SAMPLE / "customers.csv", newline="", encoding="utf-8") as f:
        source = {int(row["customer_id"]): row for row in csv.DictReader(f)}
    with_age = sum(1 for row in source.values() if row["age"] != "")
    assert 0 < with_age < 240
    assert feature_spec["age"]["presence"] == {"records": with_age, "of": 240, "min_values": 1,
                                               "max_values": 1}
    seen = set()
    for split in ("train", "validation", "test"):
        for row in rows_from_tf(load_split(str(out), split)):
            customer = int(row["customer_id"])
            seen.add(customer)
            cells = source[customer]
            assert row["city"] == [cells["city"].encode()]
            assert row["age"] == ([int(cells["age"])] if cells["age"] else [])
            assert row["member"] == [1 if cells["is_member"] == "true" else 0]
            assert row["tags"] == [t.encode() for t in cells["tags"].split("|")] if cells["tags"] else True
            assert row["score"] == pytest.approx(float(cells["score"] or 0.5))
            assert row["note"] == [cells["note"].encode()]  # "" is kept: it is quoted
    assert seen == set(source)


@pytest.fixture(scope="module")
def issue_csv(tmp_path_factory) -> pathlib.Path:
    """A folder with the issue's CSV (data.csv), its spec (spec.yaml) and its conversion,
    gzip (out/); tests only read it."""
    folder = tmp_path_factory.mktemp("issue")
    data = folder / "data.csv"
    data.write_bytes(ISSUE_CSV)
    spec = folder / "spec.yaml"
    spec.write_text(ISSUE_SPEC_YAML)
    assert convert("--input", str(data), "--format", "csv", "--output", str(folder / "out"),
                   "--spec", str(spec), "--compression", "gzip", "--max-error-rate", "1") == 0
    return folder


def test_issue_csv_end_to_end(issue_csv, tf):
    out = issue_csv / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (8, 5, 3)
    for split, entry in counts["splits"].items():
        assert entry["input"] == entry["written"] + entry["dead_letter"], split
    written = {}
    for split in ("train", "test"):
        for payload in shard_records(out, split):
            written[decode_example(payload)["id"][1][0]] = payload
        parsed = rows_from_tf(load_split(str(out), split))
        assert sorted(int(r["id"]) for r in parsed) == sorted(
            i for i, p in written.items() if p in shard_records(out, split))
    assert written == {i: reference(row) for i, row in ISSUE_GOOD.items()}
    reasons = sorted((d["row"], d["reason"]) for d in dead_letter_docs(out))
    assert reasons == [(5, "invalid_encoding"), (6, "ragged_row"), (7, "int_out_of_range")]


def test_jsonl_and_parquet_through_the_cli_match_csv(tmp_path, issue_csv):
    spec = issue_csv / "spec.yaml"
    rows = [
        {"id": 1, "name": "Smith, John", "score": 1.5, "count": 10, "tags": ["a", "b"]},
        {"id": 2, "name": "multi\nline", "score": 0.1, "count": 0, "tags": None},
        {"id": 3, "name": None, "score": 2.5, "count": None, "tags": ["x"]},
        {"id": 4, "name": "", "score": 0.0, "count": 7, "tags": []},
        {"id": 8, "name": 'say "hi"', "score": -0.0, "count": -(2**63), "tags": ["p", "q", "r"]},
    ]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([
        ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
        ("count", pa.int64()), ("tags", pa.list_(pa.string()))])), tmp_path / "data.parquet")
    # The CSV's conversion is the shared one (gzip shards: their records are compared).
    outputs = {"csv": {split: shard_records(issue_csv / "out", split) for split in ("train", "test")}}
    for fmt, name in (("jsonl", "data.jsonl"), ("parquet", "data.parquet")):
        out = tmp_path / f"out-{fmt}"
        assert convert("--input", str(tmp_path / name), "--format", fmt, "--output", str(out),
                       "--spec", str(spec), "--max-error-rate", "1") == 0
        outputs[fmt] = {split: shard_records(out, split) for split in ("train", "test")}
    assert outputs["jsonl"] == outputs["csv"] == outputs["parquet"]
    assert sum(len(v) for v in outputs["csv"].values()) == 5


def test_inferred_spec_is_written_and_reruns_give_the_same_splits(tmp_path):
    source = SAMPLE / "customers.csv"
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    assert convert("--input", str(source), "--format", "csv", "--output", str(first)) == 0
    spec_text = (first / "spec.yaml").read_text()
    assert "name: customer_id" in spec_text and "type: int64" in spec_text
    # The inferred spec can be edited: add splits, then run twice.
    edited = tmp_path / "edited.yaml"
    edited.write_text(spec_text.replace("include_unlisted: false",
                                        "include_unlisted: false\nsplits: {train: 9, test: 1}"))
    for out in (second, third):
        assert convert("--input", str(source), "--format", "csv", "--output", str(out),
                       "--spec", str(edited), "--max-shard-bytes", "8KB") == 0
    for split in ("train", "test"):
        assert shard_records(second, split) == shard_records(third, split)
    assert len(shard_records(second, "train")) + len(shard_records(second, "test")) == 240
    assert len(json.loads((second / "manifest.json").read_text())["shards"]) > 2


def test_dry_run_prints_the_spec_and_an_estimate_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert convert("--input", str(SAMPLE / "customers.csv"), "--format", "csv",
                   "--output", str(out), "--dry-run", "--max-shard-bytes", "10KB") == 0
    printed = capsys.readouterr().out
    assert "customer_id" in printed
    assert "estimate" in printed and '"rows": 240' in printed
    assert not out.exists() or not os.listdir(out)


def test_max_error_rate_fails_after_writing_dead_letters(tmp_path):
    data = tmp_path / "data.csv"
    data.write_bytes(ISSUE_CSV)
    spec = tmp_path / "spec.yaml"
    spec.write_text(ISSUE_SPEC_YAML)
    out = tmp_path / "out"
    code = convert("--input", str(data), "--format", "csv", "--output", str(out),
                   "--spec", str(spec), "--max-error-rate", "0.1")
    assert code == 3
    assert len(dead_letter_docs(out)) == 3
    assert not (out / "manifest.json").exists()


def test_a_float_default_beyond_float32_is_a_usage_error_naming_the_feature(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n  - {name: a, type: int64}\n"
                    "  - {name: b, type: float, default: 1.0e+39, nan: reject}\n")
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,\n")
    out = tmp_path / "o"
    assert convert("--input", str(data), "--format", "csv", "--output", str(out),
                   "--spec", str(spec)) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"tfrecord-pipeline convert: error: {spec}: spec: feature 'b': 'default' 1e+39 is "
        f"outside the float32 range (a cell holding it is float_out_of_range)")
    assert not out.exists() or not os.listdir(out)


def test_a_float_default_in_exponent_notation_is_a_number(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n  - {name: a, type: int64}\n  - {name: b, type: float, default: 1e-3}\n")
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,\n2,0.5\n")
    out = tmp_path / "o"
    assert convert("--input", str(data), "--format", "csv", "--output", str(out),
                   "--spec", str(spec)) == 0
    assert json.loads((out / "feature_spec.json").read_text())["features"]["b"]["default"] == 0.001
    values = {decode_example(r)["a"][1][0]: decode_example(r)["b"][1] for r in shard_records(out, "data")}
    assert values == {1: [samples.f32(0.001)], 2: [0.5]}


def test_spec_errors_are_usage_errors(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("features: [{name: a, type: int32}]")
    data = tmp_path / "data.csv"
    data.write_text("a\n1\n")
    code = convert("--input", str(data), "--format", "csv", "--output", str(tmp_path / "o"),
                   "--spec", str(spec))
    assert code == 2
    assert "feature 'a': 'type' must be one of" in capsys.readouterr().err
    assert convert("--input", str(tmp_path / "none*.csv"), "--format", "csv",
                   "--output", str(tmp_path / "o")) == 2
    assert "no input file matches" in capsys.readouterr().err
