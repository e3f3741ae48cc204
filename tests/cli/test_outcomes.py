"""Honest outcomes of `convert`: refused before anything runs where possible, leftovers of a
killed run cleaned by the next run (even one with nothing to do), one line per failure."""

from __future__ import annotations

import json
import pathlib

import pipeline
from pipeline.cli import run
from pipeline.output_lock import LOCK_NAME

SAMPLE = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"


def _convert(output, *extra: str) -> list[str]:
    return ["convert", "--input", str(SAMPLE / "*.csv"), "--format", "csv",
            "--spec", str(SAMPLE / "customers.spec.yaml"), "--output", str(output),
            "--direct_running_mode=in_memory", "--quiet", *extra]


def test_an_output_that_is_a_file_is_refused_in_one_line(tmp_path, capsys):
    target = tmp_path / "out"
    target.write_bytes(b"precious")
    assert run(_convert(target)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tfrecord-pipeline convert: error: --output {target} is a file, not a folder"]
    assert target.read_bytes() == b"precious"


def test_a_temp_folder_left_after_the_manifest_is_removed_by_a_run_with_nothing_to_do(tmp_path):
    out = tmp_path / "out"
    assert run(_convert(out)) == 0
    committed = sorted(path.name for path in out.iterdir())
    leftover = out / ".tmp-killedafterthemanifest"  # a run killed between manifest and cleanup
    (leftover / "train").mkdir(parents=True)
    (leftover / "train" / "x.tfrecord").write_bytes(b"half")
    assert run(_convert(out)) == 0  # the same conversion: nothing to do
    assert not leftover.exists()
    assert sorted(path.name for path in out.iterdir()) == committed
    assert LOCK_NAME in committed


def test_a_glob_without_a_folder_part_matches_in_the_working_folder(tmp_path, monkeypatch, capsys):
    for name in ("part-1.csv", "part-2.csv"):
        (tmp_path / name).write_text("id,name\n1,a\n2,b\n")
    monkeypatch.chdir(tmp_path)
    assert run(["convert", "--input", "part-*.csv", "--format", "csv", "--output", "out",
                "--direct_running_mode=in_memory", "--quiet"]) == 0
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["input"] == 4
    assert run(["verify", "out/*.tfrecord"]) == 0
    monkeypatch.chdir(tmp_path / "out")
    capsys.readouterr()
    assert run(["verify", "*.tfrecord"]) == 0
    assert '"files_checked": 1' in capsys.readouterr().out
    assert run(["inspect", "*.tfrecord", "--limit", "1"]) == 0
