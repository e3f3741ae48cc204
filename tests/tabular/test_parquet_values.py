"""Parquet values Python's datetime cannot hold, through the CLI: nanoseconds that are no whole
microsecond and dates past year 9999 split rows and appear in dead letters without failing the
job, and the split keys of the dates it could hold are the ones they always were. Dates Arrow
cannot write as text are wrong_type in a string feature, never a "<value out of range>"."""

from __future__ import annotations

import datetime
import json
import pathlib
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.format.example_codec import decode_example
from transforms.splits import SplitAssigner
from transforms.tabular.columns import key_text_array
from transforms.tabular.values import canonical_text


def _convert(source, out, *extra: str) -> int:
    """Converts values some of which are dead letters: any share is allowed."""
    return run(["convert", "--input", str(source), "--format", "parquet", "--output", str(out),
                "--max-error-rate", "1", *extra, *in_memory_args()])


def _spec(tmp_path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


def _by_split(out: pathlib.Path) -> dict[str, list[dict]]:
    from transforms.format.tfrecord_reader import iter_records

    manifest = json.loads((out / "manifest.json").read_text())
    records: dict[str, list[dict]] = {}
    for shard in manifest["shards"]:
        with open(out / shard["path"], "rb") as handle:
            records.setdefault(shard["split"], []).extend(
                decode_example(info.payload) for info in iter_records(handle))
    return records


def _dead(out: pathlib.Path) -> list[dict]:
    return [json.loads(line) for path in sorted((out / "dead_letter").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def _reconciled(out: pathlib.Path) -> dict:
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["input"] == counts["written"] + counts["dead_letter"]
    for entry in counts["splits"].values():
        assert entry["input"] == entry["written"] + entry["dead_letter"]
    return counts


NANOS = pa.table({
    "id": pa.array([1, 2, 3, 4], pa.int64()),
    "ts": pa.array([0, 1, -1, 1500], pa.timestamp("ns")),  # pandas' default unit
    "far": pa.array([0, 2**40, None, -(2**40)], pa.timestamp("s")),  # years 36812, -32873
    "clock": pa.array([1, 0, 86399999999999, None], pa.time64("ns")),
    "wait": pa.array([1, 2000, -1, 3], pa.duration("ns")),
    "big": pa.array([1, 2**63, 3, 2**64 - 1], pa.uint64()),  # rows 2 and 4: dead letters
})


@pytest.mark.parametrize("split_key", ["", "split_key: [ts]\n", "split_key: [far, clock]\n",
                                       "split_key: [wait]\n"])
def test_nanoseconds_and_far_years_split_rows_and_fill_dead_letters(tmp_path, split_key):
    source = tmp_path / "t.parquet"
    pq.write_table(NANOS, source)
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: big, type: int64}\n"
                           "  - {name: ts, type: string}\nsplits: {a: 50, b: 50}\n" + split_key)
    out = tmp_path / "out"
    assert _convert(source, out, "--spec", spec) == 0
    counts = _reconciled(out)
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (4, 2, 2)
    written = {r["id"][1][0]: r for records in _by_split(out).values() for r in records}
    assert sorted(written) == [1, 3]
    assert written[3]["ts"] == ("bytes", [b"1969-12-31 23:59:59.999999999"])  # Arrow's text
    raw = {d["row"]: json.loads(d["raw"]) for d in _dead(out)}
    # A row's raw holds the columns read: all of them when the whole row is the split key.
    read = set(NANOS.column_names) if not split_key else {"id", "big", "ts", *split_key[12:-2].split(", ")}
    assert set(raw[2]) == set(raw[4]) == read
    assert raw[2].items() <= {"id": 2, "ts": "1970-01-01 00:00:00.000000001",
                              "far": "36812-02-20 00:36:16", "clock": "00:00:00",
                              "wait": "0:00:00.000002", "big": 2**63}.items()
    assert raw[4].items() <= {"id": 4, "ts": "1970-01-01 00:00:00.000001500",
                              "far": "-32873-11-12 23:23:44", "clock": None,
                              "wait": "0:00:00.000000003", "big": 2**64 - 1}.items()


def test_values_that_cannot_be_a_feature_are_dead_letters_not_a_failed_job(tmp_path):
    source = tmp_path / "t.parquet"
    pq.write_table(NANOS, source)
    out = tmp_path / "out"
    # A duration[ns] of 1 is no whole number of microseconds; a timestamp is no int64.
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n"
                           "  - {name: wait, type: int64, unit: us}\n")
    assert _convert(source, out, "--spec", spec) == 0
    assert _reconciled(out)["written"] == 1
    dead = {d["row"]: d for d in _dead(out)}
    assert sorted(dead) == [1, 3, 4] and {d["reason"] for d in dead.values()} == {"wrong_type"}
    assert dead[1]["message"] == "column 'wait': duration[ns] value 1 is not a whole number of us"

    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: ts, type: int64}\n")
    assert _convert(source, tmp_path / "out2", "--spec", spec) == 5
    dead = _dead(tmp_path / "out2")
    assert len(dead) == 4 and {d["reason"] for d in dead} == {"wrong_type"}
    assert "'1970-01-01 00:00:00.000000001' cannot be a int64 value" in dead[1]["message"]


