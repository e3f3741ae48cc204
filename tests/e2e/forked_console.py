"""The console entry point (`pipeline.__main__.main`) run as a process of its own, forked from
a fork server that imported it once: a real process, with its exit status, its own stdout and
stderr (which the processes it starts inherit: Beam's worker processes, a Dask LocalCluster's
workers) and its own environment, started in milliseconds rather than a fresh interpreter's
~1.5 s of importing Beam. Not for claims about what a fresh interpreter prints while it
imports Beam: the server did that once (tests/cli/test_verify_inspect.py checks it).

`start_in_own_session` starts the command in a session of its own, for the kill tests: its
process group (its converters, Beam's worker processes, its LocalCluster's workers) is theirs
to SIGKILL."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: What the server imports once: the entry point, this module (the children's targets), and
#: what a conversion imports when it runs (its runner, Beam's local runner), which each child
#: would import again (0.3-0.5 s); importing them prints nothing and looks nothing up (Beam
#: fetches credentials when a run first reaches gs://, in the child).
PRELOAD = ["pipeline.__main__", __name__, "pipeline.convert", "apache_beam.runners.portability.fn_api_runner"]


@dataclasses.dataclass
class Done:
    """What a finished command left: as `subprocess.CompletedProcess` names it."""

    returncode: int
    stdout: str
    stderr: str


def console_main(argv: list[str], env: dict[str, str], stdout: str, stderr: str) -> None:
    """A fork-server child: `tfrecord-pipeline ARGV` in environment `env`, its output (and its
    children's) in the files `stdout` and `stderr`."""
    os.environ.clear()
    os.environ.update(env)
    # As a fresh interpreter puts PYTHONPATH first (the processes this one spawns, Dask's
    # workers, get this sys.path).
    sys.path[:0] = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    from pipeline.__main__ import main

    sys.argv = ["tfrecord-pipeline", *argv]
    main()


def _server():
    """The fork-server context; the server is one per process, started by the first child
    (whichever module's), its preload set here."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def session_main(argv: list[str], env: dict[str, str]) -> None:
    """A fork-server child: `console_main` in a new session (so that its process group is its
    own), its output discarded."""
    os.setsid()
    console_main(argv, env, os.devnull, os.devnull)


def start_in_own_session(argv: Sequence[str], *, env: dict[str, str] | None = None,
                         ) -> multiprocessing.process.BaseProcess:
    """Starts `tfrecord-pipeline ARGV` (in environment `env`, else this process's) in a
    fork-server child that opens a session of its own (`session_main`): its `pid` is its
    process group's, to SIGKILL with `os.killpg`; its `exitcode` is None until it ends
    (`join()` waits for it)."""
    process = _server().Process(target=session_main,
                                args=(list(argv), dict(os.environ if env is None else env)))
    process.start()
    return process


def console(argv: Sequence[str], folder: Path, *, env: dict[str, str] | None = None,
            target: Callable[..., None] = console_main, extra: Sequence[object] = ()) -> Done:
    """Runs `tfrecord-pipeline ARGV` (through `target`, called with `extra` after
    `console_main`'s arguments) in a fork-server child; its output is kept in `folder`."""
    context = _server()
    folder.mkdir(parents=True, exist_ok=True)
    out, err = folder / "stdout.txt", folder / "stderr.txt"
    process = context.Process(target=target, args=(list(argv), dict(os.environ if env is None else env),
                                                   str(out), str(err), *extra))
    process.start()
    process.join(timeout=300)
    if process.exitcode is None:
        process.kill()
        process.join()
        raise AssertionError("the command did not end within 300 s")
    return Done(process.exitcode, out.read_text(), err.read_text())
