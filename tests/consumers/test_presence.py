"""The converters count, per feature, the records carrying it and their value counts; the
commit adds them up into `feature_spec.json`. The counts are facts, not shapes: readers shape
features from the spec alone."""

from __future__ import annotations

import json

from tests.helpers import in_memory_args
from tfrecord_pipeline import read_examples, run, tf_dataset

SPEC = """features:
  - {name: id, type: int64}
  - {name: score, type: float}
  - {name: note, type: string}
  - {name: pair, type: int64, list: true, separator: "|"}
  - {name: tags, type: string, list: true, separator: "|"}
splits: {train: 50, test: 50}
split_key: [id]
"""


def _output(tmp_path, rows: int = 60):
    source = tmp_path / "in.csv"
    lines = ["id,score,note,pair,tags"]
    for i in range(rows):
        note = f"n{i}" if i % 3 else ""
        tags = "|".join(f"t{j}" for j in range(i % 4))
        lines.append(f"{i},{i / 2},{note},{i}|{i + 1},{tags}")
    source.write_text("\n".join(lines) + "\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    assert run(["convert", "--input", str(source), "--format", "csv", "--spec", str(spec),
                "--output", str(out), "--max-shard-records", "7", *in_memory_args()]) == 0
    return out


def test_presence_is_counted_over_every_batch_and_split(tmp_path):
    out = _output(tmp_path)
    features = json.loads((out / "feature_spec.json").read_text())["features"]
    presence = {name: entry["presence"] for name, entry in features.items()}
    assert presence["id"] == {"records": 60, "of": 60, "min_values": 1, "max_values": 1}
    assert presence["score"] == {"records": 60, "of": 60, "min_values": 1, "max_values": 1}
    assert presence["note"] == {"records": 40, "of": 60, "min_values": 1, "max_values": 1}
    assert presence["pair"] == {"records": 60, "of": 60, "min_values": 2, "max_values": 2}
    # An empty unquoted cell is missing, for lists too: 15 rows have no tags.
    assert presence["tags"] == {"records": 45, "of": 60, "min_values": 1, "max_values": 3}


def test_readers_shape_features_from_the_spec_not_from_the_counts(tmp_path, tf):
    out = _output(tmp_path)
    batch = next(iter(tf_dataset(str(out), "train", batch_size=100)))
    # Optional scalars are masked scalars whether or not a value is missing (note: 1 in 3).
    for name in ("score", "note"):
        assert not isinstance(batch[name], tf.SparseTensor) and batch[name].shape.rank == 1
        assert batch[f"{name}/present"].dtype == tf.bool
    # Lists stay varlen, even one with two values in every record.
    assert isinstance(batch["pair"], tf.SparseTensor) and isinstance(batch["tags"], tf.SparseTensor)
    ids = batch["id"].numpy().tolist()
    assert batch["pair"].values.numpy().tolist() == [v for i in ids for v in (i, i + 1)]
    assert batch["note/present"].numpy().tolist() == [bool(i % 3) for i in ids]
    records = list(read_examples(str(out), "train"))
    assert [int(r["id"]) for r in records] == ids
    assert all(r["pair"].tolist() == [int(r["id"]), int(r["id"]) + 1] for r in records)
    assert {r["note"].shape for r in records} == {()}
