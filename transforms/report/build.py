"""Building and writing an output's `report.html` (atomically, on any Beam filesystem). It is
derived from the committed output alone, so it can be rebuilt at any time; the manifest does
not list it."""

from __future__ import annotations

from transforms import fs
from transforms.output_files import REPORT_NAME
from transforms.report.collect import collect_report_data
from transforms.report.render import render_report

__all__ = ["REPORT_NAME", "build_report", "write_report"]

def build_report(output_dir: str) -> str:
    """The report page of the committed output at `output_dir` (raises as
    `collect_report_data`)."""
    return render_report(collect_report_data(output_dir))


def write_report(output_dir: str, destination: str | None = None) -> str:
    """Writes the report of `output_dir` to `destination` (default `output_dir/report.html`)
    and returns the path written."""
    page = build_report(output_dir)
    path = destination or fs.join_path(output_dir.rstrip("/") or "/", REPORT_NAME)
    fs.write_bytes_atomically(path, page.encode("utf-8"))
    return path
