#!/usr/bin/env python
"""Benchmark of rows grouped into SequenceExamples against a straightforward TensorFlow loop.

    python benchmarks/sequence_benchmark.py [--rows 1000000] [--groups 10000] [--files 4]
                                            [--repeats 3] [--in-process]

Writes `--rows` event rows (session, ts, page, dwell) of `--groups` sessions as CSV, spread
over `--files` files in shuffled order (every session has rows in several files), then times,
each in its own child process, GZIP output, `--repeats` times in turn (the median is
reported), as `run_benchmarks.py` does: our packages byte-compiled once first (as `pip install`
does; else a checkout without bytecode compiles them on every start), and before each run,
untimed, `os.sync()` and one read of the input (so no run pays for the previous one's writes
or a cold page cache):

* ours: `python -m pipeline convert ... --spec` with a `sequence:` section (group by session,
  order by ts, session as context), the whole process, start-up and imports included;
* tf: the loop a user writes: the csv module reads every file, rows go to a dict by session,
  each session is sorted by ts and built as a `tf.train.SequenceExample` (context + feature
  lists) and written with `tf.io.TFRecordWriter(..., "GZIP")`; timed after `import tensorflow`.

Both outputs are read back with `tf.io.parse_single_sequence_example` and compared as sets of
sequences, untimed, by the last run's TensorFlow child (this process imports no TensorFlow).
Prints a Markdown table of rows/s and the ratio ours/tf; see benchmarks/README.md.

`--in-process` is the smoke run (tests/sequence/test_sequence_benchmark.py): both paths and the
comparison run in this process (our CLI through `pipeline.cli.run`), whose TensorFlow a test
has usually imported already, instead of children that import Beam and TensorFlow again; its
times mean nothing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
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

from benchmarks.measure import byte_compile_project  # noqa: E402

SPEC = """\
features:
  - {name: session, type: int64, required: true}
  - {name: ts, type: int64, required: true}
  - {name: page, type: string}
  - {name: dwell, type: float}
sequence:
  group_by: [session]
  order_by: ts
  context: [session]
  feature_lists: [ts, page, dwell]
"""
PAGES = ["home", "search", "item", "cart", "checkout", "help"]


def write_events(work: str, rows: int, groups: int, files: int, seed: int = 7) -> str:
    """The CSV files; returns their glob. Row i belongs to session i % groups, at ts i // groups."""
    rng = random.Random(seed)
    order = list(range(rows))
    rng.shuffle(order)
    per_file = (rows + files - 1) // files
    for f in range(files):
        with open(os.path.join(work, f"events-{f}.csv"), "w") as handle:
            handle.write("session,ts,page,dwell\n")
            for i in order[f * per_file:(f + 1) * per_file]:
                handle.write(f"{i % groups},{i // groups},{PAGES[i % len(PAGES)]},{(i % 97) / 8}\n")
    with open(os.path.join(work, "spec.yaml"), "w") as handle:
        handle.write(SPEC)
    return os.path.join(work, "events-*.csv")


def tf_loop(pattern: str, output: str) -> float:
    """The user's loop; returns the seconds after `import tensorflow`."""
    import csv

    import tensorflow as tf

    start = time.perf_counter()
    sessions: dict[int, list[tuple[int, str, float]]] = {}
    for path in sorted(glob.glob(pattern)):
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                sessions.setdefault(int(row["session"]), []).append(
                    (int(row["ts"]), row["page"], float(row["dwell"])))
    with tf.io.TFRecordWriter(output, "GZIP") as writer:
        for session, steps in sessions.items():
            steps.sort()
            example = tf.train.SequenceExample()
            example.context.feature["session"].int64_list.value.append(session)
            lists = example.feature_lists.feature_list
            for ts, page, dwell in steps:
                lists["ts"].feature.add().int64_list.value.append(ts)
                lists["page"].feature.add().bytes_list.value.append(page.encode())
                lists["dwell"].feature.add().float_list.value.append(dwell)
            writer.write(example.SerializeToString())
    return time.perf_counter() - start


