"""Sequences shuffled by bucket: a group lands in exactly one bucket, the output does not depend
on the bucket count, the memory cap (one pass or several), the chunking (--batch-rows) or the
order fragments arrive in; oversized groups become dead letters with their size; context
values compare as the reference did (NaN equals NaN, lists element by element)."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.format.example_codec import decode_sequence_example
from transforms.format.manifest_format import Counts
from transforms.manifest import read_manifest
from transforms.records import WorkUnit
from transforms.sequence.assemble import PIECE_ROWS, _pairs_equal
from transforms.sequence.buckets import assemble_bucket, bucket_count
from transforms.sequence.rows import (
    GROUP,
    KEY_COLUMN,
    READ_COUNTS,
    ROW_COLUMN,
    SPLIT_COLUMN,
    SequenceRows,
    read_sequence_rows,
    sequence_assigner,
)
from transforms.tabular.spec import SpecError, parse_spec
from transforms.tfrecord_io import read_tfrecord_file

SPEC = """\
features:
  - {name: user, type: string}
  - {name: ts, type: int64}
  - {name: item, type: string}
  - {name: tags, type: string, list: true, separator: "|"}
splits: {train: 50, test: 50}
sequence:
  group_by: [user]
  order_by: ts
  context: [user]
  max_length: 4
  max_group_rows: 30
