"""Kill a conversion (SIGKILL to its whole process group) at the first, middle and last
moments of its conversion and of its commit, then run the same command again: the output is
the bytes of an uninterrupted run, no record is lost or duplicated, and the work units written before the
kill are reused, not converted again.

The killed runs are the console entry point (`pipeline.__main__`) in children of a fork server
that imported it once, so each starts in milliseconds rather than importing Beam again; each
child opens a session of its own, whose SIGKILL takes its converter processes (or its Dask
LocalCluster's workers) with it, as killing the command's process group does. A kill point is
a progress marker on disk (units written, commit journal and shards), never a time. The
re-runs are `pipeline.cli.run` in this process; the uninterrupted reference is converted once
for the module."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.output_lock import OutputBusyError, output_lock
from tests.e2e.forked_console import start_in_own_session
from tests.e2e.test_same_bytes import WORK_UNIT_OPTIONS, _files, _write_inputs
from transforms.manifest import read_manifest

#: The input rows `_write_inputs` writes.
ROWS = 1900 + 250 + 250

pytestmark = pytest.mark.slow


def _argv(root: Path, output: Path, *extra: str) -> list[str]:
    return ["convert", "--input", str(root / "in" / "*.csv"), "--format", "csv",
            "--spec", str(root / "in" / "spec.yaml"), "--output", str(output),
            *WORK_UNIT_OPTIONS, "--max-error-rate", "1", *extra]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(folder holding `in/`, the uninterrupted run's files, how many kill points its units
    allow)."""
    root = tmp_path_factory.mktemp("kills")
    _write_inputs(root / "in")
    reference = root / "reference" / "out"
    assert run(_argv(root, reference, "--quiet")) == 0
    shards = len(list(reference.glob("*.tfrecord")))  # at least one per unit
    return root, _output(reference), min(shards, 12)


def _temp_folder(output: Path) -> Path | None:
    folders = [path for path in output.glob(".tmp-*") if path.is_dir()]
    return folders[0] if folders else None


def _reached(output: Path, folder: Path, phase: str, count: int) -> bool:
    """Whether the run writing `output` (its temporary folder `folder`) reached the kill point:
    `count` work units written (conversion), or its commit journal and `count` final shards
    (commit)."""
    if phase == "convert":
        try:
            return sum(name.endswith(".unit") for name in os.listdir(folder / "units")) >= count
        except FileNotFoundError:
            return False
    if not (folder / "commit-journal.json").exists():
        return False
    return sum(name.endswith(".tfrecord") for name in os.listdir(output)) >= count


def _kill_at(argv, output: Path, phase: str, count: int, env: dict[str, str] | None = None) -> int:
    """Starts the run (in environment `env`, else this process's) and SIGKILLs its process
    group at the kill point; returns the work units recorded at the kill (-1: the run ended
    before the point)."""
    process = start_in_own_session(argv, env=env)
    deadline = time.monotonic() + 300
    folder = None
    while process.exitcode is None:
        folder = folder or _temp_folder(output)  # one per run, named once
        if folder is not None and _reached(output, folder, phase, count):
            break
        assert time.monotonic() < deadline, "the run never reached its kill point"
        # Polling for the kill point, not waiting for an effect: finely once the run writes
        # its temporary folder, coarsely while it starts (a Dask run starts its cluster).
        time.sleep(0.002 if folder else 0.02)
    if process.exitcode is not None:
        return -1
    os.killpg(process.pid, signal.SIGKILL)  # unreaped until join(), so the group still exists
    process.join()
    assert process.exitcode == -signal.SIGKILL
    # Its forked converters die a moment later (on a loaded machine, after the re-run would
    # start): a re-run meanwhile is refused, rightly, as another run writing the output.
    while True:
        try:
            with output_lock(str(output)):
                break
        except OutputBusyError:
            assert time.monotonic() < deadline, "the killed run's processes outlived it"
            time.sleep(0.002)  # polling for the killed processes to be gone
    return len(list((folder / "units").glob("*.unit"))) if (folder / "units").is_dir() else 0


