"""Choosing and starting the Beam runner for a conversion.

* Local (default, `--runner direct`/`DirectRunner`): Beam's FnApiRunner, chosen explicitly:
  Beam 2.77's DirectRunner first tries to download the Prism runner binary, which stalls on
  networks that hang instead of refusing. Conversions run in one process whatever their
  size: the plan's work units travel as one element converted on forked children, which
  start in milliseconds and write their own shards (`runs_in_process`,
  `pipeline.graph.ConvertOnForkedProcesses`); measured faster than Beam's worker processes
  at 1.5 GB, with half the memory (see `pipeline.convert`). Where fork is missing, an input
  of several work units above `LOCAL_PARALLEL_MIN_BYTES` (images: `..._IMAGE_BYTES`) runs in
  `multi_processing` mode, one worker per core, because a worker process costs seconds to
  start (it imports Beam). Explicit `--direct_running_mode` / `--direct_num_workers` win;
  `multi_threading` was seen to lose elements in Beam 2.77 and is refused.
* `--runner dask`: Beam's DaskRunner on the scheduler at `--dask_client_address`, or on a
  `dask.distributed.LocalCluster` started (and stopped) for the run. The DaskRunner puts up
  to 128 elements of a `beam.Create` in one bag partition, so a plan of 8 work units ran on
  one worker: the work units are cut into `dask_partitions` partitions instead, sized to the
  cluster (unless `--dask_npartitions`/`--dask_partition_size` is given). A cluster at an
  address finds the record starts of large text files in tasks of its own before the run
  (`dask_cluster`, `workers_cut_large_files`), exactly where the launcher would.
* Anything else (DataflowRunner, FlinkRunner, SparkRunner, PortableRunner, ...) is passed
  to Beam unchanged. `DataflowRunner` needs the `dataflow` extra (Beam's gcp extra), left
  out of the default install because importing it costs every local run ~0.25 s.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.errors import UsageError
from pipeline.quiet_logs import beam_worker_log_levels

__all__ = ["LOCAL_PARALLEL_MIN_BYTES", "LOCAL_PARALLEL_MIN_IMAGE_BYTES", "DaskCluster", "RunnerError",
           "check_runner_installed", "check_runner_options", "cluster_threads", "dask_cluster", "runner_for",
           "workers_cut_large_files"]

#: Below this much input, a local run stays in one process (see the module docstring).
#: Measured on 2 cores (GZIP, 8-32 CSV files): one process beat two worker processes at
#: 60 MB (4.1-4.9 s vs 6.1-6.5 s), 128 MB (6.6 vs 8.0 s) and 512 MB (12.7 vs 15.2 s): the
#: in-process run already keeps ~1.5 cores busy (Arrow and codec threads), and each worker
#: costs ~1.5 CPU-seconds to start.
LOCAL_PARALLEL_MIN_BYTES = 1024 * 1024 * 1024
#: The same for images kept as bytes, which cost far less work per input byte than CSV
#: (measured: ~4 ms/MB against 26-30 ms/MB). On 2 cores, 20,000 JPEGs (1.4 GB) took 6.7 s
#: in one process and 9.1 s with two workers.
LOCAL_PARALLEL_MIN_IMAGE_BYTES = 8 * 1024 * 1024 * 1024

_LOCAL_NAMES = {None, "", "direct", "directrunner", "fnapirunner", "local"}
_DASK_NAMES = {"dask", "daskrunner"}
_DATAFLOW_NAMES = {"dataflow", "dataflowrunner"}
#: Runner name -> (a module the runner imports, the extra that installs it, what it is).
_RUNNER_EXTRAS = {
    **dict.fromkeys(_DASK_NAMES, ("apache_beam.runners.dask.dask_runner", "dask", "Dask")),
    **dict.fromkeys(_DATAFLOW_NAMES, ("google.cloud.dataflow", "dataflow", "Beam's gcp extra")),
}


class RunnerError(UsageError):
    """The requested runner configuration is refused; `hint`: what to do instead."""


def _explicit(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def check_runner_installed(options: PipelineOptions) -> None:
    """Raises `RunnerError` when the requested runner needs an extra that is not installed."""
    runner = options.view_as(StandardOptions).runner or ""
    if runner.lower() not in _RUNNER_EXTRAS:
        return
    module, extra, what = _RUNNER_EXTRAS[runner.lower()]
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise RunnerError(f"--runner {runner} needs the {extra} extra ({what}): "
                          f"pip install 'tfrecord-pipeline[{extra}]'") from error


#: Beam's validation errors of an option that is missing (`PipelineOptionsValidator`).
_MISSING_OPTION = re.compile(r"Missing (?:GCS path |required )?option: (\w+)\.?")


def check_runner_options(options: PipelineOptions, no_wait: bool = False) -> None:
    """Raises `RunnerError` (one line) when a runner Beam starts itself is missing options or
    given invalid ones, before anything is read: Beam checks them only when the pipeline is
    built, after planning, in a message of one line per problem. `no_wait` is refused on the
    runners whose job cannot outlive the command (local, Dask)."""
    name = _runner_name(options)
    if name in _LOCAL_NAMES or name in _DASK_NAMES:
        if no_wait:
            where = ("the local runner runs the job in this process" if name in _LOCAL_NAMES
                     else "Dask cancels a job when the command that submitted it exits")
            raise RunnerError(f"--no-wait needs a runner whose job outlives this command; {where}",
                              hint="drop --no-wait, or submit to DataflowRunner (or a Flink/Spark "
                                   "job server)")
        return
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.runner import create_runner

    runner = options.view_as(StandardOptions).runner
    # Beam also logs each invalid location it validates, which the one line names already.
    beam_options_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_options_log.level
    beam_options_log.setLevel(logging.ERROR)
    try:
        errors = PipelineOptionsValidator(options, create_runner(runner)).validate()
    except ValueError as error:  # an unknown runner name
        raise RunnerError(" ".join(str(error).split())) from None
    finally:
        beam_options_log.setLevel(level)
    if errors:
        hint = "Dataflow needs --project, --region and a gs:// --temp_location"
        raise RunnerError(_validation_message(runner, errors), hint=hint if name in _DATAFLOW_NAMES else None)


def _validation_message(runner: str, errors: Sequence[str]) -> str:
    """Beam's validation errors as one line: the missing options as flags, then the rest.
    Either of --temp_location and --staging_location stands in for the other."""
    missing = [m.group(1) for m in map(_MISSING_OPTION.fullmatch, errors) if m]
    others = [" ".join(e.split()).rstrip(".") for e in errors if not _MISSING_OPTION.fullmatch(e)]
    either = "staging_location" in missing
    flags = [f"--{option}" + (" (or --staging_location)" if either and option == "temp_location" else "")
             for option in missing if option != "staging_location"]
    if either and "temp_location" not in missing:
        flags.append("--staging_location")
    parts = ([f"missing {', '.join(flags)}"] if flags else []) + others
    return f"--runner {runner}: {'; '.join(parts)}"


def _runner_name(options: PipelineOptions) -> str:
    """The `--runner` asked for, lower case ("" for the default)."""
    return (options.view_as(StandardOptions).runner or "").lower()


def is_local(options: PipelineOptions) -> bool:
    return _runner_name(options) in _LOCAL_NAMES


def runs_in_process(options: PipelineOptions) -> bool:
    """True when `options` (as `runner_for` left them) run the pipeline in this process."""
    return is_local(options) and options.view_as(DirectOptions).direct_running_mode == "in_memory"


def _dask_address(options: PipelineOptions) -> str | None:
    """--dask_client_address of a Dask run; None for other runners or without one."""
    if _runner_name(options) not in _DASK_NAMES:
        return None
    from apache_beam.runners.dask.dask_runner import DaskOptions

    return getattr(options.view_as(DaskOptions), "address", None) or None


class DaskCluster:
    """The Dask cluster at `--dask_client_address`, as the launcher uses it before the run:
    to count its threads and to run the plan's small tasks (`map`)."""

    def __init__(self, client):
        self._client = client

    @property
    def threads(self) -> int:
        """The worker threads of the cluster (1 when it cannot say)."""
        return sum(self._client.nthreads().values()) or 1

    def map(self, fn: Callable, items: Sequence) -> list:
        """`fn(item)` of each item, in order, each computed as a task on the cluster."""
        return self._client.gather(self._client.map(fn, list(items), pure=False))


