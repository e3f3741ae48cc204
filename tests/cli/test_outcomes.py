"""Honest outcomes of `convert`: refused before anything runs where possible, leftovers of a
killed run cleaned by the next run (even one with nothing to do), one line per failure."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import uuid

import pytest

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


SHARDS_OF_50 = ("--max-shard-records", "50")


@pytest.fixture(scope="module")
def committed_in_shards_of_50(tmp_path_factory):
    """The sample converted once with `_convert(out, *SHARDS_OF_50)`. Read only: tests
    change copies (copytree keeps the times: the same committed output, elsewhere)."""
    out = tmp_path_factory.mktemp("committed") / "out"
    assert run(_convert(out, *SHARDS_OF_50)) == 0
    return out


def test_a_temp_folder_left_after_the_manifest_is_removed_by_a_run_with_nothing_to_do(
        tmp_path, committed_in_shards_of_50):
    out = shutil.copytree(committed_in_shards_of_50, tmp_path / "out")
    committed = sorted(path.name for path in out.iterdir())
    leftover = out / ".tmp-0123456789abcdef"  # a run killed between manifest and cleanup
    (leftover / "train").mkdir(parents=True)
    (leftover / "train" / (uuid.uuid4().hex + ".tfrecord")).write_bytes(b"half")
    assert run(_convert(out, *SHARDS_OF_50)) == 0  # the same conversion: nothing to do
    assert not leftover.exists()
    assert sorted(path.name for path in out.iterdir()) == committed
    assert LOCK_NAME not in committed  # removed when the run ends


def test_files_merely_named_like_a_temp_folder_are_left_alone(tmp_path):
    out = tmp_path / "out"
    mine = {".tmp-backup/thesis.docx": b"precious", ".tmp-2024.log": b"notes",
            ".tmp-0123456789abcdef/notes.txt": b"mine",  # a run's name, but not a run's files
            f".tmp-fedcba9876543210/train/{uuid.uuid4().hex}.tfrecord.partial.bak": b"mine too"}
    for name, data in mine.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    assert run(_convert(out)) == 0
    assert {name: (out / name).read_bytes() for name in mine} == mine
    assert run(_convert(out)) == 0  # the same conversion: nothing to do, nothing removed
    assert {name: (out / name).read_bytes() for name in mine} == mine


def test_a_glob_without_a_folder_part_matches_in_the_working_folder(tmp_path, monkeypatch, capsys):
    for name in ("part-1.csv", "part-2.csv"):
        (tmp_path / name).write_text("id,name\n1,a\n2,b\n")
    monkeypatch.chdir(tmp_path)
    assert run(["convert", "--input", "part-*.csv", "--format", "csv", "--output", "out",
                "--direct_running_mode=in_memory", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["input"] == 4
    assert run(["verify", "out/*.tfrecord"]) == 0
    monkeypatch.chdir(tmp_path / "out")
    capsys.readouterr()
    assert run(["verify", "*.tfrecord"]) == 0
    assert f'"files_checked": {len(manifest["shards"])}' in capsys.readouterr().out
    assert run(["inspect", "*.tfrecord", "--limit", "1"]) == 0


def test_a_run_that_converts_no_record_fails_with_its_dead_letters(tmp_path, capsys):
    data = tmp_path / "ids.csv"
    data.write_text("id\n" + "".join(f"x{i}\n" for i in range(7)))  # every id is bad
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64, required: true}\n")
    out = tmp_path / "out"
    code = run(["convert", "--input", str(data), "--format", "csv", "--spec", str(spec),
                "--output", str(out), "--direct_running_mode=in_memory", "--quiet"])
    assert code == 5
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("tfrecord-pipeline convert: none of the 7 input records was converted")
    assert str(out / "dead_letter") in lines[0]
    assert not (out / "manifest.json").exists() and not list(out.glob("*.tfrecord*"))
    letters = [json.loads(line) for path in (out / "dead_letter").glob("*.jsonl")
               for line in path.read_text().splitlines()]
    assert sorted(letter["raw"] for letter in letters) == sorted(f"x{i}" for i in range(7))


def test_an_empty_input_is_still_a_success(tmp_path):
    data = tmp_path / "empty.csv"
    data.write_text("id\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64}\n")
    assert run(["convert", "--input", str(data), "--format", "csv", "--spec", str(spec),
                "--output", str(tmp_path / "out"), "--direct_running_mode=in_memory", "--quiet"]) == 0


def test_the_error_rate_failure_is_one_line(tmp_path, capsys):
    data = tmp_path / "ids.csv"
    data.write_text("id\n1\n2\nx\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64}\n")
    assert run(["convert", "--input", str(data), "--format", "csv", "--spec", str(spec),
                "--output", str(tmp_path / "out"), "--max-error-rate", "0.1",
                "--direct_running_mode=in_memory", "--quiet"]) == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfrecord-pipeline convert: 1 of 3 input records")


def test_a_folder_input_reads_only_files_named_like_the_format(tmp_path, capsys):
    folder = tmp_path / "drop"
    folder.mkdir()
    (folder / "a.csv").write_text("id\n1\n2\n")
    (folder / "b.csv.gz").write_bytes(__import__("gzip").compress(b"id\n3\n"))
    (folder / "notes.txt").write_text("not, data\n")
    (folder / "_SUCCESS").write_text("")
    out = tmp_path / "out"
    assert run(["convert", "--input", str(folder), "--format", "csv", "--output", str(out),
                "--direct_running_mode=in_memory", "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["counts"]["input"] == 3
    assert run(["convert", "--input", str(folder), "--format", "jsonl", "--output", str(tmp_path / "o2"),
                "--direct_running_mode=in_memory", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"the folder {folder} holds no jsonl file" in err and ".csv" in err


def test_an_input_file_that_cannot_be_opened_is_a_dead_letter_not_a_failed_plan(tmp_path, monkeypatch):
    """The planner's format check opens the first files: one it cannot open (permissions,
    an object store's refusal) is left to the readers, which dead-letter it, as README says."""
    from apache_beam.io.filesystems import FileSystems

    (tmp_path / "a.csv").write_text("id\n1\n2\n")
    locked = tmp_path / "b.csv"
    locked.write_text("id\n3\n")
    opened = FileSystems.open

    def open_unless_locked(path, *args, **kwargs):
        if path == str(locked):
            raise PermissionError(13, "Permission denied", path)
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "open", staticmethod(open_unless_locked))
    out = tmp_path / "out"
    assert run(["convert", "--input", str(tmp_path / "*.csv"), "--format", "csv", "--output", str(out),
                "--direct_running_mode=in_memory", "--quiet", "--max-error-rate", "1"]) == 0
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert (counts["written"], counts["dead_letter_reasons"]) == (2, {"unreadable_file": 1})


