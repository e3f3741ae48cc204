"""Log records the command's terminal does not show: noise no user can act on, and runners'
logs of a failure the command reports itself. They are chosen by logger and level, never by
the text of a message. Import-light (`logging`, `sys`): the console entry point uses it
before anything else is imported.

Importing Beam without its gcp extra (our default install) logs a warning about BigQuery,
which this tool never uses. A failed job's exception is logged, with its traceback, where a
DoFn raised it, by the Beam worker process that ran the bundle and by the Dask worker that ran
the task; the command prints the failure as one line, so those loggers are raised to CRITICAL
(in this process, Beam's local workers and Dask's LocalCluster workers). `--log-level debug`
leaves Beam's loggers alone, and the command then logs the traceback itself.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["dask_setup", "drop_runner_noise", "import_beam_quietly", "beam_worker_log_levels"]

_BEAM_FAILURE_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker")

#: The logger of Beam's worker process's main module (`python -m ...sdk_worker_main`), which
#: warns on every start that it has no staging folder (local runs have none).
_BEAM_WORKER_START = "__main__"

#: Logs a task that raised ("Compute Failed", with the traceback).
_DASK_WORKER = "distributed.worker"


def _debugging() -> bool:
    return logging.getLogger().getEffectiveLevel() <= logging.DEBUG


def import_beam_quietly() -> None:
    """Imports Beam with a handler of ours on the root logger that prints errors only: its
    warnings are dropped, and do not configure a root logger that has no handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.ERROR)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        import apache_beam  # noqa: F401 - imported for its import-time logs
    finally:
        root.removeHandler(handler)


def drop_runner_noise() -> None:
    if not _debugging():
        for name in _BEAM_FAILURE_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)


def beam_worker_log_levels(options) -> dict[str, str] | None:
    """The log levels of Beam's local worker processes: the user's
    `--sdk_harness_log_level_overrides`, else the failure loggers at CRITICAL (None at DEBUG)."""
    from apache_beam.options.pipeline_options import WorkerOptions

    given = options.view_as(WorkerOptions).sdk_harness_log_level_overrides
    if given is not None or _debugging():
        return given
    return {**{name: "CRITICAL" for name in _BEAM_FAILURE_LOGGERS}, _BEAM_WORKER_START: "ERROR"}


def dask_setup(worker) -> None:
    """Dask's preload hook (`LocalCluster(preload=[__name__])`): the worker imports Beam
    quietly (its first task would print the warnings) and does not log a task that raised."""
    del worker  # the hook's signature
    import_beam_quietly()
    logging.getLogger(_DASK_WORKER).setLevel(logging.CRITICAL)
    logging.getLogger(f"{_DASK_WORKER}.memory").setLevel(logging.WARNING)  # its child: kept
