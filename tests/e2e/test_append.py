"""`convert --append` of tabular inputs (issue 35), through the CLI and the reading API.

Appends per format each add a new file (and, for CSV and JSON Lines, rows at the end of a
growing file): ten for CSV and Parquet, three for JSON Lines (see `APPENDS`). After each: a
reader opened on the previous generation, and partly read before the append, reads its whole
snapshot; `verify` passes; the manifest's counts are the records in the shards, split by
split; TFDS's view of the output (`dataset_info.json`) lists exactly the manifest's shards
with their record counts, under the first generation's `features.json`; TFDS parses every
record of each split at the first and the last generation (see `_check_generation`). The
final output holds what one conversion of all the inputs holds: the same records and dead
letters as multisets (an append orders its shards by generation, one conversion by batch key
over all the files, so the order differs) and the same stats.json byte for byte (exact
statistics).
"""

from __future__ import annotations

import collections
import itertools
import json
import random

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from tfrecord_pipeline import read_examples, read_tfrecord_file

SPEC = ("features:\n  - {name: id, type: int64}\n  - {name: x, type: float}\n"
        "  - {name: name, type: string}\n"
        "splits: {train: 8, eval: 2}\nsplit_key: id\n")
#: Appends per format. What an append does with the generations it commits (relisting the
#: committed shards under their grown names, superseding and then deleting old names, carrying
#: the totals) never sees the input format; the format decides only how new input is found and
#: read: new files (all three), and for CSV/TSV and JSON Lines the rows a file gained past its
#: committed size (`pipeline.appending._new_rows`: the line count by the text dialect, minus
#: CSV's header, then the reader started at that offset). Ten appends run the generations of a
#: growing text file (CSV, with its header) and of a format that cannot grow (Parquet); JSON
#: Lines runs the same code at three: its file grows from a size an append committed (and again),
#: and the generation after next deletes a superseded name. The lines of pipeline/ and
#: transforms/ run by JSON Lines' three appends are those run by its ten (measured with a line
#: tracer when the count was cut from ten).
APPENDS = {"csv": 10, "jsonl": 3, "parquet": 10}


def _rows(rng: random.Random, first: int, count: int) -> list[dict]:
    rows = []
    for i in range(first, first + count):
        x = "oops" if rng.random() < 0.1 else f"{rng.randint(0, 999) / 8}"
        rows.append({"id": i, "x": x, "name": f"c{rng.randint(0, 5)}"})
    return rows


def _write(path, fmt: str, rows: list[dict], append: bool = False) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        # A float column: out of float32's range stands for the text files' bad value.
        pq.write_table(pa.table({"id": [r["id"] for r in rows],
                                 "x": [1e300 if r["x"] == "oops" else float(r["x"]) for r in rows],
                                 "name": [r["name"] for r in rows]}), path)
        return
    if fmt == "csv":
        lines = [f"{r['id']},{r['x']},{r['name']}" for r in rows]
        header = [] if append else ["id,x,name"]
    else:
        lines = [json.dumps({**r, "x": r["x"] if r["x"] == "oops" else float(r["x"])}) for r in rows]
        header = []
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in header + lines))


def _argv(tmp_path, fmt: str, output, *extra: str) -> list[str]:
    return ["convert", "--input", str(tmp_path / "in" / f"*.{fmt}"), "--format", fmt,
            "--spec", str(tmp_path / "spec.yaml"), "--output", str(output),
            "--max-error-rate", "0.5", "--quiet", *in_memory_args()[:2], *extra]


def _records(output, split: str) -> list[bytes]:
    manifest = json.loads((output / "manifest.json").read_text())
    return [record for shard in manifest["shards"] if shard["split"] == split
            for record in read_tfrecord_file(str(output / shard["path"]))]


def _dead_letters(output) -> collections.Counter:
    manifest = json.loads((output / "manifest.json").read_text())
    return collections.Counter(line for entry in manifest["dead_letter_files"]
                               for line in (output / entry["path"]).read_text().splitlines())


def _stats(output) -> str:
    """stats.json with the run id replaced: its dead-letter examples too are the first of each
    reason by place in the input (source, then row), whatever generation wrote them."""
    manifest = json.loads((output / "manifest.json").read_text())
    stats = json.loads((output / "stats.json").read_text())
    return json.dumps(stats, sort_keys=True).replace(manifest["run_id"], "RUN")


