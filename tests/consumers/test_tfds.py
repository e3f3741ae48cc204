"""TensorFlow Datasets reads our outputs with no glue: `tfds.builder_from_directory(DIR)` on an
uncompressed output finds every shard and parses every feature with the declared type.

End to end through the CLI (tabular with splits, an image folder with labels) and the sink
API (a feature_spec.json with `presence`), read back by TFDS itself; plus unit tests of
`transforms.tfds_metadata`, whose JSON is also restored by TFDS's own feature classes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipeline.cli import run
from tests.format.reference_codec import encode_example
from tests.helpers import in_memory_args
from tests.images import image_samples as samples
from transforms.format.manifest_format import ShardEntry
from transforms.records import RecordBatch, batch_key
from transforms.sink import WriteToShardedTFRecord
from transforms.tfds_metadata import (
    DATASET_INFO_NAME,
    FEATURES_NAME,
    dataset_name_for,
    tfds_metadata,
    tfds_side_files,
)


@pytest.fixture(scope="module")
def tfds(tf):
    import tensorflow_datasets

    return tensorflow_datasets


def _manifest(out) -> dict:
    with open(os.path.join(out, "manifest.json")) as handle:
        return json.load(handle)


def _split_counts(manifest) -> dict[str, int]:
    return {split: counts["written"] for split, counts in manifest["counts"]["splits"].items()}


def _records(tfds, builder, split: str) -> list[dict]:
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def _plain(value):
    """A numpy value as plain Python: scalars, or lists for arrays."""
    if isinstance(value, bytes):  # a scalar string
        return value
    return value.tolist() if isinstance(value, np.ndarray) else value.item()


# -- Tabular, through the CLI -------------------------------------------------------------

CSV = """\
id,score,name,tags,opt
1,0.5,alice,a|b,10
2,1.5,bob,,
3,-2.25,carol,c,30
4,3.0,dave,d|e|f,40
5,0.0,eve,x,
6,7.5,,y,60
7,2.5,gus,,70
8,-0.5,hal,z|z,
"""
SPEC = """\
features:
  - {name: id, type: int64, required: true}
  - {name: score, type: float, required: true}
  - {name: name, type: string}
  - {name: tags, type: string, list: true, separator: "|"}
  - {name: opt, type: int64}
  - {name: weight, column: opt, type: float, default: 1.0}
splits: {train: 50, test: 50}
split_key: [id]
"""


def _source_rows() -> dict[int, dict]:
    """The values each record must hold, by id: an absent list -> empty, a missing masked
    scalar -> TFDS's own fill (b"", the int64 minimum), a default where declared."""
    rows = {}
    for line in CSV.splitlines()[1:]:
        id_, score, name, tags, opt = line.split(",")
        rows[int(id_)] = {
            "id": int(id_), "score": float(score),
            "name": name.encode(),
            "tags": [tag.encode() for tag in tags.split("|")] if tags else [],
            "opt": int(opt) if opt else int(np.iinfo(np.int64).min),
            "weight": float(opt) if opt else 1.0,
        }
    return rows


def _convert_csv(tmp_path, *extra) -> str:
    (tmp_path / "data.csv").write_text(CSV)
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = str(tmp_path / "my-dataset")
    assert run(["convert", "--format", "csv", "--input", str(tmp_path / "data.csv"),
                "--spec", str(tmp_path / "spec.yaml"), "--output", out, *extra,
                *in_memory_args()]) == 0
    return out


def _declared(tfds, feature) -> tuple:
    """(class name, shape, dtype name) of a TFDS feature."""
    return type(feature).__name__, tuple(feature.shape), np.dtype(feature.np_dtype).name


@pytest.fixture(scope="module")
def tabular(tmp_path_factory) -> str:
    """The CSV with splits converted uncompressed, in shards of 2 records, once per module
    (read only; a test that converts again over it does so on its own copy)."""
    return _convert_csv(tmp_path_factory.mktemp("tabular"), "--max-shard-records", "2")


