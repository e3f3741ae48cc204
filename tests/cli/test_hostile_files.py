"""`verify` and `inspect` on hostile files: bounded memory, no traceback, never outside the folder.

Every outcome is a reported problem (exit 4) or a clean pass (exit 0); inspect may also say
that a path holds nothing (exit 2). The unexpected-failure path of the CLI (exit 1, "failed:")
must never be reached.
"""

from __future__ import annotations

import json
import random
import resource
import shutil
import struct
import zlib

import pytest

from pipeline.cli import run
from tests.cli.test_verify_inspect import _write_output
from transforms.format.tfrecord_format import masked_crc32c
from transforms.format.tfrecord_reader import MAX_RECORD_BYTES


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _bomb(path, payload_length: int, inflated_bytes: int) -> None:
    """A gzip TFRecord whose first header claims `payload_length`, followed by zeros."""
    header = struct.pack("<Q", payload_length)
    header += struct.pack("<I", masked_crc32c(header))
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(header)]
    zeros = bytes(1 << 20)
    for _ in range(inflated_bytes >> 20):
        parts.append(compressor.compress(zeros))
    parts.append(compressor.flush())
    path.write_bytes(b"".join(parts))


@pytest.mark.parametrize("payload_length", [2**40, MAX_RECORD_BYTES + 1])
def test_a_gzip_bomb_is_reported_without_inflating_it(tmp_path, capsys, payload_length):
    bomb = tmp_path / "bomb-00000-of-00001.tfrecord.gz"
    _bomb(bomb, payload_length, inflated_bytes=64 << 20)  # refused at the header, whatever follows
    before = _maxrss_mb()
    assert run(["verify", str(bomb)]) == 4
    assert "exceeds the reader's limit" in capsys.readouterr().out
    assert run(["inspect", str(bomb)]) == 4
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "exceeds the reader's limit" in lines[0]
    assert _maxrss_mb() - before < 200


@pytest.fixture(scope="module")
def clean_output(tmp_path_factory):
    """`_write_output`'s default output, written once (a Beam pipeline each): tests damage
    copies of it."""
    output = tmp_path_factory.mktemp("clean") / "output"
    _write_output(output)
    return output


def _rewrite_manifest(folder, change) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, problem", [
    (lambda m: m.update(shards=3), "'shards' is 3, not a list"),
    (lambda m: m.update(counts="x"), "'counts' is 'x'"),
    (lambda m: m["shards"][0].update(records="12"), "wrong type"),
    (lambda m: m["shards"][0].update(path="../outside-00000-of-00001.tfrecord"), "outside the folder"),
    (lambda m: m["shards"][0].update(path="/etc/passwd"), "outside the folder"),
    (lambda m: m["shards"][0].update(path="gs://bucket/x.tfrecord"), "outside the folder"),
    (lambda m: m.clear(), "lacks required keys"),
    (lambda m: m["counts"].update(dead_letter_reasons=["x"]), "not counts per reason"),
    (lambda m: m.update(files=["stats.json"]), "not an object of side files"),
    (lambda m: m.update(files={"../stats.json": {"bytes": 1, "sha256": "0"}}), "outside the folder"),
    (lambda m: m.update(files={"stats.json": {"bytes": "1"}}), "not its bytes and sha256"),
])
def test_a_malformed_manifest_is_a_problem_not_a_traceback(tmp_path, capsys, change, problem, clean_output):
    output = shutil.copytree(clean_output, tmp_path / "out")
    outside = tmp_path / "outside-00000-of-00001.tfrecord"
    shutil.copy(next(output.glob("*.tfrecord")), outside)
    _rewrite_manifest(output, change)
    assert run(["verify", str(output)]) == 4
    out = capsys.readouterr().out
    assert problem in out and "Traceback" not in out
    assert run(["inspect", str(output), "--limit", "-1"]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing read, in particular not the file outside the folder
    assert len(captured.err.strip().splitlines()) == 1 and problem in captured.err


def test_a_listed_shard_that_is_a_directory_is_a_problem(tmp_path, capsys, clean_output):
    output = shutil.copytree(clean_output, tmp_path / "out")
    manifest = json.loads((output / "manifest.json").read_text())
    shard = output / manifest["shards"][0]["path"]
    shard.unlink()
    shard.mkdir()
    assert run(["verify", str(output)]) == 4
    assert "Traceback" not in capsys.readouterr().out


def _mutations(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 and data:  # flip bits
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del data[rng.randrange(len(data) + 1):]
    elif kind == 2:  # insert bytes
        at = rng.randrange(len(data) + 1)
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3 and len(data) >= 8:  # a huge length field somewhere
        at = rng.randrange(len(data) - 7)
        data[at:at + 8] = struct.pack("<Q", rng.choice([2**40, 2**63, MAX_RECORD_BYTES * 2]))
    else:  # duplicate a slice
        start = rng.randrange(len(data) + 1)
        data += data[start:start + rng.randint(1, 64)]
    return bytes(data)


def _json_mutation(value, rng: random.Random):
    """`value` with one randomly chosen leaf or container replaced by a value of another type."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        return {**value, key: _json_mutation(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.7:
        index = rng.randrange(len(value))
        return value[:index] + [_json_mutation(value[index], rng)] + value[index + 1:]
    return rng.choice([None, 3, -1, 2**70, "x", "../up", [], {}, [1, "a"], {"k": None}, True, 1.5])


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_fuzzed_shards_and_manifests_never_escape_as_a_traceback(tmp_path, capsys, compression):
    pristine = tmp_path / "pristine"
    manifest = _write_output(pristine, compression, records=6)
    shard_name = manifest["shards"][0]["path"]
    shard_bytes = (pristine / shard_name).read_bytes()
    manifest_text = (pristine / "manifest.json").read_text()
    files = sorted(path.name for path in pristine.iterdir())
    rng = random.Random(f"fuzz-{compression}")
    before = _maxrss_mb()
    for case in range(400):
        # One folder: each case rewrites both files that a case may damage (cheaper than a
        # fresh copy of the folder), and no command may have left a file behind.
        if case % 2:
            mutated = _json_mutation(manifest, rng)
            (pristine / "manifest.json").write_text(json.dumps(mutated))
            (pristine / shard_name).write_bytes(shard_bytes)
        else:
            (pristine / "manifest.json").write_text(manifest_text)
            (pristine / shard_name).write_bytes(_mutations(shard_bytes, rng))
        output = pristine
        verify_code = run(["verify", str(output)])
        inspect_code = run(["inspect", str(output), "--limit", "-1"])
        captured = capsys.readouterr()
        assert verify_code in (0, 4), (case, captured.err, captured.out[-3000:])
        assert inspect_code in (0, 2, 4), (case, captured.err)
        assert "failed:" not in captured.err and "Traceback" not in captured.err, (case, captured.err)
        assert sorted(path.name for path in output.iterdir()) == files, case
    assert _maxrss_mb() - before < 200
