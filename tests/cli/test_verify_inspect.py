"""`tfrecord-pipeline verify` and `inspect` on real sink output."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipeline.cli import EXIT_CORRUPT, run
from tests.e2e.forked_console import console
from tests.format.reference_codec import encode_example
from transforms.format.manifest_format import FileEntry, Manifest
from transforms.output_files import owned_paths
from transforms.records import RecordBatch, batch_key
from transforms.sink import WriteToShardedTFRecord


def _write_output(output, compression="none", records=12, extra_files=None):
    examples = [
        encode_example({"id": ("int64", [i]), "text": ("bytes", [f"héllo {i}".encode()]),
                        "raw": ("bytes", [b"\xff\x00" * (i % 3)]), "vec": ("float", [0.5, -1.0])})
        for i in range(records)
    ]
    batch = RecordBatch(batch_key(0, 0), "train", examples, (), len(examples))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = pipeline | beam.Create([batch]) | WriteToShardedTFRecord(str(output), compression=compression,
                                                                     extra_files=extra_files)
    with open(os.path.join(output, "manifest.json")) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def clean_output(tmp_path_factory):
    """`_write_output`'s default output, written once (a Beam pipeline each) and only read:
    a test that changes it works on `_copy_of`."""
    output = tmp_path_factory.mktemp("clean") / "output"
    _write_output(output)
    return output


def _copy_of(clean_output, target) -> dict:
    """A copy of the shared clean output at `target`; its manifest."""
    shutil.copytree(clean_output, target, dirs_exist_ok=True)
    with open(os.path.join(target, "manifest.json")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_verify_accepts_clean_output(tmp_path, capsys, compression, clean_output):
    if compression == "none":  # the shared output is uncompressed
        output, manifest = clean_output, json.loads((clean_output / "manifest.json").read_text())
    else:
        output, manifest = tmp_path, _write_output(tmp_path, compression)
    assert run(["verify", str(output)]) == 0
    assert '"status": "ok"' in capsys.readouterr().out
    shard = str(output / manifest["shards"][0]["path"])
    assert run(["verify", shard]) == 0


def test_one_byte_flip_anywhere_is_reported_with_file_and_offset(tmp_path, capsys):
    manifest = _write_output(tmp_path, records=3)
    shard = tmp_path / manifest["shards"][0]["path"]
    original = shard.read_bytes()
    for position in range(len(original)):
        corrupted = bytearray(original)
        corrupted[position] ^= 0x01
        shard.write_bytes(bytes(corrupted))
        capsys.readouterr()
        # Checked as a bare file (CRCs only) and as an output folder (manifest too).
        assert run(["verify", str(shard)]) != 0, position
        out = capsys.readouterr().out
        assert str(shard) in out and re.search(r"offset \d+", out), (position, out)
        assert run(["verify", str(tmp_path)]) != 0, position
    shard.write_bytes(original)
    assert run(["verify", str(tmp_path)]) == 0


def test_one_byte_flip_in_a_gzip_shard_is_reported(tmp_path, capsys):
    manifest = _write_output(tmp_path, compression="gzip", records=20)
    shard = tmp_path / manifest["shards"][0]["path"]
    original = shard.read_bytes()
    for position in range(0, len(original), max(1, len(original) // 40)):
        corrupted = bytearray(original)
        corrupted[position] ^= 0x10
        shard.write_bytes(bytes(corrupted))
        capsys.readouterr()
        assert run(["verify", str(tmp_path)]) != 0, position
        assert str(shard) in capsys.readouterr().out
    shard.write_bytes(original)


def test_verify_reports_missing_and_unlisted_shards(tmp_path, capsys, clean_output):
    manifest = _copy_of(clean_output, tmp_path)
    stray = tmp_path / "train-00000-of-00002.tfrecord"
    stray.write_bytes((tmp_path / manifest["shards"][0]["path"]).read_bytes())
    assert run(["verify", str(tmp_path)]) != 0
    assert "not listed in the manifest" in capsys.readouterr().out
    stray.unlink()
    os.remove(tmp_path / manifest["shards"][0]["path"])
    assert run(["verify", str(tmp_path)]) != 0
    assert "missing" in capsys.readouterr().out


def test_verify_of_a_path_that_matches_nothing_is_a_usage_error(tmp_path, capsys, clean_output):
    """As inspect, index and export: exit 2 and one line, not a "corrupt" report (exit 4),
    also when another path given is fine."""
    for paths in ([tmp_path / "nothing"], [clean_output, tmp_path / "nothing*"]):
        assert run(["verify", *map(str, paths)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.splitlines() == [
            f"tfrecord-pipeline verify: error: no TFRecord file found at {paths[-1]}"]


def test_verify_checks_the_side_files_the_manifest_lists(tmp_path, capsys):
    labels, altered = b"cat\ndog\n", b"cat\ndig\n"  # same size
    _write_output(tmp_path, extra_files={"feature_spec.json": b"{}", "labels.txt": labels})
    assert run(["verify", str(tmp_path)]) == 0
    (tmp_path / "feature_spec.json").unlink()
    (tmp_path / "labels.txt").write_bytes(altered)
    capsys.readouterr()
    assert run(["verify", str(tmp_path)]) == EXIT_CORRUPT
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == [f"{tmp_path / 'feature_spec.json'}: listed in the manifest but missing",
                        f"{tmp_path / 'labels.txt'}: sha256 is {hashlib.sha256(altered).hexdigest()!r}, "
                        f"manifest says {hashlib.sha256(labels).hexdigest()!r}"]
    assert json.loads(out[-1])["status"] == "corrupt"


def test_superseded_files_are_owned_and_checked_by_size_and_digest_never_read_as_shards(
        tmp_path, capsys, clean_output):
    """The previous generation's files a manifest keeps for its readers: named like shards
    (not "unlisted"), not TFRecord (not read), but missing or altered they are reported."""
    manifest = Manifest.from_dict(_copy_of(clean_output, tmp_path))
    old_shard, old_spec = tmp_path / "train-00000-of-00002.tfrecord", tmp_path / "old" / "spec.json"
    old_shard.write_bytes(b"not a tfrecord at all")
    old_spec.parent.mkdir()
    old_spec.write_bytes(b"{}")
    superseded = tuple(FileEntry(str(path.relative_to(tmp_path)), path.stat().st_size,
                                 hashlib.sha256(path.read_bytes()).hexdigest())
                       for path in (old_shard, old_spec))
    later = dataclasses.replace(manifest, generation=1, superseded=superseded)
    (tmp_path / "manifest.json").write_bytes(later.to_json())
    assert {"train-00000-of-00002.tfrecord", "old/spec.json"} <= owned_paths(str(tmp_path))
    assert run(["verify", str(tmp_path)]) == 0
    old_shard.write_bytes(b"not a tfrecord at al!")
    old_spec.unlink()
    capsys.readouterr()
    assert run(["verify", str(tmp_path)]) == EXIT_CORRUPT
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == [f"{old_shard}: sha256 is {hashlib.sha256(b'not a tfrecord at al!').hexdigest()!r}, "
                        f"manifest says {superseded[0].sha256!r}",
                        f"{old_spec}: listed in the manifest but missing"]


def test_verify_rejects_a_payload_that_is_not_an_example(tmp_path, capsys):
    from transforms.format.tfrecord_format import frame_record

    path = tmp_path / "junk.tfrecord"
    path.write_bytes(frame_record(b"\xff\xff\xff\xff"))
    assert run(["verify", str(path)]) != 0
    out = capsys.readouterr().out
    assert "not a tf.train.Example" in out and "record 0" in out


@pytest.mark.parametrize("command", [
    ["verify"], ["inspect"], ["index"], ["export", "--to", "parquet", "{out}"], ["report"],
])
def test_every_command_reading_an_output_exits_4_on_a_damaged_manifest(
        tmp_path, capsys, command, clean_output):
    # README: 4 means the command found corrupt data. export and report said 2 (usage).
    _copy_of(clean_output, tmp_path / "output")
    (tmp_path / "output" / "manifest.json").write_text('{"shards": [')
    name, *rest = command
    argv = [name, str(tmp_path / "output"), *(a.format(out=tmp_path / "x.parquet") for a in rest)]
    assert run(argv) == EXIT_CORRUPT
    printed = capsys.readouterr()
    assert "manifest is not valid JSON" in printed.out + printed.err  # verify: in its report
    assert not (tmp_path / "x.parquet").exists()


def test_export_exits_4_on_a_damaged_feature_spec(tmp_path, capsys):
    _write_output(tmp_path / "output", extra_files={"feature_spec.json": b'{"features": 3}'})
    assert run(["export", str(tmp_path / "output"), "--to", "parquet", str(tmp_path / "x.pq")]) \
        == EXIT_CORRUPT
    assert "is not a valid feature spec" in capsys.readouterr().err


def test_inspect_prints_json_lines_and_a_summary(capsys, clean_output):
    assert run(["inspect", str(clean_output), "--limit", "3"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert len(lines) == 3
    assert [(line["file"].endswith(".tfrecord"), line["record"]) for line in lines] == [
        (True, 0), (True, 1), (True, 2)]
    first = lines[0]["features"]
    assert first["id"] == {"int64": [0]}
    assert first["text"] == {"bytes": ["héllo 0"]}
    assert first["vec"] == {"float": [0.5, -1.0]}
    assert lines[1]["features"]["raw"] == {"bytes": [{"base64": "/wA="}]}
    assert "feature" in captured.err and "3/3" in captured.err


def test_inspect_missing_path_is_a_clear_error(tmp_path, capsys):
    assert run(["inspect", str(tmp_path / "nothing")]) != 0
    assert "no TFRecord file" in capsys.readouterr().err


def test_the_installed_command_and_python_m_share_one_entry_point():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
        scripts = tomllib.load(handle)["project"]["scripts"]
    assert scripts["tfrecord-pipeline"] == "pipeline.__main__:main"


def test_console_entry_point_drops_beams_spurious_bigquery_warning_only():
    """Beam without its gcp extra (the default install) logs "apitools not found ..." on
    import; the entry point drops that one warning, keeps other import-time warnings, and
    leaves the root logger unconfigured. Blocking `apitools` reproduces Beam's warning
    wherever the test runs, with or without the extra: a filter on the root logger (not a
    handler, so it changes nothing) sees that Beam did log it in the same process."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    # Another warning, logged while the entry point imports the CLI, must still be printed.
    probe = ("import sys\nsys.modules['apitools'] = None\n"
             "import importlib.abc, logging\n"
             "seen = []\n"
             "logging.getLogger().addFilter(lambda record: seen.append(record.getMessage()) or True)\n"
             "class Hook(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path, target=None):\n"
             "        if name == 'pipeline.cli':\n"
             "            logging.getLogger('probe').warning('another warning at import')\n"
             "sys.meta_path.insert(0, Hook())\n"
             "import pipeline.__main__\n"
             "print('handlers', logging.getLogger().handlers)\n"
             "print('beam logged apitools', any('apitools not found' in m for m in seen))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == ["handlers []", "beam logged apitools True"]
    assert "apitools" not in done.stderr.decode()
    assert "another warning at import" in done.stderr.decode()


def test_log_level_sets_the_documented_format_despite_beams_own_logging_set_up(tmp_path):
    """Beam's PipelineOptions() calls logging.basicConfig() itself; ours must come first, or
    --log-level would change the level but leave Python's bare "LEVEL:name:msg" format. The
    console entry point in a process of its own whose logging nothing configured before:
    forked from the fork server, which imported Beam once (what a fresh interpreter logs
    while it imports Beam: the test above)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sample = os.path.join(root, "pipeline", "sample_data", "tabular")
    done = console(["convert", "--input", os.path.join(sample, "*.csv"), "--format", "csv",
                    "--spec", os.path.join(sample, "customers.spec.yaml"),
                    "--output", str(tmp_path / "out"), "--log-level", "INFO", "--quiet"],
                   tmp_path / "console")
    assert done.returncode == 0, done.stderr
    committed = [line for line in done.stderr.splitlines() if "Committed" in line]
    assert len(committed) == 1, done.stderr
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO tfrecord_pipeline: "
                        r"Committed .*manifest\.json", committed[0]), committed[0]


def test_console_entry_point_flushes_output_and_keeps_exit_codes(tmp_path, capsys):
    """Piped output arrives whole from the console entry point, also when the command then
    fails, and the failure's exit code survives (exit 0 through the entry point: the
    --log-level test above)."""
    _write_output(tmp_path, records=3000)
    shard = next(p for p in tmp_path.rglob("*.tfrecord"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01  # the last record's payload CRC: the 2,999 records before it are printed
    shard.write_bytes(bytes(data))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    listed = subprocess.run([sys.executable, "-m", "pipeline", "inspect", str(tmp_path), "--limit", "-1"],
                            capture_output=True, env=env, timeout=300)
    assert listed.returncode == EXIT_CORRUPT, listed.stderr.decode()
    lines = listed.stdout.decode().splitlines()
    assert len(lines) == 2999 and json.loads(lines[-1])["features"]["id"] == {"int64": [2998]}
    assert run(["verify", str(tmp_path)]) == EXIT_CORRUPT
    assert '"status": "corrupt"' in capsys.readouterr().out


def test_inspect_prints_strict_json_and_shortens_long_bytes(tmp_path, capsys):
    from tests.format.reference_codec import encode_example
    from transforms.format.tfrecord_format import TFRecordWriter

    image = bytes([0xFF, 0xD8]) + bytes(range(256)) * 40
    text = "é" * 100
    path = tmp_path / "odd.tfrecord"
    with open(path, "wb") as handle, TFRecordWriter(handle) as writer:
        writer.write(encode_example({"x": ("float", [float("nan"), float("inf"), -float("inf"), 1e39]),
                                     "image": ("bytes", [image]), "text": ("bytes", [text.encode()])}))
    assert run(["inspect", str(path)]) == 0
    line = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(name))
    assert line["file"] == str(path) and line["record"] == 0
    features = line["features"]
    assert features["x"] == {"float": ["NaN", "Infinity", "-Infinity", "Infinity"]}
    assert features["image"]["bytes"][0]["length"] == len(image)
    assert len(base64.b64decode(features["image"]["bytes"][0]["base64_prefix"])) == 64
    assert features["text"]["bytes"][0] == {"length": 200, "prefix": "é" * 32}
    assert run(["inspect", str(path), "--full-values"]) == 0
    whole = json.loads(capsys.readouterr().out)["features"]
    assert base64.b64decode(whole["image"]["bytes"][0]["base64"]) == image
    assert whole["text"]["bytes"][0] == text