def test_tabular_splits_read_by_tfds_with_declared_types_and_source_values(tfds, tabular):
    out = tabular
    manifest = _manifest(out)
    assert {DATASET_INFO_NAME, FEATURES_NAME} <= set(manifest["files"])

    builder = tfds.builder_from_directory(out)
    assert builder.info.name == "my_dataset" and str(builder.info.version) == "1.0.0"
    features = builder.info.features
    assert {name: _declared(tfds, feature) for name, feature in features.items()} == {
        "id": ("Tensor", (), "int64"),
        "score": ("Tensor", (), "float32"),
        "weight": ("Tensor", (), "float32"),  # a default: written in every record
        "name": ("Tensor", (), "object"),  # missing: mask, a scalar whatever the data
        "tags": ("Tensor", (None,), "object"),  # a list: may be absent, read as empty
        "opt": ("Tensor", (), "int64"),
    }
    counts = _split_counts(manifest)
    assert set(counts) == {"train", "test"} and all(counts.values())
    assert {split: info.num_examples for split, info in builder.info.splits.items()} == counts
    # Several shards per split: TFDS found each by the filepathTemplate, in shard order.
    for split, info in builder.info.splits.items():
        shards = [s for s in manifest["shards"] if s["split"] == split]
        assert info.num_shards == len(shards) > 1
        assert [os.path.basename(str(path)) for path in info.filepaths] == [s["path"] for s in shards]
        assert info.shard_lengths == [s["records"] for s in shards]

    expected = _source_rows()
    seen = {}
    for split in counts:
        records = _records(tfds, builder, split)
        assert len(records) == counts[split]
        for record in records:
            seen[int(record["id"])] = {name: _plain(value) for name, value in record.items()}
    assert seen == expected
    assert run(["verify", out]) == 0


def test_compressed_output_gets_no_tfds_metadata(tmp_path):
    out = _convert_csv(tmp_path, "--compression", "gzip")
    assert not os.path.exists(os.path.join(out, DATASET_INFO_NAME))
    assert not os.path.exists(os.path.join(out, FEATURES_NAME))
    assert not {DATASET_INFO_NAME, FEATURES_NAME} & set(_manifest(out)["files"])
    assert run(["verify", out]) == 0


def test_recompressing_an_output_removes_its_stale_tfds_metadata(tabular, tmp_path):
    out = str(shutil.copytree(tabular, tmp_path / "my-dataset"))
    assert os.path.exists(os.path.join(out, DATASET_INFO_NAME))
    assert _convert_csv(tmp_path, "--compression", "zlib", "--overwrite") == out
    assert not os.path.exists(os.path.join(out, DATASET_INFO_NAME))
    assert not os.path.exists(os.path.join(out, FEATURES_NAME))
    assert run(["verify", out]) == 0


def test_sequence_example_output_gets_no_tfds_metadata(tmp_path):
    (tmp_path / "data.csv").write_text("user,ts,item\nu1,1,a\nu1,2,b\nu2,1,c\n")
    (tmp_path / "spec.yaml").write_text(
        "features:\n  - {name: user, type: string}\n  - {name: ts, type: int64, required: true}\n"
        "  - {name: item, type: string}\nsequence: {group_by: [user], order_by: ts, context: [user]}\n")
    out = str(tmp_path / "seq")
    assert run(["convert", "--format", "csv", "--input", str(tmp_path / "data.csv"),
                "--spec", str(tmp_path / "spec.yaml"), "--output", out, *in_memory_args()]) == 0
    assert not os.path.exists(os.path.join(out, DATASET_INFO_NAME))
    assert not os.path.exists(os.path.join(out, FEATURES_NAME))


# -- Images, through the CLI --------------------------------------------------------------

IMAGES = {
    "train/cat/a.jpg": "jpeg_gray", "train/cat/b.png": "png_rgba", "train/dog/c.gif": "gif_animated",
    "train/dog/d.png": "png_rgb", "validation/cat/e.bmp": "bmp_rgb", "validation/dog/f.webp": "webp_alpha",
}


