"""Rows grouped into SequenceExamples, end to end: TensorFlow reads every sequence back
equal to the source groups, for CSV, JSONL and Parquet, on the local runner and on Dask."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.format.example_codec import decode_sequence_example
from transforms.manifest import read_manifest
from transforms.sequence.buckets import assemble_bucket
from transforms.sequence.rows import KEY_COLUMN, ROW_COLUMN, SPLIT_COLUMN, SequenceRows
from transforms.tabular.spec import SpecError, parse_spec
from transforms.tfrecord_io import read_tfrecord_file

SPEC = """\
features:
  - {name: user, type: string}
  - {name: country, type: string}
  - {name: ts, type: int64, required: true}
  - {name: item, type: string}
  - {name: score, type: float}
  - {name: tags, type: string, list: true, separator: "|"}
splits: {train: 60, test: 40}
sequence:
  group_by: [user]
  order_by: ts
  context: [user, country]
  max_length: 3
"""
COLUMNS = ["user", "country", "ts", "item", "score", "tags"]


def _rows(file_index: int) -> list[dict]:
    """Rows of one input file: users spread over files, ties in ts, absent values."""
    rows = []
    for i in range(12):
        user = f"u{(i * 7 + file_index) % 5}"
        rows.append({"user": user, "country": f"c-{user}", "ts": i % 4,
                     "item": None if i % 5 == 0 else f"item-{file_index}-{i}",
                     "score": None if i % 3 == 0 else i / 4,
                     "tags": None if i % 4 == 0 else [f"t{j}" for j in range(i % 3)]})
    return rows


def _write(folder, fmt: str, files: int = 2) -> dict:
    """Writes the inputs; returns {user: [steps in order]} as the source groups."""
    folder.mkdir(parents=True)
    groups: dict[str, list] = {}
    for f in range(files):
        rows = _rows(f)
        path = folder / f"part-{f}.{fmt}"
        if fmt == "csv":
            lines = [",".join(COLUMNS)]
            for r in rows:
                cells = ["" if r[c] is None else "|".join(r[c]) if c == "tags" else str(r[c])
                         for c in COLUMNS]
                lines.append(",".join(cells))
            path.write_text("\n".join(lines) + "\n")
        elif fmt == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            pq.write_table(pa.Table.from_pylist(rows), path)
        for number, r in enumerate(rows, start=1):
            groups.setdefault(r["user"], []).append(((r["ts"], str(path), number), r))
    (folder / "spec.yaml").write_text(SPEC)
    return {user: [r for _, r in sorted(steps, key=lambda s: s[0])] for user, steps in groups.items()}


def _convert(inputs, output, fmt, *extra) -> int:
    """Bad rows and groups are dead letters here: they are committed."""
    return run(["convert", "--input", str(inputs / f"*.{fmt}"), "--format", fmt, "--max-error-rate",
                "1", "--spec", str(inputs / "spec.yaml"), "--output", str(output), *extra])


def _payloads(output) -> list[bytes]:
    manifest = read_manifest(str(output))
    return [p for shard in manifest.shards for p in read_tfrecord_file(f"{output}/{shard.path}")]


def _tf_spec(tf, output):
    spec = json.loads((output / "feature_spec.json").read_text())
    assert spec["record"] == "sequence_example"

    def feature(entry, sequence):
        dtype = tf.as_dtype(entry["dtype"])
        if entry["kind"] == "fixed":
            return tf.io.FixedLenFeature([], dtype, entry["default"])
        if entry["kind"] == "fixed_len_sequence":
            return tf.io.FixedLenSequenceFeature([], dtype)
        return tf.io.VarLenFeature(dtype)

    return ({n: feature(e, False) for n, e in spec["context"].items()},
            {n: feature(e, True) for n, e in spec["sequence"].items()})


def _expected_chunks(groups, max_length=3):
    out = {}
    for user, steps in groups.items():
        for chunk, start in enumerate(range(0, len(steps), max_length)):
            out[(user, chunk)] = steps[start:start + max_length]
    return out


def _read_back(tf, output) -> dict:
    context_spec, sequence_spec = _tf_spec(tf, output)
    payloads = _payloads(output)
    got = {}
    for payload in payloads:
        context, sequences = tf.io.parse_single_sequence_example(payload, context_spec, sequence_spec)
        user = context["user"].values.numpy()[0].decode()
        assert context["country"].values.numpy().tolist() == [f"c-{user}".encode()]
        items, scores, tags = (tf.RaggedTensor.from_sparse(sequences[name]).to_list()
                               for name in ("item", "score", "tags"))
        steps = [(ts, item[0].decode() if item else None, float(score[0]) if score else None,
                  [t.decode() for t in tag])
                 for ts, item, score, tag in zip(sequences["ts"].numpy().tolist(), items, scores,
                                                 tags, strict=True)]
        got[(user, int(context["sequence_chunk"]))] = steps
    # The batch parser agrees with the one-by-one parser.
    context, sequences, lengths = tf.io.parse_sequence_example(payloads, context_spec, sequence_spec)
    assert sorted(lengths["ts"].numpy().tolist()) == sorted(len(s) for s in got.values())
    return got


def _as_steps(rows):
    return [(r["ts"], r["item"], r["score"], r["tags"] or []) for r in rows]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_tensorflow_reads_every_sequence_back(tf, tmp_path, fmt):
    groups = _write(tmp_path / "in", fmt)
    assert _convert(tmp_path / "in", tmp_path / "out", fmt, "--compression", "gzip",
                    *in_memory_args()) == 0
    expected = {key: _as_steps(rows) for key, rows in _expected_chunks(groups).items()}
    assert _read_back(tf, tmp_path / "out") == expected
    manifest = read_manifest(str(tmp_path / "out"))
    assert manifest.counts.input == manifest.counts.written_rows == 24
    assert manifest.counts.written == len(expected)
    assert all(shard.path.endswith(".gz") for shard in manifest.shards)
    # A group's chunks stay in one split.
    splits = {}
    for shard in manifest.shards:
        for payload in read_tfrecord_file(f"{tmp_path}/out/{shard.path}"):
            user = decode_sequence_example(payload)[0]["user"][1][0]
            splits.setdefault(user, set()).add(shard.split)
    assert all(len(s) == 1 for s in splits.values())
    assert run(["verify", str(tmp_path / "out")]) == 0


@pytest.mark.parametrize("bucket_bytes", [None, 2000])
def test_dask_output_is_record_identical(tmp_path, bucket_bytes, dask_address):
    """Also with many small buckets, each assembled in several passes (bucket_bytes), read
    from files cut into byte ranges (by the launcher locally, by the cluster's workers on
    Dask). On the session's cluster: the LocalCluster a run starts for itself is tested in
    tests/e2e/test_runners_e2e.py and tests/e2e/test_split_units_dask.py."""
    _write(tmp_path / "in", "csv")
    cut = []
    if bucket_bytes:
        spec = tmp_path / "in" / "spec.yaml"
        spec.write_text(spec.read_text() + f"  bucket_bytes: {bucket_bytes}\n")
        cut = ["--work-unit-bytes", "100B"]
    assert _convert(tmp_path / "in", tmp_path / "local", "csv", "--num-shards", "2", *cut,
                    *in_memory_args()) == 0
    assert _convert(tmp_path / "in", tmp_path / "dask", "csv", "--num-shards", "2", *cut,
                    "--runner", "dask", "--dask_client_address", dask_address, "--quiet") == 0
    local, dask = read_manifest(str(tmp_path / "local")), read_manifest(str(tmp_path / "dask"))
    assert _payloads(tmp_path / "local") == _payloads(tmp_path / "dask")
    assert [(s.path, s.sha256) for s in local.shards] == [(s.path, s.sha256) for s in dask.shards]
    assert local.counts == dask.counts


def test_bad_rows_and_groups_are_dead_letters_and_counts_reconcile(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("user,country,ts,item\nu1,de,1,a\n,de,2,b\nu2,fr,,c\n"
                                  "u3,it,1,d\nu3,es,2,e\nu4,de,x,f\n")
    (folder / "spec.yaml").write_text("""\
