"""`transforms.reading` against real outputs of the CLI: `tf_dataset` gives back the source
values (dense where the spec says fixed or masked), `read_examples` gives what TensorFlow gives,
`(index, count)` parts are disjoint and cover every record, lengths are exact, the PyTorch
adapter shares a split out among ranks and workers by itself, and the Grain source reads
every record once through Grain's own loaders."""

from __future__ import annotations

import json
import pickle
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import in_memory_args
from tfrecord_pipeline import grain_source, read_examples, run, tf_dataset, torch_dataset
from transforms.format.compression import Compression
from transforms.format.tfrecord_reader import TFRecordCorruptError, iter_records
from transforms.reading.features import feature_layout
from transforms.reading.output import load_split
from transforms.reading.parts import select_part, whole_split

ROWS = 40
SHARD_RECORDS = 7  # 40 records: shards of 7, 7, ..., 5 (in the one split, "data")
SPEC = """\
features:
  - {name: id, type: int64, required: true}
  - {name: label, type: int64, default: 7}
  - {name: score, type: float}
  - {name: name, type: string}
  - {name: tags, type: string, list: true, separator: "|"}
"""
VARLEN = {"tags"}  # the rest is dense: required, defaulted, or masked (with "<name>/present")


def _source_rows(fmt: str) -> list[dict]:
    """Absent values everywhere; empty lists where the format can say so (not CSV)."""
    rows = []
    for i in range(ROWS):
        tags = [f"t{j}-é" for j in range(i % 3 + 1)]
        if i % 7 == 0:
            tags = None
        elif i % 11 == 0 and fmt != "csv":
            tags = []
        rows.append({"id": i, "label": None if i % 5 == 0 else i % 3,
                     "score": None if i % 4 == 0 else i / 8,
                     "name": None if i % 6 == 0 else f"name-{i}", "tags": tags})
    return rows


def _write_source(folder: Path, fmt: str) -> list[dict]:
    rows = _source_rows(fmt)
    folder.mkdir(parents=True)
    path = folder / f"rows.{fmt}"
    if fmt == "csv":
        lines = ["id,label,score,name,tags"]
        for r in rows:
            cells = [r["id"], r["label"], r["score"], r["name"],
                     None if r["tags"] is None else "|".join(r["tags"])]
            lines.append(",".join("" if c is None else str(c) for c in cells))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    (folder / "spec.yaml").write_text(SPEC, encoding="utf-8")
    return rows


def _expected(row: dict) -> dict:
    """What TensorFlow parses from a source row: every feature, a missing masked scalar as
    its fill and `<name>/present` false, an absent list as no values."""
    return {"id": row["id"], "label": 7 if row["label"] is None else row["label"],
            "score": 0.0 if row["score"] is None else row["score"],
            "score/present": row["score"] is not None,
            "name": b"" if row["name"] is None else row["name"].encode(),
            "name/present": row["name"] is not None,
            "tags": [t.encode() for t in row["tags"] or []]}


def _convert(folder: Path, fmt: str, compression: str, *extra: str,
             shard_records: int = SHARD_RECORDS) -> Path:
    rows_folder = folder / "in"
    _write_source(rows_folder, fmt)
    out = folder / "out"
    assert run(["convert", "--input", str(rows_folder / f"rows.{fmt}"), "--format", fmt,
                "--spec", str(rows_folder / "spec.yaml"), "--output", str(out),
                "--compression", compression, "--max-shard-records", str(shard_records),
                *extra, *in_memory_args()]) == 0
    return out


def write_sidecars(output: Path) -> None:
    """`<shard>.tfindex` beside every shard: "OFFSET LENGTH" (framed) per record, written
    here as `tfrecord2idx` does, and not listed in the manifest (found beside the shards)."""
    manifest = json.loads((output / "manifest.json").read_text())
    for shard in manifest["shards"]:
        path = output / shard["path"]
        with open(path, "rb") as handle:
            lines = [f"{r.offset} {16 + len(r.payload)}\n" for r in iter_records(handle)]
        (output / (shard["path"] + ".tfindex")).write_text("".join(lines))


