"""Running benchmark cases: each in a measured child process (wall time, CPU time, peak RSS
of its process tree), its output read back and checked, and its runs summarised. The smoke
run's baselines may instead run in this process (`run_cases(..., in_process=True)`)."""

from __future__ import annotations

import compileall
import dataclasses
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cases import Case, ours_argv, worker_argv

__all__ = [
    "REPO", "RSS_POLL_SECONDS", "Measurement", "TreeRssMonitor", "byte_compile_project",
    "check_output", "measure", "measure_here", "run_cases", "summarize",
]

REPO = Path(__file__).resolve().parent.parent
RSS_POLL_SECONDS = 0.05


class TreeRssMonitor(threading.Thread):
    """Polls the summed RSS of a process and all its descendants; keeps the peak."""

    def __init__(self, pid: int, interval: float = RSS_POLL_SECONDS):
        super().__init__(daemon=True)
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(pid)
        self._interval = interval
        self._stop_event = threading.Event()
        self.peak = 0
        self.samples = 0

    def sample(self) -> None:
        psutil = self._psutil
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:  # the root has exited
            return
        total = 0
        for process in processes:
            try:
                total += process.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                pass
        self.samples += 1
        self.peak = max(self.peak, total)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self._interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up chatter
    return env


@dataclasses.dataclass
class Measurement:
    wall_seconds: float
    cpu_seconds: float | None  # user + system of the child and its waited-for descendants
    peak_rss: int
    returncode: int


def _wait(child: subprocess.Popen) -> tuple[int, float | None]:
    """Reaps `child`; its exit code and CPU seconds (this child's own rusage, so
    concurrent cases do not mix)."""
    if not hasattr(os, "wait4"):  # not POSIX
        return child.wait(), None
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_utime + usage.ru_stime


def measure(command: Sequence[str], log_path: str) -> Measurement:
    """Runs `command` as a child; wall time and the peak RSS of its process tree.

    The data earlier steps wrote (inputs generated, outputs of other cases) is flushed to
    disk first, so that its writeback does not land on this case's clock.
    """
    if hasattr(os, "sync"):
        os.sync()
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=_child_env())
        monitor = TreeRssMonitor(child.pid)
        monitor.start()
        returncode, cpu = _wait(child)
        wall = time.perf_counter() - start
        monitor.stop()
    return Measurement(wall, cpu, monitor.peak, returncode)


def _usage_here() -> tuple[float, int]:
    """CPU seconds of this process and its reaped children; the largest peak RSS of either."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes there, KiB on Linux
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
            max(own.ru_maxrss, children.ru_maxrss) * unit)


def measure_here(cfgs: Sequence[dict], log_path: str) -> Measurement:
    """Runs the baselines of `cfgs` in this process, as a `--worker` child would: for the smoke
    run, whose process has usually imported TensorFlow already (a child imports it again).
    POSIX only. Its numbers are this whole process's (other threads, reaped children and the
    peak RSS of its lifetime included): they mean nothing, as nothing of a smoke run does. A
    failure's traceback goes to `log_path`."""
    from benchmarks.baselines import run_workers

    os.sync()
    cpu_start, start = _usage_here()[0], time.perf_counter()
    returncode = 0
    try:
        run_workers(cfgs)
    except (Exception, SystemExit):
        returncode = 1
        Path(log_path).write_text(traceback.format_exc(), encoding="utf-8")
    wall, (cpu_end, peak_rss) = time.perf_counter() - start, _usage_here()
    return Measurement(wall, cpu_end - cpu_start, peak_rss, returncode)


# ------------------------------------------------------------------- checking output


def _tfrecord_files(output: str) -> list[str]:
    # Shards only: our CLI also writes manifest.json, spec.yaml, dead_letter/ ... beside them.
    names = glob.glob(os.path.join(output, "*.tfrecord")) + glob.glob(os.path.join(output, "*.tfrecord.gz"))
    return sorted(names)