"""


def _write(folder, files: int = 3, users: int = 40, seed: int = 3, extra: str = "") -> None:
    """Users spread over every file, ties in ts, one user with more than max_group_rows rows."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for f in range(files):
        lines = ["user,ts,item,tags"]
        for i in range(60):
            user = "big" if i % 5 == 0 else f"u{rng.randrange(users)}"
            tags = "|".join(f"t{j}" for j in range(i % 3))
            lines.append(f"{user},{rng.randrange(6)},item-{f}-{i},{tags}")
        (folder / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
    (folder / "spec.yaml").write_text(SPEC + extra)


def _convert(inputs, output, *extra) -> None:
    assert run(["convert", "--input", str(inputs / "*.csv"), "--format", "csv", "--spec",
                str(inputs / "spec.yaml"), "--output", str(output), "--num-shards", "1",
                "--max-error-rate", "1", *extra, *in_memory_args()]) == 0


def _outputs(output) -> tuple[dict, list, Counts]:
    """Payloads per split (in file order), dead letters (sorted), and the counts."""
    manifest = read_manifest(str(output))
    payloads: dict[str, list] = {}
    for shard in manifest.shards:
        payloads.setdefault(shard.split, []).extend(read_tfrecord_file(f"{output}/{shard.path}"))
    letters = sorted(line for path in (output / "dead_letter").iterdir()
                     for line in path.read_text().splitlines())
    return payloads, letters, manifest.counts


def test_bucket_count_follows_the_input_size():
    sequence = parse_spec(SPEC).sequence
    half = sequence.bucket_bytes // 2
    assert [bucket_count(size, sequence) for size in (0, 1, half, half + 1, 10 * half)] == \
        [1, 1, 1, 2, 10]
    assert parse_spec(SPEC + "  bucket_bytes: 1000\n").sequence.bucket_bytes == 1000
    with pytest.raises(SpecError, match="bucket_bytes"):
        parse_spec(SPEC + "  bucket_bytes: 0\n")


def test_a_group_is_in_exactly_one_bucket(tmp_path):
    _write(tmp_path / "in", files=3)
    spec = parse_spec(SPEC)
    assigner = sequence_assigner(spec)
    buckets: dict[bytes, set] = {}
    for index in range(3):
        unit = WorkUnit(str(tmp_path / "in" / f"part-{index}.csv"), index)
        for key, value in read_sequence_rows(unit, spec, "csv", 7, assigner, buckets=5):
            if key.startswith(GROUP):
                assert value.num_rows
                for group in value.batch.column(KEY_COLUMN).to_pylist():
                    buckets.setdefault(group, set()).add(key)
            else:
                assert key.startswith(READ_COUNTS)
    assert len(buckets) > 20
    assert all(len(keys) == 1 for keys in buckets.values())
    assert len({key for keys in buckets.values() for key in keys}) == 5


def test_output_does_not_depend_on_batch_rows_buckets_or_the_memory_cap(tmp_path, monkeypatch,
                                                                         capsys):
    from transforms.sequence import buckets

    large = _spy(monkeypatch, buckets, "_too_large")
    _write(tmp_path / "in")
    _convert(tmp_path / "in", tmp_path / "base")
    base = _outputs(tmp_path / "base")
    assert base[2].input == 180 and base[2].input == base[2].written_rows + base[2].dead_letter
    big = [json.loads(line) for line in base[1]]
    assert {letter["reason"] for letter in big} == {"group_too_large"}
    assert {letter["group_rows"] for letter in big} == {36} and len(big) == 36
    for rows in ("3", "50", "100000"):
        _convert(tmp_path / "in", tmp_path / f"rows-{rows}", "--batch-rows", rows)
        assert _outputs(tmp_path / f"rows-{rows}") == base
    # Tiny buckets: many of them (the plan), several passes each (the cap), the big group
    # dead-lettered fragment by fragment; the same sequences and dead letters.
    (tmp_path / "in" / "spec.yaml").write_text(SPEC + "  bucket_bytes: 600\n")
    _convert(tmp_path / "in", tmp_path / "tiny", "--batch-rows", "20")
    payloads, letters, counts = _outputs(tmp_path / "tiny")
    assert large  # the in-process runner ran the several-passes path
    capsys.readouterr()
    assert run(["convert", "--input", str(tmp_path / "in" / "*.csv"), "--format", "csv", "--spec",
                str(tmp_path / "in" / "spec.yaml"), "--output", str(tmp_path / "dry"),
                "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["sequence_buckets"] > 5
    assert letters == base[1] and counts == base[2]
    assert {split: sorted(p) for split, p in payloads.items()} == \
        {split: sorted(p) for split, p in base[0].items()}


def _fragments(tmp_path, buckets: int, batch_rows: int = 9):
    spec = parse_spec(SPEC)
    by_bucket: dict[bytes, list] = {}
    for index in range(3):
        unit = WorkUnit(str(tmp_path / "in" / f"part-{index}.csv"), index)
        for key, value in read_sequence_rows(unit, spec, "csv", batch_rows, sequence_assigner(spec),
                                             buckets=buckets):
            if key.startswith(GROUP):
                by_bucket.setdefault(key, []).append(value)
    return spec, by_bucket


def _content(batches) -> tuple[dict, list, int]:
    records: dict[str, list] = {}
    letters, rows = [], 0
    for batch in batches:
        records.setdefault(batch.split, []).extend(batch.records)
        letters.extend(batch.dead_letters)
        rows += batch.rows_written
    return records, letters, rows


def _spy(monkeypatch, module, name) -> list:
    calls = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_one_pass_and_several_passes_agree_whatever_the_fragment_order(tmp_path, monkeypatch):
    from transforms.sequence import buckets

    passes = _spy(monkeypatch, buckets, "assemble_rows")
    large = _spy(monkeypatch, buckets, "_too_large")
    _write(tmp_path / "in")
    spec, by_bucket = _fragments(tmp_path, buckets=1)
    fragments = by_bucket[GROUP + bytes(4)]
    names = sequence_assigner(spec).names
    one = _content(assemble_bucket(0, fragments, spec, names))
    shuffled = list(fragments)
    random.Random(1).shuffle(shuffled)
    assert _content(assemble_bucket(0, shuffled, spec, names)) == one
    # Fragments of other chunkings give the same output too.
    _, other = _fragments(tmp_path, buckets=1, batch_rows=25)
    assert _content(assemble_bucket(0, other[GROUP + bytes(4)], spec, names)) == one
    assert len(passes) == 3 and not large
    for cap, count in ((400, 10), (2000, 3)):
        passes.clear()
        small = parse_spec(SPEC + f"  bucket_bytes: {cap}\n")
        records, letters, rows = _content(assemble_bucket(0, shuffled, small, names))
        assert (records, sorted(letters), rows) == (one[0], sorted(one[1]), one[2])
        assert len(passes) >= count and large
    sequences = [decode_sequence_example(p) for p in one[0]["train"] + one[0]["test"]]
    assert all(len(lists["ts"][1]) <= 4 for _, lists in sequences)
    assert one[2] + len(one[1]) == 180


def test_pieces_cut_between_groups_only(monkeypatch):
    """Many groups, pieces of a few steps: every group's chunks stay whole and in order."""
    from transforms.sequence import assemble

    monkeypatch.setattr(assemble, "PIECE_ROWS", 5)
    spec = parse_spec("features: [{name: k, type: int64}, {name: t, type: int64}]\n"
                      "sequence: {group_by: k, order_by: t, context: [k], max_length: 3}\n")
    rows = [(k, t) for k in range(7) for t in range(k + 1)]
    random.Random(4).shuffle(rows)
    n = len(rows)
    fragment = SequenceRows("00000000:00000000", "f.csv", pa.RecordBatch.from_pydict({
        KEY_COLUMN: pa.array([str(k).encode() for k, _ in rows], pa.binary()),
        ROW_COLUMN: pa.array(np.arange(1, n + 1)), SPLIT_COLUMN: pa.array(np.zeros(n, np.int8)),
        "k": pa.array([k for k, _ in rows], pa.int64()),
        "t": pa.array([t for _, t in rows], pa.int64())}))
    records, letters, written = _content(assemble_bucket(0, [fragment], spec, ["data"]))
    assert not letters and written == len(rows)
    got = [decode_sequence_example(p) for p in records["data"]]
    steps = [(c["k"][1][0], c["sequence_chunk"][1][0], lists["t"][1]) for c, lists in got]
    expected = [(k, i // 3, [[t] for t in range(i, min(i + 3, k + 1))])
                for k in range(7) for i in range(0, k + 1, 3)]
    assert steps == expected
    assert PIECE_ROWS == 1 << 17


@pytest.mark.parametrize(("values", "pairs", "expected"), [
    (pa.array([1.0, float("nan"), float("nan"), None, None, 0.0, -0.0], pa.float32()),
     [(1, 2), (3, 4), (0, 3), (5, 6), (0, 5)], [True, True, False, True, False]),
    (pa.array([[b"a"], [b"a"], [b"a", b"b"], [], None, [], [b"b"]], pa.list_(pa.binary())),
     [(0, 1), (0, 2), (3, 5), (3, 4), (0, 6), (4, 4)], [True, False, True, False, False, True]),
    (pa.array([[1.0, float("nan")], [1.0, float("nan")], [1.0, 2.0]], pa.list_(pa.float32())),
     [(0, 1), (0, 2)], [True, False]),
    (pa.array([b"x", b"x", b"y", None], pa.binary()), [(0, 1), (0, 2), (3, 3), (2, 3)],
     [True, False, True, False]),
    (pa.array([5, 5, None, 6], pa.int64()), [(0, 1), (1, 2), (2, 2), (0, 3)],
     [True, False, True, False]),
])
def test_context_values_compare_like_the_reference(values, pairs, expected):
    a, b = (np.array(side, np.int64) for side in zip(*pairs, strict=True))
    assert _pairs_equal(values, a, b).tolist() == expected