features:
  - {name: user, type: string}
  - {name: country, type: string}
  - {name: ts, type: int64}
  - {name: item, type: string}
sequence: {group_by: user, order_by: ts, context: [user, country]}
""")
    assert run(["convert", "--input", str(folder / "*.csv"), "--format", "csv", "--spec",
                str(folder / "spec.yaml"), "--output", str(tmp_path / "out"), "--max-error-rate", "1",
                *in_memory_args()]) == 0
    manifest = read_manifest(str(tmp_path / "out"))
    counts = manifest.counts
    assert (counts.input, counts.written, counts.written_rows, counts.dead_letter) == (6, 1, 1, 5)
    letters = [json.loads(line) for path in (tmp_path / "out" / "dead_letter").iterdir()
               for line in path.read_text().splitlines()]
    assert sorted(letter["reason"] for letter in letters) == [
        "context_mismatch", "context_mismatch", "invalid_int", "missing_group_key",
        "missing_order_value"]
    assert run(["verify", str(tmp_path / "out")]) == 0


def _fragment(rows, order, key=b"u", source="f.csv", chunk="00000000:00000000"):
    n = len(rows)
    return SequenceRows(chunk, source, pa.RecordBatch.from_pydict({
        KEY_COLUMN: pa.array([key] * n, pa.binary()), ROW_COLUMN: pa.array(rows, pa.int64()),
        SPLIT_COLUMN: pa.array([0] * n, pa.int8()), "user": pa.array([key] * n, pa.binary()),
        "ts": pa.array(order, pa.int64())}))


def test_truncate_and_the_group_cap():
    spec = parse_spec("""\
