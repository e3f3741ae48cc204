"""Kill a conversion (SIGKILL to its whole process group) at the first, middle and last
moments of its conversion and of its commit, then run the same command again: the output is
the bytes of an uninterrupted run, no record is lost or duplicated, and the work units written before the
kill are reused, not converted again.

The killed runs are the console entry point (`pipeline.__main__`) in children of a fork server
that imported it once, so each starts in milliseconds rather than importing Beam again; each
child opens a session of its own, whose SIGKILL takes its converter processes (or its Dask
LocalCluster's workers) with it, as killing the command's process group does. A kill point is
a progress marker on disk (units written, commit journal and shards), never a time; runs
killed in their conversion start together, each polled and killed at its own point. The
re-runs are `pipeline.cli.run` in this process; the uninterrupted reference is converted once
for the module."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import NamedTuple

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
    `count` work units written (conversion), its commit journal and `count` final shards
    (commit), or an append's statistics written over the committed ones (stats)."""
    if phase == "stats":
        listed = json.loads((output / "manifest.json").read_bytes())["files"]["stats.json"]["sha256"]
        return hashlib.sha256((output / "stats.json").read_bytes()).hexdigest() != listed
    if phase == "convert":
        try:
            return sum(name.endswith(".unit") for name in os.listdir(folder / "units")) >= count
        except FileNotFoundError:
            return False
    if not (folder / "commit-journal.json").exists():
        return False
    return sum(name.endswith(".tfrecord") for name in os.listdir(output)) >= count


class Kill(NamedTuple):
    """A run to start and where to SIGKILL it: `count` of `phase` (see `_reached`); `env` its
    environment (None: this process's)."""

    argv: list[str]
    output: Path
    phase: str
    count: int
    env: dict[str, str] | None = None


def _kill_at(*kills: Kill) -> list[int]:
    """Starts the runs together and SIGKILLs each one's process group at its kill point,
    polling them all in turn (none waits for another to be killed, so none runs past its
    point unobserved: a run polled alone could end while another was being killed); returns
    per run the work units recorded at the kill (-1: the run ended before its point). Runs
    polled together are killed less precisely (each polled less often, on a machine they
    share): a point that lasts milliseconds needs a run of its own."""
    processes = [start_in_own_session(kill.argv, env=kill.env) for kill in kills]
    deadline = time.monotonic() + 300
    folders: list[Path | None] = [None] * len(kills)
    killed = [False] * len(kills)
    try:
        while pending := [number for number, process in enumerate(processes)
                          if not killed[number] and process.exitcode is None]:
            for number in pending:
                kill = kills[number]
                folders[number] = folders[number] or _temp_folder(kill.output)  # one per run
                if folders[number] is not None and _reached(kill.output, folders[number], kill.phase,
                                                            kill.count):
                    os.killpg(processes[number].pid, signal.SIGKILL)
                    killed[number] = True
            assert time.monotonic() < deadline, "a run never reached its kill point"
            # Polling for the kill points, not waiting for an effect: finely once a run writes
            # its temporary folder, coarsely while they all start (a Dask run starts its cluster).
            time.sleep(0.002 if any(folders[number] for number in pending) else 0.02)
    finally:  # a failed poll leaves no run behind
        for number, process in enumerate(processes):
            if not killed[number] and process.exitcode is None:
                os.killpg(process.pid, signal.SIGKILL)
    recorded = []
    for kill, process, folder, was_killed in zip(kills, processes, folders, killed, strict=True):
        process.join()
        if not was_killed:
            recorded.append(-1)
            continue
        assert process.exitcode == -signal.SIGKILL
        # Its forked converters die a moment later (on a loaded machine, after the re-run
        # would start): a re-run meanwhile is refused, rightly, as another run writing the output.
        while True:
            try:
                with output_lock(str(kill.output)):
                    break
            except OutputBusyError:
                assert time.monotonic() < deadline, "the killed run's processes outlived it"
                time.sleep(0.002)  # polling for the killed processes to be gone
        units = folder / "units"
        recorded.append(len(list(units.glob("*.unit"))) if units.is_dir() else 0)
    return recorded


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
    outputs = [tmp_path / f"kill{number}" / "out" for number in range(8)]
    kills = [Kill(_argv(root, output), output, phase, count)
             for output, (phase, count) in zip(outputs, _kill_points(units), strict=True)]
    # The conversion's kill points (units take ~0.05 s each) in four runs at once; the commit's
    # one at a time: polled among others, the moments of the journal alone were missed.
    recorded = _kill_at(*kills[:4])
    for kill in kills[4:]:
        recorded += _kill_at(kill)
    for kill, units_at_kill in zip(kills, recorded, strict=True):
        _resumed(capsys, kill.output, kill.argv, expected, units_at_kill)
    assert sum(units_at_kill >= 0 for units_at_kill in recorded) >= 6  # most points were reached