def _refusal(capsys, args: list[str]) -> str:
    assert run(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("tfrecord-pipeline convert: error: "), lines
    return lines[0]


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    source = tmp_path / "in.csv"
    source.write_text("id\n1\n")
    (tmp_path / "afile").write_text("x")
    base = ["convert", "--input", str(source), "--format", "csv", "--quiet"]
    line = _refusal(capsys, [*base, "--output", str(tmp_path / "afile" / "sub")])
    assert line.endswith(f"is inside {tmp_path / 'afile'}, which is a file, not a folder")
    line = _refusal(capsys, [*base, "--output", str(tmp_path / "out"), "--compression", "gzip",
                             "--compression-level", "99"])
    assert "compression level must be an integer 0-9, got 99" in line
    monkeypatch.setattr("os.access", lambda path, mode: False)  # as a user without rights
    line = _refusal(capsys, [*base, "--output", str(tmp_path / "locked" / "out")])
    assert line.endswith(f"no permission to write in {tmp_path}")
    assert not (tmp_path / "locked").exists() and not (tmp_path / "out").exists()


def test_inputs_inside_the_output_folder_are_refused(tmp_path, capsys):
    """The next run would read what this one writes there (dataset_info.json is JSON Lines)."""
    (tmp_path / "d.jsonl").write_text('{"a": 1}\n')
    line = _refusal(capsys, ["convert", "--input", str(tmp_path), "--format", "jsonl",
                             "--output", str(tmp_path), "--quiet"])
    assert f"--input matches files inside --output {tmp_path}" in line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["d.jsonl"]
    assert run(["convert", "--input", str(tmp_path), "--format", "jsonl",  # a folder of its own
                "--output", str(tmp_path / "out"), "--direct_running_mode=in_memory", "--quiet"]) == 0


def test_an_output_inside_an_image_tree_or_beside_its_manifest_is_refused(tmp_path, capsys):
    from PIL import Image

    (tmp_path / "cat").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "cat" / "a.png")
    line = _refusal(capsys, ["convert", "--input", str(tmp_path), "--format", "image-folder",
                             "--output", str(tmp_path / "out"), "--quiet"])
    assert f"--output {tmp_path / 'out'} is inside the folder tree --input {tmp_path}" in line
    (tmp_path / "m.csv").write_text("path\ncat/a.png\n")
    line = _refusal(capsys, ["convert", "--input", str(tmp_path / "m.csv"), "--format",
                             "image-manifest", "--image-column", "path", "--output", str(tmp_path),
                             "--quiet"])
    assert f"--input matches files inside --output {tmp_path}" in line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cat", "m.csv"]


def test_a_folder_input_is_fingerprinted_by_its_files(tmp_path, capsys):
    """A change to a file in an --input folder (which leaves the folder's own time alone) is
    a different input; an output written inside that folder is not (it changes the folder)."""
    folder = tmp_path / "in"
    folder.mkdir()
    data = folder / "a.jsonl"
    data.write_text('{"a": 1}\n')
    args = ["convert", "--input", str(folder), "--format", "jsonl", "--output", str(folder / "out"),
            "--direct_running_mode=in_memory", "--quiet"]
    assert run(args) == 0
    assert run(args) == 0  # the same command, its output now inside the folder: nothing to do
    before = os.stat(folder).st_mtime_ns
    with data.open("a") as handle:
        handle.write('{"a": 2}\n')
    os.utime(folder, ns=(before, before))
    capsys.readouterr()
    assert run(args) == 2
    assert "already holds a committed output of different inputs" in capsys.readouterr().err


def test_a_rerun_on_a_damaged_output_of_the_same_conversion_says_so(
        tmp_path, capsys, committed_in_shards_of_50):
    # It said "nothing to do" (exit 0): a scheduler's retry never noticed a lost shard.
    out = shutil.copytree(committed_in_shards_of_50, tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    lost = manifest["shards"][1]["path"]
    (out / lost).unlink()
    with open(out / "stats.json", "ab") as handle:
        handle.write(b" ")
    capsys.readouterr()
    assert run(_convert(out, "--max-shard-records", "50")) == 4
    [line] = capsys.readouterr().err.strip().splitlines()
    size = manifest["files"]["stats.json"]["bytes"]
    assert (f"holds this conversion, damaged: stats.json has {size + 1} bytes, not the {size} "
            f"listed (and 1 more)") in line  # the first, by path, of: it and the lost shard
    assert "--overwrite converts again" in line
    assert run(_convert(out, "--max-shard-records", "50", "--overwrite")) == 0
    assert (out / lost).exists()
    assert run(_convert(out, "--max-shard-records", "50")) == 0  # intact: nothing to do
