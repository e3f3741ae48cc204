"""A CSV file cut into byte-range work units converts on Dask exactly as on the local runner,
and as the whole file does: on a LocalCluster the run starts (the launcher scans the file, as
locally), and on a cluster at --dask_client_address (its workers find the record starts)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket

import pytest

from pipeline.cli import run
from tests.e2e.forked_console import console, console_main
from tests.helpers import in_memory_args
from transforms.manifest import read_manifest
from transforms.tabular.plan import plan_tabular
from transforms.tabular.split_units import split_text_units
from transforms.tfrecord_io import read_tfrecord_file

pytestmark = pytest.mark.slow

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


@pytest.fixture(scope="module")
def tricky_csv(tmp_path_factory) -> tuple[pathlib.Path, list[str]]:
    """A CSV of 3,000 rows (every fourth with a quoted newline and escaped quotes, 12 bad
    values) and its spec, with the whole file's output (one unit) in folder/"whole"; the
    command's arguments, --work-unit-bytes 4KB cutting it into more than 10 ranges. Shared by
    this module's tests, read only: each writes its outputs in its own tmp_path."""
    folder = tmp_path_factory.mktemp("tricky")
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
    return folder, [*base, "--work-unit-bytes", "4KB"]


def looked_at_console(argv, env, stdout, stderr, seen_path) -> None:
    """`forked_console.console_main`, with the runner the run gets looked at: its work units,
    bag partitions and shuffle method, and the shuffle method once the run is over, written
    as JSON to `seen_path`."""
    from pipeline import convert as convert_module

    real_runner_for = convert_module.runner_for
    seen = {}

    @contextlib.contextmanager
    def looked_at(options, argv, *args, **kwargs):
        import dask
        from apache_beam.runners.dask.dask_runner import DaskOptions

        with real_runner_for(options, argv, *args, **kwargs) as runner:
            seen.update(work_units=kwargs["work_units"],
                        partitions=options.view_as(DaskOptions).npartitions,
                        shuffle=dask.config.get("dataframe.shuffle.method", None))
            yield runner

    convert_module.runner_for = looked_at
    try:
        console_main(argv, env, stdout, stderr)
    finally:
        import dask

        seen["shuffle_after"] = dask.config.get("dataframe.shuffle.method", None)
        pathlib.Path(seen_path).write_text(json.dumps(seen))


def test_dask_converts_a_split_file_as_the_local_runner(tmp_path, tricky_csv):
    """Through the command (a process of its own, forked from a server that imported it):
    with --quiet the LocalCluster's start and stop print nothing, its workers included, in a
    default install too (no Beam gcp extra: Beam warns on import that apitools is missing);
    the shards are the local run's bytes. Also: the run's own LocalCluster (one worker per
    CPU) gets the work units cut into bag partitions sized to it (Beam's DaskRunner puts up
    to 128 in one partition: all on one worker), and its bag groupby shuffles by "tasks",
    said for the run only (dask's default needs dask.dataframe, 0.45 s, to reach it)."""
    from pipeline.runners import dask_partitions

    source, base = tricky_csv
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
        done = console([*base, "--output", str(tmp_path / "dask"), "--runner", "dask"],
                       tmp_path / "console", env=env, target=looked_at_console,
                       extra=[str(tmp_path / "seen.json")])
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["partitions"] == dask_partitions(seen["work_units"], os.cpu_count() or 1) > 1
    assert seen["shuffle"] == "tasks" and seen["shuffle_after"] is None
    whole = _outcome(source / "whole")
    assert _outcome(tmp_path / "local") == whole
    assert _outcome(tmp_path / "dask") == whole
    ours, theirs = read_manifest(str(tmp_path / "dask")), read_manifest(str(tmp_path / "local"))
    assert [(s.path, s.sha256) for s in ours.shards] == [(s.path, s.sha256) for s in theirs.shards]


def test_a_dask_cluster_cuts_a_split_file_in_its_workers_before_the_run(tmp_path, monkeypatch,
                                                                        dask_address, tricky_csv):
    """At --dask_client_address the launcher reads none of the file: the record starts are
    found by a task per raw range on the cluster, all done before the job starts. So no task
    of the job waits on a side input of the cut (Beam's DaskRunner computes one inside every
    task that reads it: they all start at once, each pinned to its worker, unbalanced)."""
    from dask.distributed import Client, get_task_stream

    from transforms.tabular import split_units

    source, base = tricky_csv
    raw_ranges = len(split_text_units(plan_tabular(str(source / "data.csv"), "csv"), "csv",
                                      work_unit_bytes=4000, cut_in_workers=True).units)

    def no_reading(*args, **kwargs):
        raise AssertionError("the launcher scanned a file the workers cut")

    monkeypatch.setattr(split_units, "cut_now", no_reading)
    with Client(dask_address, set_as_default=False) as client, get_task_stream(client) as tasks:
        assert run([*base, "--output", str(tmp_path / "dask"), "--runner", "dask",
                    "--dask_client_address", dask_address]) == 0
    assert _outcome(tmp_path / "dask") == _outcome(source / "whole")
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
