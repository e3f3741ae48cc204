"""Progress lines while a local conversion runs, read from the sink's heartbeat files."""

from __future__ import annotations

import json
import sys
import threading
import time

from apache_beam.io.filesystems import FileSystems

from transforms import manifest as manifest_lib

__all__ = ["Progress"]


class Progress(threading.Thread):
    """Prints records done and records/s while a local run works."""

    def __init__(self, temp_dir: str, total_units: int, stream=sys.stderr, interval: float = 2.0):
        super().__init__(daemon=True)
        self._total_units = total_units
        self._pattern = manifest_lib.join_path(temp_dir, "_progress", "*.json")
        self._stream = stream
        self._interval = interval
        self._done = threading.Event()
        self._start = time.monotonic()
        self._printed = False

    def run(self) -> None:
        while not self._done.wait(self._interval):
            written = dead = 0
            units: set[str] = set()
            try:
                for metadata in FileSystems.match([self._pattern])[0].metadata_list:
                    with FileSystems.open(metadata.path) as handle:
                        beat = json.loads(handle.read())
                    written += beat["records"]
                    dead += beat["dead_letters"]
                    units.update(beat["units"])
            except Exception:  # noqa: BLE001 - progress is best effort
                continue
            if not written and not dead:
                continue  # nothing yet, or the temp folder is already committed
            self._printed = True
            elapsed = time.monotonic() - self._start
            rate = (written + dead) / elapsed if elapsed else 0.0
            print(
                f"\r[{elapsed:6.1f}s] inputs started {len(units):,}/{self._total_units:,}, "
                f"{written:,} records written, {dead:,} dead-lettered ({rate:,.0f} records/s)",
                end="", file=self._stream, flush=True,
            )

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)
        if self._printed:
            print(file=self._stream)
