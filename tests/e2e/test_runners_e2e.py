"""One conversion, every runner path: local default, Dask, portable LOOPBACK, Dataflow
template (offline), gs:// through an emulator, and scheduler-style re-runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from apache_beam.io.filesystems import FileSystems

from pipeline.cli import run
from tests.e2e.forked_console import console
from tests.helpers import in_memory_args
from transforms.manifest import read_manifest
from transforms.tfrecord_io import read_tfrecord_file

pytestmark = pytest.mark.slow

SPEC = """\
features:
  - name: id
    type: int64
    required: true
  - name: age
    type: int64
  - name: name
    type: string
  - name: score
    type: float
  - name: tags
    type: string
    list: true
    separator: "|"
splits: {train: 70, validation: 15, test: 15}
split_key: [id]
"""


def _write_inputs(folder, files=3, rows=400):
    folder.mkdir(parents=True, exist_ok=True)
    for part in range(files):
        lines = ["id,age,name,score,tags"]
        for i in range(part * rows, (part + 1) * rows):
            age = "" if i % 11 == 0 else str(i % 90)
            age = "not-a-number" if i % 97 == 0 else age  # a few dead letters
            lines.append(f'{i},{age},"name, {i}",{i / 8},a|b{i % 3}')
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n")
    (folder / "spec.yaml").write_text(SPEC)
    return files * rows


def _records_by_split(output: str) -> dict[str, list[bytes]]:
    manifest = read_manifest(output)
    assert manifest is not None, f"{output} has no manifest"
    records: dict[str, list[bytes]] = {}
    for shard in manifest.shards:
        path = output.rstrip("/") + "/" + shard.path
        records.setdefault(shard.split, []).extend(read_tfrecord_file(path))
    return {split: sorted(payloads) for split, payloads in records.items()}


def _convert_args(inputs, output, *extra):
    """The reference input holds dead letters, which every run here commits."""
    return ["convert", "--input", str(inputs / "*.csv"), "--format", "csv", "--max-error-rate", "1",
            "--spec", str(inputs / "spec.yaml"), "--output", str(output), *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-memory local run every other runner must match."""
    root = tmp_path_factory.mktemp("reference")
    rows = _write_inputs(root / "in")
    assert run(_convert_args(root / "in", root / "out", "--num-shards", "2", *in_memory_args())) == 0
    return root, rows, _records_by_split(str(root / "out"))


def test_default_local_run_matches(reference, tmp_path):
    root, rows, expected = reference
    # No runner flags at all: the default local runner (this small input: one process).
    assert run(_convert_args(root / "in", tmp_path, "--num-shards", "2", "--quiet")) == 0
    assert _records_by_split(str(tmp_path)) == expected
    manifest = read_manifest(str(tmp_path))
    assert manifest.counts.input == rows
    assert manifest.counts.dead_letter == len(range(0, rows, 97))
    assert run(["verify", str(tmp_path)]) == 0


@pytest.mark.parametrize("sharding", [["--num-shards", "2"], ["--max-shard-bytes", "8KB"]])
def test_multiprocessing_local_run_matches(reference, tmp_path, sharding):
    root, _, expected = reference
    # Two worker processes, as large inputs get by default.
    args = _convert_args(root / "in", tmp_path, *sharding, "--direct_num_workers=2", "--quiet")
    assert run(args) == 0
    assert _records_by_split(str(tmp_path)) == expected
    assert run(["verify", str(tmp_path)]) == 0


