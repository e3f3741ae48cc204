"""A feature's shape and dtype follow from the spec alone: the same spec on an input without
missing values and on one with 2 % missing cells reads back with the same shapes and dtypes in
every reader (TensorFlow, `read_examples`, PyTorch, Grain, TFDS). A `missing: mask` scalar
reads as a value (0 where missing) plus a boolean `<name>/present`; a `missing: default` one
as its default. Inferred specs say `missing: mask` in spec.yaml, and drift reports a feature
that was in every record and now is missing in some."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.reading.examples import read_examples
from transforms.reading.features import feature_layout, record_layout
from transforms.reading.grain import grain_source
from transforms.reading.tensorflow import tf_dataset
from transforms.reading.torch import collate_examples, torch_dataset
from transforms.stats.drift import compare, describe

SPEC = """features:
  - {name: id, type: int64, required: true}
  - {name: score, type: float}
  - {name: note, type: string, missing: mask}
  - {name: count, type: int64, missing: default}
  - {name: tags, type: string, list: true, separator: "|"}
  - {name: pair, type: int64, list: true, separator: "|"}
"""
ROWS = 50


def _convert(folder, missing_every: int | None, spec: str | None = SPEC, *extra: str):
    """An uncompressed, indexed output of ROWS rows; with `missing_every`, score, note and
    count are empty in one row of that many (1 of 50: 2 %), and pair has 3 values there."""
    folder.mkdir()
    lines = ["id,score,note,count,tags,pair"]
    for i in range(ROWS):
        gap = missing_every is not None and i % missing_every == 7
        score, note, count = ("", "", "") if gap else (f"{i / 4}", f"n{i}", f"{i * 3}")
        pair = f"{i}|{-i}|0" if gap else f"{i}|{-i}"
        lines.append(f"{i},{score},{note},{count},t{i}|u{i},{pair}")
    (folder / "in.csv").write_text("\n".join(lines) + "\n")
    spec_args = []
    if spec is not None:
        (folder / "spec.yaml").write_text(spec)
        spec_args = ["--spec", str(folder / "spec.yaml")]
    out = folder / "out"
    assert run(["convert", "--input", str(folder / "in.csv"), "--format", "csv", *spec_args,
                "--output", str(out), "--compression", "none", "--index", *extra,
                *in_memory_args()]) == 0
    return str(out)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """(complete, 2 % missing): the same spec on two inputs; the second run compared to the
    first (`--compare-to`), as a run after a complete one."""
    root = tmp_path_factory.mktemp("shapes")
    complete = _convert(root / "complete", None)
    return complete, _convert(root / "gaps", ROWS, SPEC, "--compare-to", complete)


def _shapes(record: dict) -> dict:
    """{feature: (rank, dtype)}: a list's length is data, its rank is not."""
    return {name: (np.ndim(value), np.asarray(value).dtype.name) for name, value in record.items()}


def test_feature_spec_json_is_the_same_whatever_is_missing(outputs):
    specs = []
    for out in outputs:
        with open(f"{out}/feature_spec.json") as handle:
            specs.append(json.load(handle))
    # Presence is still counted, but shapes are not made of it.
    scores = [spec["features"]["score"].pop("presence")["records"] for spec in specs]
    assert scores == [ROWS, ROWS - 1]
    for spec in specs:
        for entry in spec["features"].values():
            entry.pop("presence", None)
    assert specs[0] == specs[1]
    assert specs[0]["features"]["score"]["missing"] == "mask"


