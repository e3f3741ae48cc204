"""Same input, same bytes: the output depends on the input and the options, never on how many
processes, Dask workers or partitions converted it, nor on the run.

Every file is compared byte for byte, the run's id, time and output folder aside (the report
shows them); the manifest is compared without the keys that name the run (`run_id`,
`created_at`) or record the command line (`options`, `fingerprint`, which hold the output
path and the process count).
"""

from __future__ import annotations

import json
import random

import pytest

from pipeline.cli import run

_RUN_KEYS = ("run_id", "created_at", "options", "fingerprint")
# Small work units and shards: the small inputs still make a dozen units and many shards.
WORK_UNIT_OPTIONS = ("--work-unit-bytes", "4KB", "--max-shard-bytes", "6KB")


def _write_inputs(folder) -> None:
    """Three CSV files, one large enough to be cut into a dozen byte ranges of
    `--work-unit-bytes 4KB` (`WORK_UNIT_OPTIONS`), with a few bad values, missing cells and
    quoted newlines."""
    folder.mkdir()
    rng = random.Random(7)
    for part, rows in enumerate((1900, 250, 250)):
        lines = ["id,x,name,note"]
        for i in range(rows):
            x = "" if rng.random() < 0.02 else f"{rng.random():.5f}"
            if rng.random() < 0.008:
                x = "oops"
            note = '"two\nlines"' if i % 250 == 3 else f"n{rng.randint(0, 40)}"
            lines.append(f"{i},{x},c{rng.randint(0, 9)},{note}")
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "spec.yaml").write_text(
        "features:\n  - {name: id, type: int64}\n  - {name: x, type: float}\n"
        "  - {name: name, type: string}\n  - {name: note, type: string}\n"
        "splits: {train: 8, eval: 2}\nsplit_key: id\n", encoding="utf-8")


def _files(output) -> dict[str, bytes]:
    """Every file of a committed output: relative path -> bytes, with the run's id, time and
    output path (which the report shows) replaced by placeholders, and the manifest without
    the run's own keys."""
    manifest = json.loads((output / "manifest.json").read_bytes())
    run_specific = {manifest["run_id"]: "RUN", manifest["created_at"]: "TIME", str(output): "OUT"}
    files = {}
    for path in sorted(output.rglob("*")):
        if path.is_file():
            relative = str(path.relative_to(output))
            data = path.read_bytes()
            if relative == "manifest.json":
                data = json.dumps({k: v for k, v in manifest.items() if k not in _RUN_KEYS},
                                  sort_keys=True).encode()
            for value, placeholder in run_specific.items():
                data = data.replace(value.encode(), placeholder.encode())
            files[relative] = data
    return files


def _convert(tmp_path, name: str, *extra: str) -> dict[str, bytes]:
    output = tmp_path / name / "out"  # one folder name: TFDS metadata names the data set by it
    argv = ["convert", "--input", str(tmp_path / "in" / "*.csv"), "--format", "csv",
            "--spec", str(tmp_path / "in" / "spec.yaml"), "--output", str(output),
            *WORK_UNIT_OPTIONS, "--max-error-rate", "1", "--quiet", *extra]
    assert run(argv) == 0
    return _files(output)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The inputs under `in` and their conversion on one converter process, made once for the
    tests comparing other runs with it (read only: each run writes a folder of its own)."""
    folder = tmp_path_factory.mktemp("same-bytes")
    _write_inputs(folder / "in")
    return folder, _convert(folder, "one", "--converter-processes", "1")


@pytest.mark.slow
def test_the_output_is_the_same_bytes_whatever_the_parallelism(one_process, dask_address):
    from dask.distributed import LocalCluster

    tmp_path, reference = one_process
    assert len([name for name in reference if name.endswith(".tfrecord")]) > 4
    assert any(name.startswith("dead_letter/") for name in reference)
    for processes in ("2", "4"):
        assert _convert(tmp_path, f"p{processes}", "--converter-processes", processes) == reference
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster:
        dask = _convert(tmp_path, "dask1", "--runner", "dask",
                        "--dask_client_address", cluster.scheduler_address, "--dask_npartitions", "3")
    assert dask == reference, "Dask with 1 worker"
    dask = _convert(tmp_path, "dask2", "--runner", "dask",  # the session's cluster: 2 workers
                    "--dask_client_address", dask_address, "--dask_npartitions", "7")
    assert dask == reference, "Dask with 2 workers"


def test_two_identical_runs_write_identical_statistics(one_process):
    """A second run with the same options as the shared one-process run (the runs on other
    process counts above are further runs compared with it)."""
    tmp_path, first = one_process
    second = _convert(tmp_path, "second", "--converter-processes", "1")
    assert first["stats.json"] == second["stats.json"]
    assert first == second