def test_dask_output_is_identical(reference, tmp_path, monkeypatch, dask_address):
    """On a Dask cluster (the session's; the LocalCluster a run starts for itself, with its
    partitions and shuffle, in tests/e2e/test_split_units_dask.py), the work units cut into bag
    partitions sized to the cluster's threads (Beam's DaskRunner puts up to 128 in one
    partition: all on one worker), and shards byte-identical to the local run's; the runner
    as the run gets it, looked at."""
    import contextlib

    import dask
    from apache_beam.runners.dask.dask_runner import DaskOptions
    from dask.distributed import Client

    from pipeline import convert as convert_module
    from pipeline.runners import dask_partitions

    seen = []
    real_runner_for = convert_module.runner_for

    @contextlib.contextmanager
    def looked_at(options, argv, *args, **kwargs):
        with real_runner_for(options, argv, *args, **kwargs) as runner:
            seen.append((kwargs["work_units"], options.view_as(DaskOptions).npartitions,
                         dask.config.get("dataframe.shuffle.method", None)))
            yield runner

    monkeypatch.setattr(convert_module, "runner_for", looked_at)
    with Client(dask_address, set_as_default=False) as client:
        threads = sum(client.nthreads().values())
    root, _, expected = reference
    assert run(_convert_args(root / "in", tmp_path, "--num-shards", "2", "--runner", "dask",
                             "--dask_client_address", dask_address, "--quiet")) == 0
    [(work_units, partitions, shuffle)] = seen
    assert partitions == dask_partitions(work_units, threads) > 1
    assert shuffle == "tasks" and dask.config.get("dataframe.shuffle.method", None) is None
    assert _records_by_split(str(tmp_path)) == expected
    ours, theirs = read_manifest(str(tmp_path)), read_manifest(str(root / "out"))
    # With a fixed shard count the shards are byte-identical, not just the records.
    assert [(s.path, s.sha256) for s in ours.shards] == [(s.path, s.sha256) for s in theirs.shards]
    assert ours.counts == theirs.counts


def test_dask_images_match_the_local_runner(tmp_path, dask_address):
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "pipeline", "sample_data", "images")
    args = ["convert", "--input", sample, "--format", "image-folder", "--num-shards", "1"]
    assert run([*args, "--output", str(tmp_path / "local"), *in_memory_args()]) == 0
    assert run([*args, "--output", str(tmp_path / "dask"), "--runner", "dask",
                "--dask_client_address", dask_address, "--quiet"]) == 0
    local = _records_by_split(str(tmp_path / "local"))
    assert local and local == _records_by_split(str(tmp_path / "dask"))


def test_dask_manifest_planned_as_data_matches_the_local_runner(tmp_path, dask_address):
    """A manifest's byte ranges spread over the Dask workers give the local run's records."""
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "pipeline", "sample_data", "images")
    shutil.copytree(sample, tmp_path / "images")
    files = sorted(f"images/{label}/{name}" for label in os.listdir(tmp_path / "images")
                   for name in os.listdir(tmp_path / "images" / label))
    rows = [f"{files[i % len(files)]},{files[i % len(files)].split('/')[1]},{i}" for i in range(600)]
    (tmp_path / "m.csv").write_text("image,label,n\n" + "\n".join(rows) + "\n")
    args = ["convert", "--input", str(tmp_path / "m.csv"), "--format", "image-manifest",
            "--image-column", "image", "--label-column", "label", "--num-shards", "1"]
    assert run([*args, "--output", str(tmp_path / "local"), *in_memory_args()]) == 0
    assert run([*args, "--output", str(tmp_path / "dask"), "--runner", "dask",
                "--dask_client_address", dask_address, "--quiet"]) == 0
    local = _records_by_split(str(tmp_path / "local"))
    assert local and sum(map(len, local.values())) == 600
    assert local == _records_by_split(str(tmp_path / "dask"))


def test_portable_runner_with_local_job_service_and_loopback(reference, tmp_path):
    """Through Beam's portable API: the graph goes to a job service over gRPC as a proto, and
    its LOOPBACK workers run in this process. The job service (Beam's own, none of our code
    runs in it) serves from this process too, rather than a process importing Beam again."""
    from apache_beam.runners.portability.local_job_service import LocalJobServicer

    root, _, expected = reference
    service = LocalJobServicer()
    port = service.start_grpc_server(0)
    try:
        assert run(_convert_args(root / "in", tmp_path, "--num-shards", "2",
                                 "--runner", "PortableRunner", f"--job_endpoint=localhost:{port}",
                                 "--environment_type=LOOPBACK", "--quiet")) == 0
    finally:
        service.stop()
    assert _records_by_split(str(tmp_path)) == expected


