"""One conversion at a time per output folder, on one machine.

Two runs writing the same folder at once would spoil each other: each cleans up the
other's temporary files at start and renames shards over the other's at commit. Cron
jobs that overrun, or a scheduler retrying a task whose first attempt still runs, do
exactly that. A run therefore holds an exclusive `flock` on a lock file named after the
output folder while it works. The kernel drops the lock when the process ends, however
it ends, so a killed run never leaves a stale lock behind. The small lock file itself
stays (deleting it would let two runs lock two different files of the same name).

The lock covers runs launched on the same machine (the local runners, and launchers of
remote runners while they wait for the job). Outputs on a remote filesystem (gs://, ...)
are not locked: that would need the store's own preconditions or a lease. Where `fcntl`
does not exist (Windows) nothing is locked.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None

__all__ = ["OutputBusyError", "lock_path", "output_lock"]


class OutputBusyError(RuntimeError):
    """Another run on this machine is writing the same output folder."""


def lock_path(output: str) -> str:
    """The lock file of a local output folder (in the system temp folder, not in the output)."""
    key = hashlib.sha256(os.path.realpath(output).encode("utf-8")).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"tfrecord-pipeline-{key}.lock")


@contextlib.contextmanager
def output_lock(output: str) -> Iterator[None]:
    """Holds the lock of `output` for the block; raises OutputBusyError if another run has it."""
    if "://" in output or fcntl is None:
        yield
        return
    path = lock_path(output)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:  # e.g. another user's lock file: run unlocked, not at all
        logging.getLogger("tfrecord_pipeline").warning(
            "cannot lock %s (%s): running without the one-run-per-output check", output, error)
        yield
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 200, 0).decode("utf-8", "replace").strip()
            raise OutputBusyError(
                f"another run is writing {output} ({holder or 'unknown process'}); "
                f"wait for it to finish") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