def _check_generation(output, generation: int, features_json: bytes | None, parse_all: bool) -> bytes:
    """Counts reconcile with the shards split by split, `verify` passes, and TFDS's metadata
    lists exactly the manifest's shards, with their record counts, under the first generation's
    `features.json` (returned, for the next generations). With `parse_all`, TFDS parses every
    record of each split: at the first generation and at the last, which holds every
    generation's shards under their last names and `dataset_info.json` rewritten from them (a
    pure function of the listed shards, `transforms.tfds_metadata`), so the records each
    generation added are parsed by TFDS once there; the generations between are held by the
    checks above, which cost no TFDS dataset."""
    import tensorflow_datasets as tfds

    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest.get("generation", 0) == generation
    for split, entry in manifest["counts"]["splits"].items():
        assert entry["written"] == len(_records(output, split)) == len(read_examples(str(output), split))
    assert run(["verify", str(output)]) == 0
    features = (output / "features.json").read_bytes()
    assert features_json in (None, features)
    builder = tfds.builder_from_directory(str(output))
    listed = dict(builder.info.splits.items())
    assert set(listed) == {split for split, entry in manifest["counts"]["splits"].items()
                           if entry["written"]}  # TFDS lists no empty split
    for split, info in listed.items():
        shards = sorted((shard for shard in manifest["shards"] if shard["split"] == split),
                        key=lambda shard: shard["path"])
        assert [str(path) for path in info.filepaths] == [str(output / shard["path"]) for shard in shards]
        assert info.shard_lengths == [shard["records"] for shard in shards]
        assert info.num_examples == manifest["counts"]["splits"][split]["written"]
    # Each split read whole as one batch (batch_size=-1): every record parsed by TFDS, without
    # a Python step per record; the files read one after the other, no cache, no prefetch.
    sequential = tfds.ReadConfig(try_autocache=False, skip_prefetch=True, interleave_cycle_length=1)
    for split, info in listed.items() if parse_all else ():
        batch = builder.as_dataset(split=split, batch_size=-1, read_config=sequential)
        assert len(tfds.as_numpy(batch)["id"]) == info.num_examples
    return features


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_appends_equal_one_conversion_and_keep_readers_of_the_previous_generation(tmp_path, fmt):
    rng = random.Random(35)
    (tmp_path / "in").mkdir()
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    grows = fmt != "parquet"
    next_id = 0

    def add(path, count, append=False):
        nonlocal next_id
        _write(path, fmt, _rows(rng, next_id, count), append=append)
        next_id += count

    add(tmp_path / "in" / f"part-00.{fmt}", 30)
    if grows:
        add(tmp_path / "in" / f"growing.{fmt}", 5)
    output = tmp_path / "appended" / "out"
    assert run(_argv(tmp_path, fmt, output, "--append")) == 0  # no output yet: generation 0
    features_json = _check_generation(output, 0, None, parse_all=True)
    for generation in range(1, APPENDS[fmt] + 1):
        snapshot = {split: [dict_bytes(r) for r in read_examples(str(output), split)]
                    for split in ("train", "eval")}
        opened = {split: iter(read_examples(str(output), split)) for split in ("train", "eval")}
        started = {split: [dict_bytes(r) for r in itertools.islice(reader, 1)]
                   for split, reader in opened.items()}
        add(tmp_path / "in" / f"part-{generation:02d}.{fmt}", 3 + generation % 4)
        if grows:
            add(tmp_path / "in" / f"growing.{fmt}", 2, append=True)
        assert run(_argv(tmp_path, fmt, output, "--append")) == 0
        for split, reader in opened.items():  # the previous generation's files are still there
            assert started[split] + [dict_bytes(r) for r in reader] == snapshot[split]
        _check_generation(output, generation, features_json, parse_all=generation == APPENDS[fmt])

    reference = tmp_path / "reference" / "out"  # one folder name: TFDS names the data set by it
    assert run(_argv(tmp_path, fmt, reference)) == 0
    for split in ("train", "eval"):
        assert collections.Counter(_records(output, split)) == collections.Counter(_records(reference, split))
    dead = _dead_letters(output)
    assert dead == _dead_letters(reference) and dead
    if grows:  # rows the growing file gained are numbered after the rows committed before
        rows = sorted(json.loads(line)["row"] for line in dead if "growing" in json.loads(line)["source"])
        assert rows and max(rows) > 5
    assert _stats(output) == _stats(reference)
    assert json.loads((output / "stats.json").read_text())["dead_letters"]["examples"]


def dict_bytes(example: dict) -> tuple:
    """A record read by `read_examples` as a comparable value."""
    return tuple(sorted((name, repr(value.tolist() if hasattr(value, "tolist") else value))
                        for name, value in example.items()))


def _tree(output) -> dict[str, bytes]:
    return {str(path.relative_to(output)): path.read_bytes() for path in sorted(output.rglob("*"))
            if path.is_file() and path.name != ".lock-tfrecord-pipeline"}