def test_dataflow_template_is_built_offline(reference, tmp_path, gcs_emulator):
    from apache_beam.portability.api import beam_runner_api_pb2

    pytest.importorskip("google.cloud.dataflow")  # the dataflow extra, part of the test extra

    root, _, _ = reference
    template = tmp_path / "template.json"
    assert run(_convert_args(
        root / "in", f"{gcs_emulator}/out",
        "--runner", "DataflowRunner", "--project", "test-project", "--region", "us-central1",
        "--temp_location", f"{gcs_emulator}/tmp", "--staging_location", f"{gcs_emulator}/staging",
        f"--template_location={template}", "--sdk_location=container", "--no_auth", "--quiet",
        "--work-unit-bytes", "2KB",  # the launcher leaves the cutting of files to the workers
    )) == 0
    job = json.loads(template.read_text())
    options = job["environment"]["sdkPipelineOptions"]["options"]
    assert options["format"] == "csv" and options["output"] == f"{gcs_emulator}/out"
    assert options["spec"].endswith("spec.yaml")
    staged = [m.path for m in FileSystems.match([f"{gcs_emulator}/staging/**"])[0].metadata_list]
    pipeline_files = [path for path in staged if path.endswith("/pipeline.pb")]
    assert len(pipeline_files) == 1
    with FileSystems.open(pipeline_files[0]) as handle:
        proto = beam_runner_api_pb2.Pipeline.FromString(handle.read())
    names = {transform.unique_name for transform in proto.components.transforms.values()}
    for step in ("PlanWorkUnits", "CutByteRanges/ScanRanges", "CutByteRanges/PlaceRanges",
                 "ConvertCsv", "Commit", "Commit/Finalize"):
        assert step in names, (step, sorted(names)[:20])


def test_gcs_to_gcs_conversion(reference, tmp_path, gcs_emulator):
    root, rows, _ = reference
    for name in sorted(os.listdir(root / "in")):
        with FileSystems.create(f"{gcs_emulator}/in/{name}") as handle:
            handle.write((root / "in" / name).read_bytes())
    output = f"{gcs_emulator}/converted/2026/01/02"
    assert run(["convert", "--input", f"{gcs_emulator}/in/*.csv", "--format", "csv",
                "--spec", f"{gcs_emulator}/in/spec.yaml",
                "--output", f"{gcs_emulator}/converted/{{YYYY}}/{{MM}}/{{DD}}",
                "--run-date", "2026-01-02", "--compression", "gzip", "--max-error-rate", "1",
                *in_memory_args()]) == 0
    manifest = read_manifest(output)
    assert manifest.counts.input == rows
    assert manifest.dead_letter_files
    assert run(["verify", output]) == 0
    read_back = sum(len(v) for v in _records_by_split(output).values())
    assert read_back == manifest.counts.written == rows - len(range(0, rows, 97))
    leftovers = [m.path for m in FileSystems.match([f"{output}/.tmp-*/**"])[0].metadata_list]
    assert leftovers == []


def test_a_gcs_folder_input_needs_no_trailing_slash(tmp_path, gcs_emulator):
    """Object stores have no folders: a name no object has, with objects under it, is one
    (it was 'no input file matches'); a file of that name is a file."""
    for name in ("a.csv", "b.csv", "notes.txt"):
        with FileSystems.create(f"{gcs_emulator}/folder/{name}") as handle:
            handle.write(b"id\n1\n2\n" if name.endswith(".csv") else b"not data\n")
    for folder in (f"{gcs_emulator}/folder", f"{gcs_emulator}/folder/"):
        output = str(tmp_path / ("slash" if folder.endswith("/") else "bare"))
        assert run(["convert", "--input", folder, "--format", "csv", "--output", output,
                    *in_memory_args()]) == 0
        assert read_manifest(output).counts.input == 4


def test_every_command_reaches_the_emulator_without_looking_for_credentials(tmp_path, gcs_emulator):
    """Not only convert: verify, inspect, index and report read gs:// too (they spent ~20 s
    in Beam's credential retries, printing their tracebacks). Each command a process of its
    own (forked from a server that only imported the entry point), as Beam looks for
    credentials once per process: this test process did long ago."""
    source = tmp_path / "in.csv"
    source.write_text("id\n1\n2\n")
    output = f"{gcs_emulator}/checked"
    assert run(["convert", "--input", str(source), "--format", "csv", "--output", output,
                *in_memory_args()]) == 0
    for number, command in enumerate((["verify", output], ["inspect", output, "--limit", "1"],
                                      ["report", output])):
        done = console(command, tmp_path / f"command{number}")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and "Retry" not in done.stderr, done.stderr


