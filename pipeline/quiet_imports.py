"""Dropping the one warning Beam prints on every import in our default install.

Beam installed without its gcp extra (our default install) calls `logging.warning(
"apitools not found, and bigquery client libraries are not available...")` on import: a
warning about BigQuery, which this tool never uses. The command drops it while it imports
(`dropping_import_warnings`: a handler of our own, so that the warning does not configure
the root logger before the command does); the worker processes of the Dask LocalCluster a
run starts, which print to the command's terminal, drop it for good (`dask_setup`, their
preload hook).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

__all__ = ["dask_setup", "dropping_import_warnings", "not_spurious"]

_SPURIOUS_BEAM_WARNING = "apitools not found, and bigquery client libraries are not available"


def not_spurious(record: logging.LogRecord) -> bool:
    """A logging filter: False for Beam's BigQuery import warning."""
    return not str(record.msg).startswith(_SPURIOUS_BEAM_WARNING)


@contextlib.contextmanager
def dropping_import_warnings() -> Iterator[None]:
    """For the block, warnings logged to the root logger are printed as Python's last-resort
    handler would, except Beam's BigQuery one, and leave the root logger unconfigured."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.addFilter(not_spurious)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def dask_setup(worker) -> None:
    """Dask's preload hook (`LocalCluster(preload=[__name__])`): the worker process drops
    Beam's BigQuery warning, which it would print when its first task imports Beam."""
    del worker  # the hook's signature
    logging.getLogger().addFilter(not_spurious)
