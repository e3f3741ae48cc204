"""The core benchmark: today's conversion against another checkout's, and a killed run resumed.

    python -m benchmarks.resume_benchmark --rows 5000000 --rows 50000000 [--baseline DIR]
        [--repeats 2] [--work-dir DIR]

For each row count, the TF tutorial table as 8 CSV files (GZIP output, default local runner):

* `ours` and, with `--baseline` (a checkout of another commit, e.g. a `git worktree` of the
  previous main), `baseline`: full conversions, alternated `--repeats` times in one run,
  wall time, CPU seconds and peak RSS of the process tree (median of the repeats);
* `no statistics`: ours with `TFRECORD_PIPELINE_STATS=0`, for the share of the run the
  statistics cost;
* `killed at ~80 %`: ours, SIGKILLed (with its process group) once 80 % of its work units
  have completion records, then `resumed`: the same command again, timed; its output is
  checked against the full run's, shard for shard (sha256 in the manifests);
* `append 1 %`: then 1 % more rows in new files beside the inputs, converted with `--append`
  into the committed output, timed; the output must then count every row.

Results print as a Markdown table (for benchmarks/README.md) and go to `--out` as JSON.
Needs an otherwise idle machine and ~3x the data's size of free disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.data import tutorial_columns, write_tabular
from benchmarks.measure import REPO, byte_compile_project, measure

SEED = 11


def _command(checkout: Path, data, output: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(checkout)!r}); "
            "from pipeline.__main__ import main; sys.exit(main())",
            "convert", "--input", os.path.join(data.directory, "*.csv"), "--format", "csv",
            "--spec", data.spec_path, "--output", output, "--compression", "gzip", "--quiet"]


def _timed(name: str, command: list[str], work: str) -> dict:
    output = command[command.index("--output") + 1]
    shutil.rmtree(output, ignore_errors=True)
    result = measure(command, os.path.join(work, f"{name}.log"))
    if result.returncode != 0:
        raise SystemExit(f"{name} failed: see {work}/{name}.log")
    return {"wall": result.wall_seconds, "cpu": result.cpu_seconds, "rss_mb": result.peak_rss / 2**20}


def _units_recorded(output: str) -> int:
    """Completion records of the run writing `output` so far."""
    return sum(len(list((folder / "units").glob("*.unit"))) for folder in Path(output).glob(".tmp-*")
               if (folder / "units").is_dir())


def _planned_units(command: list[str]) -> int:
    """The work units the conversion plans (its --dry-run summary)."""
    done = subprocess.run([*command, "--dry-run"], cwd=REPO, capture_output=True, text=True, check=True)
    text = done.stdout
    return int(json.loads(text[text.index("{"):text.rindex("}") + 1])["work_units"])


def _kill_at(command: list[str], output: str, fraction: float, units: int) -> int:
    shutil.rmtree(output, ignore_errors=True)
    process = subprocess.Popen(command, cwd=REPO, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while process.poll() is None and _units_recorded(output) < fraction * units:
        time.sleep(0.01)
    if process.poll() is not None:
        raise SystemExit("the run ended before the kill point")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return _units_recorded(output)


def _shards(output: str) -> list:
    manifest = json.loads((Path(output) / "manifest.json").read_text())
    return [(shard["path"], shard["sha256"]) for shard in manifest["shards"]]


def _append_one_percent(command: list[str], data, work: str, rows: int) -> dict:
    """Adds a file of 1 % more rows beside the inputs of the committed output and times
    `--append`; checks the output then counts every row."""
    extra = write_tabular(f"extra_{rows}", rows // 100, tutorial_columns, work, SEED + 1)
    for path in extra.files:  # one more file per part: the glob takes them
        shutil.move(path, os.path.join(data.directory, "appended-" + os.path.basename(path)))
    appended = measure([*command, "--append"], os.path.join(work, f"appended_{rows}.log"))
    output = command[command.index("--output") + 1]
    counts = json.loads((Path(output) / "manifest.json").read_text())["counts"]
    if appended.returncode != 0 or counts["written"] != rows + rows // 100:
        raise SystemExit(f"the append to {rows} rows failed or lost rows: see {work}/appended_{rows}.log")
    return {"wall": appended.wall_seconds, "cpu": appended.cpu_seconds}


def run(rows: int, work: str, baseline: Path | None, repeats: int) -> dict:
    data = write_tabular(f"tutorial_{rows}", rows, tutorial_columns, work, SEED)
    # The plain form both checkouts read (a spec written today spells out keys older ones lack).
    Path(data.spec_path).write_text("features:\n" + "".join(
        f"  - {{name: {name}, type: {kind}}}\n" for name, kind in data.columns), encoding="utf-8")
    output = os.path.join(work, f"out_{rows}")
    ours = _command(REPO, data, output)
    runs: dict[str, list[dict]] = {"ours": [], "baseline": []}
    for _ in range(repeats):
        runs["ours"].append(_timed(f"ours_{rows}", ours, work))
        if baseline is not None:
            runs["baseline"].append(_timed(f"baseline_{rows}", _command(baseline, data, output), work))
    os.environ["TFRECORD_PIPELINE_STATS"] = "0"
    try:
        no_stats = _timed(f"ours_no_stats_{rows}", ours, work)
    finally:
        del os.environ["TFRECORD_PIPELINE_STATS"]
    full = _timed(f"ours_full_{rows}", ours, work)
    expected = _shards(output)
    units = _planned_units([arg for arg in ours if arg != "--quiet"])
    killed = _kill_at(ours, output, 0.8, units)
    resumed = measure(ours, os.path.join(work, f"resumed_{rows}.log"))
    if resumed.returncode != 0 or _shards(output) != expected:
        raise SystemExit(f"the resumed run of {rows} rows failed or differs from the full run")
    appended = _append_one_percent(ours, data, work, rows)
    shutil.rmtree(data.directory)
    median = {name: {key: statistics.median(run[key] for run in values) for key in values[0]}
              for name, values in runs.items() if values}
    return {"rows": rows, "input_bytes": data.input_bytes, **median, "full": full, "no_stats": no_stats,
            "work_units": units, "units_at_kill": killed,
            "resumed": {"wall": resumed.wall_seconds, "cpu": resumed.cpu_seconds}, "appended": appended}


def _markdown(results: Sequence[dict]) -> str:
    lines = ["| rows | ours s | baseline s | ours / baseline | ours RSS MB | baseline RSS MB "
             "| no-stats s | resumed s (after a kill at ~80 %) | resumed / full | append 1 % s "
             "| append / full |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        base = r.get("baseline")
        lines.append(
            f"| {r['rows']:,} | {r['ours']['wall']:.2f} | {base['wall'] if base else float('nan'):.2f} "
            f"| {r['ours']['wall'] / base['wall'] if base else float('nan'):.3f} "
            f"| {r['ours']['rss_mb']:.0f} | {base['rss_mb'] if base else float('nan'):.0f} "
            f"| {r['no_stats']['wall']:.2f} "
            f"| {r['resumed']['wall']:.2f} | {r['resumed']['wall'] / r['full']['wall']:.3f} "
            f"| {r['appended']['wall']:.2f} | {r['appended']['wall'] / r['full']['wall']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, action="append", help="rows (repeatable)")
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare with")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work-dir", help="where inputs and outputs go (default: a temporary folder)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "resume.json"))
    args = parser.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="resume-bench-")
    for checkout in filter(None, (REPO, args.baseline)):
        byte_compile_project(checkout)
    results = [run(rows, work, args.baseline, args.repeats) for rows in args.rows or [5_000_000]]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