@contextlib.contextmanager
def dask_cluster(options: PipelineOptions) -> Iterator[DaskCluster | None]:
    """Connected to the cluster at `--dask_client_address` of a Dask run for the block;
    None for other runners, and for a Dask run that starts its own LocalCluster (after
    planning, on the launcher's machine)."""
    address = _dask_address(options)
    if address is None:
        yield None
        return
    with _distributed().Client(address, timeout=30, set_as_default=False) as client:
        yield DaskCluster(client)


def cluster_threads(options: PipelineOptions, cluster: DaskCluster | None) -> int | None:
    """How many work units a Dask run converts at once: the worker threads of `cluster` (see
    `dask_cluster`), or of the LocalCluster it starts without an address (one per CPU). None
    for other runners: the local one uses the planner's processes, others scale their own."""
    if cluster is not None:
        return cluster.threads
    return (os.cpu_count() or 1) if _runner_name(options) in _DASK_NAMES else None


def workers_cut_large_files(options: PipelineOptions) -> bool:
    """Whether large text files are cut where the workers run (`transforms.tabular.
    range_cuts`) rather than scanned on the launcher: not on the local runner, nor on a
    Dask run's own LocalCluster, whose workers share the launcher's machine and disk."""
    return not is_local(options) and (_runner_name(options) not in _DASK_NAMES
                                      or _dask_address(options) is not None)


