"""Tabular conversion: reading, value rules, dead letters, splits, inference, estimates.

Format claims are checked against TensorFlow: records are parsed with tf.io.parse_example
using the parse spec built from feature_spec.json by the README's snippet.
"""

from __future__ import annotations

import base64
import collections
import decimal
import gzip
import io
import json
import math
import random

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from tests.format.reference_codec import encode_example
from tests.tabular.tabular_samples import (
    ISSUE_CSV,
    ISSUE_GOOD,
    ISSUE_SPEC,
    f32,
    load_split,
    reference,
    rows_from_tf,
)
from transforms.format.example_codec import decode_example
from transforms.format.tfrecord_format import TFRecordWriter
from transforms.records import WorkUnit
from transforms.tabular import csv_reader, json_reader
from transforms.tabular import plan as plan_module
from transforms.tabular.columns import finish_feature, text_feature, typed_feature
from transforms.tabular.convert import convert_chunk, split_assigner
from transforms.tabular.infer import estimate_output, infer_spec, resolve_spec
from transforms.tabular.plan import plan_tabular
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec, CsvOptions, SpecError, parse_spec
from transforms.tabular.transform import ConvertTabular, TabularConfig
from transforms.tabular.values import RowConverter, RowError, missing_tokens

# ---------------------------------------------------------------------------------------
# Helpers.


def write_output(tmp_path, spec: ConversionSpec, batches) -> str:
    """Writes batches as the sink lays them out (one GZIP shard per split)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "feature_spec.json").write_bytes(spec.feature_spec_json())
    by_split = collections.defaultdict(list)
    for batch in sorted(batches, key=lambda b: b.key):
        by_split[batch.split].extend(batch.records)
    for split, records in by_split.items():
        with open(out / f"{split}-00000-of-00001.tfrecord.gz", "wb") as raw:
            with TFRecordWriter(raw, "gzip") as writer:
                for record in records:
                    writer.write(record)
    return str(out)


def convert(path, fmt, spec, batch_rows=32768):
    """All RecordBatches of converting `path` with ConvertTabular."""
    units = plan_tabular(str(path), fmt)
    fn = ConvertTabular(TabularConfig(spec=spec, fmt=fmt, batch_rows=batch_rows))
    fn.setup()
    batches = [batch for unit in units for batch in fn.process(unit)]
    for batch in batches:
        assert batch.input_count == len(batch.records) + len(batch.dead_letters)
    return batches


def records(batches, split=None) -> list[bytes]:
    return [r for b in sorted(batches, key=lambda b: b.key) if split in (None, b.split)
            for r in b.records]


def dead_letters(batches) -> list[dict]:
    return [json.loads(d) for b in sorted(batches, key=lambda b: b.key) for d in b.dead_letters]


# ---------------------------------------------------------------------------------------
# The issue's CSV.

def test_issue_csv_good_rows_read_back_in_tensorflow_with_exact_values(tmp_path, tf):
    path = tmp_path / "data.csv"
    path.write_bytes(ISSUE_CSV)
    batches = convert(path, "csv", ISSUE_SPEC)

    # Byte-identical to the protobuf reference encoder.
    assert records(batches) == [reference(ISSUE_GOOD[i]) for i in sorted(ISSUE_GOOD)]

    out = write_output(tmp_path, ISSUE_SPEC, batches)
    parsed = rows_from_tf(load_split(out, "data"))
    assert [row["id"] for row in parsed] == [1, 2, 3, 4, 8]
    by_id = {int(row["id"]): row for row in parsed}
    assert by_id[1]["name"] == [b"Smith, John"] and by_id[1]["tags"] == [b"a", b"b"]
    assert by_id[2]["name"] == [b"multi\nline"]
    assert by_id[2]["score"][0] == np.float32(0.1) and by_id[2]["score"][0].dtype == np.float32
    assert by_id[2]["count"] == [0]                     # 0 is a value
    assert by_id[3]["name"] == [] and by_id[3]["count"] == []  # missing: absent
    assert by_id[4]["name"] == [b""]                    # "" is a value
    assert by_id[8]["count"] == [-(2**63)] and by_id[8]["name"] == [b'say "hi"']
    assert math.copysign(1, by_id[8]["score"][0]) == -1.0

    # Absent vs empty list is visible in the Example itself (TF's own proto parser).
    example3 = tf.train.Example.FromString(records(batches)[2])
    example4 = tf.train.Example.FromString(records(batches)[3])
    assert "tags" in example3.features.feature and "name" not in example3.features.feature
    assert "tags" in example4.features.feature
    assert len(example4.features.feature["tags"].bytes_list.value) == 0
    assert "tags" not in tf.train.Example.FromString(records(batches)[1]).features.feature


def test_issue_csv_bad_rows_are_dead_letters_and_counts_reconcile(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(ISSUE_CSV)
    batches = convert(path, "csv", ISSUE_SPEC)
    letters = dead_letters(batches)
    assert [(d["row"], d["reason"], d["column"]) for d in sorted(letters, key=lambda d: d["row"])] == [
        (5, "invalid_encoding", "name"),
        (6, "ragged_row", None),
        (7, "int_out_of_range", "count"),
    ]
    by_reason = {d["reason"]: d for d in letters}
    bad = by_reason["invalid_encoding"]
    assert bad["raw_encoding"] == "base64"
    assert base64.b64decode(bad["raw"]) == b"5,caf\xe9,1.0,3,y"
    assert bad["source"] == str(path) and bad["split"] == "data" and bad["feature"] == "name"
    assert by_reason["ragged_row"]["raw"] == "6,ragged,1.0"
    assert "expected 5 fields, got 3" in by_reason["ragged_row"]["message"]
    overflow = by_reason["int_out_of_range"]
    assert overflow["raw"] == "7,overflow,3.0,9223372036854775808,z"
    assert "9223372036854775808" in overflow["message"]
    total_input = sum(b.input_count for b in batches)
    assert total_input == 8 == len(records(batches)) + len(letters)


def test_same_data_as_jsonl_and_parquet_gives_identical_examples(tmp_path):
    csv_path = tmp_path / "data.csv"
    csv_path.write_bytes(ISSUE_CSV)
    csv_records = records(convert(csv_path, "csv", ISSUE_SPEC))

    rows = [
        {"id": 1, "name": "Smith, John", "score": 1.5, "count": 10, "tags": ["a", "b"]},
        {"id": 2, "name": "multi\nline", "score": 0.1, "count": 0},
        {"id": 3, "name": None, "score": 2.5, "tags": ["x"]},
        {"id": 4, "name": "", "score": 0, "count": 7, "tags": []},
        {"id": 8, "name": 'say "hi"', "score": -0.0, "count": -(2**63), "tags": ["p", "q", "r"]},
    ]
    lines = [json.dumps(r).encode() for r in rows]
    bad_lines = [b'{"id": 5, "name": "caf\xe9"}', b"{not json", b'{"id": 7, "count": 9223372036854775808}']
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_bytes(b"\n".join(lines[:3] + bad_lines + lines[3:]) + b"\n")
    json_batches = convert(jsonl, "jsonl", ISSUE_SPEC)
    assert records(json_batches) == csv_records
    assert sorted(d["reason"] for d in dead_letters(json_batches)) == [
        "int_out_of_range", "invalid_encoding", "invalid_json"]

    table = pa.table({
        "id": pa.array([r["id"] for r in rows], pa.int64()),
        "name": pa.array([r.get("name") for r in rows], pa.string()),
        "score": pa.array([r["score"] for r in rows], pa.float64()),
        "count": pa.array([r.get("count") for r in rows], pa.int64()),
        "tags": pa.array([r.get("tags") for r in rows], pa.list_(pa.string())),
    })
    parquet = tmp_path / "data.parquet"
    pq.write_table(table, parquet, row_group_size=2)
    assert len(plan_tabular(str(parquet), "parquet")) == 3  # one unit per row group
    assert records(convert(parquet, "parquet", ISSUE_SPEC)) == csv_records


# ---------------------------------------------------------------------------------------
# Splits.


def _many_rows_csv(path, n=3000):
    rnd = random.Random(7)
    lines = ["id,x,label,padding"]
    for i in range(n):
        lines.append(f"{i},{rnd.random():.5f},{rnd.choice(['a', 'b', 'c'])},{'p' * 60}")
    path.write_text("\n".join(lines) + "\n")


SPLIT_SPEC = parse_spec("""
features:
  - {name: id, type: int64}
  - {name: x, type: float}
  - {name: label, type: string}
