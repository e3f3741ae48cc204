"""An input is what the user named: a path holding glob characters that exists is that
file or folder (as a shell takes it); a glob of several image manifests converts them all;
a file:// URI is a local path."""

from __future__ import annotations

import json
import os
import warnings

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.images import image_samples as samples


def _counts(out) -> dict:
    with open(os.path.join(out, "manifest.json")) as handle:
        return json.load(handle)["counts"]


@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_csv_input_whose_name_holds_glob_characters_is_that_file(
        tmp_path, monkeypatch, relative, given):
    # "d[1]/x[2].csv" as a glob is "d1/x2.csv": nothing matched, exit 2. A decoy that the
    # glob does match must not be read instead.
    (tmp_path / "d[1]").mkdir()
    (tmp_path / "d[1]" / "x[2].csv").write_text("id\n1\n2\n")
    (tmp_path / "d1").mkdir()
    (tmp_path / "d1" / "x2.csv").write_text("id\n7\n")
    monkeypatch.chdir(tmp_path)
    name = "d[1]/x[2].csv" if given == "file" else "d[1]"
    path = name if relative else str(tmp_path / name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # Python's re on the escaped "["
        assert run(["convert", "--input", path, "--format", "csv",
                    "--output", str(tmp_path / "out"), "--quiet", *in_memory_args()]) == 0
    assert _counts(tmp_path / "out")["written"] == 2


def test_an_image_manifest_whose_folder_name_holds_a_bracket_is_read(tmp_path, monkeypatch):
    folder = tmp_path / "g[1]"
    (folder / "cat").mkdir(parents=True)
    (folder / "cat" / "a.jpg").write_bytes(samples.build("jpeg_rgb"))
    (folder / "m.csv").write_text("path,label\ncat/a.jpg,cat\n")
    monkeypatch.chdir(tmp_path)
    assert run(["convert", "--format", "image-manifest", "--input", "g[1]/m.csv",
                "--image-column", "path", "--label-column", "label",
                "--output", str(tmp_path / "out"), "--quiet", *in_memory_args()]) == 0
    assert _counts(tmp_path / "out")["written"] == 1


@pytest.mark.parametrize("compressed", [False, True])
def test_a_glob_matching_several_image_manifests_converts_them_together(tmp_path, compressed):
    # Only the first manifest used to be converted, with exit 0. Each manifest's relative
    # paths are under its own folder; one label map; a dead letter names its manifest.
    import gzip

    for folder, label in (("day1", "cat"), ("day2", "dog")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.jpg").write_bytes(samples.build("jpeg_rgb"))
        text = f"path,label\na.jpg,{label}\nmissing.jpg,{label}\n".encode()
        name = "m.csv.gz" if compressed else "m.csv"
        (tmp_path / folder / name).write_bytes(gzip.compress(text) if compressed else text)
    out = tmp_path / "out"
    glob_ = str(tmp_path / "day*" / ("m.csv.gz" if compressed else "m.csv"))
    assert run(["convert", "--format", "image-manifest", "--input", glob_,
                "--image-column", "path", "--label-column", "label",
                "--output", str(out), "--quiet", "--max-error-rate", "1", *in_memory_args()]) == 0
    with open(out / "manifest.json") as handle:
        manifest = json.load(handle)
    assert manifest["labels"] == ["cat", "dog"]
    assert manifest["counts"]["input"] == 4 and manifest["counts"]["written"] == 2
    dead = [json.loads(line) for path in sorted((out / "dead_letter").glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    assert sorted((d["reason"], d["source"], d["row"]) for d in dead) == [
        ("missing_file", str(tmp_path / folder / "missing.jpg"), 2) for folder in ("day1", "day2")]


def test_image_manifests_of_two_formats_are_refused(tmp_path, capsys):
    (tmp_path / "m.csv").write_text("path\na.jpg\n")
    (tmp_path / "m.jsonl").write_text('{"path": "a.jpg"}\n')
    assert run(["convert", "--format", "image-manifest", "--input", str(tmp_path / "m.*"),
                "--image-column", "path", "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert "manifests of one conversion have one format" in capsys.readouterr().err


def test_file_uris_name_local_paths(tmp_path, capsys):
    # Beam has no file:// scheme: the run said to install apache-beam[gcp].
    (tmp_path / "in.csv").write_text("id\n1\n2\n")
    out = tmp_path / "out"
    assert run(["convert", "--input", f"file://{tmp_path}/in.csv", "--format", "csv",
                "--output", f"file://localhost{out}", *in_memory_args()]) == 0
    assert _counts(out)["written"] == 2
    assert run(["convert", "--input", f"file://elsewhere{tmp_path}/in.csv", "--format", "csv",
                "--output", str(tmp_path / "other"), *in_memory_args()]) == 2
    assert "names a file on the host 'elsewhere'" in capsys.readouterr().err


def test_manifest_file_uris_are_local_paths_and_other_hosts_are_dead_letters(tmp_path):
    # file://localhost/... was read as a relative path "localhost/..." under the manifest's
    # folder; a file URI of another host is not on this machine.
    (tmp_path / "a.jpg").write_bytes(samples.build("jpeg_rgb"))
    (tmp_path / "m.csv").write_text(
        f"path\nfile://localhost{tmp_path}/a.jpg\nfile://{tmp_path}/a.jpg\n"
        f"file://elsewhere{tmp_path}/a.jpg\n")
    out = tmp_path / "out"
    assert run(["convert", "--format", "image-manifest", "--input", str(tmp_path / "m.csv"),
                "--image-column", "path", "--output", str(out), "--max-error-rate", "1",
                *in_memory_args()]) == 0
    counts = _counts(out)
    assert counts["written"] == 2 and counts["dead_letter_reasons"] == {"unreadable_uri": 1}
