"""The sequence benchmark runs end to end at a tiny size: our CLI and the TensorFlow loop write
the same sequences (the script compares them and fails otherwise)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_benchmark_smoke_run(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sequence_benchmark.py"),
                           "--rows", "3000", "--groups", "40", "--repeats", "1", "--work-dir",
                           str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| 3,000 | 40 |" in done.stdout