CASES = [("csv", "none"), ("jsonl", "gzip"), ("parquet", "zlib"), ("csv", "gzip"),
         ("jsonl", "zlib"), ("parquet", "none")]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """(format, compression) -> output folder, converted once per module."""
    made = {}

    def get(fmt: str, compression: str) -> Path:
        if (fmt, compression) not in made:
            made[fmt, compression] = _convert(tmp_path_factory.mktemp(f"{fmt}-{compression}"),
                                              fmt, compression)
        return made[fmt, compression]

    return get


@pytest.fixture(scope="module")
def tf_read(tf, outputs):
    """(format, compression) -> the records `tf_dataset` reads from that output, read once per
    module (the tests only look at them)."""
    made = {}

    def get(fmt: str, compression: str) -> list[dict]:
        if (fmt, compression) not in made:
            made[fmt, compression] = list(tf_dataset(str(outputs(fmt, compression)), "data"))
        return made[fmt, compression]

    return get


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """An uncompressed JSONL output with index sidecars beside its shards, which the
    manifest lists (`convert --index`)."""
    out = _convert(tmp_path_factory.mktemp("indexed"), "jsonl", "none", "--index")
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(shard["index"]["path"] == shard["path"] + ".tfindex" for shard in manifest["shards"])
    return out


def _tf_records(tf, dataset) -> list[dict]:
    """Each parsed record as Python values: dense features as scalars, sparse as lists."""
    out = []
    for record in dataset:
        out.append({name: value.values.numpy().tolist() if isinstance(value, tf.SparseTensor)
                    else np.asarray(value.numpy()).tolist() for name, value in record.items()})
    return out


def _ids(records) -> list[int]:
    return [int(record["id"]) for record in records]


# ----------------------------------------------------------------------- tf_dataset


@pytest.mark.parametrize("fmt,compression", CASES)
def test_tf_dataset_gives_back_the_source_dense_where_fixed(tf, outputs, tf_read, fmt, compression):
    out = outputs(fmt, compression)
    assert len(json.loads((out / "manifest.json").read_text())["shards"]) == 6
    records = tf_read(fmt, compression)
    for record in records:
        for name, value in record.items():
            assert isinstance(value, tf.SparseTensor) == (name in VARLEN), name
        assert record["id"].shape == record["label"].shape == ()
    got = sorted(_tf_records(tf, records), key=lambda r: r["id"])
    assert got == [_expected(row) for row in _source_rows(fmt)]


