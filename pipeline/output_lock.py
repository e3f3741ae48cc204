"""One conversion at a time per local output folder, for any two processes on the machine.

Two runs writing the same folder at once would spoil each other: each cleans up the
other's temporary files at start and renames shards over the other's at commit. Cron
jobs that overrun, a scheduler retrying a task whose first attempt still runs, or a
backfill by hand beside a systemd unit (with its own private /tmp) do exactly that. A run
therefore holds an exclusive `flock` on `LOCK_NAME` inside the output folder while it
works: the lock lives with the output, so every process that writes that folder sees the
same lock whatever its temp folder or working directory. The kernel drops the lock when
the process ends, however it ends, so a lock left by a dead run is simply taken by the
next one. The lock file itself stays (one small file per output; deleting it would let
two runs lock two different files of the same name).

Outputs on a remote filesystem (gs://, ...) are not locked: that would need the store's
own preconditions or a lease. Where `fcntl` does not exist (Windows) nothing is locked.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None

__all__ = ["LOCK_NAME", "OutputBusyError", "lock_path", "output_lock"]

#: The lock file, inside the output folder.
LOCK_NAME = ".lock-tfrecord-pipeline"  # matches no shard glob (*.tfrecord*)


class OutputBusyError(RuntimeError):
    """Another run is writing the same output folder."""


def lock_path(output: str) -> str:
    """The lock file of a local output folder."""
    return os.path.join(output, LOCK_NAME)


@contextlib.contextmanager
def output_lock(output: str) -> Iterator[None]:
    """Holds the lock of `output` for the block (creating the folder); raises
    OutputBusyError if another process has it."""
    if "://" in output or fcntl is None:
        yield
        return
    path = lock_path(output)
    try:
        os.makedirs(output, exist_ok=True)
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
