"""Kill a conversion (SIGKILL to its whole process group) at seeded moments of its conversion
and of its commit, then run the same command again: the output is the bytes of an
uninterrupted run, no record is lost or duplicated, and the work units written before the
kill are reused, not converted again."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_same_bytes import _files, _write_inputs

REPO = Path(__file__).resolve().parents[2]
SEED = 20261128


def _argv(tmp_path, output, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "convert", "--input", str(tmp_path / "in" / "*.csv"),
            "--format", "csv", "--spec", str(tmp_path / "in" / "spec.yaml"), "--output", str(output),
            "--work-unit-bytes", "64KB", "--max-shard-bytes", "100KB", "--max-error-rate", "1", *extra]


def _run(argv) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _temp_folder(output: Path) -> Path | None:
    folders = [path for path in output.glob(".tmp-*") if path.is_dir()]
    return folders[0] if folders else None


def _reached(output: Path, phase: str, count: int) -> bool:
    """Whether the run writing `output` reached the kill point: `count` work units written
    (conversion), or its commit journal and `count` final shards (commit)."""
    folder = _temp_folder(output)
    if folder is None:
        return False
    if phase == "convert":
        units = folder / "units"
        return units.is_dir() and sum(1 for name in os.listdir(units) if name.endswith(".unit")) >= count
    if not (folder / "commit-journal.json").exists():
        return False
    return sum(1 for path in output.glob("*.tfrecord")) >= count


def _kill_at(argv, output: Path, phase: str, count: int) -> int:
    """Starts the run and SIGKILLs its process group at the kill point; returns the work
    units recorded at the kill (-1: the run ended before the point)."""
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 300
    while process.poll() is None and not _reached(output, phase, count):
        assert time.monotonic() < deadline, "the run never reached its kill point"
        time.sleep(0.002)  # polling for the kill point, not waiting for an effect
    if process.poll() is not None:
        return -1
    folder = _temp_folder(output)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return len(list((folder / "units").glob("*.unit"))) if (folder / "units").is_dir() else 0


def _kill_points(rng: random.Random, units: int, number: int) -> list[tuple[str, int]]:
    points = [("convert", rng.randint(1, units - 1)) for _ in range(number - number // 4)]
    points += [("commit", rng.randint(0, 6)) for _ in range(number // 4)]
    return points


def _output(output) -> dict[str, bytes]:
    files = _files(output)
    files.pop(".lock-tfrecord-pipeline", None)  # the lock names the process that held it
    return files


def _resumed(output, argv, expected, recorded: int) -> None:
    done = _run(argv)
    assert _output(output) == expected
    assert _temp_folder(output) is None
    reused = re.search(r"work units reused\s+([\d,]+)", done.stdout)
    if recorded > 0 and "nothing to do" not in done.stdout:
        assert reused is not None and int(reused.group(1)) > 0, done.stdout
    manifest = json.loads((output / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["input"] == counts["written"] + counts["dead_letter"]


@pytest.mark.slow
def test_a_run_killed_at_any_point_resumes_to_the_same_bytes(tmp_path):
    _write_inputs(tmp_path / "in")
    reference = tmp_path / "reference" / "out"
    _run(_argv(tmp_path, reference))
    expected = _output(reference)
    units = len(list((tmp_path / "reference").rglob("*.tfrecord")))  # at least one per unit
    rng = random.Random(SEED)
    landed = 0
    for number, (phase, count) in enumerate(_kill_points(rng, min(units, 12), 17)):
        output = tmp_path / f"kill{number}" / "out"
        argv = _argv(tmp_path, output)
        recorded = _kill_at(argv, output, phase, count)
        landed += recorded >= 0
        _resumed(output, argv, expected, recorded)
    assert landed >= 12  # most seeded points were reached before the run ended


@pytest.mark.slow
def test_a_dask_run_killed_while_converting_resumes_on_dask(tmp_path):
    _write_inputs(tmp_path / "in")
    reference = tmp_path / "reference" / "out"
    _run(_argv(tmp_path, reference))
    expected = _output(reference)
    rng = random.Random(SEED + 1)
    for number in range(3):
        output = tmp_path / f"dask{number}" / "out"
        argv = _argv(tmp_path, output, "--runner", "dask")
        recorded = _kill_at(argv, output, "convert", rng.randint(1, 8))
        _resumed(output, argv, expected, recorded)


@pytest.mark.slow
def test_an_interrupted_run_of_other_options_or_no_resume_is_discarded_saying_why(tmp_path):
    _write_inputs(tmp_path / "in")
    output = tmp_path / "out"
    assert _kill_at(_argv(tmp_path, output), output, "convert", 2) >= 2
    changed = _run(_argv(tmp_path, output, "--batch-rows", "7777"))
    first = changed.stdout.splitlines()[0]
    assert first == (f"Discarded the work of an interrupted run in {output} "
                     f"(--batch-rows 16384 then, 7777 now).")
    assert "work units reused" not in changed.stdout and _temp_folder(output) is None
    again = tmp_path / "again"
    assert _kill_at(_argv(tmp_path, again), again, "convert", 2) >= 2
    started_over = _run(_argv(tmp_path, again, "--no-resume"))
    assert started_over.stdout.splitlines()[0] == (
        f"Discarded the work of an interrupted run in {again} (--no-resume).")
    assert "work units reused" not in started_over.stdout