def check_output(output: str) -> dict[str, Any]:
    """Counts the records of every shard (CRCs checked) and reads the first one's features."""
    from transforms.format.compression import compression_from_path
    from transforms.format.example_codec import decode_example
    from transforms.format.tfrecord_reader import iter_records

    files = _tfrecord_files(output)
    records = 0
    features: tuple[str, ...] = ()
    for path in files:
        with open(path, "rb") as f:
            for info in iter_records(f, compression_from_path(path), path=path):
                if not features:
                    features = tuple(sorted(decode_example(bytes(info.payload))))
                records += 1
    manifest_path = os.path.join(output, "manifest.json")
    dead_letters = None
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            dead_letters = json.load(f)["counts"]["dead_letter"]
    return {
        "records": records,
        "files": len(files),
        "output_bytes": sum(os.path.getsize(p) for p in files),
        "features": features,
        "dead_letters": dead_letters,
    }


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _warm(inputs: Sequence[str]) -> None:
    """Reads every input file once (untimed), so each case starts from cached input."""
    paths = []
    for entry in inputs:
        if os.path.isdir(entry):
            paths += [os.path.join(folder, name) for folder, _, names in os.walk(entry)
                      for name in names]
        else:
            paths.append(entry)
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def byte_compile_project(root: Path = REPO) -> None:
    """Byte-compiles our packages once, untimed, as `pip install` does for an installed
    package. Where Python writes no bytecode itself (PYTHONDONTWRITEBYTECODE=1, as in our
    sandbox), a checkout's ~40 modules would otherwise be compiled on every start of our
    CLI: measured 0.16 s of its ~1 s start-up. Beam's and TensorFlow's modules, in
    site-packages, were compiled when they were installed."""
    for package in ("pipeline", "protos", "transforms"):
        if not compileall.compile_dir(str(root / package), quiet=1):
            print(f"warning: could not byte-compile {root / package}; our CLI's times include "
                  f"compiling it", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class _Paths:
    output: str
    result: str
    log: str


def _paths(case: Case, work: str, repeat: int) -> _Paths:
    slug = case.id.replace("/", "-")
    output = os.path.join(work, "out", f"{slug}-r{repeat}")
    shutil.rmtree(output, ignore_errors=True)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    if case.path != "ours":  # our CLI creates its output folder; the others expect one
        os.makedirs(output)
    logs = os.path.join(work, "logs", f"{slug}-r{repeat}")
    return _Paths(output, logs + ".result.json", logs + ".log")


def run_cases(cases: Sequence[Case], work: str, repeat: int, keep_output: bool = False,
              in_process: bool = False) -> list[dict[str, Any]]:
    """Runs one repeat of `cases` in one measured child: their measurements and output checks.

    More than one case shares the child: only baselines can (one worker child runs them in
    turn), and they share its wall time, CPU time and peak RSS (their "seconds" stay their
    own timed regions). `in_process`: baselines only, run in this process (`measure_here`),
    not a child. A case's output is deleted after the check unless `keep_output` (then its
    folder is in the returned run's "output_dir").
    """
    if (len(cases) > 1 or in_process) and any(case.worker is None for case in cases):
        raise ValueError("only baselines can share a child process or run in this one")
    paths = [_paths(case, work, repeat) for case in cases]
    cfgs = [dict(case.worker, output=p.output, result=p.result)
            for case, p in zip(cases, paths, strict=True) if case.worker is not None]
    command = worker_argv(cfgs) if cfgs else ours_argv(cases[0], paths[0].output)
    # Every case starts alike, untimed: no writeback pending from the case before (a 1.4 GB
    # image output still being flushed slowed the next case's writes by up to 2x), and its
    # input read once. This machine's page cache is small and evicts eagerly: the first
    # image case of a round otherwise read its input from disk (40 s instead of 10 s) and
    # left it cached for the case after it.
    os.sync()
    _warm([entry for case in cases for entry in case.inputs])
    measured = measure_here(cfgs, paths[0].log) if in_process else measure(command, paths[0].log)
    return [_check_run(case, p, measured, paths[0].log, keep_output)
            for case, p in zip(cases, paths, strict=True)]


def _check_run(case: Case, paths: _Paths, measured: Measurement, log_file: str,
               keep_output: bool) -> dict[str, Any]:
    run: dict[str, Any] = {
        "wall_seconds": measured.wall_seconds,
        "cpu_seconds": measured.cpu_seconds,
        "peak_rss_bytes": measured.peak_rss,
        "returncode": measured.returncode,
    }
    if measured.returncode != 0:
        with open(log_file, encoding="utf-8", errors="replace") as f:
            run["error"] = f"exit code {measured.returncode}; log tail:\n" + f.read()[-3000:]
        return run
    if case.timing == "region":
        run["seconds"] = json.loads(Path(paths.result).read_text())["seconds"]
    else:
        run["seconds"] = measured.wall_seconds
    run.update(check_output(paths.output))
    if keep_output:
        run["output_dir"] = paths.output
    else:
        shutil.rmtree(paths.output, ignore_errors=True)
    problems = []
    if run["records"] != case.rows:
        problems.append(f"{run['records']} records written, expected {case.rows}")
    if run["features"] != case.expected_features:
        problems.append(f"features {list(run['features'])}, expected {list(case.expected_features)}")
    if run["dead_letters"]:
        problems.append(f"{run['dead_letters']} dead letters")
    if problems:
        run["error"] = "; ".join(problems)
    return run


def summarize(case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": case.id, "dataset": case.dataset, "path": case.path,
        "compression": case.compression, "rows": case.rows, "input_bytes": case.input_bytes,
        "timing": case.timing, "runs": runs,
    }
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        entry["error"] = errors[0]
        return entry
    seconds = _median([r["seconds"] for r in runs])
    output_bytes = runs[-1]["output_bytes"]
    entry.update({
        "ok": True,
        "records": runs[-1]["records"],
        "records_all_runs": [r["records"] for r in runs],
        "features": list(runs[-1]["features"]),
        "seconds": seconds,
        "wall_seconds": _median([r["wall_seconds"] for r in runs]),
        "cpu_seconds": None if any(r["cpu_seconds"] is None for r in runs)
        else _median([r["cpu_seconds"] for r in runs]),
        "rows_per_s": case.rows / seconds if seconds > 0 else float("inf"),
        "output_bytes": output_bytes,
        "output_files": runs[-1]["files"],
        "output_dir": runs[-1].get("output_dir"),
        "mb_per_s": output_bytes / 1e6 / seconds if seconds > 0 else float("inf"),
        "peak_rss_bytes": int(_median([r["peak_rss_bytes"] for r in runs])),
        "peak_rss_mb": _median([r["peak_rss_bytes"] for r in runs]) / 2**20,
    })
    return entry