def test_a_dask_run_killed_while_converting_resumes_on_dask(converted, tmp_path, capsys,
                                                           dask_address):
    """Killed with the LocalCluster it started (its workers die mid-unit), resumed on the
    session's LocalCluster: the bytes of the local reference. Killed after the first unit and
    after the seventh (the extremes of the three seeded points this replaced: each kill starts
    a LocalCluster of its own), the two runs started together and polled in turn (`_kill_at`:
    polled alone, one at a time, the second could end before its point while the first was
    being killed, as was seen on a loaded machine). The killed
    runs' workers are forked from the run (Dask's setting `distributed.worker.
    multiprocessing-method`), not spawned as fresh interpreters that import Dask and Beam
    again (~2 s of each cluster's start): in the run's process group all the same, as spawned
    ones are (tests/e2e/test_runners_e2e.py and test_split_units_dask.py start clusters of
    spawned workers)."""
    root, expected, _ = converted
    forked_workers = {**os.environ, "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"}
    kills = [Kill(_argv(root, tmp_path / f"dask{count}" / "out", "--runner", "dask"),
                  tmp_path / f"dask{count}" / "out", "convert", count, forked_workers)
             for count in (1, 7)]
    for kill, units_at_kill in zip(kills, _kill_at(*kills), strict=True):
        assert units_at_kill > 0
        _resumed(capsys, kill.output, [*kill.argv, "--dask_client_address", dask_address], expected,
                 units_at_kill)


def test_a_run_on_beam_worker_processes_killed_resumes_to_a_verified_output(converted,
                                                                          tmp_path, capsys):
    """Killed with Beam's two worker processes (as a large local run has: the kill takes the
    whole group) after its first unit, before it could commit: the command run again leaves
    one complete output, which `verify` passes. (Was test_runners_e2e's killed-run test, its
    own interpreter and 20,000 rows for a kill at the first closed temporary shard.)"""
    root, expected, _ = converted
    output = tmp_path / "out"
    argv = _argv(root, output)
    [recorded] = _kill_at(Kill([*argv, "--direct_num_workers=2"], output, "convert", 1))
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
    output, again = tmp_path / "out", tmp_path / "again"
    assert min(_kill_at(Kill(_argv(root, output), output, "convert", 2),
                        Kill(_argv(root, again), again, "convert", 2))) >= 2
    capsys.readouterr()
    assert run(_argv(root, output, "--batch-rows", "7777")) == 0
    changed = capsys.readouterr().out
    assert changed.splitlines()[0] == (f"Discarded the work of an interrupted run in {output} "
                                       f"(--batch-rows 16384 then, 7777 now).")
    assert "work units reused" not in changed and _temp_folder(output) is None
    assert run(_argv(root, again, "--no-resume")) == 0
    started_over = capsys.readouterr().out
    assert started_over.splitlines()[0] == (
        f"Discarded the work of an interrupted run in {again} (--no-resume).")
    assert "work units reused" not in started_over