def test_tf_dataset_element_spec_does_not_depend_on_missing_values(tf, outputs):
    complete, gaps = outputs
    for batch_size in (None, 8):
        specs = [tf_dataset(out, "data", batch_size=batch_size).element_spec for out in outputs]
        assert specs[0] == specs[1]
        assert isinstance(specs[0]["score"], tf.TensorSpec) and specs[0]["score"].dtype == tf.float32
        assert specs[0]["score/present"].dtype == tf.bool
        assert specs[0]["note"].shape.rank == (0 if batch_size is None else 1)
        assert isinstance(specs[0]["count"], tf.TensorSpec) and "count/present" not in specs[0]
        assert isinstance(specs[0]["tags"], tf.SparseTensorSpec)  # lists stay varlen
    batch = next(iter(tf_dataset(gaps, "data", batch_size=ROWS)))
    row = batch["id"].numpy().tolist().index(7)
    assert batch["score"].numpy()[row] == 0.0 and not batch["score/present"].numpy()[row]
    assert batch["note"].numpy()[row] == b"" and batch["count"].numpy()[row] == 0
    assert batch["score/present"].numpy().sum() == ROWS - 1
    assert batch["score"].numpy()[row + 1] == 2.0 and batch["note"].numpy()[row + 1] == b"n8"


def test_numpy_torch_and_grain_records_have_the_same_shapes_whatever_is_missing(outputs):
    complete, gaps = outputs
    expected = _shapes(next(iter(read_examples(complete, "data"))))
    assert expected["score"] == (0, "float32") and expected["score/present"] == (0, "bool")
    assert expected["note"] == (0, "object") and expected["count"] == (0, "int64")
    assert expected["pair"] == (1, "int64")
    for out in outputs:
        for records in (read_examples(out, "data"), grain_source(out, "data"),
                        torch_dataset(out, "data")):
            assert all(_shapes(record) == expected for record in records)
    missing = next(r for r in read_examples(gaps, "data") if r["id"] == 7)
    assert missing["score"] == 0.0 and not missing["score/present"] and missing["count"] == 0
    plain = next(r for r in read_examples(gaps, "data", as_numpy=False) if r["id"] == 7)
    assert plain["score"] == 0.0 and plain["score/present"] is False and plain["note"] == b""


def test_torch_batches_have_the_same_types_whatever_is_missing(outputs):
    import torch

    batches = []
    for out in outputs:
        loader = torch.utils.data.DataLoader(torch_dataset(out, "data"), batch_size=ROWS,
                                             collate_fn=collate_examples)
        batches.append(next(iter(loader)))
    for name in ("score", "score/present", "count", "id"):
        assert isinstance(batches[1][name], torch.Tensor), name
        assert (batches[0][name].dtype, batches[0][name].shape) == \
            (batches[1][name].dtype, batches[1][name].shape)
    # A list is ragged in both, though in the complete input every record has two values.
    assert [sorted(batch["pair"]) for batch in batches] == [["lengths", "values"]] * 2
    assert batches[0]["pair"]["lengths"].tolist() == [2] * ROWS
    assert batches[1]["score/present"].dtype == torch.bool
    assert int(batches[1]["score/present"].sum()) == ROWS - 1


def test_tfds_features_do_not_depend_on_missing_values(tf, outputs):
    import tensorflow_datasets as tfds

    builders = [tfds.builder_from_directory(out) for out in outputs]
    features = [{name: (tuple(feature.shape), np.dtype(feature.np_dtype).name)
                 for name, feature in builder.info.features.items()} for builder in builders]
    assert features[0] == features[1]
    assert features[0]["score"] == ((), "float32") and features[0]["count"] == ((), "int64")
    records = list(tfds.as_numpy(builders[1].as_dataset(split="data", shuffle_files=False)))
    missing = next(r for r in records if r["id"] == 7)
    # TFDS reads its own fill for a masked scalar a record lacks (it has no companion).
    assert missing["score"] == np.finfo(np.float32).min and missing["count"] == 0
    assert sorted(r["id"] for r in records) == list(range(ROWS))