def _refused(argv, capsys, code: int, *words: str) -> str:
    assert run(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert all(word in err[0] for word in words), err
    return err[0]


def test_appends_that_would_not_equal_one_conversion_are_refused(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    rng = random.Random(1)
    _write(tmp_path / "in" / "a.csv", "csv", _rows(rng, 0, 20))
    _write(tmp_path / "in" / "b.csv", "csv", _rows(rng, 20, 20))
    output = tmp_path / "out"
    assert run(_argv(tmp_path, "csv", output)) == 0
    committed = _tree(output)

    argv = [arg for arg in _argv(tmp_path, "csv", output, "--append") if arg != "--quiet"]
    assert run(argv) == 0  # nothing new: exit 0, saying so
    assert "nothing new to append" in capsys.readouterr().out
    (tmp_path / "in" / "b.csv").rename(tmp_path / "b.csv")
    _refused(_argv(tmp_path, "csv", output, "--append"), capsys, 2, "b.csv", "is gone")
    (tmp_path / "b.csv").rename(tmp_path / "in" / "b.csv")
    _refused(_argv(tmp_path, "csv", output, "--append", "--max-shard-records", "5"), capsys, 2,
             "--append with other options", "--max-shard-records")
    _refused(_argv(tmp_path, "csv", output, "--append", "--num-shards", "2"), capsys, 2, "--num-shards")
    _refused(_argv(tmp_path, "csv", output, "--append", "--overwrite"), capsys, 2, "--overwrite")
    text = (tmp_path / "in" / "a.csv").read_text()
    (tmp_path / "in" / "a.csv").write_text(text.replace(",c", ",d", 1))  # same size, edited
    _refused(_argv(tmp_path, "csv", output, "--append"), capsys, 2, "a.csv", "changed since it was converted")
    (tmp_path / "in" / "a.csv").write_text(text[:-10])  # shrunk
    _refused(_argv(tmp_path, "csv", output, "--append"), capsys, 2, "a.csv", "changed since it was converted")
    assert _tree(output) == committed  # no refusal touched the committed output

    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "in" / "p.parquet"
    pq.write_table(pa.table({"id": [1, 2], "x": [1.5, 2.0], "name": ["a", "b"]}), parquet)
    parquet_out = tmp_path / "parquet-out"
    assert run(_argv(tmp_path, "parquet", parquet_out)) == 0
    pq.write_table(pa.table({"id": [1, 2, 3], "x": [1.5, 2.0, 3.0], "name": ["a", "b", "c"]}), parquet)
    _refused(_argv(tmp_path, "parquet", parquet_out, "--append"), capsys, 2, "p.parquet", "cannot grow")


def test_a_sequence_output_is_not_appended_to(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "spec.yaml").write_text(
        "features:\n  - {name: s, type: int64}\n  - {name: t, type: int64}\n"
        "sequence: {group_by: [s], order_by: t}\n", encoding="utf-8")
    (tmp_path / "in" / "a.csv").write_text("s,t\n1,1\n1,2\n2,1\n", encoding="utf-8")
    output = tmp_path / "out"
    assert run(_argv(tmp_path, "csv", output)) == 0
    (tmp_path / "in" / "b.csv").write_text("s,t\n1,3\n", encoding="utf-8")
    _refused(_argv(tmp_path, "csv", output, "--append"), capsys, 2, "SequenceExamples")


def test_a_bad_batch_is_refused_beside_the_previous_generation_until_a_good_append(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    _write(tmp_path / "in" / "a.csv", "csv", _rows(random.Random(2), 0, 20))
    output = tmp_path / "out"
    assert run(_argv(tmp_path, "csv", output)) == 0
    committed = _tree(output)
    bad = tmp_path / "in" / "bad.csv"
    bad.write_text("id,x,name\n100,1,c\n" + "".join(f"{i},nope,c\n" for i in range(101, 110)),
                   encoding="utf-8")  # 9 of 10 rows bad: beyond --max-error-rate 0.5
    _refused(_argv(tmp_path, "csv", output, "--append"), capsys, 3)
    after = _tree(output)
    rejected = sorted(name for name in after if name.startswith("dead_letter/rejected-"))
    assert rejected and "dead_letter/failed_run.json" in after
    assert {name: data for name, data in after.items() if name not in rejected
            and name != "dead_letter/failed_run.json"} == committed  # the generation stands
    assert run(["verify", str(output)]) == 0
    assert all(json.loads(line)["source"].endswith("bad.csv")
               for name in rejected for line in after[name].decode().splitlines())

    bad.rename(tmp_path / "bad.csv")  # never committed: not "gone"
    _write(tmp_path / "in" / "b.csv", "csv", _rows(random.Random(3), 20, 10))
    assert run(_argv(tmp_path, "csv", output, "--append")) == 0
    left = _tree(output)
    assert not any(name.startswith("dead_letter/rejected-") for name in left)
    assert "dead_letter/failed_run.json" not in left
    assert json.loads(left["manifest.json"])["generation"] == 1
    assert run(["verify", str(output)]) == 0
