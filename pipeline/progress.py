"""What a local conversion shows while it runs: its phases, then progress read from the
sink's heartbeat files (records, dead letters, and the work units each writer started).

On a terminal each phase gets a line and the conversion a `tqdm` bar over the plan's input
bytes (work units when their sizes are not known). Anywhere else (a log file, a scheduler's
captured output) whole progress lines with the same figures, at a longer interval, so they
never run together.

A work unit counts as done once the writer that started it has started a later one (or the
run commits): each writer converts its units in plan order, one at a time, so its highest
unit may still be converting. "Done" is thus a lower bound, off by one unit per writer.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence

from apache_beam.io.filesystems import FileSystems
from tqdm import tqdm

from transforms import fs, output_files
from transforms.records import WorkUnit

__all__ = ["Progress", "show_phase"]

# Done/total with its unit, time spent < time left, rate; whole lines have no bar.
_FIGURES = "{n_fmt}/{total_fmt}{unit} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| " + _FIGURES
_LINE_FORMAT = "{desc}: {percentage:3.0f}% " + _FIGURES


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _postfix(written: int, dead: int) -> str:
    return f"{written:,} records written, {dead:,} dead-lettered"


def show_phase(text: str, stream=None) -> None:
    """Shows the phase the run enters ("planning: ...") on a terminal only: a log gets the
    progress lines and the summary."""
    stream = sys.stderr if stream is None else stream
    if _is_terminal(stream):
        print(text, file=stream, flush=True)


class Progress(threading.Thread):
    """Shows the conversion of the work units of a plan while a local run works."""

    LOG_INTERVAL = 15.0

    def __init__(self, temp_dir: str, work_units: Sequence[WorkUnit], stream=None,
                 interval: float | None = None):
        super().__init__(daemon=True)
        stream = sys.stderr if stream is None else stream  # the current one, not the one at import
        self._terminal = _is_terminal(stream)
        self._interval = (1.0 if self._terminal else self.LOG_INTERVAL) if interval is None else interval
        sizes = {unit.index: unit.size for unit in work_units}
        in_bytes = bool(sizes) and all(sizes.values())
        self._weights = sizes if in_bytes else dict.fromkeys(sizes, 1)
        self._meter = {"total": sum(self._weights.values()), "unit": "B" if in_bytes else " work units",
                       "unit_scale": in_bytes, "unit_divisor": 1024}
        self._pattern = fs.join_path(fs.literal(temp_dir), "_progress", "*.json")
        self._journal = fs.join_path(temp_dir, output_files.JOURNAL_NAME)
        self._stream = stream
        self._done = threading.Event()
        self._start = time.monotonic()
        self._bar: tqdm | None = None
        self._committing = False

    def run(self) -> None:
        size = (f"{tqdm.format_sizeof(self._meter['total'], 'B', 1024)} of input in "
                if self._meter["unit"] == "B" else "")
        show_phase(f"converting {size}{len(self._weights):,} work unit(s)", self._stream)
        self._open_bar()
        while not self._done.wait(self._interval):
            self.show()

    def counts(self) -> tuple[int, int, int] | None:
        """(input done, records written, dead letters) as of now; None before the first
        heartbeat (or after the commit)."""
        done = written = dead = 0
        try:
            for metadata in fs.match([self._pattern])[0].metadata_list:
                with FileSystems.open(metadata.path) as handle:
                    beat = json.loads(handle.read())
                written += beat["records"]
                dead += beat["dead_letters"]
                started = sorted(int(unit) for unit in beat["units"])
                done += sum(self._weights.get(unit, 0) for unit in started[:-1])
        except Exception:  # noqa: BLE001 - progress is best effort
            return None
        if not written and not dead:
            return None  # nothing yet, or the temp folder is already committed
        return done, written, dead

    def line(self) -> str | None:
        counts = self.counts()
        return None if counts is None else self._line(*counts)

    def _line(self, done: int, written: int, dead: int) -> str:
        return tqdm.format_meter(done, elapsed=time.monotonic() - self._start, prefix="converting",
                                 bar_format=_LINE_FORMAT, postfix=_postfix(written, dead), **self._meter)

    def show(self) -> None:
        counts = self.counts()
        if counts is None:
            return
        if not self._terminal:
            print(self._line(*counts), file=self._stream, flush=True)
            return
        self._open_bar()
        self._bar.n = counts[0]
        self._bar.set_postfix_str(_postfix(*counts[1:]), refresh=False)
        self._bar.refresh()
        if not self._committing and FileSystems.exists(self._journal):
            self._committing = True
            self._close_bar()
            show_phase("committing: naming the shards, writing the manifest", self._stream)

    def _open_bar(self) -> None:
        if self._terminal and self._bar is None and not self._committing:
            self._bar = tqdm(file=self._stream, desc="converting", dynamic_ncols=True,
                             mininterval=0, bar_format=_BAR_FORMAT, **self._meter)

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def stop(self) -> None:
        self._done.set()
        if self.ident is not None:  # started
            self.join(timeout=5)
        self._close_bar()
