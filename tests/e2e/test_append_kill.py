"""Kill `convert --append` (SIGKILL to its process group) at seeded moments of its conversion
and of its commit: right after the kill the committed generation's shards and dead letters are
intact (and `verify` passes until the commit writes its side files), and the same append run
again resumes and commits the bytes of an uninterrupted append."""

from __future__ import annotations

import hashlib
import json
import random
import shutil

import pytest

from pipeline.cli import run
from tests.e2e.test_kill_and_resume import Kill, _kill_at, _output, _temp_folder

SEED = 35
SPEC = ("features:\n  - {name: id, type: int64}\n  - {name: x, type: float}\n"
        "splits: {train: 8, eval: 2}\nsplit_key: id\n")


def _argv(tmp_path, output) -> list[str]:
    return ["convert", "--input", str(tmp_path / "in" / "*.csv"),
            "--format", "csv", "--spec", str(tmp_path / "spec.yaml"), "--output", str(output),
            "--max-shard-records", "40", "--max-error-rate", "1", "--append", "--quiet"]


def _comparable(output) -> dict[str, bytes]:
    """The output's files as `_output` gives them, the manifest without drift.json's hash:
    drift.json names the output folder it was compared with (this one)."""
    files = _output(output)
    manifest = json.loads(files["manifest.json"])
    manifest["files"].pop("drift.json")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def _csv(path, first: int, rows: int) -> None:
    path.write_text("id,x\n" + "".join(f"{i},{'bad' if i % 17 == 0 else i / 4}\n"
                                       for i in range(first, first + rows)), encoding="utf-8")


@pytest.mark.slow
def test_an_append_killed_at_any_point_leaves_the_previous_generation_and_resumes(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    for part in range(3):
        _csv(tmp_path / "in" / f"old-{part}.csv", part * 100, 100)
    base = tmp_path / "base" / "out"
    assert run(_argv(tmp_path, base)) == 0
    for part in range(6):  # the append: six new files, six work units
        _csv(tmp_path / "in" / f"new-{part}.csv", 1000 + part * 60, 60)
    committed_shards = len(list(base.glob("*.tfrecord")))

    def copy(name: str):
        output = tmp_path / name / "out"  # one folder name: TFDS metadata names the data set by it
        shutil.copytree(base, output, copy_function=shutil.copy2)
        return output

    reference = copy("reference")
    assert run(_argv(tmp_path, reference)) == 0
    expected = _comparable(reference)
    assert json.loads((reference / "manifest.json").read_text())["generation"] == 1
    before = _output(base)

    rng = random.Random(SEED)
    points = [("convert", rng.randint(1, 5)) for _ in range(3)]
    points += [("commit", committed_shards + rng.randint(0, 4)) for _ in range(3)]
    # And once its statistics are written over the committed ones: the drift that the resumed
    # commit writes is still against the committed generation's (it kept them aside).
    points += [("stats", 0)]
    outputs = [copy(f"kill{number}") for number in range(len(points))]
    kills = [Kill(_argv(tmp_path, output), output, phase, count)
             for output, (phase, count) in zip(outputs, points, strict=True)]
    # The conversion's kill points in three runs at once; the commit's one at a time (polled
    # among others, a commit's moments are missed).
    recorded = _kill_at(*kills[:3])
    for kill in kills[3:]:
        recorded += _kill_at(kill)
    for argv, output, phase, count, _ in kills:
        manifest = json.loads((output / "manifest.json").read_text())
        if manifest.get("generation") is None:  # not committed: the committed shards are intact
            data = {entry["path"] for entry in manifest["shards"] + manifest["dead_letter_files"]}
            assert {name: _output(output)[name] for name in data} == {name: before[name] for name in data}
            # Killed in its commit, the next generation's shards (named by the commit journal)
            # are no problem for `verify`; from the first side file written over to the
            # manifest (the commit's last writes) the side files are the next generation's.
            side_files = {name: hashlib.sha256((output / name).read_bytes()).hexdigest() == entry["sha256"]
                          for name, entry in manifest["files"].items()}
            if all(side_files.values()):
                assert run(["verify", str(output)]) == 0, (phase, count)
        assert run(argv) == 0
        assert _comparable(output) == expected, (phase, count)
        assert _temp_folder(output) is None
    assert sum(units_at_kill >= 0 for units_at_kill in recorded) >= 4 and recorded[-1] >= 0
