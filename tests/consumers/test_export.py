"""`tfrecord-pipeline export --to parquet` end to end through the CLI: sources converted and
exported back equal the source column by column, modulo the documented conversions (floats
as float32, strings as bytes, a missing value as null)."""

from __future__ import annotations

import gzip
import json
import math
import pathlib
import re
import shutil
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.cli import EXIT_CORRUPT, EXIT_USAGE, run
from tests.format.reference_codec import encode_example
from tests.helpers import in_memory_args
from transforms.format.tfrecord_format import frame_records

SPEC = """\
features:
  - {name: id, type: int64, required: true}
  - {name: count, type: int64}
  - {name: score, type: float}
  - {name: city, type: string}
  - {name: tags, type: string, list: true, separator: "|"}
  - {name: sizes, type: int64, list: true, separator: "|"}
"""
SPLIT_SPEC = SPEC + "splits: {train: 50, test: 50}\nsplit_key: [id]\n"


def _source_table(rows: int = 40) -> pa.Table:
    """Every kind, with missing values, non-ASCII text, large ints, NaN and infinities."""
    rng = np.random.default_rng(3)
    cities = ["Zürich", "Köln", "", "東京", "a,b"]
    data = {"id": [], "count": [], "score": [], "city": [], "tags": [], "sizes": []}
    for i in range(rows):
        data["id"].append(i)
        data["count"].append(None if i % 7 == 3 else [2**62, -(2**62), 0, -1][i % 4] + i)
        data["score"].append(None if i % 5 == 2 else [math.inf, -math.inf, 0.1][i % 3]
                             if i % 11 == 0 else float(rng.standard_normal()))
        data["city"].append(None if i % 6 == 1 else cities[i % len(cities)])
        data["tags"].append(None if i % 4 == 1 else [f"t{j}é" for j in range(i % 3 + 1)])
        data["sizes"].append(None if i % 9 == 4 else list(range(i % 4 + 1)))
    return pa.table(data, schema=pa.schema([
        ("id", pa.int64()), ("count", pa.int64()), ("score", pa.float64()), ("city", pa.string()),
        ("tags", pa.list_(pa.string())), ("sizes", pa.list_(pa.int64())),
    ]))


def _expected(source: pa.Table) -> pa.Table:
    """The source after the documented conversions: float32; a spec string stays text."""
    return pa.table({
        "city": source["city"],
        "count": source["count"],
        "id": source["id"],
        "score": source["score"].cast(pa.float32()),
        "sizes": source["sizes"],
        "tags": source["tags"],
    })


def _write_source(table: pa.Table, fmt: str, folder: pathlib.Path) -> pathlib.Path:
    if fmt == "parquet":
        path = folder / "source.parquet"
        pq.write_table(table, path)
    elif fmt == "jsonl":
        path = folder / "source.jsonl"
        path.write_text("".join(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n"
                                for row in table.to_pylist()), encoding="utf-8")
    else:
        path = folder / "source.csv"
        lines = [",".join(table.column_names)]
        for row in table.to_pylist():
            cells = []
            for value in row.values():
                if value is None:
                    cells.append("")
                elif isinstance(value, list):
                    cells.append("|".join(str(v) for v in value))
                elif isinstance(value, str):
                    cells.append('"' + value.replace('"', '""') + '"')  # "" stays a value
                else:
                    cells.append(repr(value) if isinstance(value, float) else str(value))
            lines.append(",".join(cells))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _convert(source: pathlib.Path, fmt: str, output: pathlib.Path, spec: str = SPEC,
             compression: str = "none") -> None:
    spec_path = output.parent / f"{output.name}.spec.yaml"
    spec_path.write_text(spec, encoding="utf-8")
    assert run(["convert", "--input", str(source), "--format", fmt, "--spec", str(spec_path),
                "--output", str(output), "--compression", compression, *in_memory_args()]) == 0


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(format, spec, rows, compression) -> an output of `_source_table(rows)`, converted once
    per module; tests only read it (one that changes an output changes its own copy)."""
    made = {}

    def get(fmt: str, spec: str = SPEC, rows: int = 40, compression: str = "none") -> pathlib.Path:
        key = fmt, spec, rows, compression
        if key not in made:
            folder = tmp_path_factory.mktemp(f"{fmt}-{rows}-{compression}")
            _convert(_write_source(_source_table(rows), fmt, folder), fmt, folder / "out", spec,
                     compression)
            made[key] = folder / "out"
        return made[key]

    return get


def _copy(output: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """The test's own copy of a shared output, as tmp_path/out."""
    return pathlib.Path(shutil.copytree(output, tmp_path / "out"))


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id").select(sorted(table.column_names))