splits: {train: 80, validation: 10, test: 10}
split_key: [id]
""")


def test_splits_are_stable_across_runs_and_chunking(tmp_path):
    path = tmp_path / "many.csv"
    _many_rows_csv(path)
    first = convert(path, "csv", SPLIT_SPEC)
    second = convert(path, "csv", SPLIT_SPEC, batch_rows=100)  # other chunks, new DoFn
    assert len({b.key for b in second}) > len({b.key for b in first})
    for split in ("train", "validation", "test"):
        assert records(first, split) == records(second, split)
    sizes = {s: len(records(first, s)) for s in ("train", "validation", "test")}
    assert sum(sizes.values()) == 3000
    assert 2250 < sizes["train"] < 2550 and 200 < sizes["validation"] < 400

    # The split follows the key's value, whatever the format: the same ids as JSON.
    jsonl = tmp_path / "many.jsonl"
    with open(path) as f:
        next(f)
        jsonl.write_text("".join(
            json.dumps({"id": int(i), "x": float(x), "label": label}) + "\n"
            for i, x, label, _ in (line.split(",") for line in f)))
    from_json = convert(jsonl, "jsonl", SPLIT_SPEC)

    def ids(batches, split):
        return [decode_example(r)["id"][1][0] for r in records(batches, split)]

    for split in ("train", "validation", "test"):
        assert ids(from_json, split) == ids(first, split)


def test_whole_row_split_key_and_dead_letters_get_a_split(tmp_path):
    spec = parse_spec("""