def test_image_folder_read_by_tfds_with_class_labels_and_original_bytes(tfds, tmp_path):
    root, out = tmp_path / "photos", str(tmp_path / "images")
    source = {}
    for relative, variant in IMAGES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(samples.build(variant))
        source[path.name] = (path.read_bytes(), relative.split("/")[1])
    assert run(["convert", "--format", "image-folder", "--input", str(root), "--output", out,
                *in_memory_args()]) == 0
    manifest = _manifest(out)

    builder = tfds.builder_from_directory(out)
    features = builder.info.features
    label = features["image/class/label"]
    assert isinstance(label, tfds.features.ClassLabel)
    assert label.names == manifest["labels"] == ["cat", "dog"]
    assert builder.info.supervised_keys == ("image/encoded", "image/class/label")
    for name in ("image/encoded", "image/format", "image/filename", "image/class/text"):
        assert _declared(tfds, features[name]) == ("Tensor", (), "object"), name
    for name in ("image/height", "image/width", "image/channels"):
        assert _declared(tfds, features[name]) == ("Tensor", (), "int64"), name
    counts = _split_counts(manifest)
    assert counts == {"train": 4, "validation": 2}
    assert {split: info.num_examples for split, info in builder.info.splits.items()} == counts

    seen = {}
    for split in counts:
        for record in _records(tfds, builder, split):
            filename = os.path.basename(record["image/filename"].decode())
            seen[filename] = (record["image/encoded"], label.int2str(record["image/class/label"]))
            assert record["image/class/text"].decode() == seen[filename][1]
    assert seen == source
    pairs = list(tfds.as_numpy(builder.as_dataset(split="validation", as_supervised=True)))
    assert sorted(label.int2str(index) for _, index in pairs) == ["cat", "dog"]
    assert run(["verify", out]) == 0


# -- The sink API: a feature_spec.json with presence, a foreign file ----------------------

def _write_with_sink(out, feature_spec: dict, examples: list[bytes], splits=("train",)) -> None:
    batch = RecordBatch(batch_key(0, 0), "train", examples, (), len(examples))
    spec_json = json.dumps(feature_spec).encode()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (pipeline | beam.Create([batch])
             | WriteToShardedTFRecord(str(out), splits=list(splits),
                                      extra_files={"feature_spec.json": spec_json}))


PRESENCE_SPEC = {"version": 1, "features": {
    # var_len in the spec, but the counts show one value in every record: a scalar.
    "always": {"dtype": "int64", "kind": "var_len", "default": None,
               "presence": {"records": 4, "of": 4, "min_values": 1, "max_values": 1}},
    # Absent from one record: stays (None,), so TFDS reads it as empty there.
    "sometimes": {"dtype": "float32", "kind": "var_len", "default": None,
                  "presence": {"records": 3, "of": 4, "min_values": 1, "max_values": 1}},
    # Two values everywhere: a fixed-size vector.
    "pair": {"dtype": "string", "kind": "var_len", "default": None,
             "presence": {"records": 4, "of": 4, "min_values": 2, "max_values": 2}},
}}


def test_presence_counts_make_scalars_and_vectors_tfds_parses(tfds, tmp_path):
    out = tmp_path / "presence"
    examples = []
    for i in range(4):
        features = {"always": ("int64", [i]), "pair": ("bytes", [b"\x00\xff", f"p{i}".encode()])}
        if i != 2:
            features["sometimes"] = ("float", [i / 2])
        examples.append(encode_example(features))
    _write_with_sink(out, PRESENCE_SPEC, examples)

    builder = tfds.builder_from_directory(str(out))
    assert {name: _declared(tfds, f) for name, f in builder.info.features.items()} == {
        "always": ("Tensor", (), "int64"), "sometimes": ("Tensor", (None,), "float32"),
        "pair": ("Tensor", (2,), "object")}
    records = sorted(_records(tfds, builder, "train"), key=lambda r: int(r["always"]))
    assert [{name: _plain(value) for name, value in r.items()} for r in records] == [
        {"always": i, "sometimes": [] if i == 2 else [i / 2], "pair": [b"\x00\xff", f"p{i}".encode()]}
        for i in range(4)]


def test_an_empty_split_is_left_out_so_tfds_reads_the_others(tfds, tmp_path):
    out = tmp_path / "empty-split"
    spec = {"version": 1, "features": {
        "always": {"dtype": "int64", "kind": "fixed", "shape": [], "default": None}}}
    _write_with_sink(out, spec, [encode_example({"always": ("int64", [1])})],
                     splits=("train", "test"))
    builder = tfds.builder_from_directory(str(out))
    assert {split: info.num_examples for split, info in builder.info.splits.items()} == {
        "train": 1}
    assert [int(r["always"]) for r in _records(tfds, builder, "train")] == [1]


