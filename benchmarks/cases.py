"""The benchmark cases: which path runs on which dataset with which compression, and the
command line that runs it (our CLI, or a child running baselines from `baselines`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.data import ImageData, TabularData

__all__ = [
    "COMPRESSIONS", "IMAGE_FEATURE_NAMES", "STARTUP_CASE", "TABULAR_DATASETS", "TABULAR_PATHS",
    "Case", "child_groups", "image_cases", "in_shared_child", "ours_argv", "tabular_cases",
    "worker_argv",
]

RUN_SCRIPT = Path(__file__).resolve().with_name("run_benchmarks.py")
# Our CLI on one row per part file: its fixed cost (start-up, planning, workers, commit).
STARTUP_CASE = "startup/ours/gzip"
TABULAR_DATASETS = ("tf_tutorial", "wide")
TABULAR_PATHS = ("ours", "tf", "beam", "ceiling")
COMPRESSIONS = ("none", "gzip")
IMAGE_FEATURE_NAMES = (
    "image/channels", "image/class/label", "image/class/text", "image/encoded",
    "image/filename", "image/format", "image/height", "image/key/sha256", "image/width",
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmarked path on one dataset with one compression.

    Our CLI's cases carry its arguments (`ours`, without --output); the baselines' carry
    the cfg of their worker (`worker`, without the output folder and result file).
    """

    id: str
    dataset: str
    path: str
    compression: str
    rows: int
    input_bytes: int
    expected_features: tuple[str, ...]
    inputs: tuple[str, ...] = ()  # files or folders the case reads (warmed before it runs)
    ours: tuple[str, ...] = ()
    worker: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)

    @property
    def timing(self) -> str:
        """"process": the child's wall time; "region": the worker's timed work."""
        return "process" if self.worker is None else "region"


def ours_argv(case: Case, output: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "convert", *case.ours, "--output", output, "--quiet"]


def worker_argv(cfgs: Sequence[Mapping[str, Any]]) -> list[str]:
    """A child running the baselines of `cfgs` in turn (cfgs complete with output and result)."""
    return [sys.executable, str(RUN_SCRIPT), "--worker", json.dumps([dict(c) for c in cfgs])]


def tabular_cases(data: TabularData, worker_options: Mapping[str, Any] | None = None) -> list[Case]:
    """Every tabular path with every compression on `data`; `worker_options` go into each
    baseline's cfg (e.g. the Beam baseline's running mode)."""
    features = tuple(sorted(n for n, _ in data.columns))
    cases = []
    for path in TABULAR_PATHS:
        for compression in COMPRESSIONS:
            ours: tuple[str, ...] = ()
            worker = None
            if path == "ours":
                ours = ("--input", data.pattern, "--format", "csv", "--spec", data.spec_path)
                if compression != "none":
                    ours += ("--compression", compression)
            else:
                worker = {
                    "kind": path, "compression": compression, "columns": data.columns,
                    "files": data.files, "pattern": data.pattern, **(worker_options or {}),
                }
            cases.append(Case(
                id=f"{data.name}/{path}/{compression}", dataset=data.name, path=path,
                compression=compression, rows=data.rows, input_bytes=data.input_bytes,
                expected_features=features, inputs=tuple(data.files), ours=ours, worker=worker,
            ))
    return cases


def image_cases(data: ImageData) -> list[Case]:
    common = dict(dataset="images", compression="none", rows=data.count,
                  input_bytes=data.input_bytes, expected_features=IMAGE_FEATURE_NAMES,
                  inputs=(data.root,))
    return [
        Case(id="images/ours/none", path="ours", **common,
             ours=("--input", data.root, "--format", "image-folder")),
        Case(id="images/plain_loop/none", path="plain_loop", **common,
             worker={"kind": "plain_loop", "root": data.root}),
    ]


def in_shared_child(case: Case) -> Case:
    """For the smoke run: `case` of our CLI as a worker running the CLI in-process, so that
    it shares the baselines' process (the benchmark's own: `measure.run_cases(in_process=True)`;
    an interpreter and Beam's import saved per case); the start-up case stays a process of
    its own, whose whole time is its measure."""
    if case.worker is not None or case.id == STARTUP_CASE:
        return case
    return dataclasses.replace(case, worker={"kind": "ours", "argv": list(case.ours)})


def child_groups(cases: Sequence[Case], shared_worker: bool) -> list[list[Case]]:
    """The cases each process runs: one each, or (`shared_worker`) all workers in one process
    (the smoke run's own), first, since it is the longest. In it our CLI's runs
    (`in_shared_child`) go before the baselines: they fork, best done before TensorFlow (where
    not imported already) has started its threads."""
    if not shared_worker:
        return [[case] for case in cases]
    shared = sorted((case for case in cases if case.worker is not None),
                    key=lambda case: case.worker["kind"] != "ours")
    ours = [[case] for case in cases if case.worker is None]
    return ([shared] if shared else []) + ours