features: [{name: id, type: int64, required: true}, {name: v, type: string}]
splits: {a: 1, b: 1}
""")
    path = tmp_path / "rows.csv"
    lines = ["id,v"] + [f"{i},value {i}" for i in range(400)] + [",orphan"] * 3 + ["1,2,3"]
    path.write_text("\n".join(lines) + "\n")
    first = convert(path, "csv", spec)
    second = convert(path, "csv", spec, batch_rows=7)
    assert records(first, "a") == records(second, "a") and records(first, "b") == records(second, "b")
    assert 150 < len(records(first, "a")) < 250
    letters = dead_letters(first)
    assert sorted(d["reason"] for d in letters) == ["missing_required"] * 3 + ["ragged_row"]
    assert {d["split"] for d in letters} <= {"a", "b"}
    per_split = collections.Counter()
    for b in first:
        per_split[b.split] += b.input_count
    assert sum(per_split.values()) == 404


# ---------------------------------------------------------------------------------------
# Other inputs: TSV, gzip, encodings, headers.


def test_tsv_with_quotes(tmp_path):
    path = tmp_path / "data.tsv"
    path.write_bytes(b'a\tb\n1\t"x\ty"\n2\tplain, text\n3\t\n')
    spec = parse_spec("features: [{name: a, type: int64}, {name: b, type: string}]")
    assert [decode_example(r) for r in records(convert(path, "tsv", spec))] == [
        {"a": ("int64", [1]), "b": ("bytes", [b"x\ty"])},
        {"a": ("int64", [2]), "b": ("bytes", [b"plain, text"])},
        {"a": ("int64", [3])},
    ]
    inferred = resolve_spec(plan_tabular(str(path), "tsv"), "tsv")
    assert inferred.csv.delimiter == "\t"
    assert [(f.name, f.type) for f in inferred.features] == [("a", "int64"), ("b", "string")]


def test_gzip_inputs_are_read_transparently(tmp_path):
    plain = tmp_path / "data.csv"
    plain.write_bytes(ISSUE_CSV)
    packed = tmp_path / "data.csv.gz"
    packed.write_bytes(gzip.compress(ISSUE_CSV))
    assert records(convert(packed, "csv", ISSUE_SPEC)) == records(convert(plain, "csv", ISSUE_SPEC))
    letters = dead_letters(convert(packed, "csv", ISSUE_SPEC))
    assert {d["source"] for d in letters} == {str(packed)}

    jsonl = tmp_path / "data.jsonl.gz"
    jsonl.write_bytes(gzip.compress(b'{"id": 1, "name": "a"}\n{"id": 2}\n'))
    assert [decode_example(r)["id"] for r in records(convert(jsonl, "jsonl", ISSUE_SPEC))] == [
        ("int64", [1]), ("int64", [2])]


def test_other_encodings(tmp_path):
    spec = parse_spec("features: [{name: id, type: int64}, {name: city, type: string}]\n"
                      "csv: {encoding: cp1252}")
    path = tmp_path / "cp1252.csv"
    path.write_bytes("id,city\n1,Zürich\n2,€uro\n".encode("cp1252") + b"3,bad\x81byte\n4,ok\n")
    batches = convert(path, "csv", spec)
    assert [decode_example(r)["city"][1][0].decode() for r in records(batches)] == [
        "Zürich", "€uro", "ok"]
    (letter,) = dead_letters(batches)
    assert letter["reason"] == "invalid_encoding" and letter["row"] == 3
    assert base64.b64decode(letter["raw"]) == b"3,bad\x81byte"

    utf16 = tmp_path / "utf16.csv"
    utf16.write_bytes("id,city\n1,Kraków\n".encode("utf-16"))
    spec16 = ConversionSpec(features=spec.features, csv=CsvOptions(encoding="utf-16"))
    assert [decode_example(r)["city"] for r in records(convert(utf16, "csv", spec16))] == [
        ("bytes", ["Kraków".encode()])]


def test_ragged_row_with_invalid_bytes_is_a_dead_letter_not_a_crash(tmp_path):
    # pyarrow decodes a ragged row's text strictly for its handler; the escaping keeps
    # the bad bytes out of its way and the dead letter still has the original bytes.
    path = tmp_path / "bad.csv"
    path.write_bytes(b"a,b\n1,x\n2,\xff\xfe,extra\n3,y\n")
    spec = parse_spec("features: [{name: a, type: int64}, {name: b, type: string}]")
    batches = convert(path, "csv", spec)
    assert [decode_example(r)["a"][1][0] for r in records(batches)] == [1, 3]
    (letter,) = dead_letters(batches)
    assert (letter["row"], letter["reason"], letter["raw_encoding"]) == (2, "ragged_row", "base64")
    assert base64.b64decode(letter["raw"]) == b"2,\xff\xfe,extra"


def test_utf8_byte_order_mark_is_not_part_of_the_header(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfid,name\n1,x\n")
    spec = resolve_spec(plan_tabular(str(path), "csv"), "csv")
    assert [f.name for f in spec.features] == ["id", "name"]
    assert [decode_example(r) for r in records(convert(path, "csv", spec))] == [
        {"id": ("int64", [1]), "name": ("bytes", [b"x"])}]


def test_explicit_column_names(tmp_path):
    headerless = tmp_path / "noheader.csv"
    headerless.write_text("1,x\n2,y\n")
    spec = parse_spec("features: [{name: n, type: int64}, {name: s, type: string}]\n"
                      "csv: {header: false, column_names: [n, s]}")
    assert [decode_example(r) for r in records(convert(headerless, "csv", spec))] == [
        {"n": ("int64", [1]), "s": ("bytes", [b"x"])},
        {"n": ("int64", [2]), "s": ("bytes", [b"y"])},
    ]
    renamed = tmp_path / "renamed.csv"
    renamed.write_text("A,B\n1,x\n")
    spec_renamed = parse_spec("features: [{name: n, type: int64}, {name: s, type: string}]\n"
                              "csv: {header: true, column_names: [n, s]}")
    assert [decode_example(r) for r in records(convert(renamed, "csv", spec_renamed))] == [
        {"n": ("int64", [1]), "s": ("bytes", [b"x"])}]


def test_row_numbers_stay_exact_across_chunks_with_ragged_rows(tmp_path):
    lines, expected = ["id,v,w"], {}
    for i in range(1, 30001):
        if i % 4999 == 0:
            lines.append(f"{i},ragged")
            expected[i] = "ragged_row"
        elif i % 7919 == 0:
            lines.append(f'{i},"multi\nline",notanumber')
            expected[i] = "invalid_int"
        else:
            lines.append(f"{i},{'x' * (i % 13)},{i}")
        if i % 1000 == 0:
            lines.append("")  # blank lines are not rows
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    spec = parse_spec("features: [{name: id, type: int64}, {name: w, type: int64}]")
    batches = convert(path, "csv", spec, batch_rows=1000)
    assert len(batches) > 5
    letters = dead_letters(batches)
    assert {d["row"]: d["reason"] for d in letters} == expected
    assert all(d["raw"].split(",")[0] == str(d["row"]) for d in letters)
    assert sum(b.input_count for b in batches) == 30000
    ids = [decode_example(r)["id"][1][0] for r in records(batches)]
    assert ids == [i for i in range(1, 30001) if i not in expected]


# ---------------------------------------------------------------------------------------
# Value rules.


def test_value_checks_and_defaults(tmp_path):
    spec = parse_spec("""
features:
  - {name: i, type: int64}
  - {name: f, type: float, nan: reject}
  - {name: g, type: float}
  - {name: s, type: bytes, default: none}
  - {name: d, type: int64, default: -1}
  - {name: r, type: string, required: true}
