"""`tfrecord-pipeline report DIR [--output FILE]`, and the report every conversion writes: the
outcomes of `transforms.report` (which builds the page) as the command line's.
"""

from __future__ import annotations

import logging
import os

from pipeline.errors import OutputProblems, UsageError
from transforms.report.build import REPORT_NAME, write_report

__all__ = ["report_command", "write_report_after_commit"]

_LOG = logging.getLogger("tfrecord_pipeline")


def report_command(output_dir: str, destination: str | None = None) -> None:
    """Writes the report of `output_dir` and prints its path. A folder without a manifest is a
    usage error, and so is an `--output` folder, refused before the page is built (it would
    fail only at the final rename)."""
    if destination is not None and "://" not in destination and os.path.isdir(destination):
        raise UsageError(f"--output {destination} is a folder; give the HTML file to write "
                         f"(e.g. {os.path.join(destination, REPORT_NAME)})")
    try:
        path = write_report(output_dir, destination)
    except FileNotFoundError as error:
        raise UsageError(str(error), hint="pass an output folder of `tfrecord-pipeline convert`, "
                                          "the one holding manifest.json") from None
    except ValueError as error:  # a manifest or side file that cannot be read: damaged output
        raise OutputProblems(str(error)) from None
    print(f"wrote {path}")


def write_report_after_commit(output_dir: str) -> str | None:
    """Writes `output_dir/report.html` after a committed conversion; returns its path, or None
    with a warning, never a failed run: the output is sound either way, and `report` rebuilds
    the page later."""
    try:
        return write_report(output_dir)
    except Exception as error:  # noqa: BLE001 - the conversion succeeded; the report is extra
        _LOG.debug("writing the report of %s failed", output_dir, exc_info=True)
        _LOG.warning("the conversion is committed, but its report.html could not be written "
                     "(%s: %s); `tfrecord-pipeline report %s` rebuilds it",
                     type(error).__name__, error, output_dir)
        return None