def test_inferred_spec_writes_missing_mask_and_shapes_hold(tf, tmp_path):
    complete = _convert(tmp_path / "complete", None, spec=None)
    gaps = _convert(tmp_path / "gaps", ROWS, spec=None)
    with open(f"{gaps}/spec.yaml") as handle:
        inferred = {f["name"]: f for f in yaml.safe_load(handle)["features"]}
    assert inferred["score"]["missing"] == "mask" and inferred["id"]["missing"] == "mask"
    with open(f"{complete}/spec.yaml") as handle:
        assert yaml.safe_load(handle)["features"][1]["missing"] == "mask"
    specs = [tf_dataset(out, "data", batch_size=4).element_spec for out in (complete, gaps)]
    assert specs[0] == specs[1] and specs[0]["score/present"].dtype == tf.bool


def test_version_1_outputs_still_read_dense_by_their_counted_presence():
    entry = {"dtype": "float32", "kind": "var_len", "default": None, "list": False,
             "presence": {"records": 5, "of": 5, "min_values": 1, "max_values": 1}}
    assert record_layout({"version": 1, "features": {"x": entry}}).features["x"].shape == ()
    assert record_layout({"features": {"x": entry}}).features["x"].shape == ()
    # From version 2 on, presence is a count, not a shape.
    assert record_layout({"version": 2, "features": {"x": entry}}).features["x"].shape is None
    masked = feature_layout("x", {**entry, "missing": "mask"})
    assert masked.masked and masked.shape == () and masked.default == 0.0


def test_image_outputs_are_dense_scalars_from_the_config(tmp_path):
    from transforms.images.config import ImagePlan

    plan = ImagePlan(work_units=(), labels=("a", "b"), splits=("train",), allowed_roots=(),
                     input_count=0)
    layout = record_layout(plan.feature_spec())
    assert {f.shape for f in layout.features.values()} == {()}
    assert not any(f.masked for f in layout.features.values())


def test_a_run_with_2_percent_missing_after_a_complete_one_reports_the_presence_change(outputs):
    _, gaps = outputs
    with open(f"{gaps}/drift.json") as handle:
        drift = json.load(handle)
    assert [(c["feature"], c["previous"], c["current"]) for c in drift["presence"]] == [
        ("note", 1.0, 0.98), ("score", 1.0, 0.98)]  # count: missing: default writes 0
    assert drift["distribution_drift"] and not drift["schema_drift"]


def test_drift_reports_a_feature_that_was_always_present_and_now_is_missing_sometimes():
    def stats(score_records):
        return {"splits": {"data": {"records": 100, "features": {
            "id": {"kind": "int64", "records": 100},
            "score": {"kind": "float", "records": score_records}}}}}

    drift = compare(stats(100), stats(98), "previous")
    assert drift["presence"] == [{"split": "data", "feature": "score", "previous": 1.0,
                                  "current": 0.98}]
    assert drift["distribution_drift"]
    assert describe(drift) == ["'score' now missing in 2.0% of records (was in every one)"]
    assert compare(stats(98), stats(97), "previous")["presence"] == []  # within 10 points


def test_a_masked_context_feature_of_sequence_examples_reads_the_same_everywhere(tf, tmp_path):
    spec = """features:
  - {name: user, type: string, required: true}
  - {name: ts, type: int64, required: true}
  - {name: age, type: int64}
sequence: {group_by: [user], order_by: ts, context: [user, age]}
"""
    rows = [{"user": f"u{i % 2}", "ts": i, "age": 30 if i % 2 else None} for i in range(6)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "spec.yaml").write_text(spec)
    out = str(tmp_path / "out")
    assert run(["convert", "--input", str(tmp_path / "rows.jsonl"), "--format", "jsonl", "--spec",
                str(tmp_path / "spec.yaml"), "--output", out, *in_memory_args()]) == 0
    got = {}
    for context, _ in tf_dataset(out, "data"):
        got[context["user"].numpy()] = (int(context["age"]), bool(context["age/present"]))
    assert got == {b"u0": (0, False), b"u1": (30, True)}
    batch, _ = next(iter(tf_dataset(out, "data", batch_size=2)))
    assert batch["age"].shape == batch["age/present"].shape == (2,)
    numpy = {c["user"].item(): (int(c["age"]), bool(c["age/present"])) for c, _ in read_examples(out, "data")}
    assert numpy == got
