"""The benchmark report: ratios against the baselines, memory growth, the issue's targets,
the machine, and the results as a text table (stdout) and Markdown (beside the JSON)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

from benchmarks.cases import COMPRESSIONS, STARTUP_CASE, TABULAR_DATASETS
from benchmarks.data import IMAGE_QUALITY, IMAGE_SIZE, NUM_PARTS

__all__ = [
    "compute_memory", "compute_ratios", "compute_targets", "format_markdown", "format_text",
    "machine_info", "startup_seconds",
]

# The issue's targets: (ratio key, compression, minimum) for every tabular dataset.
TARGETS = (
    ("ours/beam", "gzip", 20.0),
    ("ours/tf", "gzip", 8.0),
    ("ours/ceiling", "gzip", 0.5),
)
IMAGE_TARGET = 0.5
MEMORY_GROWTH_TARGET_PCT = 10.0


def startup_seconds(results: dict[str, dict]) -> float | None:
    """Our CLI's fixed cost: its median time for one row per part file."""
    entry = results.get(STARTUP_CASE)
    return entry["seconds"] if entry and entry.get("ok") else None


def compute_ratios(results: dict[str, dict], mode: str = "timed") -> dict[str, dict[str, float]]:
    """ours / other rows/s, per dataset and compression.

    mode "timed": each path's reported rate (ours: whole process; others: timed region).
    "wall": every path's whole child process (start-up and imports included).
    "excluding_startup": ours' seconds minus `startup_seconds` (others as "timed"), i.e.
    our throughput once running; None where that leaves no time.
    """
    ratios: dict[str, dict[str, float]] = {}
    startup = startup_seconds(results)

    def rate(key: str) -> float | None:
        entry = results.get(key)
        if not (entry and entry.get("ok")):
            return None
        if mode == "wall":
            return entry["rows"] / entry["wall_seconds"]
        if mode == "excluding_startup" and entry["path"] == "ours":
            if startup is None or entry["seconds"] <= startup:
                return None
            return entry["rows"] / (entry["seconds"] - startup)
        return entry["rows_per_s"]

    for dataset in TABULAR_DATASETS:
        for compression in COMPRESSIONS:
            ours = rate(f"{dataset}/ours/{compression}")
            group = {}
            for other in ("tf", "beam", "ceiling"):
                theirs = rate(f"{dataset}/{other}/{compression}")
                if ours is not None and theirs:
                    group[f"ours/{other}"] = ours / theirs
            if group:
                ratios[f"{dataset}/{compression}"] = group
    ours, plain = rate("images/ours/none"), rate("images/plain_loop/none")
    if ours is not None and plain:
        ratios["images/none"] = {"ours/plain_loop": ours / plain}
    return ratios


def compute_memory(results: dict[str, dict]) -> dict[str, Any] | None:
    small, large = results.get("memory_small/ours/gzip"), results.get("tf_tutorial/ours/gzip")
    if not (small and large and small.get("ok") and large.get("ok")):
        return None
    growth = (large["peak_rss_bytes"] - small["peak_rss_bytes"]) / small["peak_rss_bytes"] * 100
    return {
        "small": small["id"], "large": large["id"],
        "rows_small": small["rows"], "rows_large": large["rows"],
        "peak_rss_small_mb": small["peak_rss_mb"], "peak_rss_large_mb": large["peak_rss_mb"],
        "growth_pct": growth,
    }


def compute_targets(ratios: dict, memory: dict | None) -> list[dict[str, Any]]:
    targets = []
    for key, compression, minimum in TARGETS:
        for dataset in TABULAR_DATASETS:
            value = ratios.get(f"{dataset}/{compression}", {}).get(key)
            if value is not None:
                targets.append({"name": f"{dataset} {compression} {key}", "value": value,
                                "target": f">= {minimum:g}", "met": value >= minimum})
    value = ratios.get("images/none", {}).get("ours/plain_loop")
    if value is not None:
        targets.append({"name": "images ours/plain_loop", "value": value,
                        "target": f">= {IMAGE_TARGET:g}", "met": value >= IMAGE_TARGET})
    if memory is not None:
        targets.append({"name": "memory: peak RSS growth for 10x rows (%)",
                        "value": memory["growth_pct"], "target": f"< {MEMORY_GROWTH_TARGET_PCT:g}",
                        "met": memory["growth_pct"] < MEMORY_GROWTH_TARGET_PCT})
    return targets


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_bytes": ram,
        "ram_gib": round(ram / 2**30, 1) if ram else None,
        "os": platform.platform(),
        "python": platform.python_version(),
        "apache_beam": _version("apache-beam"),
        "tensorflow": _version("tensorflow-cpu", "tensorflow"),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "protobuf": _version("protobuf"),
        "isal": _version("isal"),
        # Beam's gcp extra (our `dataflow` extra) adds ~0.25 s to every start of our CLI.
        "beam_gcp_extra": _version("google-cloud-dataflow-client") is not None,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _fmt_rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.1f}"


def result_rows(report: dict) -> list[list[str]]:
    rows = []
    for entry in report["results"]:
        if not entry.get("ok"):
            rows.append([entry["id"], f"{entry['rows']:,}", "FAILED", "", "", "", "", ""])
            continue
        rows.append([
            entry["id"], f"{entry['rows']:,}", f"{entry['seconds']:.2f}", _fmt_rate(entry["rows_per_s"]),
            f"{entry['mb_per_s']:.1f}", f"{entry['output_bytes'] / 1e6:.1f}", f"{entry['peak_rss_mb']:.0f}",
            f"{entry['records']:,}",
        ])
    return rows


