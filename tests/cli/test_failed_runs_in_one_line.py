"""A run that fails on its input prints one line and exits with its code, as a command, on
every runner: not the runner's log of the exception (with its traceback) that ended the job.
Run as the user runs it (a process of its own), where Beam's and Dask's loggers print: once as
a fresh interpreter (`python -m pipeline`), else forked from a server that imported the entry
point once (`tests.e2e.forked_console`)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from pipeline.convert import _outcome_of
from tests.e2e.forked_console import console

REPO = pathlib.Path(__file__).resolve().parents[2]


def _convert(tmp_path: pathlib.Path, rows: str, *extra: str, fresh: bool = False):
    """The command's finished process (`fresh`: a new interpreter, else a fork-server child)."""
    data = tmp_path / "ids.csv"
    data.write_text("id\n" + rows)
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64}\n")
    argv = ["convert", "--input", str(data), "--format", "csv", "--spec", str(spec),
            "--output", str(tmp_path / "out"), "--quiet", *extra]
    if not fresh:
        return console(argv, tmp_path / "console")
    return subprocess.run([sys.executable, "-m", "pipeline", *argv],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


NOTHING = "tfrecord-pipeline convert: none of the 2 input records was converted"


@pytest.mark.parametrize("rows, extra, code, line, fresh", [
    ("x\ny\n", (), 5, NOTHING, True),  # the one fresh interpreter: its imports print nothing
    ("1\n2\nx\n", ("--max-error-rate", "0.1"), 3, "tfrecord-pipeline convert: 1 of 3 input records",
     False),
])
def test_a_failed_run_prints_one_line(tmp_path, rows, extra, code, line, fresh):
    done = _convert(tmp_path, rows, *extra, fresh=fresh)
    assert done.returncode == code, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(line), done.stderr
    assert done.stdout == ""


def test_log_level_debug_shows_the_traceback(tmp_path):
    done = _convert(tmp_path, "x\ny\n", "--log-level", "debug")
    assert done.returncode == 5
    assert "Traceback" in done.stderr and "NothingConvertedError" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(NOTHING)


@pytest.mark.slow
def test_on_beam_worker_processes_the_outcome_is_the_commits_own_message(tmp_path):
    """The worker's exception reaches the launcher as text holding its whole traceback: the
    outcome and its message come from the run's failed_run.json, not from that text. One
    worker process is enough to put a process between the failure and the launcher."""
    done = _convert(tmp_path, "x\ny\n", "--direct_running_mode=multi_processing",
                    "--direct_num_workers=1")
    assert done.returncode == 5, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(NOTHING) and last.endswith(str(tmp_path / "out" / "dead_letter"))
    # Beam's worker processes print to the terminal themselves (see README); the launcher's
    # job service does not forward the worker's log of the exception again.
    assert "local_job_service" not in done.stderr


@pytest.mark.slow
def test_on_dask_a_failed_run_prints_one_line(tmp_path):
    pytest.importorskip("dask.distributed")
    done = _convert(tmp_path, "x\ny\n", "--runner", "dask")
    assert done.returncode == 5, done.stderr
    # Nothing of the failed task (Dask's worker logs it with the traceback, which names the
    # commit's module) nor of the client losing its cluster. Dask may still log about a busy
    # machine (an unresponsive event loop, a late heartbeat): not this failure's business.
    assert done.stderr.splitlines()[-1].startswith(NOTHING), done.stderr
    assert not any(word in done.stderr for word in ("Compute Failed", "transforms/commit.py",
                                                    "ConnectionRefusedError")), done.stderr


def test_any_other_job_failure_is_the_last_line_of_the_workers_error(tmp_path):
    error = RuntimeError("Error processing instruction bundle_3. Original traceback is\n"
                         "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                         "OSError: [Errno 28] No space left on device [while running 'WriteShards/Write']\n")
    outcome = _outcome_of(error, str(tmp_path), "run")
    assert str(outcome) == "conversion failed: OSError: [Errno 28] No space left on device"