SMALL_CSV = "id,v\n1,a\n2,b\n3,c\n"
# test gets 1 % of the rows: none of these three.
SKEWED_SPEC = """\
features: [{name: id, type: int64}, {name: v, type: string}]
splits: {train: 99, test: 1}
split_key: [id]
"""


def test_a_declared_split_without_records_does_not_stop_tfds_reading_the_output(tfds, tmp_path):
    (tmp_path / "small.csv").write_text(SMALL_CSV)
    (tmp_path / "spec.yaml").write_text(SKEWED_SPEC)
    out = str(tmp_path / "skewed")
    assert run(["convert", "--format", "csv", "--input", str(tmp_path / "small.csv"),
                "--spec", str(tmp_path / "spec.yaml"), "--output", out,
                *in_memory_args()]) == 0
    # The empty split still has its one empty shard in the manifest, as documented.
    assert [(s["split"], s["records"]) for s in _manifest(out)["shards"]] == [
        ("test", 0), ("train", 3)]

    builder = tfds.builder_from_directory(out)
    assert set(builder.info.splits) == {"train"}
    datasets = builder.as_dataset(shuffle_files=False)  # every split TFDS lists
    assert set(datasets) == {"train"}
    assert sorted(int(r["id"]) for r in tfds.as_numpy(datasets["train"])) == [1, 2, 3]
    with pytest.raises(ValueError, match="Unknown split 'test'"):
        builder.as_dataset(split="test")


def test_a_foreign_dataset_info_is_never_replaced(tmp_path):
    out = tmp_path / "foreign"
    out.mkdir()
    (out / DATASET_INFO_NAME).write_text("not ours")
    _write_with_sink(out, PRESENCE_SPEC, [encode_example({"always": ("int64", [1])})])
    assert (out / DATASET_INFO_NAME).read_text() == "not ours"
    assert not (out / FEATURES_NAME).exists()
    assert not {DATASET_INFO_NAME, FEATURES_NAME} & set(_manifest(out)["files"])


# -- Unit tests of the pure function --------------------------------------------------------

def _shard(split, index, total, records, size=100):
    return ShardEntry(f"{split}-{index:05d}-of-{total:05d}.tfrecord", records, size, "", split)


SHARDS = [_shard("train", 1, 2, 7, 70), _shard("train", 0, 2, 5, 50), _shard("test", 0, 1, 3, 30)]
SPEC_DOC = {"version": 1, "features": {
    "id": {"dtype": "int64", "kind": "fixed", "shape": [], "default": None},
    "x": {"dtype": "float32", "kind": "var_len", "default": None},
    "image/class/label": {"dtype": "int64", "kind": "fixed", "shape": [], "default": None},
}}


def _decoded(files) -> tuple[dict, dict]:
    return json.loads(files[DATASET_INFO_NAME]), json.loads(files[FEATURES_NAME])


def test_split_infos_list_shards_in_index_order_with_the_template():
    info, _ = _decoded(tfds_metadata(SHARDS, SPEC_DOC, name="demo"))
    assert info["name"] == "demo" and info["version"] == "1.0.0"
    assert info["fileFormat"] == "tfrecord"
    assert info["splits"] == [
        {"name": "test", "shardLengths": ["3"], "numBytes": "30",
         "filepathTemplate": "{SPLIT}-{SHARD_X_OF_Y}.tfrecord"},
        {"name": "train", "shardLengths": ["5", "7"], "numBytes": "120",
         "filepathTemplate": "{SPLIT}-{SHARD_X_OF_Y}.tfrecord"}]


def test_features_restore_as_tfds_connectors(tfds):
    _, features = _decoded(tfds_metadata(SHARDS, SPEC_DOC, ["a cat ", "dog"]))
    restored = tfds.features.FeatureConnector.from_json(features)
    assert _declared(tfds, restored["id"]) == ("Tensor", (), "int64")
    assert _declared(tfds, restored["x"]) == ("Tensor", (None,), "float32")
    # Names kept exactly, surrounding spaces included (a labels.txt file would strip them).
    assert restored["image/class/label"].names == ["a cat ", "dog"]
    # Without labels the label is a plain int64 scalar.
    _, plain = _decoded(tfds_metadata(SHARDS, SPEC_DOC))
    restored = tfds.features.FeatureConnector.from_json(plain)
    assert _declared(tfds, restored["image/class/label"]) == ("Tensor", (), "int64")


