#!/usr/bin/env python
"""Benchmarks of tfrecord-pipeline against what users would otherwise write.

    python benchmarks/run_benchmarks.py [--tabular-rows-tf N] [--tabular-rows-wide N]
        [--images N] [--out DIR_OR_FILE.json] [--repeats 3] [--tiny] [--only SUBSTR,...]

Generates deterministic inputs (seeded numpy) into a work folder, then runs every path
back to back, each in its own child process of this one, round robin over `--repeats`
rounds (the median is reported):

* TF tutorial data (4 features) and a 20-column table, as CSV split into 8 part files
  (the same files feed every path):
  - ours: `python -m pipeline convert --format csv` end to end (default local runner),
    uncompressed and GZIP;
  - tf: TensorFlow's tutorial writer, csv module -> tf.train.Example per row ->
    tf.io.TFRecordWriter (NONE and GZIP);
  - beam: ReadFromText -> parse line -> tf.train.Example per row -> WriteToTFRecord on
    the FnApiRunner in multi_processing mode with 2 workers (NONE and GZIP);
  - ceiling: pyarrow CSV read -> our vectorised encoder, framing included -> one file,
    single process (NONE and GZIP).
* 640x480 JPEGs under ROOT/<label>/ (2 labels): ours (`--format image-folder`, keep
  bytes) against a plain loop that reads each file, parses its header, builds the same
  Example with the reference encoder, frames and writes it.
* Memory: ours (TF tutorial data, GZIP) at N/10 and N rows; growth of the peak RSS of
  the whole process tree.

Every run's output is read back (CRCs checked) and its records counted; a path whose
count differs from the input rows is reported as failed. Results go to `--out` as JSON
and beside it as Markdown (same name, `.md`). See benchmarks/README.md.

`--tiny` is the smoke run: it proves every path works, it measures nothing. To stay quick it
runs all baselines and our CLI's cases in turn in this process (TensorFlow and Beam imported
once, not again by a child; only the start-up case runs our CLI as a process of its own) and
Beam's in_memory.

`--scale` runs the scale benchmark instead (`benchmarks/scale.py`: large inputs, cores busy,
Dask workers, memory at 10x rows).

This module is the command line; the parts live beside it: `data` (inputs), `baselines`
(the other paths), `cases`, `measure` (running and checking a case) and `report`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(REPO))

# After the path set-up above: the parts are the `benchmarks` package of the checkout.
from benchmarks.baselines import BEAM_WORKERS, CEILING_BATCH_ROWS, run_workers  # noqa: E402
from benchmarks.cases import Case, child_groups, image_cases, in_shared_child, tabular_cases  # noqa: E402
from benchmarks.data import (  # noqa: E402
    NUM_PARTS,
    tutorial_columns,
    wide_columns,
    write_images,
    write_tabular,
)
from benchmarks.measure import RSS_POLL_SECONDS, byte_compile_project, run_cases, summarize  # noqa: E402
from benchmarks.report import (  # noqa: E402
    compute_memory,
    compute_ratios,
    compute_targets,
    format_markdown,
    format_text,
    machine_info,
    startup_seconds,
)

__all__ = ["main", "parse_args"]

RESULTS_SCHEMA = 1
FULL = {
    "rows_tf": 2_000_000, "rows_wide": 500_000, "images": 20_000, "repeats": 3, "jobs": 1,
    "shared_worker": False, "beam_running_mode": "multi_processing", "beam_workers": BEAM_WORKERS,
}
# Tiny proves every path works (CI); at this size start-up dominates, so the cases may overlap,
# and the baselines and our CLI's cases run in this process: TensorFlow's import (~4 s; a test
# calling `main` has it already), Beam's worker processes (each importing TensorFlow again) and
# one interpreter per case of our CLI (~1.5 s) would otherwise be most of the run.
TINY = {
    "rows_tf": 500, "rows_wide": 500, "images": 8, "repeats": 1, "jobs": 2,
    "shared_worker": True, "beam_running_mode": "in_memory", "beam_workers": 1,
}
DEFAULT_OUT = REPO / "benchmarks" / "results" / "latest.json"
SEED = 6


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabular-rows-tf", type=int, help=f"TF tutorial rows (default {FULL['rows_tf']:,})")
    parser.add_argument("--tabular-rows-wide", type=int,
                        help=f"20-column table rows (default {FULL['rows_wide']:,})")
    parser.add_argument("--images", type=int, help=f"JPEGs (default {FULL['images']})")
    parser.add_argument("--repeats", type=int,
                        help=f"runs per path, median reported (default {FULL['repeats']})")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="JSON results file, or a folder for latest.json (the .md goes beside it)")
    parser.add_argument("--tiny", action="store_true",
                        help=f"tiny sizes ({TINY['rows_tf']:,} rows, {TINY['images']} images, 1 run): "
                             "the CI smoke run")
    parser.add_argument("--work-dir", help="where inputs and outputs go (default: a temporary folder)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the work folder: inputs, logs and each path's last output")
    parser.add_argument("--only", help="comma-separated substrings; run only cases whose id contains one "
                                      "(e.g. 'tf_tutorial/ours,ceiling')")
    parser.add_argument("--jobs", type=int,
                        help="cases run at once (default 1; 2 with --tiny). Above 1 the cases disturb "
                             "each other's timings: for smoke runs only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL
    for key, attr in (("rows_tf", "tabular_rows_tf"), ("rows_wide", "tabular_rows_wide"),
                      ("images", "images"), ("repeats", "repeats"), ("jobs", "jobs")):
        if getattr(args, attr) is None:
            setattr(args, attr, sizes[key])
        if getattr(args, attr) < 1 or (key.startswith("rows") and getattr(args, attr) < 10):
            parser.error(f"--{attr.replace('_', '-')} is too small")
    for key in ("shared_worker", "beam_running_mode", "beam_workers"):
        setattr(args, key, sizes[key])
    return args


def _out_paths(out: str) -> tuple[Path, Path]:
    path = Path(out)
    if path.suffix.lower() != ".json":
        path = path / "latest.json"
    return path, path.with_suffix(".md")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--scale" in argv:  # the scale benchmark has flags of its own (benchmarks/scale.py)
        from benchmarks.scale import main as scale_main

        return scale_main([arg for arg in argv if arg != "--scale"])
    args = parse_args(argv)
    if args.worker:
        run_workers(json.loads(args.worker))
        return 0
    json_path, md_path = _out_paths(args.out)
    work = args.work_dir or tempfile.mkdtemp(prefix="tfrecord-bench-")
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    started = time.perf_counter()
    machine = machine_info()
    byte_compile_project()
    try:
        print(f"generating data in {work} ...", flush=True)
        gen_start = time.perf_counter()
        tutorial = write_tabular("tf_tutorial", args.tabular_rows_tf, tutorial_columns, work, SEED)
        small = write_tabular("memory_small", max(1, args.tabular_rows_tf // 10), tutorial_columns,
                              work, SEED + 1)
        wide = write_tabular("wide", args.tabular_rows_wide, wide_columns, work, SEED + 2)
        startup = write_tabular("startup", NUM_PARTS, tutorial_columns, work, SEED + 4)
        images = write_images(args.images, os.path.join(work, "images"), SEED + 3)
        generation_seconds = time.perf_counter() - gen_start

        worker_options = {"beam_running_mode": args.beam_running_mode, "beam_workers": args.beam_workers}
        cases = (tabular_cases(tutorial, worker_options) + tabular_cases(wide, worker_options)
                 + image_cases(images))
        for extra in (small, startup):
            cases += [c for c in tabular_cases(extra) if c.path == "ours" and c.compression == "gzip"]
        if args.only:
            wanted = [s.strip() for s in args.only.split(",") if s.strip()]
            cases = [c for c in cases if any(s in c.id for s in wanted)]
        if args.shared_worker:
            cases = [in_shared_child(c) for c in cases]
        runs: dict[str, list[dict]] = {c.id: [] for c in cases}
        # Round robin over the repeats: slow drift of a shared machine hits every path alike.
        for repeat in range(args.repeats):
            keep = args.keep_work and repeat == args.repeats - 1

            def one(group: list[Case], repeat: int = repeat, keep: bool = keep) -> list[dict[str, Any]]:
                print(f"[{time.perf_counter() - started:7.1f}s] run {repeat + 1}/{args.repeats}: "
                      f"{', '.join(case.id for case in group)}", flush=True)
                return run_cases(group, work, repeat, keep_output=keep,
                                 in_process=args.shared_worker and group[0].worker is not None)

            groups = child_groups(cases, args.shared_worker)
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                for group, group_runs in zip(groups, pool.map(one, groups), strict=True):
                    for case, run in zip(group, group_runs, strict=True):
                        runs[case.id].append(run)
        results = {c.id: summarize(c, runs[c.id]) for c in cases}
    finally:
        if not args.keep_work and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    ratios = compute_ratios(results)
    memory = compute_memory(results)
    report = {
        "schema": RESULTS_SCHEMA,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "config": {
            "tiny": args.tiny, "repeats": args.repeats, "jobs": args.jobs, "rows_tf": args.tabular_rows_tf,
            "rows_wide": args.tabular_rows_wide, "rows_memory_small": small.rows, "images": args.images,
            "parts": NUM_PARTS, "seed": SEED, "beam_workers": args.beam_workers,
            "beam_running_mode": args.beam_running_mode, "shared_worker": args.shared_worker,
            "ceiling_batch_rows": CEILING_BATCH_ROWS, "rss_poll_seconds": RSS_POLL_SECONDS,
            "only": args.only,
        },
        "datasets": {
            d.name: {"rows": d.rows, "columns": [list(c) for c in d.columns], "files": len(d.files),
                     "input_bytes": d.input_bytes}
            for d in (tutorial, wide, small, startup)
        } | {"images": {"rows": images.count, "labels": list(images.labels),
                        "input_bytes": images.input_bytes, "distinct": images.distinct}},
        "generation_seconds": generation_seconds,
        "total_seconds": time.perf_counter() - started,
        "results": list(results.values()),
        "ratios": ratios,
        "startup_seconds": startup_seconds(results),
        "ratios_excluding_startup": compute_ratios(results, "excluding_startup"),
        "ratios_wall_clock": compute_ratios(results, "wall"),
        "memory": memory,
        "targets": compute_targets(ratios, memory),
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(format_markdown(report), encoding="utf-8")
    print()
    print(format_text(report))
    print(f"\nwrote {json_path} and {md_path} ({report['total_seconds']:.0f} s)")
    return 0 if all(e.get("ok") for e in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
