"""Nothing destroyed: a run never deletes or replaces a file the tool did not write; a commit
killed half-way is undone by the next run from its journal; a failed run's dead letters are
replaced by the next run; files are synced before the manifest names them; the summary shows
dead letters by reason and where they are."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

import pipeline
from pipeline.cli import run
from transforms.output_files import FAILED_RUN_NAME, JOURNAL_NAME, owned_paths

SAMPLE = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"


def _convert(output, *extra: str, source: str | None = None) -> list[str]:
    spec = [] if source else ["--spec", str(SAMPLE / "customers.spec.yaml")]
    return ["convert", "--input", source or str(SAMPLE / "*.csv"), "--format", "csv", *spec,
            "--output", str(output), "--direct_running_mode=in_memory", "--quiet", *extra]


def _manifest(out: pathlib.Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_foreign_tfrecord_files_are_refused_and_kept_even_with_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "train-00000-of-00001.tfrecord"
    foreign.write_bytes(b"somebody else's shard")
    other = out / "dead_letter" / "notes.jsonl"
    other.parent.mkdir()
    other.write_bytes(b"{}\n")
    for extra in ((), ("--overwrite",)):
        assert run(_convert(out, *extra)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0].startswith(f"tfrecord-pipeline convert: error: {out} holds 2 files this tool "
                                 f"did not write (dead_letter/notes.jsonl, train-00000-of-00001.tfrecord)")
        assert err[1].startswith("hint: move them away or choose another --output")
    assert foreign.read_bytes() == b"somebody else's shard"
    assert other.read_bytes() == b"{}\n"
    assert not (out / "manifest.json").exists()


def test_a_foreign_side_file_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "feature_spec.json").write_text("{mine}")
    assert run(_convert(out)) == 2
    assert "feature_spec.json" in capsys.readouterr().err
    assert (out / "feature_spec.json").read_text() == "{mine}"


def test_overwrite_replaces_only_what_the_manifest_lists(tmp_path):
    out = tmp_path / "out"
    assert run(_convert(out, "--max-shard-records", "10")) == 0
    first = _manifest(out)
    assert len(first["shards"]) > 3
    unrelated = out / "README.txt"
    unrelated.write_text("keep me")
    assert run(_convert(out, "--overwrite")) == 0
    second = _manifest(out)
    on_disk = sorted(p.name for p in out.glob("*.tfrecord"))
    assert on_disk == sorted(shard["path"] for shard in second["shards"])
    assert len(second["shards"]) < len(first["shards"])
    assert unrelated.read_text() == "keep me"


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """The sample converted once with `_convert`'s defaults. Read only: tests change copies."""
    out = tmp_path_factory.mktemp("committed") / "out"
    assert run(_convert(out)) == 0
    return out


def test_a_commit_killed_half_way_is_undone_from_its_journal(tmp_path, committed):
    out = shutil.copytree(committed, tmp_path / "out")  # times kept: the same committed output
    committed = _manifest(out)
    owned = owned_paths(str(out))  # what the killed commit's journal says it replaces
    # A later --overwrite run was killed mid-commit: it had deleted the manifest and renamed
    # one of its shards, and had not yet written its manifest.
    (out / "manifest.json").unlink()
    killed = out / ".tmp-5e1f0c2a9b3d4e67"
    killed.mkdir()
    half = out / "train-00000-of-00009.tfrecord"
    half.write_bytes(b"half of a commit")
    old = sorted(shard["path"] for shard in committed["shards"])
    journal = {"run_id": "5e1f0c2a9b3d4e67",
               "writes": ["manifest.json", half.name, *committed["files"], FAILED_RUN_NAME],
               "replaces": sorted(owned)}
    (killed / JOURNAL_NAME).write_text(json.dumps(journal))
    assert run(_convert(out)) == 0
    assert not killed.exists() and not half.exists()
    assert sorted(p.name for p in out.glob("*.tfrecord")) == old
    assert run(["verify", str(out)]) == 0