def test_presence_decides_scalar_only_when_every_record_has_one_value():
    def shape_of(presence, **entry):
        spec = {"features": {"f": {"dtype": "int64", "kind": "var_len", "default": None,
                                   "presence": presence, **entry}}}
        _, features = _decoded(tfds_metadata(SHARDS, spec))
        return features["featuresDict"]["features"]["f"]["tensor"]["shape"]

    assert shape_of({"records": 5, "of": 5, "min_values": 1, "max_values": 1}) == {}
    assert shape_of({"records": 4, "of": 5, "min_values": 1, "max_values": 1}) == {"dimensions": ["-1"]}
    assert shape_of({"records": 5, "of": 5, "min_values": 1, "max_values": 2}) == {"dimensions": ["-1"]}
    # A declared list keeps a dimension even with one value everywhere.
    assert shape_of({"records": 5, "of": 5, "min_values": 1, "max_values": 1},
                    default=[0]) == {"dimensions": ["1"]}


def test_splits_without_records_are_left_out_and_empty_shards_of_others_kept():
    shards = [_shard("test", 0, 1, 0, 0), _shard("train", 0, 2, 0, 0), _shard("train", 1, 2, 4, 40)]
    info, _ = _decoded(tfds_metadata(shards, SPEC_DOC))
    assert [(split["name"], split["shardLengths"]) for split in info["splits"]] == [
        ("train", ["0", "4"])]
    info, _ = _decoded(tfds_metadata([_shard("test", 0, 1, 0, 0)], SPEC_DOC))
    assert info["splits"] == []


@pytest.mark.parametrize("shards, spec, compression, message", [
    (SHARDS, SPEC_DOC, "gzip", "uncompressed"),
    (SHARDS, {"version": 1, "context": {}, "sequence": {}}, "none", "SequenceExample"),
    ([_shard("train", 0, 2, 1), _shard("train", 2, 2, 1)], SPEC_DOC, "none", "would look for"),
    ([dataclasses.replace(_shard("train", 0, 1, 1), path="train-00000-of-00001.tfrecord.gz")],
     SPEC_DOC, "none", "uncompressed"),
    ([_shard("a+b", 0, 1, 1)], SPEC_DOC, "none", "TFDS selects only splits"),
])
def test_outputs_tfds_cannot_read_are_refused(shards, spec, compression, message):
    with pytest.raises(ValueError, match=message):
        tfds_metadata(shards, spec, compression=compression)


def test_side_files_only_for_uncompressed_examples():
    extra = [("feature_spec.json", json.dumps(SPEC_DOC).encode()), ("labels.txt", b"cat\ndog\n")]
    shards = SHARDS
    files = tfds_side_files("gs://bucket/out/Day 1/", "none", shards, extra)
    assert set(files) == {DATASET_INFO_NAME, FEATURES_NAME}
    info, features = _decoded(files)
    assert info["name"] == "day_1"
    label = features["featuresDict"]["features"]["image/class/label"]
    assert json.loads(label["jsonFeature"]["json"]) == {"names": ["cat", "dog"]}
    assert tfds_side_files("out", "gzip", shards, extra) == {}
    assert tfds_side_files("out", "none", shards, []) == {}
    sequence = [("feature_spec.json", b'{"version": 1, "context": {}, "sequence": {}}')]
    assert tfds_side_files("out", "none", shards, sequence) == {}
    # An output it cannot describe gets none, rather than a failed commit.
    bad = [dataclasses.replace(shards[0], path="train-7.tfrecord")]
    assert tfds_side_files("out", "none", bad, extra) == {}


@pytest.mark.parametrize("folder, name", [
    ("out/my-dataset", "my_dataset"), ("/data/2024-05-01/", "ds_2024_05_01"),
    ("gs://b/CamelCase.v2", "camelcase_v2"), ("/tmp/---", "tfrecord_pipeline"), ("x", "x"),
])
def test_dataset_names_are_valid_tfds_names(tfds, folder, name):
    from tensorflow_datasets.core import naming

    assert dataset_name_for(folder) == name
    assert naming.is_valid_dataset_name(name)
