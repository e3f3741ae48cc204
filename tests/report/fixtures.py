"""Test fixtures for the report: real outputs converted from the sample data (their
`stats.json` is the conversion's own), and a `drift.json` of the fixed shape with one change of
every kind (a real comparison of the sample data with itself finds none)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.cli import run
from tests.helpers import in_memory_args

SAMPLE = Path(__file__).resolve().parents[2] / "pipeline" / "sample_data"


def convert_tabular(out: Path, *extra: str) -> Path:
    args = ["convert", "--input", str(SAMPLE / "tabular" / "*.csv"), "--format", "csv",
            "--spec", str(SAMPLE / "tabular" / "customers.spec.yaml"), "--output", str(out),
            *extra, *in_memory_args()]
    assert run(args) == 0
    return out


def convert_images(tmp_path: Path, *extra: str) -> Path:
    """The sample class folders plus two bad files (dead letters, committed), converted."""
    images = tmp_path / "images"
    shutil.copytree(SAMPLE / "images", images)
    (images / "cat" / "bad.jpg").write_bytes(b"not an image at all")
    jpeg = (SAMPLE / "images" / "cat" / "chelsea.jpg").read_bytes()
    (images / "coffee" / "truncated.jpg").write_bytes(jpeg[:300])
    out = tmp_path / "out"
    args = ["convert", "--format", "image-folder", "--input", str(images), "--output", str(out),
            "--max-error-rate", "1", *extra, *in_memory_args()]
    assert run(args) == 0
    return out


DRIFT = {
    "compared_to": "out/2026-05-03",
    "schema": [{"feature": "loyalty", "change": "added", "before": None, "after": "int64"},
               {"feature": "fax", "change": "missing", "before": "bytes", "after": None},
               {"feature": "age", "change": "kind_changed", "before": "int64", "after": "float"}],
    "presence": [{"feature": "tags", "split": "train", "before": 0.98, "after": 0.75}],
    "distribution": [{"feature": "income", "split": "train", "psi": 0.41, "threshold": 0.2},
                     {"feature": "score", "split": "train", "psi": 0.03, "threshold": 0.2}],
    "labels": {"added": ["coffee"], "vanished": ["dog"]},
}


def write_drift(out: Path) -> None:
    (out / "drift.json").write_text(json.dumps(DRIFT))
