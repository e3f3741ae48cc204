"""`tfrecord-pipeline report DIR [--output FILE]`, and the report every conversion writes.

The page itself is built by `transforms.report` from the committed output alone; this module
maps its outcomes onto the command line's: a folder without a manifest is a usage error,
and after a conversion a report that cannot be written is a warning, never a failed run
(the output is committed and sound either way; `report` rebuilds the page later).
"""

from __future__ import annotations

import logging

from pipeline.errors import UsageError
from transforms.report.build import write_report

__all__ = ["report_command", "write_report_after_commit"]

_LOG = logging.getLogger("tfrecord_pipeline")


def report_command(output_dir: str, destination: str | None = None) -> None:
    """Writes the report of the committed output `output_dir`; prints the path written."""
    try:
        path = write_report(output_dir, destination)
    except FileNotFoundError as error:
        raise UsageError(str(error), hint="pass an output folder of `tfrecord-pipeline convert`, "
                                          "the one holding manifest.json") from None
    print(f"wrote {path}")


def write_report_after_commit(output_dir: str) -> str | None:
    """Writes `output_dir/report.html` after a committed conversion; returns its path, or
    None (with a warning) when it could not be written."""
    try:
        return write_report(output_dir)
    except Exception as error:  # noqa: BLE001 - the conversion succeeded; the report is extra
        _LOG.debug("writing the report of %s failed", output_dir, exc_info=True)
        _LOG.warning("the conversion is committed, but its report.html could not be written "
                     "(%s: %s); `tfrecord-pipeline report %s` rebuilds it",
                     type(error).__name__, error, output_dir)
        return None