def test_a_commit_killed_before_it_changed_anything_leaves_the_committed_output_whole(
        tmp_path, committed):
    """A run killed right after journaling its commit (which names every file the commit
    may replace, report.html included) changed nothing: the next run removes its temp
    folder, and nothing the committed output holds, its report neither."""
    out = shutil.copytree(committed, tmp_path / "out")
    before = sorted(path.name for path in out.iterdir())
    killed = out / ".tmp-0a1b2c3d4e5f6a7b"
    killed.mkdir()
    journal = {"run_id": "0a1b2c3d4e5f6a7b", "writes": ["manifest.json"],
               "replaces": sorted(owned_paths(str(out)))}
    assert "report.html" in journal["replaces"]
    (killed / JOURNAL_NAME).write_text(json.dumps(journal))
    assert run(_convert(out)) == 0  # the same conversion: nothing to do
    assert sorted(path.name for path in out.iterdir()) == before
    assert run(["verify", str(out)]) == 0


def _csv_and_spec(tmp_path, csv: str, features: str) -> tuple:
    """(source, spec, out) paths: `csv` as tmp_path/data.csv, a spec of `features`."""
    source, spec = tmp_path / "data.csv", tmp_path / "spec.yaml"
    source.write_text(csv)
    spec.write_text("features:\n" + features)
    return source, spec, tmp_path / "out"


def test_a_failed_runs_dead_letters_are_replaced_by_the_next_run(tmp_path, capsys):
    source, spec, out = _csv_and_spec(tmp_path, "id\nx\ny\n", "  - {name: id, type: int64}\n")
    assert run(_convert(out, "--spec", str(spec), source=str(source))) == 5
    first_line = capsys.readouterr().err.strip().splitlines()[0]
    assert "(dead letters: 2 invalid_int)" in first_line
    record = json.loads((out / FAILED_RUN_NAME).read_text())
    assert record["outcome"] == "nothing_converted"
    assert record["counts"]["dead_letter_reasons"] == {"invalid_int": 2}
    source.write_text("id\n1\ny\n")
    assert run(_convert(out, "--spec", str(spec), "--max-error-rate", "1", source=str(source))) == 0
    assert not (out / FAILED_RUN_NAME).exists()
    dead = [line for path in (out / "dead_letter").glob("*.jsonl")
            for line in path.read_text().splitlines()]
    assert [json.loads(line)["raw"] for line in dead] == ["y"]
    assert _manifest(out)["counts"]["dead_letter_reasons"] == {"invalid_int": 1}