def _python_key(value) -> bytes:
    """The split key text of a typed value before date/times got a text of their own: the
    Python object's, through canonical_text."""
    text = canonical_text(value)
    return text if isinstance(text, bytes) else text.encode("utf-8")


def test_split_keys_of_dates_python_can_hold_are_unchanged(tmp_path):
    rnd = random.Random(3)
    seconds = [rnd.randint(-62135596800, 253402300799) for _ in range(300)] + [0, -1, None]
    micros = [None if s is None else s * 10**6 + rnd.randint(0, 999999) for s in seconds]
    arrays = [
        pa.array(seconds, pa.timestamp("s")),
        pa.array(micros, pa.timestamp("us")),
        pa.array([None if m is None else m % 2**52 * 1000 for m in micros], pa.timestamp("ns")),
        pa.array([None if s is None else s * 1000 for s in seconds], pa.timestamp("ms", tz="UTC")),
        # Arrow's zone database and Python's agree up to 2037 (Arrow's has no later DST).
        pa.array([None if s is None else s % 2**31 for s in seconds],
                 pa.timestamp("s", tz="Europe/Paris")),
        pa.array([None if s is None else s // 86400 for s in seconds], pa.date32()),
        pa.array([None if m is None else m // 1000 for m in micros], pa.date64()),
        pa.array([None if s is None else s % 86400 for s in seconds], pa.time32("s")),
        pa.array([None if m is None else m % 86400000000 * 1000 for m in micros], pa.time64("ns")),
        pa.array(micros, pa.duration("us")),
        pa.array([[0, 1500], None, []] * 10, pa.list_(pa.timestamp("ms"))),
        pa.array([{"at": 86400, "n": 1}, None] * 10,
                 pa.struct([("at", pa.date32()), ("n", pa.int64())])),
    ]
    for array in arrays:
        expected = [_python_key(value) for value in array.to_pylist()]
        assert key_text_array(array, len(array), text=False).to_pylist() == expected, array.type

    # Through the CLI: a split_key of microsecond timestamps still lands where it did.
    ts = pa.array([datetime.datetime(2020, 1, 1) + datetime.timedelta(seconds=7919 * i,
                                                                      microseconds=i)
                   for i in range(200)], pa.timestamp("us"))
    pq.write_table(pa.table({"id": list(range(200)), "ts": ts}), tmp_path / "t.parquet")
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n"
                           "splits: {a: 50, b: 30, c: 20}\nsplit_key: [ts]\n")
    out = tmp_path / "out"
    assert _convert(tmp_path / "t.parquet", out, "--spec", spec) == 0
    assigner = SplitAssigner({"a": 50, "b": 30, "c": 20})
    splits = {r["id"][1][0]: split for split, records in _by_split(out).items() for r in records}
    assert splits == {i: assigner.assign(json.dumps(str(value)).encode())
                      for i, value in enumerate(ts.to_pylist())}


_LOW_DAY, _HIGH_DAY = -12687428, 11248737  # -32767-01-01 and 32767-12-31: Arrow writes these


def test_dates_arrow_cannot_write_are_dead_letters_not_placeholder_strings(tmp_path):
    day = 86400  # row 1 holds the extremes Arrow writes, the others a value it cannot write
    table = pa.table({
        "id": [1, 2, 3, 4, 5, 6, 7],
        "ts": pa.array([0, 2**40, 0, 0, 0, 0, -(2**40)], pa.timestamp("s")),
        "day": pa.array([_HIGH_DAY, 0, 2147483647, 0, 0, 0, -2147483648], pa.date32()),
        # Zoned: Arrow wrote year -28724 for 2**40 s, and raised for the day before -32767.
        "paris": pa.array([_LOW_DAY * day, 0, 0, 2**40, 0, 0, 0],
                          pa.timestamp("s", tz="Europe/Paris")),
        "utc": pa.array([(_HIGH_DAY + 1) * day * 1000 - 1, 0, 0, 0, _LOW_DAY * day * 1000 - 1, 0, 0],
                        pa.timestamp("ms", tz="UTC")),
        "clock": pa.array([86399, 0, 0, 0, 0, 86400, 0], pa.time32("s")),
    })
    source = tmp_path / "t.parquet"
    pq.write_table(table, source)
    out = tmp_path / "out"
    assert _convert(source, out) == 0  # inferred: the date/time columns are string features
    counts = _reconciled(out)
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (7, 1, 6)
    [record] = _by_split(out)["data"]
    assert record["day"] == ("bytes", [b"32767-12-31"])
    assert record["paris"] == ("bytes", [b"-32767-01-01 00:09:21.000+0009"])  # Parquet: ms
    assert record["utc"] == ("bytes", [b"32767-12-31 23:59:59.999Z"])
    dead = {d["row"]: d for d in _dead(out)}
    assert {row: (d["reason"], d["column"]) for row, d in dead.items()} == {
        2: ("wrong_type", "ts"), 3: ("wrong_type", "day"), 4: ("wrong_type", "paris"),
        5: ("wrong_type", "utc"), 6: ("wrong_type", "clock"), 7: ("wrong_type", "ts")}
    assert dead[3]["message"] == (
        "column 'day': date32[day] value 5881580-07-11 is outside the dates and times Arrow "
        "writes as text (years -32767 to 32767, times of day within 24 h)")
    assert "value 36812-02-20 01:36:16+01:00 is outside" in dead[4]["message"]


def test_the_dates_arrow_writes_are_the_ones_arrow_writable_says():
    import pyarrow.compute as pc

    from transforms.tabular.temporal import arrow_writable

    day, low, high = 86400, _LOW_DAY, _HIGH_DAY + 1
    for array in (pa.array([low * day - 1, low * day, high * day - 1, high * day], pa.timestamp("s")),
                  pa.array([low - 1, low, high - 1, high, None], pa.date32()),
                  pa.array([(low - 1) * day * 1000, low * day * 1000, high * day * 1000 - 1,
                            high * day * 1000], pa.date64()),
                  pa.array([-1, 0, day - 1, day], pa.time32("s")),
                  pa.array([-1, 0, day * 10**9 - 1, day * 10**9], pa.time64("ns"))):
        written = [text is None or not text.startswith("<")
                   for text in pc.cast(array, pa.string()).to_pylist()]
        assert arrow_writable(array).tolist() == written, array.type
        assert written[1:3] == [True, True] and not written[0] and not written[3]


def test_float32_and_float16_in_a_string_feature_are_their_shortest_text(tmp_path):
    import numpy as np

    texts = ["0.1", "1.5", "1e-05", "16777216", "123456790", "NaN", "-Infinity", None]
    numbers = [np.nan if t is None else float(t) for t in texts]
    nulls = np.array([t is None for t in texts])
    table = pa.table({
        "id": list(range(len(texts))),
        "f32": pa.array(np.array(numbers, np.float32), mask=nulls),
        "f16": pa.array(np.array([0.1, 1.5, 1e-5, 2048, 65504, np.nan, -np.inf, 0], np.float16),
                        mask=nulls),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: f32, type: string}\n"
                           "  - {name: f16, type: string}\n")
    out = tmp_path / "parquet"
    assert _convert(tmp_path / "t.parquet", out, "--spec", spec) == 0
    records = sorted(_by_split(out)["data"], key=lambda r: r["id"][1][0])
    assert [r.get("f32", (None, [None]))[1][0] for r in records] == [
        None if t is None else t.encode() for t in texts]
    assert [r.get("f16", (None, [None]))[1][0] for r in records] == [
        b"0.1", b"1.5", b"1e-05", b"2048", b"65500", b"NaN", b"-Infinity", None]

    # The same values written as CSV text give the same Examples.
    (tmp_path / "t.csv").write_text("id,f32\n" + "".join(
        f"{i},{'' if t is None else t}\n" for i, t in enumerate(texts)))
    spec = _spec(tmp_path, "features:\n  - {name: id, type: int64}\n  - {name: f32, type: string}\n")
    assert run(["convert", "--input", str(tmp_path / "t.csv"), "--format", "csv", "--output",
                str(tmp_path / "csv"), "--spec", spec, *in_memory_args()]) == 0
    assert run(["convert", "--input", str(tmp_path / "t.parquet"), "--format", "parquet",
                "--output", str(tmp_path / "f32"), "--spec", spec, *in_memory_args()]) == 0
    assert _by_split(tmp_path / "csv") == _by_split(tmp_path / "f32")