def test_tf_dataset_batches_shuffles_files_and_reads_only_listed_shards(tf, outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(outputs("jsonl", "gzip"), out)
    # A shard-like file the manifest does not list (a leftover) is never read.
    shutil.copy(out / "data-00000-of-00006.tfrecord.gz", out / "data-00006-of-00007.tfrecord.gz")
    batches = list(tf_dataset(str(out), "data", batch_size=8, shuffle_files=True, seed=3))
    assert [int(batch["id"].shape[0]) for batch in batches] == [8] * 5
    assert sorted(i for batch in batches for i in batch["id"].numpy().tolist()) == list(range(ROWS))
    assert isinstance(batches[0]["tags"], tf.SparseTensor) and batches[0]["label"].shape == (8,)
    ragged = next(iter(tf_dataset(str(out), "data", batch_size=4, ragged=True)))
    assert isinstance(ragged["tags"], tf.RaggedTensor)


def test_tf_dataset_parts_are_disjoint_and_cover_the_split(tf, outputs, indexed):
    for out in (outputs("csv", "gzip"), indexed):
        parts = [_ids(_tf_records(tf, tf_dataset(str(out), "data", shard=(i, 3)))) for i in range(3)]
        assert sorted(sum(parts, [])) == list(range(ROWS))
        assert parts == [_ids(read_examples(str(out), "data", shard=(i, 3))) for i in range(3)]


# ----------------------------------------------------------------------- read_examples


@pytest.mark.parametrize("fmt,compression", CASES)
def test_read_examples_equals_tf_dataset(tf, outputs, tf_read, fmt, compression):
    out = outputs(fmt, compression)
    expected = _tf_records(tf, tf_read(fmt, compression))
    reader = read_examples(str(out), "data", fill_defaults=True)
    assert len(reader) == ROWS
    got = list(reader)
    assert len(got) == ROWS
    for record, want in zip(got, expected, strict=True):
        assert record["id"].shape == record["label"].shape == record["score"].shape == ()
        assert {name: value.tolist() for name, value in record.items()} == {
            name: value for name, value in want.items() if value != [] or name in record}
    python = list(read_examples(str(out), "data", fill_defaults=True, as_numpy=False))
    assert python == [{name: value.tolist() for name, value in r.items()} for r in got]


@pytest.mark.parametrize("fmt,compression", [("jsonl", "gzip"), ("parquet", "none")])
def test_read_examples_tells_an_absent_feature_from_an_empty_list(tf, outputs, tf_read, tmp_path, fmt,
                                                                  compression):
    out = tmp_path / "out"
    shutil.copytree(outputs(fmt, compression), out)
    by_id = {int(r["id"]): r for r in read_examples(str(out), "data")}
    assert "tags" not in by_id[7]  # an absent list: left out
    assert by_id[4]["score"] == 0.0 and not by_id[4]["score/present"]  # a masked scalar
    assert by_id[11]["tags"].shape == (0,) and by_id[11]["tags"].dtype == object  # empty list
    assert int(by_id[5]["label"]) == 7  # a missing value with a spec default is written
    tf_tags = {r["id"]: r["tags"] for r in _tf_records(tf, tf_read(fmt, compression))}  # the copy's
    assert tf_tags[7] == tf_tags[11] == []  # TensorFlow cannot tell them apart
    # fill_defaults gives an absent feature the spec's default; an empty list stays empty.
    spec = json.loads((out / "feature_spec.json").read_text())
    spec["features"]["tags"]["default"] = ["none"]
    (out / "feature_spec.json").write_text(json.dumps(spec))
    filled = {int(r["id"]): r for r in read_examples(str(out), "data", fill_defaults=True)}
    assert filled[7]["tags"].tolist() == [b"none"] and filled[11]["tags"].tolist() == []
    assert not filled[4]["score/present"]  # masked: still missing


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):
    """compression -> an output whose one split is one shard of 40 records (no sidecar)."""
    made = {}

    def get(compression: str) -> Path:
        if compression not in made:
            made[compression] = _convert(tmp_path_factory.mktemp(f"one-{compression}"), "csv",
                                         compression, shard_records=ROWS)
        return made[compression]

    return get


@pytest.mark.parametrize("count", [1, 2, 3, 4, 6, 9, 13, 40])
@pytest.mark.parametrize("kind", ["one shard", "one gzip shard", "6 zlib shards", "6 indexed shards"])
def test_parts_are_balanced_disjoint_and_cover_everything_whatever_the_shards(
        outputs, indexed, one_shard, kind, count):
    out = {"one shard": lambda: one_shard("none"), "one gzip shard": lambda: one_shard("gzip"),
           "6 zlib shards": lambda: outputs("parquet", "zlib"), "6 indexed shards": lambda: indexed}[kind]()
    assert len(load_split(str(out), "data").shards) == (1 if kind.startswith("one") else 6)
    parts = [read_examples(str(out), "data", shard=(i, count)) for i in range(count)]
    ids = [_ids(part) for part in parts]
    assert [len(part) for part in parts] == [len(i) for i in ids]
    assert min(map(len, ids)) >= 1 and max(map(len, ids)) - min(map(len, ids)) <= 1
    assert sum(ids, []) == _ids(read_examples(str(out), "data"))  # in order, each once
    assert sorted(sum(ids, [])) == list(range(ROWS))


