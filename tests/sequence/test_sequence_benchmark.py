"""The sequence benchmark runs end to end at a tiny size: our CLI and the TensorFlow loop write
the same sequences (the script compares them and fails otherwise)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_benchmark_smoke_run(tmp_path, capsys, monkeypatch):
    # The script's main, its smoke run: our CLI (through `pipeline.cli.run`), the TensorFlow
    # loop and the comparison of their outputs in this process, which has TensorFlow already
    # where the session's `tf` fixture ran (a child would import it again, ~4 s of CPU).
    from benchmarks.sequence_benchmark import main

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # what main sets, kept to this test
    main(["--rows", "3000", "--groups", "40", "--repeats", "1", "--work-dir", str(tmp_path),
          "--in-process"])
    assert "| 3,000 | 40 |" in capsys.readouterr().out
