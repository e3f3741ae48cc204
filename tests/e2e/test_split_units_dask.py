"""A CSV file cut into byte-range work units converts on Dask exactly as on the local runner,
and as the whole file does: on a LocalCluster the run starts (the launcher scans the file, as
locally), and on a cluster at --dask_client_address (its workers find the record starts)."""

from __future__ import annotations

import contextlib
import json
import os
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
    for shard in manifest.shards:
        records.setdefault(shard.split, []).extend(read_tfrecord_file(str(folder / shard.path)))
    dead = sorted(line for path in sorted((folder / "dead_letter").glob("*.jsonl"))
                  for line in path.read_text().splitlines())
    return {s: sorted(r) for s, r in records.items()}, [json.loads(d) for d in dead], \
        manifest.counts.to_dict()


def _tricky_csv(folder: pathlib.Path) -> list[str]:
    """A CSV of 3,000 rows (every fourth with a quoted newline and escaped quotes, 12 bad
    values) and its spec; returns the command's arguments, --work-unit-bytes 4KB cutting it
    into more than 10 ranges, and writes the whole file's output to folder/"whole"."""
    lines = ["id,text,n"]
    for i in range(1, 3001):
        text = f'"two\nlines, ""{i}"""' if i % 4 == 0 else f"é {i}"
        lines.append(f"{i},{text},{'bad' if i % 250 == 0 else i}")
    (folder / "data.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "spec.yaml").write_text(SPEC)
    units = split_text_units(plan_tabular(str(folder / "data.csv"), "csv"), "csv",
                             work_unit_bytes=4000).units
    assert len(units) > 10  # what --work-unit-bytes 4KB plans
    base = ["convert", "--input", str(folder / "data.csv"), "--format", "csv",
            "--spec", str(folder / "spec.yaml"), "--quiet", "--max-error-rate", "1"]
    assert run([*base, "--output", str(folder / "whole"), "--work-unit-bytes", "1GB",
                *in_memory_args()]) == 0
    records, dead, counts = _outcome(folder / "whole")
    assert counts["input"] == 3000 and len(dead) == 12
    assert sorted(d["row"] for d in dead) == list(range(250, 3001, 250))
    return [*base, "--work-unit-bytes", "4KB"]


def test_dask_converts_a_split_file_as_the_local_runner(tmp_path):
    """Through the command (a process of its own): with --quiet the LocalCluster's start and
    stop print nothing, its workers included, in a default install too (no Beam gcp extra:
    Beam warns on import that apitools is missing)."""
    base = _tricky_csv(tmp_path)
    assert run([*base, "--output", str(tmp_path / "local"), *in_memory_args()]) == 0
    without_apitools = tmp_path / "default_install" / "apitools"
    without_apitools.mkdir(parents=True)
    (without_apitools / "__init__.py").write_text(
        'raise ImportError("apitools: Beam\'s gcp extra is not installed")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(without_apitools.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with contextlib.ExitStack() as stack:
        # Dask's default HTTP port taken (as by a concurrent run's cluster): still no warning.
        with contextlib.suppress(OSError):  # already taken: the case this stands for
            stack.enter_context(socket.create_server(("127.0.0.1", 8787)))
        done = subprocess.run([sys.executable, "-m", "pipeline", *base, "--output",
                               str(tmp_path / "dask"), "--runner", "dask"],
                              capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    whole = _outcome(tmp_path / "whole")
    assert _outcome(tmp_path / "local") == whole
    assert _outcome(tmp_path / "dask") == whole


def test_a_dask_cluster_cuts_a_split_file_in_its_workers_before_the_run(tmp_path, monkeypatch,
                                                                        dask_address):
    """At --dask_client_address the launcher reads none of the file: the record starts are
    found by a task per raw range on the cluster, all done before the job starts. So no task
    of the job waits on a side input of the cut (Beam's DaskRunner computes one inside every
    task that reads it: they all start at once, each pinned to its worker, unbalanced)."""
    from dask.distributed import Client, get_task_stream

    from transforms.tabular import split_units

    base = _tricky_csv(tmp_path)
    raw_ranges = len(split_text_units(plan_tabular(str(tmp_path / "data.csv"), "csv"), "csv",
                                      work_unit_bytes=4000, cut_in_workers=True).units)

    def no_reading(*args, **kwargs):
        raise AssertionError("the launcher scanned a file the workers cut")

    monkeypatch.setattr(split_units, "cut_now", no_reading)
    with Client(dask_address, set_as_default=False) as client, get_task_stream(client) as tasks:
        assert run([*base, "--output", str(tmp_path / "dask"), "--runner", "dask",
                    "--dask_client_address", dask_address]) == 0
    assert _outcome(tmp_path / "dask") == _outcome(tmp_path / "whole")
    spans = {str(task["key"]): [(span["start"], span["stop"]) for span in task["startstops"]
                                if span["action"] == "compute"] for task in tasks.data}
    scans = [span for key, found in spans.items() if key.startswith("_scan_unit") for span in found]
    job = [span for key, found in spans.items() if not key.startswith("_scan_unit") for span in found]
    assert len(scans) == raw_ranges > 10 and job
    assert max(stop for _, stop in scans) <= min(start for start, _ in job)


def test_relative_paths_are_the_launchers_on_a_dask_cluster(tmp_path, monkeypatch, dask_address):
    """Workers run in their own folder: a relative --input and --output are resolved on the
    launcher (they wrote beside the workers, and the run ended without committing)."""
    from dask.distributed import Client

    with Client(dask_address, set_as_default=False) as client:
        workers = set(client.run(os.getcwd).values())  # the session's cluster: a folder of its own
    launcher = tmp_path / "launcher"
    launcher.mkdir()
    assert str(launcher) not in workers and all(os.listdir(folder) == [] for folder in workers)
    (launcher / "data.csv").write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(50)))
    monkeypatch.chdir(launcher)
    assert run(["convert", "--input", "data.csv", "--format", "csv", "--output", "out",
                "--quiet", "--runner", "dask", "--dask_client_address", dask_address]) == 0
    assert read_manifest(str(launcher / "out")).counts.written == 50
    assert all(os.listdir(folder) == [] for folder in workers)