max_bytes_length: 5
""")
    path = tmp_path / "values.csv"
    path.write_text(
        "i,f,g,s,d,r\n"
        " +7 ,1e3,nan,ok,,x\n"       # 1: whitespace and sign; NaN allowed in g; default d
        "true,-inf,1,,3,x\n"         # 2: -inf rejected in f
        "0x10,1,1,,3,x\n"            # 3: hex is not an integer
        "1,abc,1,,3,x\n"             # 4: not a number
        "1,1e39,1,,3,x\n"            # 5: beyond float32
        "1,1,1,toolong,3,x\n"        # 6: longer than max_bytes_length
        "1,1,1,,3,\n"                # 7: required missing
        "FALSE,3.4028235e38,-Infinity,\"\",0,\"\"\n"  # 8: fine; "" is a value
        "99999999999999999999,1,1,,3,x\n"  # 9: int64 overflow
    )
    batches = convert(path, "csv", spec)
    assert {d["row"]: d["reason"] for d in dead_letters(batches)} == {
        2: "nan_rejected", 3: "invalid_int", 4: "invalid_float", 5: "float_out_of_range",
        6: "value_too_long", 7: "missing_required", 9: "int_out_of_range"}
    good = [decode_example(r) for r in records(batches)]
    assert good[0] == {"i": ("int64", [7]), "f": ("float", [1000.0]),
                       "g": ("float", [good[0]["g"][1][0]]), "s": ("bytes", [b"ok"]),
                       "d": ("int64", [-1]), "r": ("bytes", [b"x"])}
    assert math.isnan(good[0]["g"][1][0])
    assert good[1] == {"i": ("int64", [0]), "f": ("float", [f32(3.4028235e38)]),
                       "g": ("float", [-math.inf]), "s": ("bytes", [b""]),
                       "d": ("int64", [0]), "r": ("bytes", [b""])}


def test_json_types(tmp_path):
    spec = parse_spec("""
features:
  - {name: i, type: int64}
  - {name: f, type: float}
  - {name: s, type: string}
  - {name: l, type: int64, list: true}
