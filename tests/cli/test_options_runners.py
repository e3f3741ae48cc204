"""Command-line options, date templates and runner selection."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from pipeline import cli
from pipeline.options import ConvertOptions, fill_date_template, parse_size
from pipeline.runners import (
    RunnerError,
    runner_for,
)
from tests.images import image_samples

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("200MB", 200_000_000), ("256MiB", 256 * 2**20), ("1.5G", 1_500_000_000), ("1048576", 2**20),
     ("10kib", 10240), ("7 b", 7)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-5MB", "12 parsecs", "0"])
def test_parse_size_rejects_nonsense(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_date_templates():
    day = datetime.date(2026, 3, 9)
    assert fill_date_template("gs://b/in/{YYYY}/{MM}/{DD}/*.csv", day) == "gs://b/in/2026/03/09/*.csv"
    assert fill_date_template("out/span-{SPAN}", day) == f"out/span-{(day - datetime.date(1970, 1, 1)).days}"
    assert fill_date_template("out/span-{SPAN}", day, span=7) == "out/span-7"
    assert fill_date_template("plain/path", day) == "plain/path"


@pytest.mark.parametrize("flag", ["--output", "--input"])
@pytest.mark.parametrize("token, suggestion", [("{D}", "{DD}"), ("{yyyy}", "{YYYY}"), ("{FOO}", None)])
def test_a_misspelt_date_placeholder_is_a_usage_error(tmp_path, capsys, flag, token, suggestion):
    # It was kept as text: every day's run then wrote into (or read) the same folder, and
    # the second day's run said "nothing to do".
    paths = {"--input": str(tmp_path / "in" / "*.csv"), "--output": str(tmp_path / "out")}
    paths[flag] = paths[flag].replace("in", f"in-{token}") if flag == "--input" \
        else str(tmp_path / f"out-{token}")
    from pipeline.cli import run

    assert run(["convert", "--input", paths["--input"], "--format", "csv", "--output",
                paths["--output"], "--quiet"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"unknown placeholder {token}" in line
    assert (f"did you mean {suggestion}?" in line) == (suggestion is not None)
    assert not any(tmp_path.iterdir())


def test_hyphen_and_underscore_spellings_are_the_same_option():
    hyphen = PipelineOptions(["--max-shard-bytes", "1MB", "--num-shards", "3"]).view_as(ConvertOptions)
    underscore = PipelineOptions(["--max_shard_bytes=1MB", "--num_shards=3"]).view_as(ConvertOptions)
    assert hyphen.max_shard_bytes == underscore.max_shard_bytes == 1_000_000
    assert hyphen.num_shards == underscore.num_shards == 3


def test_dry_run_does_not_clash_with_beams_own_flag():
    options = PipelineOptions(["--dry-run"])
    assert options.view_as(ConvertOptions).convert_dry_run is True


def test_local_runner_defaults_to_multi_processing_on_every_core():
    options = PipelineOptions([])
    with runner_for(options, []) as runner:
        assert type(runner).__name__ == "FnApiRunner"  # never Prism, never a download
    direct = options.view_as(DirectOptions)
    assert direct.direct_running_mode == "multi_processing"
    assert direct.direct_num_workers >= 1


def test_small_or_single_unit_local_runs_stay_in_one_process():
    options = PipelineOptions([])
    with runner_for(options, [], parallel=False) as runner:
        assert type(runner).__name__ == "FnApiRunner"
    direct = options.view_as(DirectOptions)
    assert (direct.direct_running_mode, direct.direct_num_workers) == ("in_memory", 1)
    argv = ["--direct_running_mode=multi_processing"]
    explicit = PipelineOptions(argv)
    with runner_for(explicit, argv, parallel=False):
        pass
    assert explicit.view_as(DirectOptions).direct_running_mode == "multi_processing"


def test_explicit_local_settings_are_kept():
    argv = ["--runner=DirectRunner", "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    options = PipelineOptions(argv)
    with runner_for(options, argv) as runner:
        assert type(runner).__name__ == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_running_mode == "in_memory"


def test_explicit_in_memory_mode_means_one_worker():
    argv = ["--direct_running_mode=in_memory"]
    options = PipelineOptions(argv)
    with runner_for(options, argv, parallel=True):
        pass
    direct = options.view_as(DirectOptions)
    assert (direct.direct_running_mode, direct.direct_num_workers) == ("in_memory", 1)


def test_multi_threading_is_refused_with_a_reason():
    argv = ["--direct_running_mode=multi_threading"]
    with pytest.raises(RunnerError, match="lose elements"):
        with runner_for(PipelineOptions(argv), argv):
            pass


def test_other_runners_pass_through_by_name():
    argv = ["--runner=DataflowRunner"]
    with runner_for(PipelineOptions(argv), argv) as runner:
        assert runner == "DataflowRunner"


@pytest.mark.parametrize(("argv", "in_workers"), [
    ([], False),
    (["--runner", "direct"], False),
    (["--runner", "dask"], False),  # its own LocalCluster: the launcher's machine
    (["--runner", "dask", "--dask_client_address", "tcp://scheduler:8786"], True),
    (["--runner", "DataflowRunner"], True),
    (["--runner", "FlinkRunner"], True),
])
def test_large_files_are_cut_where_the_workers_run_unless_that_is_the_launchers_machine(
        argv, in_workers):
    from pipeline.runners import workers_cut_large_files

    assert workers_cut_large_files(PipelineOptions(argv)) is in_workers


@pytest.mark.parametrize(("runner", "module", "extra"), [
    ("DataflowRunner", "google.cloud.dataflow", "dataflow"),
    ("dataflow", "google.cloud.dataflow", "dataflow"),
    ("dask", "apache_beam.runners.dask.dask_runner", "dask"),
])
def test_runner_without_its_extra_is_refused_before_anything_is_read_or_written(
        runner, module, extra, tmp_path, monkeypatch, capsys):
    from pipeline.cli import EXIT_USAGE, run

    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    output = tmp_path / "out"
    code = run(["convert", "--input", str(tmp_path / "missing" / "*.csv"), "--format", "csv",
                "--output", str(output), "--runner", runner, "--quiet"])
    assert code == EXIT_USAGE
    # Refused for the missing extra, not for the missing input, and nothing was created.
    err = capsys.readouterr().err
    assert f"--runner {runner} needs the {extra} extra" in err
    assert f"pip install 'tfrecord-pipeline[{extra}]'" in err
    assert not output.exists()


def test_dataflow_with_its_extra_passes_the_check(tmp_path, capsys):
    """With the extra installed, a Dataflow run gets past the extra's check to Dataflow's own
    options, and is refused for those (in one line)."""
    pytest.importorskip("google.cloud.dataflow")
    source = tmp_path / "in.csv"
    source.write_text("id\n1\n")
    assert cli.run(["convert", "--input", str(source), "--format", "csv",
                    "--output", str(tmp_path / "out"), "--runner", "DataflowRunner"]) == 2
    err = capsys.readouterr().err
    assert "missing --temp_location (or --staging_location), --project, --region" in err
    assert "extra" not in err


def _units_written(tmp_path, units):
    """The temp folder of a run whose one writer wrote 100 records of each of `units`."""
    from transforms.records import RecordBatch
    from transforms.shard_writers import RollingShardWriter, SinkConfig

    config = SinkConfig(output_dir=str(tmp_path), run_id="progress", report_progress=True)
    writer = RollingShardWriter(config)
    for unit in units:
        writer.write(RecordBatch(key=f"{unit:08d}:00000000", split="train", records=[b"x"] * 100,
                                 dead_letters=[b"{}"] * (unit == 0), input_count=100))
    writer.close()
    return config.temp_dir


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_done_of_the_planned_bytes_with_rate_and_time_left(tmp_path):
    """Units 0 and 1 started by one writer: unit 0 (2 KiB of 7 KiB) is done, 1 may still run."""
    from pipeline.progress import Progress
    from transforms.records import WorkUnit

    temp_dir = _units_written(tmp_path, [0, 1])
    planned = [WorkUnit("f", i, extra={"size": size}) for i, size in enumerate([2048, 1024, 4096])]
    line = Progress(temp_dir, planned, stream=io.StringIO()).line()
    assert re.fullmatch(r"converting:  29% 2\.00k/7\.00kB \[00:0\d<00:\d\d, \S+B/s, "
                        r"200 records written, 1 dead-lettered\]", line), line
    terminal = _Terminal()
    progress = Progress(temp_dir, planned, stream=terminal)
    progress.show()
    progress.stop()
    shown = terminal.getvalue()
    assert "\rconverting:  29%|" in shown and "| 2.00k/7.00kB [" in shown and shown.endswith("\n")
    # Sizes unknown: work units.
    unsized = [WorkUnit("f", i) for i in range(3)]
    assert "33% 1/3 work units [" in Progress(temp_dir, unsized, stream=io.StringIO()).line()


def test_progress_shows_nothing_before_the_first_heartbeat(tmp_path):
    from pipeline.progress import Progress
    from transforms.records import WorkUnit

    stream = io.StringIO()
    progress = Progress(str(tmp_path / "no-temp"), [WorkUnit("f", 0)], stream=stream)
    assert progress.line() is None
    progress.show()
    assert stream.getvalue() == ""


SAMPLE_CONVERT = ["convert", "--input", str(REPO / "pipeline/sample_data/tabular/*.csv"), "--format",
                  "csv", "--output"]


def _convert_sample_on_a_terminal(output) -> str:
    """What `tfrecord-pipeline convert` of the sample CSV prints on a pseudo-terminal."""
    argv = [sys.executable, "-m", "pipeline", *SAMPLE_CONVERT, str(output)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdin=follower, stdout=follower,
                               stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=300) == 0
    return b"".join(chunks).decode()


def test_a_terminal_sees_each_phase_and_a_log_gets_no_phase_lines(tmp_path, capsys):
    shown = _convert_sample_on_a_terminal(tmp_path / "tty")  # a real terminal: a process of its own
    assert "planning: listing the inputs, sampling them to infer the spec\r\n" in shown
    assert re.search(r"converting \S+kB of input in 1 work unit\(s\)\r\n", shown), shown
    assert shown.index("planning:") < shown.index("converting") < shown.index("Committed")
    # A log (the output captured here is no terminal, as a pipe), from the same defaults.
    assert cli.run([*SAMPLE_CONVERT, str(tmp_path / "pipe")]) == 0
    captured = capsys.readouterr()
    logged = captured.out + captured.err
    assert "planning:" not in logged and "converting" not in logged and "\r" not in logged
    assert "Committed" in logged


@pytest.mark.parametrize(("runner_argv", "expected"), [
    (["--runner", "direct"], True), (["--runner", "dask"], False), (["--quiet"], False)])
def test_only_a_local_run_showing_progress_has_its_writers_leave_heartbeats(
        tmp_path, monkeypatch, runner_argv, expected):
    """Elsewhere the heartbeat files would be objects (on gs://, one per bundle) nobody reads."""
    from pipeline import convert as convert_module

    class Stop(Exception):
        pass

    given = {}

    def sink(*args, **kwargs):
        given.update(kwargs)
        raise Stop  # the run itself is not needed

    monkeypatch.setattr(convert_module, "WriteToShardedTFRecord", sink)
    data = tmp_path / "in.csv"
    data.write_text("a,b\n1,x\n", encoding="utf-8")
    with pytest.raises(Stop):
        convert_module.convert(["--input", str(data), "--format", "csv",
                                "--output", str(tmp_path / "out"), *runner_argv])
    assert given["report_progress"] is expected


@pytest.mark.parametrize("fmt", ["csv", "image-folder"])
def test_a_local_run_that_can_fork_never_starts_beams_worker_processes(tmp_path, monkeypatch, fmt):
    """Forked converters beat Beam's worker processes on every input size measured (see
    `pipeline.convert`), even past the size at which Beam's workers would otherwise pay off."""
    import contextlib

    from pipeline import convert as convert_module
    from pipeline.cli import run

    if fmt == "csv":
        for i in range(2):
            (tmp_path / f"part-{i}.csv").write_text("a\n1\n2\n")
        source = str(tmp_path / "part-*.csv")
    else:
        for label in ("x", "y"):
            (tmp_path / "in" / label).mkdir(parents=True)
            (tmp_path / "in" / label / "1.png").write_bytes(image_samples.build("png_rgb"))
        source = str(tmp_path / "in")
    monkeypatch.setattr(convert_module, "LOCAL_PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(convert_module, "LOCAL_PARALLEL_MIN_IMAGE_BYTES", 1)
    seen = []
    real_runner_for = convert_module.runner_for

    @contextlib.contextmanager
    def spy(options, argv, parallel=True, work_units=1, threads=None):
        seen.append(parallel)
        with real_runner_for(options, argv, False, work_units) as runner:  # one process
            yield runner

    monkeypatch.setattr(convert_module, "runner_for", spy)
    assert run(["convert", "--input", source, "--format", fmt, "--output",
                str(tmp_path / "out"), "--quiet"]) == 0
    assert seen == [False]


@pytest.mark.parametrize(("units", "threads", "partitions"),
                         [(8, 2, 8), (1, 2, 1), (100, 2, 8), (0, 4, 1), (9, 1, 4)])
def test_dask_work_units_are_cut_into_partitions_sized_to_the_cluster(units, threads, partitions):
    from pipeline.runners import dask_partitions

    assert dask_partitions(units, threads) == partitions


@pytest.mark.slow
def test_a_large_file_is_cut_alike_on_a_dask_cluster_and_locally(tmp_path, monkeypatch, capsys):
    """The workers of the cluster at --dask_client_address cut a large file into the work
    units the local runner's launcher cuts, whatever the cluster's threads or the local
    processes (the output's bytes never depend on the parallelism)."""
    from dask.distributed import LocalCluster

    from pipeline.cli import run
    from transforms.tabular import split_units

    monkeypatch.setattr(split_units, "MIN_RANGE_BYTES", 1000)  # a small file is cut too
    path = tmp_path / "data.csv"
    path.write_text("id,text\n" + "".join(f"{i},row {i}\n" for i in range(20000)))
    base = ["convert", "--input", str(path), "--format", "csv", "--output", str(tmp_path / "out"),
            "--dry-run"]
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        assert run([*base, "--runner", "dask", "--dask_client_address",
                    cluster.scheduler_address]) == 0
        on_cluster = json.loads(capsys.readouterr().out)
    assert run([*base, "--converter-processes", "2"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert on_cluster["work_units"] == local["work_units"] == 8
    assert "cut at record starts by the workers" in \
        on_cluster["work_unit_splitting"]["files"][str(path)]


def test_a_dask_run_keeps_the_partitions_and_shuffle_it_is_told():
    """Given partitions and a configured shuffle method are kept as they are. On a cluster at
    an address, never contacted: with the partitions given there is nothing to ask it (the
    choice does not depend on whose cluster it is). The partitions and shuffle a run on its
    own LocalCluster gets: tests/e2e/test_runners_e2e.py, test_dask_local_cluster_..."""
    import dask
    from apache_beam.runners.dask.dask_runner import DaskOptions

    argv = ["--runner", "dask", "--dask_client_address", "tcp://scheduler:8786",
            "--dask_npartitions", "3"]
    options = PipelineOptions(argv)
    with runner_for(options, argv, work_units=8):
        assert options.view_as(DaskOptions).npartitions == 3
        assert dask.config.get("dataframe.shuffle.method") == "tasks"
    with dask.config.set({"dataframe.shuffle.method": "disk"}):
        with runner_for(PipelineOptions(argv), argv, work_units=2):
            assert dask.config.get("dataframe.shuffle.method") == "disk"


def test_a_dask_cluster_that_fails_to_cut_the_input_fails_the_run_in_one_line(
        tmp_path, monkeypatch, capsys):
    """Scans lost on the cluster (a worker gone, a cancelled task) end the run before it
    starts: one line, exit 1, nothing written but the output folder's lock file."""
    import contextlib

    from pipeline import convert
    from pipeline.cli import EXIT_FAILED, run
    from transforms.tabular import split_units

    class LostWorkers:
        threads = 2

        def map(self, fn, items):
            raise RuntimeError("Error during deserialization of the task graph. This\n"
                               "frequently occurs if ...")

    monkeypatch.setattr(convert, "dask_cluster",
                        lambda options: contextlib.nullcontext(LostWorkers()))
    monkeypatch.setattr(split_units, "MIN_RANGE_BYTES", 1000)
    path = tmp_path / "data.csv"
    path.write_text("id,text\n" + "".join(f"{i},row {i}\n" for i in range(5000)))
    code = run(["convert", "--input", str(path), "--format", "csv", "--output",
                str(tmp_path / "out"), "--runner", "dask", "--dask_client_address", "tcp://x:1"])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED
    assert err == ("tfrecord-pipeline convert: finding the record starts of the input's byte "
                   "ranges on the Dask cluster failed: RuntimeError: Error during "
                   "deserialization of the task graph. This\n")
    assert not (tmp_path / "out").exists()  # the lock and the folder it created are gone


def test_a_dask_rerun_of_a_committed_conversion_reads_nothing_on_the_cluster(
        tmp_path, monkeypatch, capsys):
    """The committed output is recognised before any range is scanned: a scheduled re-run
    costs no read of the input on the workers."""
    import contextlib

    from pipeline import convert
    from pipeline.cli import run
    from tests.helpers import in_memory_args
    from transforms.tabular import split_units

    class NoScans:
        threads = 2

        def map(self, fn, items):
            raise AssertionError("scanned the input of a committed conversion")

    monkeypatch.setattr(split_units, "MIN_RANGE_BYTES", 1000)
    path = tmp_path / "data.csv"
    path.write_text("id,text\n" + "".join(f"{i},row {i}\n" for i in range(5000)))
    base = ["convert", "--input", str(path), "--format", "csv", "--output", str(tmp_path / "out")]
    assert run([*base, *in_memory_args()]) == 0
    monkeypatch.setattr(convert, "dask_cluster", lambda options: contextlib.nullcontext(NoScans()))
    capsys.readouterr()
    assert run([*base, "--runner", "dask", "--dask_client_address", "tcp://x:1"]) == 0
    assert "already holds this conversion" in capsys.readouterr().out
