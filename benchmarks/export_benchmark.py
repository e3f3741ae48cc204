#!/usr/bin/env python
"""Benchmark of `tfrecord-pipeline export --to parquet` against what a user writes today.

    python benchmarks/export_benchmark.py [--rows 1000000] [--work-dir DIR] [--repeats 1]

Generates the TF tutorial data (`benchmarks/data.py`: int, int, string, float) as CSV, converts
it with our CLI (untimed) uncompressed and GZIP, then times, each in its own child process:

* ours: `python -m pipeline export OUT --to parquet FILE`, the whole process (start-up and
  imports included), and `export_command` inside a child after its imports ("in-process");
* tf: `tf.data.TFRecordDataset(shards).batch(65536)` -> `tf.io.parse_example` (FixedLenFeature
  per column) -> `pyarrow.table` -> `pyarrow.parquet.ParquetWriter`, after `import tensorflow`.

Both Parquet files are read back and compared: same rows, same values (TF's strings as
binary). Prints a Markdown table of rows/s and the ratio ours/tf. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(REPO))

from benchmarks.data import tutorial_columns, write_tabular  # noqa: E402
from benchmarks.measure import byte_compile_project  # noqa: E402

BATCH_ROWS = 65_536
COMPRESSIONS = ("none", "gzip")
_TF_TYPES = {"int64": "int64", "float": "float32", "string": "string"}


def _tf_export(output_dir: str, target: str, columns: list[list[str]], compression: str) -> float:
    """The user's way today; returns the seconds after `import tensorflow`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tensorflow as tf

    start = time.perf_counter()
    with open(os.path.join(output_dir, "manifest.json")) as handle:
        shards = [os.path.join(output_dir, s["path"]) for s in json.load(handle)["shards"]]
    features = {name: tf.io.FixedLenFeature([], getattr(tf, _TF_TYPES[kind])) for name, kind in columns}
    dataset = tf.data.TFRecordDataset(shards, compression_type="GZIP" if compression == "gzip" else "")
    writer = None
    for batch in dataset.batch(BATCH_ROWS):
        parsed = tf.io.parse_example(batch, features)
        table = pa.table({name: pa.array(parsed[name].numpy(), pa.binary() if kind == "string" else None)
                          for name, kind in columns})
        if writer is None:
            writer = pq.ParquetWriter(target, table.schema)
        writer.write_table(table)
    writer.close()
    return time.perf_counter() - start


def _ours_in_process(output_dir: str, target: str) -> float:
    import contextlib
    import io

    from pipeline.export import export_command

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        export_command(output_dir, "parquet", target)
    return time.perf_counter() - start


def _child(argv: list[str]) -> float:
    """Runs this script as a worker (`--worker JSON`); returns the seconds it reports."""
    completed = subprocess.run([sys.executable, __file__, "--worker", json.dumps(argv)],
                               capture_output=True, text=True, cwd=REPO)
    if completed.returncode:
        raise SystemExit(f"worker {argv[0]} failed:\n{completed.stderr[-3000:]}")
    return float(completed.stdout.strip().splitlines()[-1])


def _ours_process(output_dir: str, target: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline", "export", output_dir, "--to", "parquet", target],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _same_tables(ours: str, theirs: str) -> None:
    import pyarrow.parquet as pq

    a, b = pq.read_table(ours), pq.read_table(theirs)
    b = b.select(a.column_names)
    if a.num_rows != b.num_rows or not a.equals(b.cast(a.schema)):
        raise SystemExit(f"exports differ: {ours} vs {theirs}")


def _convert(data, compression: str, output: str) -> None:
    subprocess.run([sys.executable, "-m", "pipeline", "convert", "--input", data.pattern,
                    "--format", "csv", "--spec", data.spec_path, "--output", output,
                    "--compression", compression, "--quiet"], check=True, cwd=REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs per path; the median is reported")
    parser.add_argument("--work-dir", default=None, help="kept when given; else a temporary folder")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, *rest = json.loads(args.worker)
        seconds = _tf_export(*rest) if name == "tf" else _ours_in_process(*rest)
        print(seconds)
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    byte_compile_project()
    work = args.work_dir or tempfile.mkdtemp(prefix="export-bench-")
    try:
        data = write_tabular("tf_tutorial", args.rows, tutorial_columns, work, seed=1)
        columns = [list(column) for column in data.columns]
        results = []
        for compression in COMPRESSIONS:
            output = os.path.join(work, f"tfrecords-{compression}")
            shutil.rmtree(output, ignore_errors=True)
            _convert(data, compression, output)
            paths = {p: os.path.join(work, f"{p}-{compression}.parquet") for p in ("ours", "in", "tf")}
            times: dict[str, list[float]] = {p: [] for p in paths}
            for _ in range(args.repeats):
                times["ours"].append(_ours_process(output, paths["ours"]))
                times["in"].append(_child(["ours", output, paths["in"]]))
                times["tf"].append(_child(["tf", output, paths["tf"], columns, compression]))
            _same_tables(paths["ours"], paths["tf"])
            median = {p: statistics.median(t) for p, t in times.items()}
            results.append((compression, median, sum(os.path.getsize(f) for f in
                                                      glob.glob(os.path.join(output, "*.tfrecord*")))))
        print(f"\n{args.rows:,} rows of the TF tutorial data, median of {args.repeats} run(s)\n")
        print("| shards | input MB | ours (CLI process) rows/s | ours (in-process) rows/s | "
              "TF + pyarrow rows/s | ours/TF (process) | ours/TF (in-process) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for compression, median, size in results:
            rate = {p: args.rows / s for p, s in median.items()}
            print(f"| {compression} | {size / 1e6:.1f} | {rate['ours']:,.0f} | {rate['in']:,.0f} | "
                  f"{rate['tf']:,.0f} | {rate['ours'] / rate['tf']:.2f} | {rate['in'] / rate['tf']:.2f} |")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