""")
    lines = [
        {"i": True, "f": 2, "s": 12, "l": 5},           # bool->int, int->float, number->text, scalar->list
        {"i": 3, "f": 1.5, "s": 1.0, "l": [1, 2]},      # integral float text without .0
        {"i": None, "s": None, "l": []},                # null = missing; [] = empty list
        {"i": "3"},                                     # string for int64
        {"f": "1.5"},                                   # string for float
        {"s": {"a": 1}},                                # object
        {"i": [1]},                                     # list for a scalar
        {"l": [1, None]},                               # null element
        {"l": [[1]]},                                   # nested list
        {"i": 1.0},                                     # float for int64
    ]
    path = tmp_path / "types.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    batches = convert(path, "jsonl", spec)
    assert [decode_example(r) for r in records(batches)] == [
        {"i": ("int64", [1]), "f": ("float", [2.0]), "s": ("bytes", [b"12"]), "l": ("int64", [5])},
        {"i": ("int64", [3]), "f": ("float", [1.5]), "s": ("bytes", [b"1"]), "l": ("int64", [1, 2])},
        {"l": ("int64", [])},
    ]
    assert {d["row"]: (d["reason"], d["column"]) for d in dead_letters(batches)} == {
        4: ("wrong_type", "i"), 5: ("wrong_type", "f"), 6: ("wrong_type", "s"),
        7: ("wrong_type", "i"), 8: ("wrong_type", "l"), 9: ("wrong_type", "l"),
        10: ("wrong_type", "i")}


def test_jsonl_lines(tmp_path):
    spec = parse_spec("features: [{name: a, type: int64}]")
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b'{"a": 1}\n\n   \n{"a": 2}{"a": 3}\n"text"\n{"a": 4}\r\n{"b": 5}')
    batches = convert(path, "jsonl", spec)
    assert [decode_example(r) for r in records(batches)] == [
        {"a": ("int64", [1])}, {"a": ("int64", [4])}, {}]
    letters = {d["row"]: d for d in dead_letters(batches)}
    assert {row: d["reason"] for row, d in letters.items()} == {2: "invalid_json", 3: "invalid_json"}
    assert letters[2]["line"] == 4 and letters[2]["raw"] == '{"a": 2}{"a": 3}'
    assert letters[3]["line"] == 5


def json_chunk_modes(path, spec, batch_rows) -> collections.Counter:
    """The chunks the JSON Lines reader yields per mode ("typed" = read by Arrow, "python" =
    line by line), as `convert` reads them."""
    return collections.Counter(chunk.mode for unit in plan_tabular(str(path), "jsonl")
                               for chunk in read_chunks(unit, "jsonl", spec, batch_rows))


def convert_line_by_line(path, spec, batch_rows) -> list:
    """All RecordBatches of converting a JSON Lines file as `convert` does, every line parsed
    by `json.loads` (the reader's reference mode, `arrow=False`)."""
    assigner = split_assigner(spec)
    batches = []
    for unit in plan_tabular(str(path), "jsonl"):
        for chunk in json_reader.JsonLinesReader(spec, batch_rows, arrow=False).chunks(unit):
            assert chunk.mode == "python"
            batches += convert_chunk(chunk, spec, assigner, unit).batches
    for batch in batches:
        assert batch.input_count == len(batch.records) + len(batch.dead_letters)
    return batches


def test_jsonl_arrow_and_python_paths_agree(tmp_path):
    """Chunks Arrow reads and chunks parsed line by line give identical output."""

    rnd = random.Random(3)
    values = [None, 0, 1, -5, 2**62, 1.5, -0.0, 1e30, 1e-30, "x", "", "é", True, False,
              [1, 2], [], ["a"], [1.5], {"k": 1}]
    spec = parse_spec("""
features:
  - {name: i, type: int64}
  - {name: f, type: float}
  - {name: s, type: string}
  - {name: li, type: int64, list: true}
  - {name: ls, type: string, list: true}
splits: {p: 1, q: 1}
split_key: [k]
""")
    lines = []
    for n in range(8000):
        messy = 3000 <= n < 3400  # other chunks are clean, so that Arrow reads them
        row = {"k": rnd.choice([n, str(n), float(n), n + 0.5, True, None]) if messy else n}
        for name in ("i", "f", "s", "li", "ls"):
            if messy and rnd.random() < 0.3:
                row[name] = rnd.choice(values)
            elif rnd.random() < 0.95:
                row[name] = {"i": n, "f": n / 7, "s": f"s{n}", "li": [n, n], "ls": [str(n)]}[name]
        lines.append(json.dumps(row))
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")

    modes = json_chunk_modes(path, spec, batch_rows=50)
    assert modes["typed"] >= 3 and modes["python"] >= 2, modes
    with_arrow = convert(path, "jsonl", spec, batch_rows=50)
    python_only = convert_line_by_line(path, spec, batch_rows=50)
    for split in ("p", "q"):
        assert records(with_arrow, split) == records(python_only, split)
    assert dead_letters(with_arrow) == dead_letters(python_only)
    assert len(dead_letters(with_arrow)) > 50
    assert len(records(with_arrow)) > 7000


def test_jsonl_types_learned_from_odd_chunks_do_not_change_results(tmp_path):
    """After a chunk read line by line, Arrow reads the next ones with types learned from
    it (bools for an int64 feature, ...), never with one that changes a value."""

    spec = parse_spec("""
features:
  - {name: i, type: int64}
  - {name: flag, type: int64}
  - {name: f, type: float}
  - {name: s, type: string}
splits: {p: 1, q: 1}
split_key: [k]
""")
    rows = []
    for n in range(9000):
        rows.append({
            "i": n + 0.5 if n < 1500 and n % 2 else n,          # ints and floats, then ints
            "flag": n % 3 == 0,                                 # bools in an int64 feature
            "f": n if n % 2 else n / 3,                         # ints and floats: doubles
            "s": 2**60 + n if n >= 6000 else f"s{n}",           # large ints as text
            "k": n / 2 if 3000 <= n < 4500 else n,              # a float split key
        })
    path = tmp_path / "learned.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    modes = json_chunk_modes(path, spec, batch_rows=200)
    assert modes["typed"] >= 3, modes
    with_arrow = convert(path, "jsonl", spec, batch_rows=200)
    python_only = convert_line_by_line(path, spec, batch_rows=200)
    for split in ("p", "q"):
        assert records(with_arrow, split) == records(python_only, split)
    assert dead_letters(with_arrow) == dead_letters(python_only)
    assert len(dead_letters(with_arrow)) == 750  # the early float values of "i"
    by_i = {decode_example(r)["i"][1][0]: decode_example(r) for r in records(with_arrow)}
    assert by_i[8999]["s"] == ("bytes", [str(2**60 + 8999).encode()])
    assert by_i[8999]["flag"] == ("int64", [0]) and by_i[8997]["flag"] == ("int64", [1])


# The same rules row by row (RowConverter) and column by column (the batch path).
_CELLS = ["0", "-0", "+5", " 42 ", "007", "1.5", "-.5", "1e5", "1E-3", "1.", ".", "", "abc",
          "true", "False", "nan", "-inf", "Infinity", "nan(1)", "0x1f", "1_0", "9223372036854775807",
          "9223372036854775808", "-9223372036854775809", "1e39", "3.4028235e38", "1e400",
          "a|b", "|", "x||y", "1|2", "1| 2", "é", "\U0010ff81bad", "NA", " NA", "#N/A", "-999", None]


@pytest.mark.parametrize("feature_yaml", [
    "{name: c, type: int64}",
    "{name: c, type: float}",
    "{name: c, type: float, nan: reject}",
    "{name: c, type: string}",
    "{name: c, type: int64, list: true, separator: '|'}",
    "{name: c, type: float, list: true, separator: '|'}",
    "{name: c, type: string, list: true, separator: '|', default: [d]}",
    "{name: c, type: int64, required: true}",
    "{name: c, type: int64, missing_values: ['-999', 'NA']}",
    "{name: c, type: string, list: true, separator: '|', missing_values: [NA, '']}",
])
@pytest.mark.parametrize("cell_set", ["messy", "numbers"])
def test_row_converter_matches_the_column_path_on_text(feature_yaml, cell_set):
    spec = parse_spec(f"features: [{feature_yaml}]\nmax_bytes_length: 4")
    feature = spec.features[0]
    rnd = random.Random(11)
    if cell_set == "messy":  # most rows take the per-value path
        cells = _CELLS + [rnd.choice(["1", "2.5", "x", "-", "e", "9", "|", " "]) * rnd.randint(1, 4)
                          for _ in range(300)]
    else:  # Arrow parses the whole column (the fast path), except for NaN spellings
        cells = [rnd.choice([str(rnd.randint(-10**18, 10**18)), "007", "-0", None]) for _ in range(300)]
        if feature.type == "float":
            cells += [repr(rnd.uniform(-1e6, 1e6)) for _ in range(300)]
            cells += ["1e5", ".5", "1.", "-0.0", "nan", "-inf", "Infinity", "nan(1)", "1e39", "1e400"]
    column = finish_feature(feature, text_feature(feature, pa.array(cells, pa.string()),
                                                  max_length=4, escapes=True,
                                                  missing=missing_tokens(feature, spec.csv)))
    converter = RowConverter(spec, "csv", escapes=True)
    values = column.values.to_pylist()
    for i, cell in enumerate(cells):
        try:
            expected = converter.convert({"c": cell})
        except RowError as e:
            assert i in column.errors and column.errors[i].reason == e.reason, (cell, e)
            continue
        assert i not in column.errors, (cell, column.errors.get(i))
        got = values[i]
        if "c" not in expected:
            assert got is None
            continue
        want = expected["c"][1]
        got = got if feature.is_list else [got]
        assert encode_example({"c": (feature.kind, got)}) == encode_example({"c": (feature.kind, want)}), cell


@pytest.mark.parametrize("feature_yaml", [
    "{name: c, type: int64}", "{name: c, type: float}", "{name: c, type: string}",
    "{name: c, type: bytes}",
])
@pytest.mark.parametrize("arrow_type, items", [
    (pa.int64(), [0, -1, 2**63 - 1, None]),
    (pa.uint64(), [0, 2**63, 2**64 - 1, None]),
    (pa.float64(), [0.0, -0.0, 1.5, 1e39, float("nan"), 3.0, 2.0**60, None]),
    (pa.bool_(), [True, False, None]),
    (pa.string(), ["a", "", "1", None]),
    (pa.binary(), [b"\xff", b"ok", None]),
    (pa.list_(pa.int64()), [[1], [], None]),
    (pa.decimal128(10, 3), [decimal.Decimal("1.250"), None]),
])
def test_row_converter_matches_the_column_path_on_typed_values(feature_yaml, arrow_type, items):
    spec = parse_spec(f"features: [{feature_yaml}]\nmax_bytes_length: 10")
    feature = spec.features[0]
    column = typed_feature(feature, pa.array(items, arrow_type), max_length=10)
    converter = RowConverter(spec, "parquet")
    values = column.values.to_pylist()
    for i, item in enumerate(items):
        try:
            expected = converter.convert({"c": item})
        except RowError as e:
            assert i in column.errors and column.errors[i].reason == e.reason, (item, e)
            continue
        assert i not in column.errors, (item, column.errors.get(i))
        want = expected["c"][1] if "c" in expected else None
        got = None if values[i] is None else [values[i]]
        assert (got is None) == (want is None)
        if want is not None:
            assert encode_example({"c": (feature.kind, got)}) == encode_example({"c": (feature.kind, want)})


def test_row_converter_api():
    spec = parse_spec("""
features:
  - {name: label, type: int64, required: true}
  - {name: weight, type: float, default: 1.0}
  - {name: caption, type: string}
""")
    converter = RowConverter(spec)
    assert converter.convert({"label": "3", "caption": ""}) == {
        "label": ("int64", [3]), "weight": ("float", [1.0]), "caption": ("bytes", [b""])}
    with pytest.raises(RowError) as info:
        converter.convert({"label": None})
    assert (info.value.reason, info.value.column) == ("missing_required", "label")
    with pytest.raises(RowError) as info:
        RowConverter(spec, "jsonl").convert({"label": "3"})
    assert info.value.reason == "wrong_type"
    assert RowConverter(spec, "jsonl").convert({"label": 3, "weight": 0.1})["weight"] == (
        "float", [f32(0.1)])


# ---------------------------------------------------------------------------------------
# Files that cannot be read.


def test_unreadable_and_missing_files_are_one_dead_letter_each(tmp_path):
    good = tmp_path / "a.csv"
    good.write_text("id\n1\n2\n")
    broken = tmp_path / "b.csv.gz"
    broken.write_bytes(b"this is not gzip at all")
    gone = tmp_path / "c.csv"
    gone.write_text("id\n3\n")
    units = plan_tabular(str(tmp_path / "*.csv*"), "csv")
    gone.unlink()
    spec = parse_spec("features: [{name: id, type: int64}]")
    fn = ConvertTabular(TabularConfig(spec=spec, fmt="csv"))
    fn.setup()
    batches = [b for u in units for b in fn.process(u)]
    assert len(records(batches)) == 2
    letters = dead_letters(batches)
    assert [(d["source"], d["reason"]) for d in letters] == [
        (str(broken), "unreadable_file"), (str(gone), "missing_file")]
    assert sum(b.input_count for b in batches) == 4

    corrupt = tmp_path / "d.parquet"
    corrupt.write_bytes(b"PAR1 nonsense")
    (unit,) = plan_tabular(str(corrupt), "parquet")
    fn = ConvertTabular(TabularConfig(spec=spec, fmt="parquet"))
    (batch,) = list(fn.process(unit))
    assert json.loads(batch.dead_letters[0])["reason"] == "unreadable_file"
    assert batch.input_count == 1


def test_planning(tmp_path):
    for name in ("b.csv", "a.csv", "c.txt"):
        (tmp_path / name).write_text("x\n1\n")
    units = plan_tabular(str(tmp_path / "*.csv"), "csv")
    assert [(u.path, u.index) for u in units] == [
        (str(tmp_path / "a.csv"), 0), (str(tmp_path / "b.csv"), 1)]
    assert units[0].extra == {"size": 4}
    with pytest.raises(FileNotFoundError, match="no input file matches"):
        plan_tabular(str(tmp_path / "*.jsonl"), "jsonl")
    with pytest.raises(ValueError, match="unknown tabular format"):
        plan_tabular(str(tmp_path / "*.csv"), "xlsx")
    table = pa.table({"x": list(range(10))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=4)
    units = plan_tabular(str(tmp_path / "t.parquet"), "parquet")
    assert [(u.start, u.end, u.extra["rows"], u.extra["row_offset"]) for u in units] == [
        (0, 1, 4, 0), (1, 2, 4, 4), (2, 3, 2, 8)]


def test_config_validation():
    spec = parse_spec("features: [{name: t, type: string, list: true}]")
    with pytest.raises(ValueError, match="feature 't': list features read from CSV need a 'separator'"):
        TabularConfig(spec=spec, fmt="csv")
    TabularConfig(spec=spec, fmt="jsonl")
    with pytest.raises(ValueError, match="unknown tabular format"):
        TabularConfig(spec=spec, fmt="xml")
    with pytest.raises(ValueError, match="resolve_spec"):
        TabularConfig(spec=ConversionSpec(include_unlisted=True), fmt="csv")


# ---------------------------------------------------------------------------------------
# Inference and resolution.


def test_infer_csv_types(tmp_path):
    path = tmp_path / "infer.csv"
    path.write_text(
        "i,f,b,s,big,mixed,empty,ws\n"
        "1,1.5,true,x,1,1,, 3\n"
        "-2,2,FALSE,y,99999999999999999999,true,,4 \n"
        ",nan,,\"\",,2.5,,\n")
    spec = infer_spec(plan_tabular(str(path), "csv"), "csv")
    assert [(f.name, f.type, f.is_list, f.required) for f in spec.features] == [
        ("i", "int64", False, False), ("f", "float", False, False), ("b", "int64", False, False),
        ("s", "string", False, False), ("big", "string", False, False),  # beyond int64: lossless text
        ("mixed", "float", False, False), ("empty", "string", False, False),
        ("ws", "int64", False, False)]
    # The inferred spec converts its own sample without dead letters.
    assert dead_letters(convert(path, "csv", spec)) == []


def test_infer_jsonl_and_parquet_types(tmp_path):
    path = tmp_path / "infer.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"i": 1, "f": 1, "b": True, "s": "x", "l": [1, 2], "m": 1, "o": {"a": 1}, "n": None},
        {"i": 2, "f": 2.5, "b": False, "s": "y", "l": 3, "m": "z", "ls": ["a", 1]},
    ]) + "\n")
    spec = infer_spec(plan_tabular(str(path), "jsonl"), "jsonl")
    assert [(f.name, f.type, f.is_list) for f in spec.features] == [
        ("i", "int64", False), ("f", "float", False), ("b", "int64", False),
        ("s", "string", False), ("l", "int64", True), ("m", "string", False),
        ("n", "string", False), ("ls", "string", True)]  # "o" (objects) is skipped
    assert dead_letters(convert(path, "jsonl", spec)) == []

    table = pa.table({
        "u8": pa.array([1], pa.uint8()), "flag": [True], "d": [1.5], "s": ["x"],
        "raw": pa.array([b"\x00"], pa.binary()), "tags": [["a"]], "day": pa.array([0], pa.date32()),
        "st": pa.array([{"a": 1}]),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    units = plan_tabular(str(tmp_path / "t.parquet"), "parquet")
    spec = infer_spec(units, "parquet")
    assert [(f.name, f.type, f.is_list) for f in spec.features] == [
        ("u8", "int64", False), ("flag", "int64", False), ("d", "float", False),
        ("s", "string", False), ("raw", "bytes", False), ("tags", "string", True),
        ("day", "string", False)]
    (example,) = [decode_example(r) for r in records(convert(tmp_path / "t.parquet", "parquet", spec))]
    assert example["day"] == ("bytes", [b"1970-01-01"]) and example["flag"] == ("int64", [1])


def test_inference_skips_unreadable_files(tmp_path):
    (tmp_path / "a.csv.gz").write_bytes(b"not gzip")
    (tmp_path / "b.csv").write_text("n,s\n1,x\n")
    spec = infer_spec(plan_tabular(str(tmp_path / "*.csv*"), "csv"), "csv")
    assert [(f.name, f.type) for f in spec.features] == [("n", "int64"), ("s", "string")]


def test_inference_reads_only_the_sample(tmp_path):
    path = tmp_path / "late.csv"
    path.write_text("a\n" + "1\n" * 50 + "x\n")
    units = plan_tabular(str(path), "csv")
    assert infer_spec(units, "csv", sample_rows=50).features[0].type == "int64"
    assert infer_spec(units, "csv", sample_rows=51).features[0].type == "string"


def test_resolve_spec_include_unlisted_and_checks(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("id,score,extra,more\n1,0.5,x,7\n")
    units = plan_tabular(str(path), "csv")
    spec = parse_spec("features: [{name: score, type: float}]\ninclude_unlisted: true")
    resolved = resolve_spec(units, "csv", spec)
    assert resolved.include_unlisted is False
    assert [(f.name, f.type) for f in resolved.features] == [
        ("score", "float"), ("id", "int64"), ("extra", "string"), ("more", "int64")]
    assert parse_spec(resolved.to_yaml()) == resolved
    with pytest.raises(SpecError, match="split_key column 'user' is not in the input"):
        resolve_spec(units, "csv", parse_spec(
            "features: [{name: id, type: int64}]\nsplits: {a: 1, b: 1}\nsplit_key: [user]"))
    with pytest.raises(SpecError, match="required column 'nope' is not in the input"):
        resolve_spec(units, "csv", parse_spec("features: [{name: nope, type: int64, required: true}]"))
    assert resolve_spec(units, "csv").features[0].name == "id"


# ---------------------------------------------------------------------------------------
# Estimates, Beam, metrics.


def test_estimate_output(tmp_path):
    for k in range(3):
        _many_rows_csv(tmp_path / f"part{k}.csv", n=2000)
    units = plan_tabular(str(tmp_path / "part*.csv"), "csv")
    exact = estimate_output(units, SPLIT_SPEC, "csv", sample_rows=100000)
    assert exact.exact and exact.rows == 6000 and exact.sampled_rows == 6000
    assert exact.dead_letter_rate == 0
    total = sum(len(r) + 16 for r in records(convert(tmp_path / "part*.csv", "csv", SPLIT_SPEC)))
    assert exact.output_bytes == pytest.approx(total, rel=1e-6)
    assert exact.rows_exact
    assert exact.shards == {"train": 3, "validation": 3, "test": 3}  # each file writes its own
    rough = estimate_output(units, SPLIT_SPEC, "csv", sample_rows=500, max_shard_bytes=10_000,
                            compression="gzip")
    assert not rough.exact and not rough.rows_exact and rough.sampled_rows >= 500
    assert 5000 < rough.rows < 7000
    assert 0 < rough.compression_ratio < 1
    # Each split gets its share of the bytes, in shards of at most max_shard_bytes, written
    # by each of the 3 work units.
    shards = rough.shards
    assert shards["train"] > shards["validation"] >= 3 and shards["test"] >= 3
    assert rough.output_bytes / 10_000 <= sum(shards.values()) < rough.output_bytes / 10_000 + 9
    assert rough.num_shards == sum(rough.shards.values())
    assert set(rough.to_dict()) >= {"rows", "output_bytes", "num_shards", "bytes_per_example"}
    fixed = estimate_output(units, SPLIT_SPEC, "csv", sample_rows=100, num_shards=4)
    assert fixed.shards == {"train": 4, "validation": 4, "test": 4}


def test_a_parquet_estimate_is_exact_in_rows_only_unless_it_read_every_row(tmp_path):
    """Parquet metadata counts the rows; the dead-letter rate and bytes come from the sample."""
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"x": [1.0] * 100 + [float("nan")] * 900}), path, row_group_size=100)
    spec = parse_spec("features: [{name: x, type: float, nan: reject}]")
    units = plan_tabular(str(path), "parquet")
    sampled = estimate_output(units, spec, "parquet", sample_rows=100)
    assert (sampled.rows, sampled.rows_exact, sampled.exact) == (1000, True, False)
    assert sampled.shards == {"data": 10}  # one per row group, each its own work unit
    whole = estimate_output(units, spec, "parquet", sample_rows=1000)
    assert (whole.rows_exact, whole.exact, whole.dead_letter_rate) == (True, True, 0.9)