RESULT_HEADER = ["path", "rows", "seconds", "rows/s", "MB/s out", "MB out", "peak RSS MB", "records"]


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


RATIO_HEADER = ["dataset/compression", "ratio (rows/s)", "value", "ours without start-up"]


def ratio_rows(report: dict) -> list[list[str]]:
    rows = []
    for group, values in report["ratios"].items():
        for key, value in values.items():
            steady = report["ratios_excluding_startup"].get(group, {}).get(key)
            rows.append([group, key, f"{value:.2f}x", "-" if steady is None else f"{steady:.2f}x"])
    return rows


def target_rows(report: dict) -> list[list[str]]:
    return [[t["name"], f"{t['value']:.2f}", t["target"], "met" if t["met"] else "NOT met"]
            for t in report["targets"]]


def format_text(report: dict) -> str:
    parts = [_text_table(RESULT_HEADER, result_rows(report))]
    if report["ratios"]:
        parts.append(_text_table(RATIO_HEADER, ratio_rows(report)))
        if report["startup_seconds"] is not None:
            parts.append(f"our CLI's fixed cost (one row per part file): {report['startup_seconds']:.1f} s")
    memory = report.get("memory")
    if memory:
        parts.append(
            f"memory: ours GZIP peak RSS {memory['peak_rss_small_mb']:.0f} MB at {memory['rows_small']:,} "
            f"rows, {memory['peak_rss_large_mb']:.0f} MB at {memory['rows_large']:,} rows "
            f"(growth {memory['growth_pct']:+.1f} %)"
        )
    if report["targets"]:
        parts.append(_text_table(["target", "value", "goal", ""], target_rows(report)))
    failed = [e for e in report["results"] if not e.get("ok")]
    for entry in failed:
        parts.append(f"FAILED {entry['id']}: {entry.get('error', 'not run')}")
    return "\n\n".join(parts)


def format_markdown(report: dict) -> str:
    m, c = report["machine"], report["config"]
    how = [f"median of {c['repeats']} runs"]
    if c["jobs"] > 1:
        how.append(f"{c['jobs']} cases at once")
    if c["tiny"]:
        how.append("tiny sizes: not a measurement")
    if c.get("shared_worker"):
        how.append(f"the baselines and our CLI's cases but start-up in the script's process, Beam's in "
                   f"{c['beam_running_mode']} mode")
    lines = [
        "# tfrecord-pipeline benchmarks",
        "",
        f"Measured {report['created_at']} with `python benchmarks/run_benchmarks.py"
        f"{' --tiny' if c['tiny'] else ''}` ({', '.join(how)}).",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), RAM {m['ram_gib']} GiB",
        f"- {m['os']}; Python {m['python']}, Apache Beam {m['apache_beam']}, TensorFlow {m['tensorflow']}, "
        f"pyarrow {m['pyarrow']}, numpy {m['numpy']}, protobuf {m['protobuf']}, isal {m['isal']}; "
        f"Beam's gcp extra {'installed' if m.get('beam_gcp_extra') else 'not installed'}",
        f"- Load average at start: {m['load_average_at_start']}",
        f"- Data: TF tutorial {c['rows_tf']:,} rows, 20 columns {c['rows_wide']:,} rows "
        f"(CSV, {NUM_PARTS} part files each), {c['images']:,} JPEGs {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]} "
        f"(quality {IMAGE_QUALITY}; {report['datasets']['images'].get('distinct', c['images']):,} "
        f"distinct, the rest byte copies)",
        "",
        "`ours` is the CLI's whole process (start-up and imports included); the other paths time "
        "their work inside a child process (after importing TensorFlow/Beam). MB/s counts output "
        "bytes. Peak RSS is summed over the path's process tree (Beam workers included).",
        "",
        _md_table(RESULT_HEADER, result_rows(report)),
        "",
    ]
    if report["ratios"]:
        lines += ["## Ratios (rows/s)", "", _md_table(RATIO_HEADER, ratio_rows(report)), ""]
        if report["startup_seconds"] is not None:
            lines += [
                "\"Ours without start-up\" subtracts our CLI's fixed cost, "
                f"{report['startup_seconds']:.1f} s (`{STARTUP_CASE}`: one row per part file), from "
                "ours' time; the targets use the end-to-end value.",
                "",
            ]
    memory = report.get("memory")
    if memory:
        lines += [
            "## Memory",
            "",
            f"Ours, TF tutorial data, GZIP: peak RSS {memory['peak_rss_small_mb']:.0f} MB at "
            f"{memory['rows_small']:,} rows and {memory['peak_rss_large_mb']:.0f} MB at "
            f"{memory['rows_large']:,} rows: growth {memory['growth_pct']:+.1f} %.",
            "",
        ]
    if report["targets"]:
        table = _md_table(["target", "value", "goal", ""], target_rows(report))
        lines += ["## Targets (issue 6)", "", table, ""]
    failed = [e for e in report["results"] if not e.get("ok")]
    if failed:
        lines += ["## Failures", ""]
        lines += [f"- `{e['id']}`: {(e.get('error') or 'failed').splitlines()[0]}" for e in failed]
    return "\n".join(lines).rstrip() + "\n"
