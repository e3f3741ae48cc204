"""`convert --dry-run` with a `sequence:` spec estimates sequences (records), not rows: exact
when the sample covers the input, extrapolated from rows per sequence otherwise."""

from __future__ import annotations

import json

from pipeline.cli import run

SPEC = """\
features:
  - {name: session, type: int64}
  - {name: ts, type: int64}
  - {name: v, type: float}
sequence:
  group_by: [session]
  order_by: ts
  context: [session]
"""


def _input(tmp_path, sessions: int, steps: int):
    source = tmp_path / "events.csv"
    # Rows of one length, so that the row count extrapolated from the file size is right.
    lines = ["session,ts,v"] + [f"{s:06d},{t},{t / 10:.2f}" for s in range(sessions)
                                for t in range(steps)]
    source.write_text("\n".join(lines) + "\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    return source, spec


def _estimate(capsys, source, spec, out, *extra) -> dict:
    capsys.readouterr()
    assert run(["convert", "--input", str(source), "--format", "csv", "--spec", str(spec),
                "--output", str(out), "--dry-run", *extra]) == 0
    return json.loads(capsys.readouterr().out)["estimate"]


def test_a_whole_sample_counts_sequences_exactly(tmp_path, capsys):
    source, spec = _input(tmp_path, sessions=30, steps=4)
    estimate = _estimate(capsys, source, spec, tmp_path / "out")
    assert estimate["exact"] is True
    assert (estimate["rows"], estimate["sequences"], estimate["rows_per_sequence"]) == (120, 30, 4.0)
    assert estimate["bytes_per_sequence"] > 0 and estimate["num_shards"] == 1
    assert not (tmp_path / "out").exists()


def test_a_partial_sample_extrapolates_from_rows_per_sequence(tmp_path, capsys):
    source, spec = _input(tmp_path, sessions=50_000, steps=4)
    estimate = _estimate(capsys, source, spec, tmp_path / "out", "--sample-rows", "400")
    assert estimate["exact"] is False
    # A group cut by the end of the sample counts as a shorter sequence.
    assert 400 <= estimate["sampled_rows"] < 200_000
    assert abs(estimate["rows_per_sequence"] - 4.0) < 0.05
    assert 0.9 * 50_000 <= estimate["sequences"] <= 1.1 * 50_000