def _sequences(files: list[str]) -> set:
    """Every sequence as a comparable tuple, read back with TensorFlow."""
    import tensorflow as tf

    context = {"session": tf.io.FixedLenFeature([], tf.int64)}
    lists = {"ts": tf.io.FixedLenSequenceFeature([], tf.int64),
             "page": tf.io.FixedLenSequenceFeature([], tf.string),
             "dwell": tf.io.FixedLenSequenceFeature([], tf.float32)}
    out = set()
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        ctx, seq = tf.io.parse_single_sequence_example(record, context, lists)
        out.add((int(ctx["session"]), tuple(seq["ts"].numpy().tolist()),
                 tuple(seq["page"].numpy().tolist()), tuple(seq["dwell"].numpy().tolist())))
    return out


def _settle(pattern: str) -> None:
    """Untimed, before each run: flush earlier writes, then read the input once."""
    os.sync()
    for path in glob.glob(pattern):
        with open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass


def _ours(pattern: str, work: str, ours_dir: str, in_process: bool = False) -> float:
    shutil.rmtree(ours_dir, ignore_errors=True)
    argv = ["convert", "--input", pattern, "--format", "csv", "--spec", os.path.join(work, "spec.yaml"),
            "--output", ours_dir, "--compression", "gzip", "--quiet"]
    start = time.perf_counter()
    if in_process:
        from pipeline.cli import run

        if code := run(argv):
            raise SystemExit(f"our CLI exited with {code}")
    else:
        subprocess.run([sys.executable, "-m", "pipeline", *argv], check=True, cwd=REPO)
    return time.perf_counter() - start


def _theirs(pattern: str, tf_file: str, compare_with: list[str] | None = None,
            in_process: bool = False) -> float:
    """The TF loop in a child (or this process); `compare_with`: our shards, which it then
    compares with its output (untimed), exiting with an error where they differ."""
    if in_process:
        return _worker(pattern, tf_file, compare_with)
    done = subprocess.run([sys.executable, __file__, "--worker",
                           json.dumps([pattern, tf_file, compare_with])],
                          capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        raise SystemExit(done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                         else f"the TF loop exited with {done.returncode}")
    return float(done.stdout.strip().splitlines()[-1])


def _worker(pattern: str, tf_file: str, compare_with: list[str] | None) -> float:
    seconds = tf_loop(pattern, tf_file)
    if compare_with is not None and _sequences(compare_with) != _sequences([tf_file]):
        raise SystemExit("the two outputs hold different sequences")
    return seconds


def _our_shards(ours_dir: str) -> list[str]:
    with open(os.path.join(ours_dir, "manifest.json")) as handle:
        return [os.path.join(ours_dir, s["path"]) for s in json.load(handle)["shards"]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--in-process", action="store_true",
                        help="smoke run: both paths in this process, not in children; times mean nothing")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(_worker(*json.loads(args.worker)))
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    byte_compile_project()
    work = args.work_dir or tempfile.mkdtemp(prefix="sequence-bench-")
    pattern = write_events(work, args.rows, args.groups, args.files)
    ours_dir, tf_file = os.path.join(work, "ours"), os.path.join(work, "tf.tfrecord.gz")
    times: dict[str, list[float]] = {"ours": [], "tf": []}
    repeats = max(1, args.repeats)
    for repeat in range(repeats):
        _settle(pattern)
        times["ours"].append(_ours(pattern, work, ours_dir, args.in_process))
        _settle(pattern)
        last = repeat == repeats - 1
        times["tf"].append(_theirs(pattern, tf_file, _our_shards(ours_dir) if last else None,
                                   args.in_process))
    ours, theirs = statistics.median(times["ours"]), statistics.median(times["tf"])
    print(f"runs (s): ours {', '.join(f'{t:.2f}' for t in times['ours'])}; "
          f"TF loop {', '.join(f'{t:.2f}' for t in times['tf'])}", file=sys.stderr)
    print(f"| rows | sequences | ours (s) | ours rows/s | TF loop (s) | TF rows/s | ours/TF |\n"
          f"|---:|---:|---:|---:|---:|---:|---:|\n"
          f"| {args.rows:,} | {args.groups:,} | {ours:.2f} | {args.rows / ours:,.0f} | "
          f"{theirs:.2f} | {args.rows / theirs:,.0f} | {theirs / ours:.2f}x |")


if __name__ == "__main__":
    main()
