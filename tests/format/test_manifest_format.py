"""`Manifest`: the bytes of a committed manifest read and written back unchanged, the two
generation fields absent until used, and what `manifest_problems` refuses."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.format.manifest_format import Counts, FileEntry, Manifest, ShardEntry, manifest_problems

_SHA = "ab" * 32


def _document(**changes) -> dict:
    document = {
        "created_at": "2026-05-04T00:00:00+00:00", "tool_version": "1", "options": {"format": "csv"},
        "run_id": "r", "compression": "none", "splits": ["train"],
        "shards": [{"path": "train-00000-of-00001.tfrecord", "split": "train", "records": 2, "bytes": 40,
                    "sha256": _SHA, "index": {"path": "train-00000-of-00001.tfrecord.tfindex",
                                              "bytes": 8, "sha256": _SHA}}],
        "dead_letter_files": [{"path": "dead_letter/d-00000-of-00001.jsonl", "records": 1, "bytes": 9,
                               "sha256": _SHA}],
        "counts": {"input": 3, "written": 2, "dead_letter": 1, "dead_letter_reasons": {"bad": 1},
                   "splits": {"train": {"input": 3, "written": 2, "dead_letter": 1}}},
        "files": {"feature_spec.json": {"bytes": 5, "sha256": _SHA}},
    }
    return {**document, **changes}


def _raw(document: dict) -> bytes:
    return json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n"


def test_a_committed_manifest_is_written_back_byte_for_byte(tmp_path):
    (tmp_path / "a.csv").write_text("id,x\n1,0.5\n2,oops\n3,1.5\n")
    (tmp_path / "spec.yaml").write_text("features:\n  - {name: id, type: int64}\n"
                                        "  - {name: x, type: float}\n")
    out = tmp_path / "out"
    assert run(["convert", "--input", str(tmp_path / "a.csv"), "--format", "csv", "--spec",
                str(tmp_path / "spec.yaml"), "--output", str(out), "--index", "--max-error-rate", "1",
                *in_memory_args()]) == 0
    raw = (out / "manifest.json").read_bytes()
    manifest = Manifest.from_json(raw, "manifest.json")
    assert manifest.to_json() == raw
    assert manifest.shards[0].index is not None and manifest.dead_letter_files
    assert (manifest.counts.input, manifest.counts.written, manifest.counts.dead_letter) == (3, 2, 1)
    assert manifest.metadata["run_id"] and manifest.side_file("feature_spec.json") is not None
    assert b"generation" not in raw and b"superseded" not in raw


def test_every_key_round_trips_sequences_and_unknown_keys_included():
    document = _document(labels=["a"], future={"kept": [1, 2]})
    document["counts"].update(written_rows=5, input=6)
    document["counts"]["splits"]["train"].update(written_rows=5, input=6)
    manifest = Manifest.from_json(_raw(document), "m")
    assert manifest.counts.rows_written == 5 and manifest.counts.splits["train"].written_rows == 5
    assert manifest.to_json() == _raw(document)


def test_generation_and_superseded_are_written_only_when_set():
    manifest = Manifest.from_dict(_document())
    assert (manifest.generation, manifest.superseded) == (0, ())
    old = FileEntry("train-00000-of-00002.tfrecord", 10, _SHA)
    later = dataclasses.replace(manifest, generation=2, superseded=(old,))
    document = json.loads(later.to_json())
    assert document["generation"] == 2 and document["superseded"] == [dataclasses.asdict(old)]
    assert Manifest.from_json(later.to_json(), "m") == later
    assert old in later.listed_files() and old not in manifest.listed_files()


@pytest.mark.parametrize("changes, problem", [
    ({"generation": -1}, "'generation' is -1, not a count"),
    ({"generation": True}, "'generation' is True, not a count"),
    ({"generation": 1, "superseded": {"path": "x"}}, "'superseded' is {'path': 'x'}, not a list"),
    ({"generation": 1, "superseded": [{"path": "../x", "bytes": 1, "sha256": _SHA}]},
     "'superseded' entry names '../x', a path outside the folder"),
    ({"generation": 1, "superseded": [{"path": "x", "bytes": 1}]}, "lacks ['sha256']"),
    ({"generation": 1, "superseded": [{"path": "x", "bytes": -1, "sha256": _SHA}]}, "wrong type"),
    ({"superseded": [{"path": "x", "bytes": 1, "sha256": _SHA}]}, "but 'generation' is 0"),
    ({"generation": 1, "superseded": [{"path": "feature_spec.json", "bytes": 1, "sha256": _SHA}]},
     "a file of the current generation"),
    ({"generation": 1, "superseded": [{"path": "train-00000-of-00001.tfrecord.tfindex", "bytes": 1,
                                       "sha256": _SHA}]}, "a file of the current generation"),
])
def test_generation_and_superseded_are_validated(changes, problem):
    document = _document(**changes)
    assert any(problem in found for found in manifest_problems(document)), manifest_problems(document)
    with pytest.raises(ValueError, match="m: manifest is malformed"):
        Manifest.from_json(_raw(document), "m")


def test_a_malformed_index_entry_makes_the_manifest_malformed():
    document = _document()
    document["shards"][0]["index"] = {"path": "/etc/passwd", "bytes": 1, "sha256": _SHA}
    with pytest.raises(ValueError, match="lists the index"):
        Manifest.from_dict(document, "m")


def test_too_large_or_not_json_names_the_path():
    with pytest.raises(ValueError, match="^here: manifest is not valid JSON"):
        Manifest.from_json(b"{", "here")
    with pytest.raises(ValueError, match="^here: manifest is malformed: the manifest is a JSON list"):
        Manifest.from_json(b"[]", "here")


def test_a_manifest_built_in_code_writes_the_layout_readers_parse():
    shard = ShardEntry("train-00000-of-00001.tfrecord", 1, 4, _SHA, "train")
    manifest = Manifest((shard,), Counts(1, 1, 0), "none",
                        metadata={"created_at": "t", "tool_version": "1", "options": {}})
    document = json.loads(manifest.to_json())
    assert document["shards"] == [{"path": shard.path, "split": "train", "records": 1, "bytes": 4,
                                   "sha256": _SHA}]
    assert document["counts"] == {"input": 1, "written": 1, "dead_letter": 0, "dead_letter_reasons": {},
                                  "splits": {}}
    assert Manifest.from_json(manifest.to_json(), "m") == manifest