def assert_tables_equal(got: pa.Table, expected: pa.Table) -> None:
    assert got.schema == expected.schema, (got.schema, expected.schema)
    for name in expected.column_names:
        # Compared as Python values: NaN never occurs, infinities and nulls compare equal.
        assert got[name].to_pylist() == expected[name].to_pylist(), name


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_converted_source_exports_back_to_its_columns(tmp_path, capsys, converted, fmt):
    source = _source_table()
    out = converted(fmt)
    target = tmp_path / "back.parquet"
    assert run(["export", str(out), "--to", "parquet", str(target)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {target} (40 rows)"]
    assert_tables_equal(_sorted(pq.read_table(target)), _expected(source))


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_outputs_with_splits_export_one_file_per_split(tmp_path, capsys, converted,
                                                                 compression):
    source = _source_table(60)
    out = converted("parquet", SPLIT_SPEC, 60, compression)
    assert run(["export", str(out), "--to", "parquet", str(tmp_path / "back")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"wrote {tmp_path / 'back' / split}.parquet ({n} rows)"
                     for split, n in _split_counts(out)]
    parts = [pq.read_table(tmp_path / "back" / f"{split}.parquet") for split in ("train", "test")]
    assert all(part.num_rows for part in parts)
    assert_tables_equal(_sorted(pa.concat_tables(parts)), _expected(source))

    # --split: only that one; a .parquet OUT is then the file itself.
    assert run(["export", str(out), "--to", "parquet", str(tmp_path / "only.parquet"),
                "--split", "test"]) == 0
    assert_tables_equal(pq.read_table(tmp_path / "only.parquet"), parts[1])


def _split_counts(output: pathlib.Path) -> list[tuple[str, int]]:
    manifest = json.loads((output / "manifest.json").read_text())
    counts: dict[str, int] = {}
    for shard in manifest["shards"]:
        counts[shard["split"]] = counts.get(shard["split"], 0) + shard["records"]
    return list(counts.items())


def test_a_tensorflow_written_file_is_exported_with_an_inferred_schema(tmp_path, tf):
    path = tmp_path / "tf_written.tfrecord.gz"
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for i in range(300):
            feature = {"label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i - 150]))}
            if i % 3:
                feature["text"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\xff%d" % i]))
            feature["vec"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=[i / 4] * (i % 3)))  # 0, 1 or 2 values
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    target = tmp_path / "tf.parquet"
    assert run(["export", str(path), "--to", "parquet", str(target)]) == 0
    table = pq.read_table(target)
    assert table.schema == pa.schema([("label", pa.int64()), ("text", pa.binary()),
                                      ("vec", pa.list_(pa.float32()))])
    assert table["label"].to_pylist() == [i - 150 for i in range(300)]
    assert table["text"].to_pylist() == [b"\xff%d" % i if i % 3 else None for i in range(300)]
    assert table["vec"].to_pylist() == [[i / 4] * (i % 3) for i in range(300)]


@pytest.mark.parametrize(("compress", "name"), [(gzip.compress, "gzip"), (zlib.compress, "zlib")])
def test_suffix_less_compressed_files_are_sniffed_as_verify_and_inspect_do(tmp_path, capsys,
                                                                           compress, name):
    """A file whose name does not say (Beam's `prefix-00000-of-00001`) is read as what its
    first bytes are, not as uncompressed."""
    payloads = [encode_example({"x": ("int64", [i])}) for i in range(20)]
    path = tmp_path / f"{name}-00000-of-00001"
    path.write_bytes(compress(frame_records(payloads)))
    target = tmp_path / "x.parquet"
    assert run(["export", str(path), "--to", "parquet", str(target)]) == 0, capsys.readouterr().err
    assert pq.read_table(target)["x"].to_pylist() == list(range(20))


def test_records_are_written_in_batches_as_row_groups(tmp_path, monkeypatch):
    from pipeline import export

    monkeypatch.setattr(export, "BATCH_RECORDS", 7)
    payloads = [encode_example({"x": ("int64", [i] * (1 + (i == 30)))}) for i in range(50)]
    (tmp_path / "a.tfrecord").write_bytes(frame_records(payloads))
    assert run(["export", str(tmp_path / "a.tfrecord"), "--to", "parquet", str(tmp_path / "a.parquet")]) == 0
    parquet = pq.ParquetFile(tmp_path / "a.parquet")
    assert parquet.metadata.num_row_groups == 8
    # One record with two values makes the (learnt) column a list column.
    assert parquet.read()["x"].to_pylist() == [[i] * (1 + (i == 30)) for i in range(50)]


def test_corrupt_input_exits_4_naming_the_file_and_offset(tmp_path, capsys, converted):
    _copy(converted("parquet"), tmp_path)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    shard = tmp_path / "out" / manifest["shards"][0]["path"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    target = tmp_path / "back.parquet"
    assert run(["export", str(tmp_path / "out"), "--to", "parquet", str(target)]) == EXIT_CORRUPT
    err = capsys.readouterr().err
    assert str(shard) in err and re.search(r"offset \d+", err), err
    assert len(err.strip().splitlines()) == 1
    assert not target.exists() and not list(tmp_path.glob("back.parquet.tmp-*"))


def test_an_export_failing_on_a_later_split_leaves_no_file_of_an_earlier_one(tmp_path, capsys,
                                                                            converted):
    # It printed "wrote back/train.parquet", left it there, then exited 4 on the next split.
    _copy(converted("parquet", SPLIT_SPEC, 60), tmp_path)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    last_split = manifest["shards"][-1]["split"]
    shard = tmp_path / "out" / manifest["shards"][-1]["path"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    back = tmp_path / "back"
    back.mkdir()
    earlier = {path.name: b"an earlier export" for path in
               (back / f"{split}.parquet" for split, _ in _split_counts(tmp_path / "out"))}
    for name, content in earlier.items():
        (back / name).write_bytes(content)
    capsys.readouterr()
    assert run(["export", str(tmp_path / "out"), "--to", "parquet", str(back)]) == EXIT_CORRUPT
    printed = capsys.readouterr()
    assert printed.out == "" and str(shard) in printed.err and last_split != manifest["shards"][0]["split"]
    assert {path.name: path.read_bytes() for path in back.iterdir()} == earlier


def test_a_payload_that_is_not_an_example_exits_4(tmp_path, capsys):
    path = tmp_path / "bad.tfrecord"
    good = encode_example({"x": ("int64", [1])})
    path.write_bytes(frame_records([good, b"\xff\xff\xff"]))
    assert run(["export", str(path), "--to", "parquet", str(tmp_path / "x.parquet")]) == EXIT_CORRUPT
    err = capsys.readouterr().err
    offset = 16 + len(good)  # the second record starts after the first's frame
    assert f"{path}: record at byte offset {offset} is not a tf.train.Example" in err, err


def test_a_record_that_does_not_fit_the_feature_spec_exits_4(tmp_path, capsys, converted):
    _copy(converted("parquet"), tmp_path)
    spec_path = tmp_path / "out" / "feature_spec.json"
    spec = json.loads(spec_path.read_text())
    spec["features"]["count"]["dtype"] = "float32"  # the records hold int64
    spec_path.write_text(json.dumps(spec))
    target = str(tmp_path / "x.parquet")
    assert run(["export", str(tmp_path / "out"), "--to", "parquet", target]) == EXIT_CORRUPT
    assert "feature 'count' holds int64 values, expected float" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["missing-folder", "--to", "parquet", "x.parquet"],
    ["missing-*.tfrecord", "--to", "parquet", "x.parquet"],
])
def test_a_missing_path_exits_2(tmp_path, capsys, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    assert run(["export", *args]) == EXIT_USAGE
    assert "no TFRecord file found" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path, capsys, converted):
    out = str(converted("parquet", SPLIT_SPEC, 60))
    assert run(["export", out, "--to", "parquet", str(tmp_path / "x"), "--split", "nope"]) == EXIT_USAGE
    assert "has no split 'nope'" in capsys.readouterr().err
    assert run(["export", out, "--to", "parquet", str(tmp_path / "x.parquet")]) == EXIT_USAGE
    assert "OUT must be a folder" in capsys.readouterr().err
    assert run(["export", out, "--to", "csv", str(tmp_path / "x")]) == EXIT_USAGE


def test_sequence_example_outputs_are_refused_in_one_line(tmp_path, capsys, converted):
    _copy(converted("parquet"), tmp_path)
    (tmp_path / "out" / "feature_spec.json").write_text(json.dumps(
        {"version": 1, "context": {}, "sequence": {}}))
    target = str(tmp_path / "x.parquet")
    assert run(["export", str(tmp_path / "out"), "--to", "parquet", target]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "SequenceExamples" in err and len(err.strip().splitlines()) == 1


def test_float_values_keep_their_float32_bits(tmp_path):
    values = [math.nan, math.inf, -0.0, 1e-45, 3.4028234663852886e38]
    (tmp_path / "f.tfrecord").write_bytes(frame_records([encode_example({"f": ("float", [v])})
                                                         for v in values]))
    assert run(["export", str(tmp_path / "f.tfrecord"), "--to", "parquet", str(tmp_path / "f.parquet")]) == 0
    column = pq.read_table(tmp_path / "f.parquet")["f"]
    assert column.type == pa.float32()
    assert np.array_equal(column.to_numpy().view(np.uint32),
                          np.array(values, np.float32).view(np.uint32))
    assert pc.is_nan(column).to_pylist() == [True, False, False, False, False]