def test_the_summary_shows_dead_letters_by_reason_and_where_they_are(tmp_path, capsys):
    source, spec, out = _csv_and_spec(tmp_path, "id,score\n1,0.5\nx,0.1\n3,abc\n4,zz\n5,1\n",
                                      "  - {name: id, type: int64}\n  - {name: score, type: float}\n")
    argv = [arg for arg in _convert(out, "--spec", str(spec), "--max-error-rate", "1",
                                    source=str(source)) if arg != "--quiet"]
    assert run(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Committed {out}/manifest.json, with 3 of 5 records dead-lettered (60.00%)"
    dead = next(i for i, line in enumerate(lines) if line.startswith("  dead-lettered"))
    assert lines[dead].split()[-1] == "3"
    assert lines[dead + 1].split() == ["invalid_float", "2"]
    assert lines[dead + 2].split() == ["invalid_int", "1"]
    # Not the last line: the feature statistics and the report's path follow it.
    assert (f"  dead letters (one JSON line each, with the reason): {out}/dead_letter/"
            in lines)


def test_every_file_the_manifest_names_is_synced_before_it_is_written(tmp_path, monkeypatch):
    events = []
    real_fsync = os.fsync

    def recording_fsync(descriptor):
        events.append(("sync", pathlib.Path(os.readlink(f"/proc/self/fd/{descriptor}")).name))
        real_fsync(descriptor)

    real_replace = os.replace

    def recording_replace(source, target):
        events.append(("rename", pathlib.Path(target).name))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    out = tmp_path / "out"
    assert run(_convert(out)) == 0
    manifest = _manifest(out)
    manifest_at = events.index(("rename", "manifest.json"))
    synced_before = {name for kind, name in events[:manifest_at] if kind == "sync"}
    named = [shard["path"] for shard in manifest["shards"]] + list(manifest["files"])
    assert {pathlib.Path(path).name for path in named} <= synced_before
    assert "out" in synced_before  # the folder entries of the renamed shards
    assert events[manifest_at + 1] == ("sync", "out")  # and the manifest's own entry


def test_a_failed_overwrite_leaves_only_its_dead_letters_and_the_next_run_commits(tmp_path, capsys):
    """A run with --overwrite that commits only its dead letters (exit 3) removes what the
    earlier output left: the folder holds no unlisted shard or side file, so the next run
    neither refuses it nor needs a hand."""
    source, spec, out = _csv_and_spec(tmp_path, "a\n1\n2\n", "- {name: a, type: int64}\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("a\n1\nx\ny\n4\n")
    args = ["--format", "csv", "--spec", str(spec), "--output", str(out),
            "--direct_running_mode=in_memory", "--quiet"]
    assert run(["convert", "--input", str(source), *args]) == 0
    assert (out / "report.html").exists()
    assert run(["convert", "--input", str(bad), *args, "--overwrite", "--max-error-rate", "0.1"]) == 3
    failed = json.loads((out / FAILED_RUN_NAME).read_text())
    left = sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file())
    assert left == sorted([FAILED_RUN_NAME, *failed["files"]])
    capsys.readouterr()
    assert run(["convert", "--input", str(source), *args, "--overwrite"]) == 0, capsys.readouterr().err
    assert run(["verify", str(out)]) == 0
    assert not (out / FAILED_RUN_NAME).exists()


def test_a_report_page_the_tool_did_not_write_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    page = out / "report.html"
    page.write_text("<html>mine</html>")
    assert run(_convert(out)) == 2
    assert "report.html" in capsys.readouterr().err
    assert page.read_text() == "<html>mine</html>"
    page.unlink()
    assert run(_convert(out)) == 0  # then the tool's own page is no obstacle to a re-run
    assert run(_convert(out, "--overwrite")) == 0
    assert "<html>mine</html>" not in page.read_text()


def test_an_output_folder_named_like_a_glob_is_taken_literally(tmp_path, capsys):
    """Beam matches and (locally) deletes paths as glob patterns: `out[1]/x` as a pattern is
    `out1/x`. The tool's own paths are taken as they are: nothing of `out1` is touched, the
    foreign-file check sees into `out[1]`, the temp folder goes, and readers read it."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.tfrecord_io import ReadTFRecordFiles

    source, _, _ = _csv_and_spec(tmp_path, "a\n1\n2\n", "- {name: a, type: int64}\n")
    out, decoy = tmp_path / "out[1]", tmp_path / "out1"
    decoy.mkdir()
    theirs = {name: f"not the tool's {name}".encode() for name in
              ("manifest.json", "data-00000-of-00001.tfrecord", "spec.yaml")}
    for name, data in theirs.items():
        (decoy / name).write_bytes(data)
    args = ["convert", "--input", str(source), "--format", "csv", "--output", str(out),
            "--direct_running_mode=in_memory", "--quiet"]
    assert run(args) == 0
    assert run([*args, "--overwrite"]) == 0
    assert {name: (decoy / name).read_bytes() for name in theirs} == theirs
    assert not [path.name for path in out.iterdir() if path.name.startswith(".tmp-")]
    assert run(["verify", str(out)]) == 0
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        values = (pipeline | ReadTFRecordFiles.from_output(str(out), "data", parse=True)
                  | beam.Map(lambda example: example["a"][0]))
        assert_that(values, equal_to([1, 2]))
    (out / "manifest.json").unlink()  # now its shard is nobody's: refused, and kept
    capsys.readouterr()
    assert run([*args, "--overwrite"]) == 2
    assert "data-00000-of-00001.tfrecord" in capsys.readouterr().err
    assert (out / "data-00000-of-00001.tfrecord").exists()