def test_convert_tabular_in_a_beam_pipeline_counts_outcomes(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(ISSUE_CSV)
    units = plan_tabular(str(path), "csv")
    # The FnApiRunner itself, as the CLI uses it: "DirectRunner" first tries to download
    # Prism (and leaves a /tmp/beam-temp* folder behind when that fails).
    pipeline = beam.Pipeline(runner=FnApiRunner())
    batches = (pipeline | beam.Create(units)
               | beam.ParDo(ConvertTabular(TabularConfig(spec=ISSUE_SPEC, fmt="csv"))))

    def check(got):
        assert sum(len(b.records) for b in got) == 5
        assert sum(b.input_count for b in got) == 8

    assert_that(batches, check)
    result = pipeline.run()
    result.wait_until_finish()
    query = result.metrics().query(MetricsFilter().with_namespace("tfrecord_pipeline"))
    counters = {c.key.metric.name: c.committed for c in query["counters"]}
    assert counters["rows_read"] == 8 and counters["records_written"] == 5
    assert counters["dead_letter"] == 3
    assert counters["dead_letter_ragged_row"] == 1 and counters["dead_letter_invalid_encoding"] == 1


def test_sample_data_ships_and_converts_cleanly():
    import pathlib

    import pipeline

    root = pathlib.Path(pipeline.__file__).parent / "sample_data" / "tabular"
    data, spec_path = root / "customers.csv", root / "customers.spec.yaml"
    assert data.stat().st_size < 100_000
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["splits"] == {"train": 80, "validation": 10, "test": 10}
    from transforms.tabular.spec import load_spec

    spec = load_spec(str(spec_path))
    batches = convert(data, "csv", spec)
    assert dead_letters(batches) == []
    assert sum(b.input_count for b in batches) == 240
    assert {b.split for b in batches} == {"train", "validation", "test"}
    text = data.read_bytes()
    assert b'""' in text and b",," in text and b'"New York, NY"' in text and b"\r\n" in text


def test_work_unit_key_uses_unit_index(tmp_path):
    path = tmp_path / "k.csv"
    path.write_text("a\n1\n")
    spec = parse_spec("features: [{name: a, type: int64}]")
    fn = ConvertTabular(TabularConfig(spec=spec, fmt="csv"))
    (batch,) = list(fn.process(WorkUnit(str(path), 12)))
    assert batch.key == "00000012:00000000"


def _random_text_bytes(rng: random.Random, size: int) -> bytes:
    pieces = [b"a", b"1,", b"\n", "ß".encode(), "€".encode(), "😀".encode(),
              chr(0x10FF41).encode(),  # private use: the escaping's own range, but valid
              b"\x80", b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98",  # stray / truncated
              b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]  # overlong, surrogate, > U+10FFFF
    weights = [40, 10, 5, 5, 5, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    return b"".join(rng.choices(pieces, weights, k=size))


def _csv_of_blocks(tmp_path, rows: int):
    """A CSV of ~100-byte rows and its work unit: read with batch_rows=300, its blocks
    are 64 KiB (the minimum), so `rows` / 690 of them."""
    path = tmp_path / "blocks.csv"
    path.write_text("id,text\n" + "".join(f"{i},{'x' * 90}\n" for i in range(rows)))
    spec = parse_spec("features: [{name: id, type: int64}, {name: text, type: string}]")
    return plan_module.plan_tabular(str(path), "csv")[0], spec


def test_csv_reader_reads_every_row_of_many_blocks_and_records_longer_than_one(tmp_path):
    """The reader cuts its blocks where records end (no thread reads ahead): every row of a
    file of many blocks once, in order, also where a record spans several blocks."""
    unit, spec = _csv_of_blocks(tmp_path, 30_000)
    chunks = list(read_chunks(unit, "csv", spec, batch_rows=300))
    ids = [i for chunk in chunks for i in chunk.columns["id"].to_pylist()]
    assert ids == [str(i) for i in range(30_000)] and len(chunks) > 30
    assert [n for chunk in chunks for n in chunk.row_numbers.tolist()] == list(range(1, 30_001))
    long_field = '"' + "x\n" * 200_000 + '"'  # 400 KB with line ends, over several blocks
    (tmp_path / "long.csv").write_text(f"id,text\n1,a\n2,{long_field}\n3,c\n")
    (long_unit,) = plan_module.plan_tabular(str(tmp_path / "long.csv"), "csv")
    chunks = list(read_chunks(long_unit, "csv", spec, batch_rows=300))
    rows = [(n, i, len(t)) for chunk in chunks for n, i, t in zip(
        chunk.row_numbers.tolist(), chunk.columns["id"].to_pylist(),
        chunk.columns["text"].to_pylist(), strict=True)]
    assert rows == [(1, "1", 1), (2, "2", 400_000), (3, "3", 1)]
    assert not any(chunk.failures for chunk in chunks)


@pytest.mark.parametrize("seed", range(40))
def test_escaping_reader_matches_one_whole_decode_at_any_block_boundary(seed):
    # Valid UTF-8 blocks bypass the decoder (validated by Arrow); the bytes must still be
    # exactly those of decoding the whole input at once, wherever the blocks are cut.
    rng = random.Random(seed)
    data = (b"\xef\xbb\xbf" if seed % 3 == 0 else b"") + _random_text_bytes(rng, rng.randint(0, 400))
    if seed % 4 == 1:  # mostly valid, so that the pass-through path is exercised
        data = data.decode("utf-8", "ignore").encode("utf-8")
    expected = data.decode("utf-8-sig", errors=csv_reader._ESCAPE_ERRORS).encode("utf-8")
    for read_size in (1, 2, 3, 5, 64, 1 << 20):
        reader = csv_reader._EscapingReader(io.BytesIO(data), "utf-8", read_size=read_size)
        pieces = []
        while piece := reader.read(rng.randint(1, 50)):
            pieces.append(piece)
        out = b"".join(pieces)
        assert out == expected, (seed, read_size)
        assert reader.escapes == (expected != data.decode("utf-8-sig", "replace").encode())
