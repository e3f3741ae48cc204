"""Log records the command's terminal does not show: noise no user can act on, and runners'
logs of a failure the command reports itself. Import-light (only `logging`): the console
entry point uses it before anything else is imported.

* Beam installed without its gcp extra (our default install) calls `logging.warning(
  "apitools not found, and bigquery client libraries are not available...")` on import: a
  warning about BigQuery, which this tool never uses. The command drops it while it imports
  (`dropping_import_warnings`: a handler of our own, so that the warning does not configure
  the root logger before the command does).
* A failed job's exception is logged, with its traceback, by Beam where a DoFn raised it
  (in this process, or in a worker process whose log the job service forwards) and by Dask's
  worker that ran the task; the command prints the failure as one line and exits with its
  code, so those logs go (`drop_runner_noise`; `--log-level debug` keeps Beam's, and the
  command then logs the traceback itself). Beam's worker processes also log, on every start,
  a warning about Beam's own registries that this tool does not use.
* The worker processes of the Dask LocalCluster a run starts print to the command's
  terminal: they drop the BigQuery warning and their log of a failed task (`dask_setup`,
  their preload hook).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

__all__ = ["dask_setup", "drop_runner_noise", "dropping_import_warnings", "not_spurious"]

_SPURIOUS_BEAM_WARNING = "apitools not found, and bigquery client libraries are not available"

#: What Beam's worker processes (`--direct_running_mode=multi_processing`) log at WARNING on
#: every start, forwarded by the launcher's job service.
_SPURIOUS_WORKER_WARNING = "No semi_persistent_directory found"

#: Beam's loggers of a failed job's exception: a DoFn's, raised in this process, and a worker
#: process's, forwarded by the job service as the text of the worker's log entry: the
#: exception with its traceback (`trace`), then the failed bundle's.
_BEAM_STEP_ERRORS = "apache_beam.runners.common"
_BEAM_JOB_SERVICE = "apache_beam.runners.portability.local_job_service"
_FORWARDED_FAILURE_MARKS = ('trace: "', "Error processing instruction")

#: How a Dask worker logs a task that raised (the exception and its traceback follow).
_DASK_WORKER = "distributed.worker"
_DASK_TASK_FAILED = "Compute Failed"


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


def _not_spurious_worker_warning(record: logging.LogRecord) -> bool:
    return _SPURIOUS_WORKER_WARNING not in record.getMessage()


def _not_job_failure_trace(record: logging.LogRecord) -> bool:
    """False for Beam's log of the exception that failed the job, unless the root logger is
    at DEBUG."""
    if record.levelno < logging.ERROR or logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        return True
    if record.name == _BEAM_STEP_ERRORS:
        return record.exc_info is None
    message = record.getMessage()
    return not any(mark in message for mark in _FORWARDED_FAILURE_MARKS)


def _not_failed_task(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_DASK_TASK_FAILED)


def drop_runner_noise() -> None:
    """Adds the filters of Beam's logs in this process (each is added once, however often
    this is called)."""
    logging.getLogger(_BEAM_JOB_SERVICE).addFilter(_not_spurious_worker_warning)
    logging.getLogger(_BEAM_JOB_SERVICE).addFilter(_not_job_failure_trace)
    logging.getLogger(_BEAM_STEP_ERRORS).addFilter(_not_job_failure_trace)


def dask_setup(worker) -> None:
    """Dask's preload hook (`LocalCluster(preload=[__name__])`): the worker process drops
    Beam's BigQuery warning, which it would print when its first task imports Beam, and its
    log of a task that raised (the command reports the job's failure)."""
    del worker  # the hook's signature
    logging.getLogger().addFilter(not_spurious)
    logging.getLogger(_DASK_WORKER).addFilter(_not_failed_task)
