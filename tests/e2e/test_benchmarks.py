"""The benchmark script runs end to end at its tiny size (benchmarks are not tests: this
only proves that every path works and writes what it claims)."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib.util
import io
import json
import os
from pathlib import Path

import pytest

from benchmarks.cases import Case

REPO = Path(__file__).resolve().parents[2]
TABULAR_IDS = {
    f"{dataset}/{path}/{compression}"
    for dataset in ("tf_tutorial", "wide")
    for path in ("ours", "tf", "beam", "ceiling")
    for compression in ("none", "gzip")
}
EXPECTED_IDS = TABULAR_IDS | {
    "images/ours/none", "images/plain_loop/none", "memory_small/ours/gzip", "startup/ours/gzip",
}


def _tf_examples(output_dir: str) -> list[bytes]:
    """Every Example of a path's output, read by TensorFlow, in a canonical form: parsed and
    serialized again deterministically (features by name, values packed), so two Examples are
    equal exactly when their features' names, kinds and values are."""
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(output_dir, "*.tfrecord*")))
    assert files, f"no TFRecord files in {output_dir}"
    compression = "GZIP" if files[0].endswith(".gz") else ""
    rows = []
    # One batch of all records: iterating record by record costs ~0.2 ms each in eager mode.
    dataset = tf.data.TFRecordDataset(files, compression_type=compression).batch(1 << 20)
    for batch in dataset.as_numpy_iterator():
        rows += [tf.train.Example.FromString(record).SerializeToString(deterministic=True)
                 for record in batch]
    return rows


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The script's main in this process, which runs the baselines and our CLI's cases too
    (TensorFlow imported once, usually by the session already); the start-up case is a child.
    Smaller than --tiny's own sizes (every path's work is per row, its start-up is not): still
    a row in every part file of the smallest input (memory_small, a tenth of the tutorial's
    rows) and two images per label."""
    from benchmarks.run_benchmarks import main

    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "results.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["--tiny", "--out", str(out), "--work-dir", str(tmp / "work"), "--keep-work",
                     "--tabular-rows-tf", "80", "--tabular-rows-wide", "16", "--images", "4"])
    assert code == 0, stdout.getvalue()[-5000:]
    return json.loads(out.read_text()), out, stdout.getvalue()


@pytest.mark.slow
def test_every_path_runs_and_writes_every_row(tiny_run):
    report, _, _ = tiny_run
    config = report["config"]
    assert config["tiny"] and config["repeats"] == 1
    assert (config["rows_tf"], config["rows_wide"], config["images"]) == (80, 16, 4)
    expected_rows = {
        "tf_tutorial": config["rows_tf"],
        "wide": config["rows_wide"],
        "memory_small": config["rows_tf"] // 10,
        "images": config["images"],
        "startup": config["parts"],  # one row per part file
    }
    results = {entry["id"]: entry for entry in report["results"]}
    assert set(results) == EXPECTED_IDS
    for case_id, entry in results.items():
        assert entry.get("ok"), (case_id, entry.get("error"))
        rows = expected_rows[entry["dataset"]]
        assert entry["rows"] == rows, case_id
        # Counted by the script reading every output file back with CRC checks.
        assert entry["records"] == rows, case_id
        assert entry["records_all_runs"] == [rows], case_id
        assert entry["rows_per_s"] > 0, case_id
        assert entry["mb_per_s"] > 0 and entry["output_bytes"] > 0, case_id
        assert entry["peak_rss_bytes"] > 0, case_id


@pytest.mark.slow
def test_outputs_hold_the_same_examples_read_by_tensorflow(tiny_run):
    report, _, _ = tiny_run
    results = {entry["id"]: entry for entry in report["results"]}
    for dataset in ("tf_tutorial", "wide"):
        reference = sorted(_tf_examples(results[f"{dataset}/tf/none"]["output_dir"]))
        assert len(reference) == results[f"{dataset}/tf/none"]["rows"]
        for case_id in sorted(i for i in TABULAR_IDS if i.startswith(dataset + "/")):
            examples = _tf_examples(results[case_id]["output_dir"])
            assert sorted(examples) == reference, case_id
    ours = sorted(_tf_examples(results["images/ours/none"]["output_dir"]))
    plain = sorted(_tf_examples(results["images/plain_loop/none"]["output_dir"]))
    assert len(ours) == report["config"]["images"]
    assert ours == plain


@pytest.mark.slow
def test_reports_ratios_memory_and_machine(tiny_run):
    report, out, stdout = tiny_run
    for group in ("tf_tutorial/none", "tf_tutorial/gzip", "wide/none", "wide/gzip"):
        assert set(report["ratios"][group]) == {"ours/tf", "ours/beam", "ours/ceiling"}
        assert all(value > 0 for value in report["ratios"][group].values())
    assert report["ratios"]["images/none"]["ours/plain_loop"] > 0
    memory = report["memory"]
    assert memory["rows_large"] == 10 * memory["rows_small"]
    assert memory["peak_rss_small_mb"] > 0 and memory["peak_rss_large_mb"] > 0
    assert report["machine"]["cores"] >= 1 and report["machine"]["python"]
    assert report["machine"]["apache_beam"] and report["machine"]["tensorflow"]
    gcp_extra = report["machine"]["beam_gcp_extra"]
    assert gcp_extra is (importlib.util.find_spec("google.cloud.dataflow") is not None)
    markdown = out.with_suffix(".md").read_text()
    assert "| tf_tutorial/ours/gzip |" in markdown and report["machine"]["cpu"] in markdown
    assert f"Beam's gcp extra {'installed' if gcp_extra else 'not installed'}" in markdown
    assert "tf_tutorial/beam/gzip" in stdout and "ours/ceiling" in stdout


def test_our_packages_are_byte_compiled_before_timing(tmp_path):
    """As `pip install` would have done, even where Python writes no bytecode itself."""
    from benchmarks.measure import byte_compile_project

    sources = []
    for package in ("pipeline", "protos", "transforms"):
        (tmp_path / package).mkdir()
        for source in (REPO / package).glob("*.py"):
            sources.append(tmp_path / package / source.name)
            sources[-1].write_bytes(source.read_bytes())
    assert not any(Path(importlib.util.cache_from_source(str(s))).exists() for s in sources)
    byte_compile_project(tmp_path)
    for source in sources:
        assert Path(importlib.util.cache_from_source(str(source))).is_file(), source


def test_full_runs_give_every_case_its_own_child_and_beam_its_worker_processes():
    """The smoke run shares one process (its own) among the baselines and our CLI's cases but
    start-up's; a measurement must not."""
    from benchmarks.baselines import BEAM_WORKERS
    from benchmarks.cases import STARTUP_CASE, child_groups, in_shared_child
    from benchmarks.run_benchmarks import parse_args

    full, tiny = parse_args([]), parse_args(["--tiny"])
    assert not full.shared_worker and tiny.shared_worker
    assert (full.beam_running_mode, full.beam_workers) == ("multi_processing", BEAM_WORKERS)
    assert (tiny.beam_running_mode, tiny.beam_workers) == ("in_memory", 1)
    ours = Case(id="d/ours/none", dataset="d", path="ours", compression="none", rows=1,
                input_bytes=1, expected_features=())
    tf, beam = (dataclasses.replace(ours, id=f"d/{path}/none", path=path, worker={"kind": path})
                for path in ("tf", "beam"))
    assert child_groups([ours, tf, beam], shared_worker=False) == [[ours], [tf], [beam]]
    assert child_groups([ours, tf, beam], shared_worker=True) == [[tf, beam], [ours]]
    # The smoke run's cases: our CLI in-process in the shared child, before the baselines
    # (it forks); start-up's stays a process of its own.
    startup = dataclasses.replace(ours, id=STARTUP_CASE, ours=("--input", "x"))
    shared = [in_shared_child(case) for case in (tf, ours, startup, beam)]
    assert shared[0] is tf and shared[2] is startup and shared[3] is beam
    assert shared[1].worker == {"kind": "ours", "argv": []} and shared[1].timing == "region"
    assert child_groups(shared, shared_worker=True) == [[shared[1], tf, beam], [startup]]