def test_a_part_enters_a_shard_at_a_record_with_or_without_its_sidecar(one_shard, indexed):
    for out in (one_shard("none"), indexed):
        ranges = select_part(whole_split(load_split(str(out), "data")), (1, 3))  # records 13-25
        expected = [(13, 26)] if out != indexed else [(6, 7), (0, 7), (0, 5)]  # shards of 7
        assert [(r.start, r.stop) for r in ranges] == expected
        whole = _ids(read_examples(str(out), "data"))
        assert _ids(read_examples(str(out), "data", shard=(1, 3))) == whole[13:26]


def test_a_bad_part_a_bad_split_and_a_folder_without_manifest_are_refused(outputs, tmp_path):
    out = str(outputs("csv", "none"))
    for part in [(3, 3), (-1, 2), (0, 0), (True, 2), "0/2"]:
        with pytest.raises(ValueError, match="index, count"):
            read_examples(out, "data", shard=part)
    with pytest.raises(ValueError, match=r"no split 'train'; it has \['data'\]"):
        read_examples(out, "train")
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        read_examples(str(tmp_path), "data")


def test_corruption_and_a_sidecar_of_another_file_are_errors(outputs, indexed, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(outputs("csv", "none"), broken)
    shard = broken / "data-00002-of-00006.tfrecord"
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(TFRecordCorruptError, match="data-00002-of-00006"):
        list(read_examples(str(broken), "data"))
    lying = tmp_path / "lying"
    shutil.copytree(indexed, lying)
    index = lying / "data-00001-of-00006.tfrecord.tfindex"
    index.write_text("".join(index.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(ValueError, match="6 records indexed, the manifest lists 7"):
        list(read_examples(str(lying), "data", shard=(1, 3)))
    with pytest.raises(ValueError, match="6 records indexed"):
        grain_source(str(lying), "data")[10]


def test_a_uri_is_read_through_fsspec_and_without_it_the_error_says_so(outputs, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    out = outputs("csv", "gzip")
    for path in out.iterdir():
        if path.is_file():
            memory.pipe(f"/reading-test/{path.name}", path.read_bytes())
    try:
        records = read_examples("memory://reading-test", "data")
        assert len(records) == ROWS and sorted(_ids(records)) == list(range(ROWS))
        monkeypatch.setitem(sys.modules, "fsspec", None)
        with pytest.raises(ImportError, match="needs fsspec"):
            read_examples("memory://reading-test", "data")
    finally:
        memory.rm("/reading-test", recursive=True)


# ------------------------------------------------------------- the dense-or-varlen rule


def test_one_rule_decides_dense_or_varlen():
    def layout(counted=True, **entry):
        return feature_layout("f", {"dtype": "int64", "default": None, **entry},
                              counted=counted).shape

    def presence(records, of, low, high):
        return {"records": records, "of": of, "min_values": low, "max_values": high}

    assert layout(kind="fixed", shape=[]) == ()
    assert layout(kind="var_len") is None
    assert layout(kind="var_len", presence=presence(9, 9, 1, 1)) == ()
    assert layout(kind="var_len", presence=presence(9, 9, 1, 1), list=True) == (1,)
    assert layout(kind="var_len", presence=presence(9, 9, 3, 3)) == (3,)
    assert layout(kind="var_len", presence=presence(8, 9, 1, 1)) is None
    assert layout(kind="var_len", presence=presence(9, 9, 1, 2)) is None
    # From feature_spec.json version 2 on, shapes follow from the spec alone.
    assert layout(kind="var_len", presence=presence(9, 9, 1, 1), counted=False) is None
    assert layout(kind="var_len", missing="mask", counted=False) == ()
    assert layout(kind="var_len", missing="mask", list=True, counted=False) is None
    with pytest.raises(ValueError, match="'f' has dtype 'int64' and kind 'dense'"):
        layout(kind="dense")


PRESENCE_SPEC = """\
features:
  - {name: id, type: int64, required: true}
  - {name: score, type: float}
  - {name: pair, type: int64, list: true}
  - {name: name, type: string}
"""


def _convert_rows(tmp_path, rows: list[dict], spec: str, *options: str):
    """`rows` as JSON Lines converted with `spec` into tmp_path/out (returned)."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "spec.yaml").write_text(spec)
    out = tmp_path / "out"
    assert run(["convert", "--input", str(tmp_path / "rows.jsonl"), "--format", "jsonl",
                "--spec", str(tmp_path / "spec.yaml"), "--output", str(out), *options,
                *in_memory_args()]) == 0
    return out


def test_a_version_1_output_reads_a_feature_always_present_as_dense_as_before(tf, tmp_path):
    rows = [{"id": i, "score": i / 4, "pair": [i, -i], "name": None if i % 3 else f"n{i}"}
            for i in range(12)]
    out = _convert_rows(tmp_path, rows, PRESENCE_SPEC, "--max-shard-records", "5")
    write_sidecars(out)
    # As written before "missing" (version 1): shapes by the presence the writer counted,
    # score and pair in every record with one and two values, name in 4 of 12.
    spec = json.loads((out / "feature_spec.json").read_text())
    spec["version"] = 1
    for entry in spec["features"].values():
        entry.pop("missing", None)
    for name, presence in {"score": (12, 12, 1, 1), "pair": (12, 12, 2, 2),
                           "name": (4, 12, 1, 1)}.items():
        spec["features"][name]["presence"] = dict(zip(("records", "of", "min_values", "max_values"),
                                                      presence, strict=True))
    (out / "feature_spec.json").write_text(json.dumps(spec))

    [tf_record] = list(tf_dataset(str(out), "data", shard=(1, 12)))
    assert not isinstance(tf_record["score"], tf.SparseTensor) and tf_record["score"].shape == ()
    assert tf_record["pair"].shape == (2,) and isinstance(tf_record["name"], tf.SparseTensor)
    batch = next(iter(tf_dataset(str(out), "data", batch_size=12)))
    assert batch["pair"].shape == (12, 2) and batch["pair"].numpy()[:, 0].tolist() == list(range(12))
    for record in (next(iter(read_examples(str(out), "data", shard=(1, 12)))),
                   grain_source(str(out), "data")[1]):
        assert record["score"].shape == () and record["pair"].tolist() == [1, -1]
        assert "name" not in record  # varlen, and absent from record 1
    assert grain_source(str(out), "data")[3]["name"].shape == (1,)


# ------------------------------------------------------------------- sequences


SEQUENCE_SPEC = """\
features:
  - {name: user, type: string, required: true}
  - {name: ts, type: int64, required: true}
  - {name: item, type: string}
sequence:
  group_by: [user]
  order_by: ts
  context: [user]
"""


def test_sequence_outputs_read_back_through_tf_dataset_and_read_examples(tf, tmp_path):
    rows = [{"user": f"u{i % 3}", "ts": 10 - i, "item": None if i % 4 == 0 else f"i{i}"}
            for i in range(10)]
    out = _convert_rows(tmp_path, rows, SEQUENCE_SPEC, "--compression", "zlib")
    expected = {}
    for r in sorted(rows, key=lambda r: r["ts"]):
        steps = expected.setdefault(r["user"], ([], []))
        steps[0].append(r["ts"])
        steps[1].append([] if r["item"] is None else [r["item"].encode()])
    got = {}
    for context, sequence in tf_dataset(str(out), "data"):
        user = context["user"].numpy().decode()
        items = tf.RaggedTensor.from_sparse(sequence["item"]).to_list()
        got[user] = (sequence["ts"].numpy().tolist(), items)
    assert got == expected
    reader = read_examples(str(out), "data")
    assert len(reader) == 3
    numpy_got = {}
    for context, sequence in reader:
        numpy_got[context["user"].item().decode()] = (
            sequence["ts"].tolist(), [step.tolist() for step in sequence["item"]])
    assert numpy_got == expected
    context, sequence = next(iter(tf_dataset(str(out), "data", batch_size=3)))
    assert context["user"].shape == (3,) and sequence["ts"].shape == (3, 4)


# ------------------------------------------------------------------------- PyTorch


def _fake_torch(monkeypatch, worker: list) -> types.ModuleType:
    """A stand-in `torch` with the two names the adapter uses; `worker[0]` is what
    `get_worker_info()` returns (None in the main process)."""
    torch = types.ModuleType("torch")
    torch.utils = types.ModuleType("torch.utils")
    torch.utils.data = types.ModuleType("torch.utils.data")

    class IterableDataset:
        def __iter__(self):
            raise NotImplementedError

    torch.utils.data.IterableDataset = IterableDataset
    torch.utils.data.get_worker_info = lambda: worker[0]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.utils", torch.utils)
    monkeypatch.setitem(sys.modules, "torch.utils.data", torch.utils.data)
    return torch


@pytest.mark.parametrize("indexed_output", [False, True])
def test_torch_adapter_shares_the_split_among_ranks_and_workers(monkeypatch, outputs, indexed,
                                                                indexed_output):
    out = str(indexed if indexed_output else outputs("csv", "zlib"))
    worker = [None]
    torch = _fake_torch(monkeypatch, worker)
    world, workers = 2, 3
    seen = []
    for rank in range(world):
        dataset = torch_dataset(out, "data", rank=rank, world_size=world)
        assert isinstance(dataset, torch.utils.data.IterableDataset)
        worker[0] = None  # iterated in the main process: the rank's whole part
        whole = _ids(dataset)
        assert len(dataset) == len(whole)
        per_worker = []
        for worker_id in range(workers):
            worker[0] = types.SimpleNamespace(id=worker_id, num_workers=workers)
            per_worker.append(_ids(dataset))
        assert sorted(sum(per_worker, [])) == sorted(whole)
        seen += sum(per_worker, [])
        worker[0] = None
        assert _ids(pickle.loads(pickle.dumps(dataset))) == whole
    assert sorted(seen) == list(range(ROWS))  # every record once, over all ranks and workers


def test_torch_adapter_with_real_torch_dataloader_workers(outputs):
    import torch

    dataset = torch_dataset(str(outputs("parquet", "zlib")), "data", rank=1, world_size=2)
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    ids = [int(record["id"]) for record in loader]
    assert sorted(ids) == sorted(_ids(dataset)) and len(ids) == len(dataset) > 0
    other = torch_dataset(str(outputs("parquet", "zlib")), "data", rank=0, world_size=2)
    assert sorted(ids + _ids(other)) == list(range(ROWS))


def test_dataloader_workers_share_one_gzip_shard(one_shard):
    """Every worker of every rank reads records of a one-shard output, balanced to one."""
    import torch

    out, world, workers = str(one_shard("gzip")), 2, 2
    seen = []
    for rank in range(world):
        dataset = torch_dataset(out, "data", rank=rank, world_size=world)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        ids = [int(record["id"]) for record in loader]
        # The loader takes one record from each worker in turn: the first `workers` records
        # are the first of each worker's part (20 records: parts of 10).
        whole = _ids(dataset)
        assert ids[:workers] == [whole[0], whole[10]] and sorted(ids) == sorted(whole)
        seen += ids
    assert sorted(seen) == list(range(ROWS))


@pytest.mark.parametrize("module, read, needs", [
    ("torch", torch_dataset, "a PyTorch dataset needs PyTorch: pip install 'tfrecord-pipeline[torch]'"),
    ("tensorflow", tf_dataset,
     "a tf.data.Dataset needs TensorFlow: pip install 'tfrecord-pipeline[tensorflow]'"),
])
def test_a_missing_torch_or_tensorflow_is_one_line_naming_the_extra(outputs, monkeypatch, module,
                                                                    read, needs):
    monkeypatch.setitem(sys.modules, module, None)  # what Python does when it is not installed
    with pytest.raises(ImportError) as error:
        read(str(outputs("csv", "none")), "data")
    assert str(error.value) == f"reading an output as {needs}"
    assert error.value.__suppress_context__  # not chained to "No module named ..."


def test_collate_examples_batches_by_shape_dense_ragged_strings_and_absent(monkeypatch):
    from tfrecord_pipeline import collate_examples

    torch = _fake_torch(monkeypatch, [None])
    torch.as_tensor = lambda array: ("tensor", np.asarray(array).tolist())  # the one call used
    records = [
        {"id": np.array(1), "pair": np.array([1, 2]), "tags": np.array([b"a"], object),
         "ragged": np.array([1.5]), "maybe": np.array(3)},
        {"id": np.array(2), "pair": np.array([3, 4]), "tags": np.array([b"b", b"c"], object),
         "ragged": np.array([2.5, 3.5, 4.5])},
    ]
    batch = collate_examples(records)
    assert batch["id"] == ("tensor", [1, 2])
    # A list is ragged even when its lengths happen to be equal in the batch.
    assert batch["pair"] == {"values": ("tensor", [1, 2, 3, 4]), "lengths": ("tensor", [2, 2])}
    assert batch["ragged"] == {"values": ("tensor", [1.5, 2.5, 3.5, 4.5]), "lengths": ("tensor", [1, 3])}
    assert [list(t) for t in batch["tags"]] == [[b"a"], [b"b", b"c"]]
    assert batch["maybe"] == {"values": ("tensor", [3]), "lengths": ("tensor", [1, 0])}


def test_collate_examples_with_real_torch(outputs):
    import torch

    from tfrecord_pipeline import collate_examples

    dataset = torch_dataset(str(outputs("csv", "none")), "data")
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, collate_fn=collate_examples)
    batches = list(loader)
    assert sum(len(b["id"]) for b in batches) == ROWS


# --------------------------------------------------------------------------- Grain


def test_grain_reads_every_record_once(indexed):
    import grain.python as grain

    source = grain_source(str(indexed), "data")
    assert len(source) == ROWS and "records=40" in repr(source)
    assert sorted(_ids(grain.MapDataset.source(source))) == list(range(ROWS))
    assert _ids(grain.MapDataset.source(source)) == _ids(read_examples(str(indexed), "data"))
    sampler = grain.IndexSampler(num_records=len(source), shard_options=grain.NoSharding(),
                                 shuffle=True, num_epochs=1, seed=5)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)
    assert sorted(_ids(loader)) == list(range(ROWS))
    assert int(source[-1]["id"]) == int(source[ROWS - 1]["id"])
    with pytest.raises(IndexError):
        source[ROWS]
    assert _ids(pickle.loads(pickle.dumps(source))) == _ids(source)


def test_grain_refuses_compressed_output_and_missing_sidecars(outputs):
    with pytest.raises(ValueError, match="gzip-compressed; convert again with --compression none"):
        grain_source(str(outputs("jsonl", "gzip")), "data")
    with pytest.raises(ValueError, match="6 of 6 have none .*tfrecord-pipeline index DIR"):
        grain_source(str(outputs("csv", "none")), "data")
    assert load_split(str(outputs("csv", "none")), "data").compression is Compression.NONE


def test_a_record_is_read_as_numpy_or_python_values(indexed):
    record = read_examples(str(indexed), "data", as_numpy=False)
    first = next(iter(record))
    assert isinstance(first["id"], int) and isinstance(first.get("tags", []), list)
    assert isinstance(grain_source(str(indexed), "data")[0]["id"], np.ndarray)
