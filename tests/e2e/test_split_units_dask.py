"""A CSV file cut into byte-range work units converts on a Dask LocalCluster exactly as on
the local runner, and as the whole file does."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import subprocess
import sys

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.manifest import read_manifest
from transforms.tabular.plan import plan_tabular
from transforms.tabular.split_units import split_text_units
from transforms.tfrecord_io import read_tfrecord_file

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]

SPEC = """\
features:
  - {name: id, type: int64, required: true}
  - {name: text, type: string}
  - {name: n, type: int64}
splits: {train: 70, test: 30}
split_key: [id]
"""


def _outcome(folder: pathlib.Path) -> tuple[dict, list, dict]:
    manifest = read_manifest(str(folder))
    records: dict[str, list[bytes]] = {}
    for shard in manifest["shards"]:
        records.setdefault(shard["split"], []).extend(read_tfrecord_file(str(folder / shard["path"])))
    dead = sorted(line for path in sorted((folder / "dead_letter").glob("*.jsonl"))
                  for line in path.read_text().splitlines())
    return {s: sorted(r) for s, r in records.items()}, [json.loads(d) for d in dead], \
        manifest["counts"]


def test_dask_converts_a_split_file_as_the_local_runner(tmp_path):
    """Through the command (a process of its own): the workers cut the file (the launcher
    does not read it), and with --quiet the LocalCluster's start and stop print nothing."""
    lines = ["id,text,n"]
    for i in range(1, 3001):
        text = f'"two\nlines, ""{i}"""' if i % 4 == 0 else f"é {i}"
        lines.append(f"{i},{text},{'bad' if i % 250 == 0 else i}")
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "spec.yaml").write_text(SPEC)
    units = split_text_units(plan_tabular(str(tmp_path / "data.csv"), "csv"), "csv",
                             work_unit_bytes=4000).units
    assert len(units) > 10  # what --work-unit-bytes 4KB plans
    base = ["convert", "--input", str(tmp_path / "data.csv"), "--format", "csv",
            "--spec", str(tmp_path / "spec.yaml"), "--quiet"]
    assert run([*base, "--output", str(tmp_path / "whole"), "--work-unit-bytes", "1GB",
                *in_memory_args()]) == 0
    assert run([*base, "--output", str(tmp_path / "local"), "--work-unit-bytes", "4KB",
                *in_memory_args()]) == 0
    with contextlib.ExitStack() as stack:
        # Dask's default HTTP port taken (as by a concurrent run's cluster): still no warning.
        with contextlib.suppress(OSError):  # already taken: the case this stands for
            stack.enter_context(socket.create_server(("127.0.0.1", 8787)))
        done = subprocess.run([sys.executable, "-m", "pipeline", *base, "--output",
                               str(tmp_path / "dask"), "--work-unit-bytes", "4KB",
                               "--runner", "dask"],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    whole = _outcome(tmp_path / "whole")
    assert _outcome(tmp_path / "local") == whole
    assert _outcome(tmp_path / "dask") == whole
    records, dead, counts = whole
    assert counts["input"] == 3000 and len(dead) == 12
    assert sorted(d["row"] for d in dead) == list(range(250, 3001, 250))