def test_full_runs_baselines_run_in_a_child_of_the_script_run_as_a_plain_script(tmp_path):
    """A full run's baseline child: the script as a plain script (`--worker`), measured, its
    timed region and output checked. (The smoke run above runs its baselines in its own
    process.) The ceiling baseline, which imports no TensorFlow."""
    from benchmarks.cases import tabular_cases
    from benchmarks.data import tutorial_columns, write_tabular
    from benchmarks.measure import run_cases

    (tmp_path / "logs").mkdir()
    data = write_tabular("tf_tutorial", 20, tutorial_columns, str(tmp_path), 1)
    [case] = [case for case in tabular_cases(data) if case.id == "tf_tutorial/ceiling/gzip"]
    [run] = run_cases([case], str(tmp_path), 0)
    assert "error" not in run, run["error"]
    assert run["returncode"] == 0 and run["records"] == 20 and run["files"] == 1
    assert run["seconds"] > 0 and run["cpu_seconds"] > 0 and run["peak_rss_bytes"] > 0
    assert run["seconds"] < run["wall_seconds"]  # its region, without the child's start-up
    with pytest.raises(ValueError, match="only baselines"):  # our CLI's cases are processes
        run_cases([tabular_cases(data)[0]], str(tmp_path), 0, in_process=True)


def test_a_baseline_failing_in_the_smoke_runs_process_is_reported_with_its_traceback(tmp_path):
    from benchmarks.measure import run_cases

    (tmp_path / "logs").mkdir()
    missing = str(tmp_path / "missing.csv")
    case = Case(id="d/ceiling/none", dataset="d", path="ceiling", compression="none", rows=1,
                input_bytes=1, expected_features=("a",),
                worker={"kind": "ceiling", "compression": "none", "columns": [["a", "int64"]],
                        "files": [missing]})
    [run] = run_cases([case], str(tmp_path), 0, in_process=True)
    assert run["returncode"] == 1
    assert run["error"].startswith("exit code 1; log tail:\nTraceback") and missing in run["error"]
