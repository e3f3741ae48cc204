"""Bad input or flags are one line on stderr (plus at most one `hint:` line) and exit 2:
never a multi-line message of a library, never a misleading cause, never a silent success."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

import pipeline
from pipeline.cli import run

SAMPLE = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"
PREFIX = "tfrecord-pipeline convert: error: "


def _convert(tmp_path, *extra: str) -> list[str]:
    return ["convert", "--input", str(SAMPLE / "*.csv"), "--format", "csv",
            "--output", str(tmp_path / "out"), "--direct_running_mode=in_memory", "--quiet", *extra]


def _error_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_a_spec_that_is_not_yaml_is_one_line_naming_file_line_and_column(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n  - name: id\n\ttype: int64\n")
    assert run(_convert(tmp_path, "--spec", str(spec))) == 2
    assert _error_lines(capsys) == [
        f"{PREFIX}{spec}:3:1: found character '\\t' that cannot start any token"]
    assert not (tmp_path / "out").exists()


def test_log_level_without_its_value_is_the_tools_one_line_error(tmp_path, capsys):
    assert run(_convert(tmp_path, "--log-level")) == 2
    first, hint = _error_lines(capsys)
    assert first == f"{PREFIX}argument --log-level/--log_level: expected one argument"
    assert hint.startswith("hint: ")


def test_dataflow_without_its_options_is_one_line_naming_them_before_anything_is_read(
        tmp_path, capsys, monkeypatch):
    pytest.importorskip("google.cloud.dataflow")  # else: the one line "needs the dataflow extra"
    monkeypatch.delenv("CLOUDSDK_COMPUTE_REGION", raising=False)
    argv = ["convert", "--input", str(tmp_path / "missing.csv"), "--format", "csv",
            "--output", str(tmp_path / "out"), "--runner", "DataflowRunner", "--region", "r1"]
    assert run(argv) == 2
    first, hint = _error_lines(capsys)
    assert first == (f"{PREFIX}--runner DataflowRunner: missing --temp_location "
                     f"(or --staging_location), --project")
    assert hint.startswith("hint: Dataflow needs")
    assert not (tmp_path / "out").exists()


def test_a_runner_without_its_extra_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.dataflow", None)  # as if not installed
    argv = ["convert", "--input", str(tmp_path / "missing.csv"), "--format", "csv",
            "--output", str(tmp_path / "out"), "--runner", "DataflowRunner"]
    assert run(argv) == 2
    [line] = _error_lines(capsys)
    assert line.startswith(f"{PREFIX}--runner DataflowRunner needs the dataflow extra")


@pytest.mark.parametrize("runner, why", [
    ([], "the local runner runs the job in this process"),
    (["--runner", "dask"], "Dask cancels a job when the command that submitted it exits"),
])
def test_no_wait_on_a_runner_whose_job_cannot_outlive_the_command_is_refused(
        tmp_path, capsys, runner, why):
    # It used to be ignored on the local runner (a silent wait), and on Dask the run's own
    # LocalCluster stopped as the command returned "Submitted": nothing was ever committed.
    pytest.importorskip("apache_beam.runners.dask.dask_runner")
    argv = ["convert", "--input", str(SAMPLE / "*.csv"), "--format", "csv",
            "--output", str(tmp_path / "out"), "--no-wait", "--quiet", *runner]
    assert run(argv) == 2
    first, hint = _error_lines(capsys)
    assert first == f"{PREFIX}--no-wait needs a runner whose job outlives this command; {why}"
    assert hint.startswith("hint: drop --no-wait")
    assert not (tmp_path / "out").exists()


def test_a_csv_with_duplicate_header_names_says_so(tmp_path, capsys):
    data = tmp_path / "dup.csv"
    data.write_text("a,b,a\n1,2,3\n")
    argv = ["convert", "--input", str(data), "--format", "csv", "--output", str(tmp_path / "out")]
    assert run(argv) == 2
    assert _error_lines(capsys) == [
        f"{PREFIX}duplicate column names ['a'] in {data}: give the columns distinct names in "
        f"the spec's csv.column_names"]


def test_a_truncated_parquet_file_says_so(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.table({"x": list(range(100))}), whole)
    data = tmp_path / "data.parquet"
    data.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    argv = ["convert", "--input", str(data), "--format", "parquet",
            "--output", str(tmp_path / "out")]
    assert run(argv) == 2
    [line] = _error_lines(capsys)
    assert line.startswith(f"{PREFIX}{data} is not a readable Parquet file: ")


@pytest.mark.parametrize("flags, message", [
    (["--format", "jsonl"], "--format is given twice"),
    (["--format=csv"], "--format is given twice"),
    (["--max_shard_records", "5", "--max-shard-records", "6"],
     "--max-shard-records is given twice (also as --max_shard_records)"),
])
def test_a_flag_given_twice_is_a_usage_error_naming_it(tmp_path, capsys, flags, message):
    assert run(_convert(tmp_path, *flags)) == 2
    first, hint = _error_lines(capsys)
    assert first == PREFIX + message and hint.startswith("hint: ")
    assert not (tmp_path / "out").exists()


def test_beams_repeatable_flags_and_our_switches_may_repeat(tmp_path):
    assert run(_convert(tmp_path, "--experiments", "a", "--experiments", "b", "--dry-run")) == 0
    assert run(_convert(tmp_path, "--dry-run", "--dry_run", "--quiet", "--quiet")) == 0


@pytest.mark.parametrize("fmt, flags, message", [
    ("csv", ["--compression-level", "5"], "--compression-level needs --compression gzip or zlib"),
    ("csv", ["--compression", "none", "--compression-level", "5"],
     "--compression-level needs --compression gzip or zlib"),
    ("csv", ["--image-column", "path"],
     "--image-column does not apply to --format csv, only to image-manifest"),
    ("csv", ["--labels-file", "labels.txt"],
     "--labels-file does not apply to --format csv, only to image-folder, image-manifest"),
    ("parquet", ["--resize", "8x8"],
     "--resize does not apply to --format parquet, only to image-folder, image-manifest"),
    ("image-folder", ["--spec", "spec.yaml"],
     "--spec does not apply to --format image-folder, only to csv, tsv, jsonl, parquet, "
     "image-manifest"),
    ("image-folder", ["--label-column", "label"],
     "--label-column does not apply to --format image-folder, only to image-manifest"),
    ("image-manifest", ["--image-column", "p", "--sample-rows", "5"],
     "--sample-rows does not apply to --format image-manifest, only to csv, tsv, jsonl, parquet"),
    ("image-folder", ["--resize-mode", "fill"], "--resize-mode applies with --resize only"),
    ("image-folder", ["--quality", "50"], "--quality applies to re-encoded JPEGs only"),
    ("image-folder", ["--encode", "png", "--quality", "50"],
     "--quality applies to re-encoded JPEGs only"),
    ("image-folder", ["--resize", "8x8", "--max-side", "5"],
     "--max-side and --resize exclude each other"),
    ("csv", ["--fail-on-drift", "schema"], "--fail-on-drift has nothing to compare with"),
])
def test_a_flag_the_others_make_meaningless_is_a_usage_error(tmp_path, capsys, fmt, flags, message):
    argv = ["convert", "--input", str(tmp_path / "in"), "--format", fmt,
            "--output", str(tmp_path / "out"), *flags]
    assert run(argv) == 2
    [line] = _error_lines(capsys)
    assert line.startswith(PREFIX + message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags", [
    ["--compression", "gzip", "--compression-level", "5"],
    ["--fail-on-drift", "schema", "--output", "{out}/{{YYYY}}-{{MM}}-{{DD}}"],
])
def test_the_same_flags_with_what_they_need_are_accepted(tmp_path, flags):
    flags = [flag.format(out=tmp_path) for flag in flags]
    argv = ["convert", "--input", str(SAMPLE / "*.csv"), "--format", "csv", "--dry-run",
            *(["--output", str(tmp_path / "out")] if "--output" not in flags else []), *flags]
    assert run(argv) == 0


@pytest.mark.parametrize("flags", [
    ["--encode", "jpeg", "--quality", "50"], ["--max-side", "8", "--quality", "50"],
    ["--exif-orientation", "--quality", "50"], ["--convert-mode", "L", "--quality", "50"],
])
def test_quality_with_a_re_encoding_is_accepted(tmp_path, flags):
    (tmp_path / "tree" / "cat").mkdir(parents=True)
    (tmp_path / "tree" / "cat" / "a.jpg").write_bytes(b"not read by a dry run")
    assert run(["convert", "--input", str(tmp_path / "tree"), "--format", "image-folder",
                "--output", str(tmp_path / "out"), "--dry-run", *flags]) == 0


def test_convert_help_shows_the_required_flags_as_required(capsys):
    assert run(["convert", "--help"]) == 0
    usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    for flag in ("--input INPUT", "--format {", "--output OUTPUT"):
        assert flag in usage and f"[{flag}" not in usage
    assert "[--spec SPEC]" in usage


def _unreadable(monkeypatch, folder: pathlib.Path) -> None:
    """As if this user could not read `folder` (chmod 000; the tests may run as root, whom
    no permission stops): listing it fails as it then would."""
    import os

    scandir = os.scandir

    def refusing(path="."):
        if os.fspath(path).rstrip("/") == str(folder):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)


def test_an_input_folder_that_cannot_be_read_says_so(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("x\n1\n")
    _unreadable(monkeypatch, folder)
    for given in (str(folder), str(folder / "*.csv")):
        assert run(["convert", "--input", given, "--format", "csv",
                    "--output", str(tmp_path / "out")]) == 2
        assert _error_lines(capsys) == [
            f"{PREFIX}cannot read the folder {folder}: Permission denied"]


def test_an_image_class_folder_that_cannot_be_read_is_not_left_out(tmp_path, capsys, monkeypatch):
    from PIL import Image

    for label in ("cat", "dog"):
        (tmp_path / "in" / label).mkdir(parents=True)
        Image.new("RGB", (4, 4)).save(tmp_path / "in" / label / "a.png")
    _unreadable(monkeypatch, tmp_path / "in" / "dog")
    assert run(["convert", "--input", str(tmp_path / "in"), "--format", "image-folder",
                "--output", str(tmp_path / "out")]) == 2
    assert _error_lines(capsys) == [
        f"{PREFIX}cannot read the folder {tmp_path / 'in' / 'dog'}: Permission denied"]
    assert not (tmp_path / "out").exists()


def _damage_manifest(out: pathlib.Path) -> None:
    manifest = out / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:100])  # truncated: not JSON any more


def test_a_damaged_manifest_beside_shards_asks_to_move_the_folder_and_overwrite_keeps_them(
        tmp_path, capsys):
    spec = ["--spec", str(SAMPLE / "customers.spec.yaml")]
    assert run(_convert(tmp_path, *spec)) == 0
    out = tmp_path / "out"
    _damage_manifest(out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    for extra in ([], ["--overwrite"]):
        assert run(_convert(tmp_path, *spec, *extra)) == 2
        first, hint = _error_lines(capsys)
        assert first.startswith(f"{PREFIX}{out / 'manifest.json'}: manifest is not valid JSON")
        assert "not even with --overwrite" in first and "--overwrite to replace" not in first
        assert hint == "hint: move the folder away or choose another --output"
        assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_damaged_manifest_alone_is_replaced_with_overwrite_as_the_error_says(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"version": 1, "shards": [')
    assert run(_convert(tmp_path)) == 2
    [line] = _error_lines(capsys)
    assert line.endswith("; use --overwrite to replace it")
    assert run(_convert(tmp_path, "--overwrite")) == 0
    assert json.loads((out / "manifest.json").read_text())["shards"]


def test_a_reader_that_stops_early_ends_inspect_quietly_with_141(tmp_path):
    """`inspect ... | head -1`: the pipe closing is no failure to report (exit 128 + SIGPIPE)."""
    import subprocess

    assert run(_convert(tmp_path)) == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "inspect", str(tmp_path / "out"), "--limit", "-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()  # as `head -1` exits
    _, stderr = process.communicate(timeout=120)
    assert json.loads(first)["record"] == 0
    assert process.returncode == 141
    assert stderr == b""