def test_scheduled_rerun_is_a_no_op_other_options_are_refused_and_overwrite_redoes(reference, tmp_path,
                                                                                    capsys):
    root, _, _ = reference
    args = ["convert", "--input", str(root / "in" / "*.csv"), "--format", "csv",
            "--spec", str(root / "in" / "spec.yaml"),
            "--output", str(tmp_path / "{YYYY}-{MM}-{DD}"), "--run-date", "2026-05-04",
            "--max-error-rate", "1", *in_memory_args()]
    assert run(args) == 0
    output = tmp_path / "2026-05-04"
    first = read_manifest(str(output))
    listing = sorted(os.listdir(output))
    capsys.readouterr()
    assert run([a for a in args if a != "--quiet"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert read_manifest(str(output)).metadata["run_id"] == first.metadata["run_id"]
    assert sorted(os.listdir(output)) == listing
    # The same inputs with other options are not the same run: refused without --overwrite.
    assert run([*args, "--compression", "gzip"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(os.listdir(output)) == listing
    assert run([*args, "--overwrite"]) == 0
    assert read_manifest(str(output)).metadata["run_id"] != first.metadata["run_id"]


def test_file_added_while_planning_is_not_skipped_by_the_next_run(reference, tmp_path, monkeypatch,
                                                                   capsys):
    # A file that lands between the fingerprint's listing and the planner's must not be
    # counted as converted: the next run may not call the output "nothing to do".
    import transforms.tabular.plan

    root, _, _ = reference
    inputs = tmp_path / "in"
    shutil.copytree(root / "in", inputs)
    plan = transforms.tabular.plan.plan_tabular

    def plan_after_a_new_file(pattern, fmt):
        (inputs / "zz-late.csv").write_bytes((inputs / sorted(os.listdir(inputs))[0]).read_bytes())
        return plan(pattern, fmt)

    monkeypatch.setattr(transforms.tabular.plan, "plan_tabular", plan_after_a_new_file)
    args = _convert_args(inputs, tmp_path / "out", *in_memory_args())
    assert run(args) == 0
    monkeypatch.setattr(transforms.tabular.plan, "plan_tabular", plan)
    capsys.readouterr()
    assert run(args) == 2  # a different listing now: refused, not skipped
    assert "--overwrite" in capsys.readouterr().err
    assert run([*args, "--overwrite"]) == 0


def test_a_second_run_into_a_busy_output_is_refused(reference, tmp_path, capsys):
    from pipeline.output_lock import LOCK_NAME, output_lock

    root, _, _ = reference
    out = tmp_path / "out"
    args = _convert_args(root / "in", out, *in_memory_args())
    with output_lock(str(out)):  # what a run still writing `out` holds
        assert run(args) == 2
        assert "another run is writing" in capsys.readouterr().err
        assert os.listdir(out) == [LOCK_NAME]  # refused before touching anything
    assert run(args) == 0
    assert read_manifest(str(out)).counts.input > 0


def test_an_unopenable_lock_file_warns_and_does_not_block_the_run(tmp_path, caplog):
    from pipeline.output_lock import lock_path, output_lock

    out = str(tmp_path / "out")
    os.makedirs(lock_path(out))  # a folder where the lock file should be: open() fails
    try:
        with output_lock(out), output_lock(out):  # nothing is held, so nesting is fine
            pass
    finally:
        os.rmdir(lock_path(out))
    assert "running without the one-run-per-output check" in caplog.text


@pytest.mark.parametrize("own_tmpdir", [False, True])
def test_a_killed_run_leaves_no_stale_lock(reference, tmp_path, own_tmpdir):
    # own_tmpdir: the holder has another TMPDIR (a systemd unit with PrivateTmp beside a
    # backfill by hand): the lock lives with the output, so it still excludes.
    root, _, _ = reference
    out = tmp_path / "out"
    env = dict(os.environ)
    if own_tmpdir:
        (tmp_path / "private-tmp").mkdir()
        env["TMPDIR"] = str(tmp_path / "private-tmp")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pipeline.output_lock import output_lock\n"
         "with output_lock(sys.argv[1]):\n    print('locked', flush=True); time.sleep(600)",
         str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert run(_convert_args(root / "in", out, *in_memory_args())) == 2
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert run(_convert_args(root / "in", out, *in_memory_args())) == 0