features: [{name: user, type: string}, {name: ts, type: int64}]
sequence: {group_by: user, order_by: ts, context: [user], max_length: 2, overflow: truncate,
           max_group_rows: 4}
""")
    batches = list(assemble_bucket(0, [_fragment([1, 2], [3, 1]), _fragment([3], [2])], spec,
                                   ["data"]))
    assert [(b.record_rows, len(b.records), len(b.dead_letters)) for b in batches] == \
        [(2, 1, 0), (0, 0, 1)]
    _, lists = decode_sequence_example(batches[0].records[0])
    assert lists["ts"] == ("int64", [[1], [2]])
    assert [json.loads(d)["reason"] for d in batches[1].dead_letters] == ["sequence_truncated"]
    big = list(assemble_bucket(0, [_fragment([1, 2, 3], [1, 2, 3]), _fragment([4, 5], [4, 5])],
                               spec, ["data"]))
    assert sum(len(b.dead_letters) for b in big) == 5 and not any(b.records for b in big)
    assert {json.loads(d)["group_rows"] for b in big for d in b.dead_letters} == {5}


def test_spec_section_round_trips_and_errors_name_the_key():
    spec = parse_spec(SPEC)
    assert parse_spec(spec.to_yaml()) == spec
    assert spec.to_feature_spec()["sequence"]["ts"] == {"dtype": "int64", "kind": "fixed_len_sequence",
                                                       "shape": []}
    base = "features: [{name: a, type: int64}, {name: b, type: int64, list: true}]\n"
    for section, key in [("{order_by: a}", "group_by"), ("{group_by: k, colour: 1}", "colour"),
                         ("{group_by: k, order_by: b}", "order_by"),
                         ("{group_by: k, context: [zz]}", "context"),
                         ("{group_by: k, max_length: 0}", "max_length"),
                         ("{group_by: k, overflow: drop}", "overflow"),
                         ("{group_by: k, context: [a], feature_lists: [a, b]}", "both"),
                         ("{group_by: k, feature_lists: [b]}", "neither")]:
        with pytest.raises(SpecError, match=key):
            parse_spec(base + f"sequence: {section}\n")
    with pytest.raises(SpecError, match="split_key"):
        parse_spec(base + "splits: {a: 1, b: 1}\nsplit_key: [a]\nsequence: {group_by: k}\n")


def test_the_run_summary_counts_rows_and_sequences_so_they_add_up(tmp_path, capsys):
    """Input and dead letters are rows, `written` sequences: the summary says which, with the
    rows written, so that rows read = rows written + dead-lettered rows."""
    source = tmp_path / "s.csv"
    source.write_text("session_id,ts,user,page\ns1,1,u1,a\ns1,2,u1,b\ns2,1,u2,c\ns2,x,u2,d\ns3,1,u3,e\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("features:\n- {name: session_id, type: string}\n- {name: ts, type: int64}\n"
                    "- {name: user, type: string}\n- {name: page, type: string}\n"
                    "sequence:\n  group_by: [session_id]\n  order_by: ts\n  context: [user]\n")
    assert run(["convert", "--input", str(source), "--format", "csv", "--spec", str(spec),
                "--output", str(tmp_path / "out"), "--direct_running_mode=in_memory",
                "--max-error-rate", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = dict(re.split(r"\s{2,}", line.strip()) for line in lines[1:9])
    assert shown == {"rows read": "5", "rows written": "4", "sequences written: data": "3",
                     "sequences written (total)": "3", "dead-lettered rows": "1",
                     "invalid_int": "1", "shards": "1", "bytes": shown["bytes"]}
