"""Issue 34, "trust at face value": a run's outcome line says what happened and why.

Safe default error budget, refusals that name what differs, no lock file left behind nor a
folder made by a refused run, failure lines that name their cause, and smaller contract
points (Parquet text columns, verify on a non-TFRecord file, a bare --fail-on-drift, the
dry run's spec, messages).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import signal
import struct
import zlib

import pyarrow.parquet as pq
import pytest

from pipeline.cli import run
from pipeline.output_lock import LOCK_NAME, OutputBusyError, output_lock
from tests.helpers import in_memory_args
from transforms.images.headers import HeaderError, parse_header


def _csv(path, rows: int, bad: dict[int, str] | None = None) -> str:
    """`rows` rows of id,name; row i replaced by bad[i]."""
    bad = bad or {}
    path.write_text("id,name\n" + "".join(bad.get(i, f"{i},n{i}") + "\n" for i in range(rows)))
    return str(path)


def _convert(source: str, out, *extra: str, quiet: bool = True) -> list[str]:
    flags = in_memory_args() if quiet else [arg for arg in in_memory_args() if arg != "--quiet"]
    return ["convert", "--input", source, "--format", "csv", "--output", str(out), *flags, *extra]


# ------------------------------------------------------------------ the error budget


@pytest.mark.parametrize("bad", [{499: '499,"n499'},  # a quote that never closes
                                 {3: "3,a,b", 7: "7"}])  # rows with more or fewer fields
def test_by_default_any_dead_letter_fails_the_run_in_one_line(tmp_path, capsys, bad):
    source = _csv(tmp_path / "data.csv", 1000, bad)
    out = tmp_path / "out"
    assert run(_convert(source, out)) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfrecord-pipeline convert: ")
    assert "input records" in err[0] and "more than --max-error-rate 0.00%" in err[0]
    assert not (out / "manifest.json").exists()  # nothing committed but the dead letters
    assert not list(out.glob("*.tfrecord"))


def test_with_a_budget_the_summary_first_line_gives_the_dead_lettered_fraction(tmp_path, capsys):
    source = _csv(tmp_path / "data.csv", 1000, {499: '499,"n499'})  # swallows rows 499..999
    out = tmp_path / "out"
    assert run(_convert(source, out, "--max-error-rate", "1", quiet=False)) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"Committed {out}/manifest.json, with 501 of 1,000 records dead-lettered (50.10%)"
    assert "the shard<" in (out / "report.html").read_text()  # one shard, not "the 1 shards"


def test_a_clean_run_first_line_says_only_committed(committed):
    _, out, printed = committed
    assert printed.splitlines()[0] == f"Committed {out}/manifest.json"


def test_a_whole_file_dead_letter_says_its_reason_in_the_outcome_line(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    _csv(tmp_path / "in" / "good.csv", 10)
    (tmp_path / "in" / "dup.csv").write_text("id,id\n1,2\n")
    source = str(tmp_path / "in" / "*.csv")
    assert run(_convert(source, tmp_path / "failed")) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"input file {tmp_path}/in/dup.csv dead-lettered whole: " in err[0]
    assert "duplicate column names ['id']" in err[0]
    assert run(_convert(source, tmp_path / "kept", "--max-error-rate", "1", quiet=False)) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"Committed {tmp_path}/kept/manifest.json, with 1 of 11 records "
                            f"dead-lettered (9.09%); input file {tmp_path}/in/dup.csv dead-lettered "
                            f"whole: ")
    assert "duplicate column names" in first


# ------------------------------------------------------------------ refused re-runs


def _refusal(capsys, argv) -> str:
    capsys.readouterr()
    assert run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("tfrecord-pipeline convert: error: ")
    assert "already holds a committed output of different inputs or options" in err[0]
    return err[0]


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """(source, output, what the run printed): 20 clean rows converted once with `_convert`'s
    defaults but --quiet. Read only: a test that runs on the output again works on a copy."""
    folder = tmp_path_factory.mktemp("committed")
    source = _csv(folder / "data.csv", 20)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run(_convert(source, folder / "out", quiet=False)) == 0
    return source, folder / "out", printed.getvalue()


def _copy_of(output, target):
    shutil.copytree(output, target)  # times kept: the same committed output, elsewhere
    return target


def test_a_refused_rerun_names_the_option_that_differs(tmp_path, capsys, committed):
    source, shared, _ = committed
    out = _copy_of(shared, tmp_path / "out")
    line = _refusal(capsys, _convert(source, out, "--batch-rows", "7", "--max-shard-records", "5"))
    assert "--batch-rows 16384 then, 7 now" in line
    assert "--max-shard-records unset then, 5 now" in line


def test_a_refused_rerun_names_the_files_added_removed_or_changed(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a", "b", "c"):
        _csv(folder / f"{name}.csv", 5)
    out = tmp_path / "out"
    argv = _convert(str(folder / "*.csv"), out, "--spec", _spec(tmp_path))
    assert run(argv) == 0
    size = os.path.getsize(folder / "a.csv")
    _csv(folder / "a.csv", 6)
    (folder / "b.csv").unlink()
    _csv(folder / "d.csv", 5)
    line = _refusal(capsys, argv)
    assert f"input {folder}/d.csv added" in line
    assert f"input {folder}/b.csv removed" in line
    assert f"input {folder}/a.csv changed ({size} bytes then, {size + 5} now)" in line
    os.utime(folder / "c.csv", (1, 1))
    _csv(folder / "a.csv", 5)
    (folder / "d.csv").unlink()
    _csv(folder / "b.csv", 5)
    os.utime(folder / "b.csv", (1, 1))  # b is back as it was, but for its time
    assert f"input {folder}/c.csv changed (modified since)" in _refusal(capsys, argv)


def _spec(tmp_path) -> str:
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n  - {name: id, type: int64}\n  - {name: name, type: string}\n")
    return str(spec)


# ------------------------------------------------------------------ the lock


def test_no_lock_file_stays_and_a_rerun_with_nothing_to_do_touches_nothing(tmp_path, capsys, committed):
    source, shared, _ = committed
    assert LOCK_NAME not in os.listdir(shared)
    out = _copy_of(shared, tmp_path / "out")
    before = {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)}
    folder_time = os.stat(out).st_mtime_ns
    mode = os.stat(out).st_mode
    os.chmod(out, 0o555)  # a published, read-only data set
    try:
        assert run(_convert(source, out, quiet=False)) == 0
    finally:
        os.chmod(out, mode)
    assert "nothing to do" in capsys.readouterr().out
    assert os.stat(out).st_mtime_ns == folder_time  # no lock file made and removed
    assert {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)} == before


def test_a_run_refused_at_a_usage_check_creates_no_folder(tmp_path, capsys):
    source = _csv(tmp_path / "data.csv", 20)
    out = tmp_path / "out"
    assert run(_convert(source, out, "--compare-to", str(tmp_path / "nowhere"))) == 2
    assert "--compare-to" in capsys.readouterr().err
    assert not out.exists()


def test_the_lock_excludes_a_second_holder_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    with output_lock(str(out)):
        assert os.listdir(out) == [LOCK_NAME]
        with pytest.raises(OutputBusyError, match="another run is writing"), output_lock(str(out)):
            pass
    assert not out.exists()  # the folder it created, empty again, is gone too
    out.mkdir()
    (out / LOCK_NAME).write_text("pid 1")  # left by a run that was killed
    with output_lock(str(out)):
        (out / "kept").write_text("x")
    assert os.listdir(out) == ["kept"]


# ------------------------------------------------------------------ failure causes


def test_a_write_failure_in_a_converter_process_names_its_cause(tmp_path, capsys):
    """Shards that cannot grow (as on a full disk) fail the run with the OS's reason; the
    forked converter's failure used to end 'conversion failed:' and nothing. Run in this
    process: its forked converters inherit a file size limit lowered (soft limit only, so it
    is raised back) for the run's length, and SIGXFSZ ignored, so a write past it is EFBIG."""
    source = _csv(tmp_path / "data.csv", 3000)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, limits[1]))
    try:
        code = run(["convert", "--input", source, "--format", "csv", "--output", str(tmp_path / "out"),
                    "--work-unit-bytes", "20KB", "--converter-processes", "2", "--quiet"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "tfrecord-pipeline convert: conversion failed: OSError: [Errno 27] File too large"


# ------------------------------------------------------------------ smaller contract points


def test_parquet_export_writes_spec_strings_as_text_and_bytes_as_binary(tmp_path, capsys):
    source = tmp_path / "data.csv"
    source.write_text("id,name,blob\n1,é,x\n2,b,y\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n  - {name: id, type: int64}\n  - {name: name, type: string}\n"
                    "  - {name: blob, type: bytes}\n")
    out = tmp_path / "out"
    assert run(_convert(str(source), out, "--spec", str(spec))) == 0
    assert run(["export", str(out), "--to", "parquet", str(tmp_path / "data.parquet")]) == 0
    table = pq.read_table(tmp_path / "data.parquet")
    assert str(table.schema.field("name").type) == "string"
    assert str(table.schema.field("blob").type) == "binary"
    assert table.column("name").to_pylist() == ["é", "b"]


def test_verify_says_a_csv_is_not_a_tfrecord_file(tmp_path, capsys):
    source = _csv(tmp_path / "data.csv", 5)
    assert run(["verify", source]) == 4
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"{source} offset 0 record 0: length CRC mismatch in the first record "
                     f"header: not a TFRecord file (it starts with b'id,name\\n0,n0'), or a "
                     f"damaged one")


def test_a_bare_fail_on_drift_means_schema_drift(tmp_path, capsys):
    source = _csv(tmp_path / "data.csv", 20)
    spec = tmp_path / "ids.yaml"
    spec.write_text("features:\n  - {name: id, type: int64}\n")
    assert run(_convert(source, tmp_path / "before", "--spec", str(spec))) == 0
    assert run(_convert(source, tmp_path / "after", "--fail-on-drift",  # a feature added
                        "--compare-to", str(tmp_path / "before"))) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfrecord-pipeline convert: schema drift against ")
    assert "(--fail-on-drift schema)" in err[0]


def test_the_dry_run_prints_the_spec_once_and_readably(tmp_path, capsys):
    source = _csv(tmp_path / "data.csv", 20)
    assert run(_convert(source, tmp_path / "out", "--dry-run")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "spec_yaml" not in summary
    assert summary["spec"]["features"] == [{"name": "id", "type": "int64", "missing": "mask"},
                                           {"name": "name", "type": "string", "missing": "mask"}]


def test_a_png_chunk_type_of_garbage_is_shown_escaped():
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
           + struct.pack(">I", 100) + b"\xa9\xb4E3" + b"\x00" * 10)
    with pytest.raises(HeaderError) as caught:
        parse_header(png)
    assert str(caught.value).endswith("PNG ends inside a \\xa9\\xb4E3 chunk")


def test_a_line_without_a_command_has_no_stray_space(capsys):
    assert run([]) == 2
    assert capsys.readouterr().err.startswith("tfrecord-pipeline: error: ")


def test_a_rerun_refused_for_new_input_files_points_to_append(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    _csv(folder / "a.csv", 5)
    argv = _convert(str(folder / "*.csv"), tmp_path / "out", "--spec", _spec(tmp_path))
    assert run(argv) == 0
    _csv(folder / "b.csv", 5)
    capsys.readouterr()
    assert run(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[1] == (
        "hint: --append converts only the new input into it")
    assert run([*argv, "--append"]) == 0
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["written"] == 10
