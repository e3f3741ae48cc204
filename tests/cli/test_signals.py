"""SIGINT and SIGTERM end a run with one line and the conventional codes (130, 143)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from pipeline.cli import run
from pipeline.errors import Terminated
from tests.helpers import in_memory_args
from transforms import commit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("signum, code, word", [
    (signal.SIGTERM, 143, "terminated"),
    (signal.SIGINT, 130, "interrupted"),
])
def test_a_signal_mid_run_is_one_line_and_a_conventional_code(tmp_path, signum, code, word):
    (tmp_path / "in.csv").write_text("a,b\n1,2\n")
    fifo = tmp_path / "stalled.spec.yaml"
    os.mkfifo(fifo)  # the run blocks reading its spec (a plain Python read), handlers in place
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", "--input", str(tmp_path / "in.csv"),
         "--format", "csv", "--spec", str(fifo), "--output", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        # A shell's background job inherits SIGINT ignored, and Python then keeps it ignored:
        # the run gets the default disposition, as in a terminal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        with open(fifo, "w") as writer:  # returns once the run has opened the file to read it
            writer.write("features:\n")
            writer.flush()
            process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    lines = [line for line in err.decode().splitlines() if "WARNING" not in line]
    assert process.returncode == code, err.decode()
    assert lines == [f"tfrecord-pipeline convert: {word}" + (" (SIGTERM)" if code == 143 else "")]
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("signal_error, code, word", [
    (KeyboardInterrupt, 130, "interrupted"),
    (Terminated, 143, "terminated"),
])
def test_a_signal_while_beam_runs_the_job_keeps_its_code(tmp_path, monkeypatch, capsys,
                                                        signal_error, code, word):
    """Beam re-raises what a step raised inside an exception of its own: a Ctrl-C or SIGTERM
    that arrives while the job runs is still reported as one (it was 'conversion failed')."""
    def interrupted(*args, **kwargs):
        raise signal_error()

    monkeypatch.setattr(commit, "finalize_output", interrupted)
    (tmp_path / "in.csv").write_text("a,b\n1,2\n")
    assert run(["convert", "--input", str(tmp_path / "in.csv"), "--format", "csv",
                "--output", str(tmp_path / "out"), *in_memory_args()]) == code
    assert capsys.readouterr().err.strip().splitlines() == [f"tfrecord-pipeline convert: {word}"
                                                            + (" (SIGTERM)" if code == 143 else "")]
