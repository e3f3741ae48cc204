"""The sequence benchmark runs end to end at a tiny size: our CLI and the TensorFlow loop write
the same sequences (the script compares them and fails otherwise)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_benchmark_smoke_run(tmp_path, capsys, monkeypatch):
    # The script's main in this process: its children run our CLI and the TensorFlow loop
    # (the script as a plain script, `--worker`), which also compares the outputs.
    from benchmarks.sequence_benchmark import main

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # what main sets, kept to this test
    main(["--rows", "3000", "--groups", "40", "--repeats", "1", "--work-dir", str(tmp_path)])
    assert "| 3,000 | 40 |" in capsys.readouterr().out
