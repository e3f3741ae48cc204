"""Progress lines while a local conversion runs, read from the sink's heartbeat files.

On a terminal one line is rewritten in place; anywhere else (a log file, a scheduler's
captured output) whole lines are written, at a longer interval, so they never run together.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from apache_beam.io.filesystems import FileSystems

from transforms import fs

__all__ = ["Progress"]


class Progress(threading.Thread):
    """Prints records done and records/s while a local run works."""

    #: Seconds between lines where the stream is not a terminal.
    LOG_INTERVAL = 15.0

    def __init__(self, temp_dir: str, total_units: int, stream=None, interval: float | None = None):
        super().__init__(daemon=True)
        stream = sys.stderr if stream is None else stream  # the current one, not the one at import
        isatty = getattr(stream, "isatty", None)
        self._terminal = bool(isatty and isatty())
        if interval is None:
            interval = 2.0 if self._terminal else self.LOG_INTERVAL
        self._total_units = total_units
        self._pattern = fs.join_path(fs.literal(temp_dir), "_progress", "*.json")
        self._stream = stream
        self._interval = interval
        self._done = threading.Event()
        self._start = time.monotonic()
        self._printed = False

    def run(self) -> None:
        while not self._done.wait(self._interval):
            line = self.line()
            if line is None:
                continue
            self.write(line)

    def write(self, line: str) -> None:
        """Shows `line`: in place on a terminal, as a whole line anywhere else."""
        self._printed = True
        if self._terminal:
            print("\r" + line, end="", file=self._stream, flush=True)
        else:
            print(line, file=self._stream, flush=True)

    def line(self) -> str | None:
        """The progress line as of now; None before the first heartbeat (or after commit)."""
        written = dead = 0
        units: set[str] = set()
        try:
            for metadata in fs.match([self._pattern])[0].metadata_list:
                with FileSystems.open(metadata.path) as handle:
                    beat = json.loads(handle.read())
                written += beat["records"]
                dead += beat["dead_letters"]
                units.update(beat["units"])
        except Exception:  # noqa: BLE001 - progress is best effort
            return None
        if not written and not dead:
            return None  # nothing yet, or the temp folder is already committed
        elapsed = time.monotonic() - self._start
        rate = (written + dead) / elapsed if elapsed else 0.0
        return (f"[{elapsed:6.1f}s] inputs started {len(units):,}/{self._total_units:,}, "
                f"{written:,} records written, {dead:,} dead-lettered ({rate:,.0f} records/s)")

    def stop(self) -> None:
        self._done.set()
        if self.ident is not None:  # started
            self.join(timeout=5)
        if self._printed and self._terminal:
            print(file=self._stream)
