"""One conversion at a time per local output folder, for any two processes on the machine.

Two runs writing the same folder at once would spoil each other: each cleans up the other's
temporary files at start and renames shards over the other's at commit. Overrunning cron jobs,
a scheduler retrying a task whose first attempt still runs, or a backfill by hand beside a
systemd unit (with its own private /tmp) do exactly that. A run that writes therefore holds an
exclusive `flock` on `LOCK_NAME` inside the output folder: the same file for every process,
whatever its temp folder or working directory (unlike the run's own `.tmp-<run id>`). The
kernel drops the lock when the process ends, however it ends. Runs that write nothing take no
lock.

The file is removed when the run ends, so `DIR` holds only the output: the holder unlinks it
while still holding the lock, and a run that took a lock checks that the file it locked is
still the one under the name (else it locked a removed file, and tries again), so two runs
never both hold it.

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

#: The lock file, inside the output folder while a run writes it.
LOCK_NAME = ".lock-tfrecord-pipeline"  # matches no shard glob (*.tfrecord*)


class OutputBusyError(RuntimeError):
    """Another run is writing the same output folder."""


def lock_path(output: str) -> str:
    return os.path.join(output, LOCK_NAME)


def _take(output: str, path: str) -> int:
    """A descriptor of the lock file `path`, locked; raises OutputBusyError or OSError."""
    for _ in range(100):  # again when the file locked was removed by the run that held it
        os.makedirs(output, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:  # the folder was removed by the run that just ended
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 200, 0).decode("utf-8", "replace").strip()
            os.close(descriptor)
            raise OutputBusyError(
                f"another run is writing {output} ({holder or 'unknown process'}); "
                f"wait for it to finish") from None
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(descriptor), os.stat(path)):
                return descriptor
        os.close(descriptor)
    raise OSError(f"{path} could not be created and kept while locked")


@contextlib.contextmanager
def output_lock(output: str) -> Iterator[None]:
    """Holds the lock of `output` for the block (creating the folder, removed again if the
    block left it empty); raises OutputBusyError if another process has it."""
    if "://" in output or fcntl is None:
        yield
        return
    path = lock_path(output)
    created = not os.path.isdir(output)
    try:
        descriptor = _take(output, path)
    except OSError as error:  # e.g. another user's lock file: run unlocked, not at all
        logging.getLogger("tfrecord_pipeline").warning(
            "cannot lock %s (%s): running without the one-run-per-output check", output, error)
        yield
        return
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # while locked: see the module docstring
        os.close(descriptor)  # closing releases the lock
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(output)  # only when empty
