"""A CSV reader stopped before the end of its file (the sample of a dry run) is done with
the file when it is closed: a dry run exits normally, where the thread Arrow reads on was
left reading and aborted the interpreter at exit ("Fatal Python error: PyGILState_Release").
A conversion error holds no traceback, whose frames kept the sample's reader alive."""

from __future__ import annotations

import gzip
import pathlib
import subprocess
import sys

import pyarrow as pa

from transforms.tabular.columns import python_feature, text_feature
from transforms.tabular.spec import FeatureSpec

REPO = pathlib.Path(__file__).resolve().parents[2]

SPEC = """features:
  - {name: id, type: int64, required: true}
  - {name: age, type: int64}
  - {name: income, type: float}
  - {name: city, type: string}
  - {name: note, type: string}
"""


def _csv_text(rows: int) -> str:
    """Rows with a bad int now and then, quoted cells, notes over two lines, ragged rows."""
    lines = ["id,age,income,city,note"]
    for i in range(rows):
        age = "abc" if i % 97 == 0 else str(i % 90)
        note = '"two\nlines ""q"""' if i % 500 == 0 else "plain"
        lines.append(f"{i},{age}" if i % 1009 == 0 else
                     f'{i},{age},{i * 1.5},"City, {i % 7}",{note}')
    return "\n".join(lines) + "\n"


# The console entry point's run (`pipeline.__main__` imports Beam quietly, `main` freezes the
# import's objects): one dry run per file, then the interpreter's exit, which a reader left
# reading aborted.
_DRY_RUNS = """
import gc, sys
import pipeline.__main__
from pipeline.cli import run
gc.freeze()
sys.exit(max(run(argv) for argv in {argvs!r}))
"""


def test_dry_runs_sampling_part_of_a_csv_exit_normally(tmp_path):
    """Both a plain and a gzip CSV, each sampled by a dry run of its own in one real process
    (each reader must be done, or the exit aborts)."""
    text = _csv_text(20000)  # far more than the 500 rows sampled
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    argvs = []
    for name in ("data.csv.gz", "data.csv"):
        source = tmp_path / name
        if name.endswith(".gz"):
            source.write_bytes(gzip.compress(text.encode()))
        else:
            source.write_text(text)
        argvs.append(["convert", "--input", str(source), "--format", "csv", "--spec", str(spec),
                      "--output", str(tmp_path / f"out-{name}"), "--dry-run", "--quiet",
                      "--sample-rows", "500"])
    done = subprocess.run([sys.executable, "-c", _DRY_RUNS.format(argvs=argvs)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "Fatal Python error" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count('"estimate"') == 2


def test_conversion_errors_hold_no_traceback():
    feature = FeatureSpec(name="age", type="int64")
    column = text_feature(feature, pa.array(["1", "abc", "1e999x"]), max_length=100,
                          escapes=False, missing=frozenset())
    assert sorted(column.errors) == [1, 2]
    assert all(error.__traceback__ is None for error in column.errors.values())
    column = python_feature(feature, [1, "abc"], max_length=100)
    assert list(column.errors) == [1]
    assert column.errors[1].__traceback__ is None