@contextlib.contextmanager
def runner_for(
    options: PipelineOptions, argv: Sequence[str], parallel: bool = True, work_units: int = 1,
    threads: int | None = None,
) -> Iterator[object]:
    """Yields the runner (an instance or a Beam runner name) for `options`, which it may
    adjust (local worker count and mode, Dask scheduler address and bag partitions); for
    Dask without an address, keeps a LocalCluster alive for the block. `parallel=False`: the
    input cannot use more than one local worker; `work_units`: how many elements the plan
    feeds the converter; `threads`: the cluster's `cluster_threads`, when known."""
    name = _runner_name(options)
    if name in _LOCAL_NAMES:
        yield _local_runner(options, argv, parallel)
    elif name in _DASK_NAMES:
        with _dask_runner(options, argv, work_units, threads) as runner:
            yield runner
    else:
        yield options.view_as(StandardOptions).runner


def _local_runner(options: PipelineOptions, argv: Sequence[str], parallel: bool):
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise RunnerError(
            "--direct_running_mode=multi_threading is refused: Beam 2.77 was seen to lose "
            "elements in that mode. Use multi_processing (the default here) or in_memory."
        )
    workers_given = _explicit(argv, "--direct_num_workers")
    if not _explicit(argv, "--direct_running_mode"):
        direct.direct_running_mode = "multi_processing" if parallel or workers_given else "in_memory"
    in_memory = direct.direct_running_mode == "in_memory"
    if not workers_given:  # one process: one worker
        direct.direct_num_workers = 1 if in_memory else os.cpu_count() or 1
    return FnApiRunner() if in_memory else FnApiRunner(provision_info=_worker_provision(options))


def _worker_provision(options: PipelineOptions):
    """What Beam's local worker processes are told: only their log levels
    (`pipeline.quiet_logs`), as a job service tells its workers their pipeline options (the
    FnApiRunner on its own tells them none)."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from google.protobuf import struct_pb2

    told = struct_pb2.Struct()
    levels = beam_worker_log_levels(options)
    if levels:
        told.update({"sdk_harness_log_level_overrides": levels})
    return ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(
        retrieval_token="unused-retrieval-token", pipeline_options=told))


#: Bag partitions per worker thread: more than one, so a slow work unit does not hold up a
#: worker's whole share; few enough that a partition's fixed cost (a DoFn set-up) stays small.
PARTITIONS_PER_THREAD = 4


def dask_partitions(work_units: int, threads: int) -> int:
    """How many bag partitions `work_units` are cut into on a cluster of `threads` threads."""
    return max(1, min(work_units, PARTITIONS_PER_THREAD * max(1, threads)))


def _distributed():
    """`dask.distributed`, imported with its logger back at the run's level (importing it
    applies dask's logging config, INFO)."""
    import dask.distributed

    follow_log_level()
    return dask.distributed


def follow_log_level() -> None:
    """Sets the loggers of Dask's scheduler and Beam's runners to the root logger's level
    (`--log-level`), at least WARNING: their INFO lines are routine start-up and shut-down
    events."""
    level = max(logging.getLogger().getEffectiveLevel(), logging.WARNING)
    for name in ("distributed", "apache_beam"):
        logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def _dask_runner(options: PipelineOptions, argv: Sequence[str], work_units: int,
                 threads: int | None):
    check_runner_installed(options)
    import dask

    distributed = _distributed()  # before the runner imports it
    from apache_beam.runners.dask.dask_runner import DaskOptions, DaskRunner

    dask_options = options.view_as(DaskOptions)
    sized = not any(_explicit(argv, flag) for flag in ("--dask_npartitions", "--dask_partition_size"))
    # The DaskRunner groups with a bag's groupby, whose default shuffle on a distributed
    # client is "tasks" after importing dask.dataframe (and pandas) to rule out "p2p",
    # which bags lack: 0.45 s of every launch. Say "tasks" (dask's public setting), unless
    # the user configured a method.
    unset = dask.config.get("dataframe.shuffle.method", None) is None
    with dask.config.set({"dataframe.shuffle.method": "tasks"} if unset else {}), \
            contextlib.ExitStack() as stack:
        if not _dask_address(options):
            threads = os.cpu_count() or 1
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=threads, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None,
                # The scheduler's HTTP server still starts, by default on port 8787, and warns
                # when another run holds that port: an unused port of the system's choosing.
                scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                # The workers print to our terminal: see `pipeline.quiet_logs`.
                preload=["pipeline.quiet_logs"]))
            dask_options.address = cluster.scheduler_address
        elif sized and not threads:
            with dask_cluster(options) as cluster:
                threads = cluster.threads
        if sized:
            dask_options.npartitions = dask_partitions(work_units, threads)
        yield DaskRunner()
