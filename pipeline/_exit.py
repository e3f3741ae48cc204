"""Ending the CLI process without tearing down its imports.

Tearing down Beam's import graph (about 2,000 modules) at interpreter exit takes ~0.4 s,
a fixed cost on every run that buys nothing: the process is ending. `pipeline/__init__`
registers `_exit_if_armed` with atexit before anything else is imported, so it runs after
every other atexit handler (they run last-registered first: logging's flush included);
`arm(code)`, called only by the console entry point, makes it flush stdio and end the
process with `code` instead of letting the interpreter finalize. Non-daemon threads have
been joined by then (Python joins them before running atexit handlers). Files the run
wrote were closed by the code that wrote them before it reported success.
"""

from __future__ import annotations

import atexit
import os
import sys

_armed_code: int | None = None


def arm(code: int) -> None:
    """Makes the process exit with `code` right after the atexit handlers have run."""
    global _armed_code
    _armed_code = code


def _exit_if_armed() -> None:
    if _armed_code is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or replaced streams
            pass
    os._exit(_armed_code)


def register() -> None:
    atexit.register(_exit_if_armed)