def _kill_points(units: int) -> list[tuple[str, int]]:
    """The boundaries of each phase rather than seeded draws (17 draws hit these classes and
    never a commit killed before its first shard): the first, second, middle and last unit
    of the conversion; the commit with its journal alone, and after 1, 3 and 5 shards."""
    return [("convert", count) for count in (1, 2, units // 2, units - 1)] + \
        [("commit", count) for count in (0, 1, 3, 5)]


def _output(output) -> dict[str, bytes]:
    files = _files(output)
    files.pop(".lock-tfrecord-pipeline", None)  # the lock names the process that held it
    return files


def _resumed(capsys, output, argv, expected, recorded: int) -> None:
    capsys.readouterr()
    assert run(argv) == 0
    printed = capsys.readouterr().out
    assert _output(output) == expected
    assert _temp_folder(output) is None
    reused = re.search(r"work units reused\s+([\d,]+)", printed)
    if recorded > 0 and "nothing to do" not in printed:
        assert reused is not None and int(reused.group(1)) > 0, printed
    manifest = json.loads((output / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["input"] == counts["written"] + counts["dead_letter"]


def test_a_run_killed_at_any_point_resumes_to_the_same_bytes(converted, tmp_path, capsys):
    root, expected, units = converted
    landed = 0
    for number, (phase, count) in enumerate(_kill_points(units)):
        output = tmp_path / f"kill{number}" / "out"
        argv = _argv(root, output)
        recorded = _kill_at(argv, output, phase, count)
        landed += recorded >= 0
        _resumed(capsys, output, argv, expected, recorded)
    assert landed >= 6  # most points were reached before the run ended


def test_a_dask_run_killed_while_converting_resumes_on_dask(converted, tmp_path, capsys,
                                                           dask_address):
    """Killed with the LocalCluster it started (its workers die mid-unit), resumed on the
    session's LocalCluster: the bytes of the local reference. Killed after the first unit and
    after the seventh (the extremes of the three seeded points this replaced: each kill starts
    a LocalCluster of its own), one run at a time: started together, the second run could end
    before its point while the first was being killed (seen on a loaded machine). The killed
    runs' workers are forked from the run (Dask's setting `distributed.worker.
    multiprocessing-method`), not spawned as fresh interpreters that import Dask and Beam
    again (~2 s of each cluster's start): in the run's process group all the same, as spawned
    ones are (tests/e2e/test_runners_e2e.py and test_split_units_dask.py start clusters of
    spawned workers)."""
    root, expected, _ = converted
    forked_workers = {**os.environ, "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"}
    for number, count in enumerate((1, 7)):
        output = tmp_path / f"dask{number}" / "out"
        argv = _argv(root, output, "--runner", "dask")
        recorded = _kill_at(argv, output, "convert", count, forked_workers)
        assert recorded > 0
        _resumed(capsys, output, [*argv, "--dask_client_address", dask_address], expected, recorded)


def test_a_run_on_beam_worker_processes_killed_resumes_to_a_verified_output(converted,
                                                                          tmp_path, capsys):
    """Killed with Beam's two worker processes (as a large local run has: the kill takes the
    whole group) after its first unit, before it could commit: the command run again leaves
    one complete output, which `verify` passes. (Was test_runners_e2e's killed-run test, its
    own interpreter and 20,000 rows for a kill at the first closed temporary shard.)"""
    root, expected, _ = converted
    output = tmp_path / "out"
    argv = _argv(root, output)
    recorded = _kill_at([*argv, "--direct_num_workers=2"], output, "convert", 1)
    assert recorded > 0
    assert not (output / "manifest.json").exists()  # killed before it could commit
    _resumed(capsys, output, argv, expected, recorded)
    manifest = read_manifest(str(output))
    assert manifest.counts.input == ROWS
    assert sum(shard.records for shard in manifest.shards) == manifest.counts.written
    assert run(["verify", str(output)]) == 0


def test_an_interrupted_run_of_other_options_or_no_resume_is_discarded_saying_why(
        converted, tmp_path, capsys):
    root, _, _ = converted
    output = tmp_path / "out"
    assert _kill_at(_argv(root, output), output, "convert", 2) >= 2
    capsys.readouterr()
    assert run(_argv(root, output, "--batch-rows", "7777")) == 0
    changed = capsys.readouterr().out
    assert changed.splitlines()[0] == (f"Discarded the work of an interrupted run in {output} "
                                       f"(--batch-rows 16384 then, 7777 now).")
    assert "work units reused" not in changed and _temp_folder(output) is None
    again = tmp_path / "again"
    assert _kill_at(_argv(root, again), again, "convert", 2) >= 2
    assert run(_argv(root, again, "--no-resume")) == 0
    started_over = capsys.readouterr().out
    assert started_over.splitlines()[0] == (
        f"Discarded the work of an interrupted run in {again} (--no-resume).")
    assert "work units reused" not in started_over
