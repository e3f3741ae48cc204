"""Value counts, distinct counts and quantiles are exact while a feature holds at most
`EXACT_VALUES` distinct values per split, flagged estimates beyond it, and stats.json is the
same bytes for the same input, run after run (and within the bound, however it is batched)."""

from __future__ import annotations

import collections
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from transforms.stats.columns import arrow_batch_stats
from transforms.stats.document import SplitStats, stats_document
from transforms.stats.sketches import EXACT_VALUES, StatsTotal


def _convert(source, output, *extra) -> int:
    return run(["convert", "--input", str(source), "--format", "csv", "--output", str(output),
                *extra, *in_memory_args()])


def _features(output) -> dict:
    return json.loads((output / "stats.json").read_text())["splits"]["data"]["features"]


def _expected_top(values) -> list[dict]:
    ranked = sorted(collections.Counter(values).items(), key=lambda item: (-item[1], item[0]))
    return [{"value": value, "count": count} for value, count in ranked[:10]]


@pytest.fixture(scope="module")
def within_bound(tmp_path_factory):
    """2,000 rows: 500 days (4 each), 499 codes, a name per row, skewed words, small ints."""
    rng = np.random.default_rng(5)
    rows = 2000
    words = rng.choice([f"w{i}" for i in range(30)], rows, p=np.r_[np.full(10, 0.07), np.full(20, 0.015)])
    table = pa.table({
        "day": [f"day{i % 500:03d}" for i in range(rows)],
        "code": [f"c{i % 499}" for i in range(rows)],
        "name": [f"file-{i:05d}.jpg" for i in rng.permutation(rows)],
        "word": words.tolist(),
        "age": rng.integers(0, 90, rows).tolist(),
    })
    source = tmp_path_factory.mktemp("exact") / "data.csv"
    pa_csv.write_csv(table, source)
    return source, table


@pytest.fixture(scope="module")
def batched_150(within_bound, tmp_path_factory):
    """The 2,000 rows converted in batches of 150 (read only: two tests check it)."""
    out = tmp_path_factory.mktemp("exact150") / "out"
    assert _convert(within_bound[0], out, "--batch-rows", "150") == 0
    return out


def test_counts_and_top_values_equal_the_source_within_the_bound(within_bound, batched_150):
    _, table = within_bound
    # Small batches: each holds more distinct values than a batch used to offer the sketch.
    features = _features(batched_150)
    for name in ("day", "code", "name", "word"):
        values = table[name].to_pylist()
        summary = features[name]["bytes"]
        assert summary["top"] == _expected_top(values), name
        assert summary["distinct"] == len(set(values)) and summary["distinct_range"] == [len(set(values))] * 2
        assert summary["distinct_exact"] and summary["top_exact"] and summary["top_error"] == 0
    assert features["code"]["bytes"]["distinct"] == 499  # not "~501"
    assert {entry["count"] for entry in features["name"]["bytes"]["top"]} == {1}  # unique: not "(2)"
    assert {entry["count"] for entry in features["day"]["bytes"]["top"]} == {4}
    ages = np.asarray(table["age"].to_pylist())
    numeric = features["age"]["numeric"]
    assert numeric["quantiles_exact"] and numeric["rank_error"] == 0
    for rank, value in numeric["quantiles"][1:-1]:  # the smallest age with that share at or below
        assert np.mean(ages < value) < rank <= np.mean(ages <= value)
    histogram = numeric["histogram"]
    assert histogram["counts"] == np.histogram(ages, bins=histogram["edges"])[0].tolist()
    assert numeric["mean"] == pytest.approx(ages.mean(), rel=1e-12)


def test_stats_json_is_the_same_bytes_however_the_input_is_batched_within_the_bound(
        within_bound, batched_150, tmp_path):
    source, _ = within_bound
    outputs = []
    for batch_rows in ("37", "150", "100000"):
        if batch_rows != "150":
            assert _convert(source, tmp_path / batch_rows, "--batch-rows", batch_rows) == 0
        outputs.append(((batched_150 if batch_rows == "150" else tmp_path / batch_rows)
                        / "stats.json").read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]


def test_beyond_the_bound_estimates_are_flagged_and_never_above_the_truth(tmp_path):
    rows = EXACT_VALUES + 2500
    rng = np.random.default_rng(9)
    ids = [f"id-{i}" for i in range(rows)]
    hot = ["hot"] * 400 + ["warm"] * 250 + [f"once-{i}" for i in range(rows - 650)]
    order = rng.permutation(rows)
    table = pa.table({"id": ids, "tag": [hot[i] for i in order],
                      "x": rng.normal(0, 1, rows).astype(np.float32)})
    pa_csv.write_csv(table, tmp_path / "data.csv")
    assert _convert(tmp_path / "data.csv", tmp_path / "out", "--batch-rows", "1000") == 0
    features = _features(tmp_path / "out")
    for name in ("id", "tag"):
        summary = features[name]["bytes"]
        truth = collections.Counter(table[name].to_pylist())
        assert not summary["distinct_exact"] and not summary["top_exact"] and summary["top_error"] > 0
        low, high = summary["distinct_range"]
        assert low <= len(truth) <= high and low <= summary["distinct"] <= high
        for entry in summary["top"]:
            assert truth[entry["value"]] - summary["top_error"] <= entry["count"] <= truth[entry["value"]]
            assert entry["count"] == 1 or truth[entry["value"]] > 1  # a value seen once shows 1 at most
    assert [entry["value"] for entry in features["tag"]["bytes"]["top"][:2]] == ["hot", "warm"]
    numeric = features["x"]["numeric"]
    assert not numeric["quantiles_exact"] and 0 < numeric["rank_error"] < 0.01
    x = np.asarray(table["x"].to_numpy(), dtype=np.float64)
    for rank, value in numeric["quantiles"]:
        assert np.mean(x <= value) >= rank - numeric["rank_error"]
        assert np.mean(x < value) <= rank + numeric["rank_error"]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "distinct \u2248" in page and "top \u2248 (lower bounds, each up to" in page
    # Two runs of the same command: the same bytes, estimates included.
    assert _convert(tmp_path / "data.csv", tmp_path / "again", "--batch-rows", "1000") == 0
    assert (tmp_path / "out" / "stats.json").read_bytes() == (tmp_path / "again" / "stats.json").read_bytes()


def _document(parts) -> bytes:
    merged = SplitStats()
    for part in parts:
        merged.add(part)
    return json.dumps(stats_document({"data": merged}, {}), sort_keys=True).encode()


def _partials(columns: dict, bounds) -> list:
    return [arrow_batch_stats((name, kind, pa.array(values[low:high]))
                              for name, (kind, values) in columns.items())
            for low, high in zip(bounds[:-1], bounds[1:], strict=True)]


def test_merged_partials_give_one_document_however_the_input_is_cut():
    rng = np.random.default_rng(2)
    columns = {"i": ("int64", rng.integers(-40, 40, 3000)), "f": ("float", rng.normal(size=3000)),
               "s": ("bytes", [f"v{v}" for v in rng.integers(0, 700, 3000)])}
    whole = _document(_partials(columns, [0, 3000]))
    assert _document(_partials(columns, [0, 1, 999, 2000, 3000])) == whole
    merged = StatsTotal()  # as a writer merges the batches of its work units
    for stats in _partials(columns, [0, 5, 3000]):
        merged.add(stats)
    assert _document([merged.partial()]) == whole
    assert _document(_partials(columns, [0, 17, 3000])[::-1]) == whole  # even in another order


def test_beyond_the_bound_the_same_partials_in_the_same_order_give_the_same_bytes():
    rng = np.random.default_rng(3)
    columns = {"f": ("float", rng.normal(size=20000)),
               "s": ("bytes", [f"v{v}" for v in rng.integers(0, 10000, 20000)])}
    bounds = [0, 3000, 9000, 20000]
    first, second = _document(_partials(columns, bounds)), _document(_partials(columns, bounds))
    assert first == second and b'"top_exact": false' in first and b'"quantiles_exact": false' in first


def test_long_values_sharing_their_shown_start_stay_distinct():
    start = "x" * 150
    parts = _partials({"s": ("bytes", [start + "a", start + "b", start + "a"])}, [0, 1, 3])
    summary = json.loads(_document(parts))["splits"]["data"]["features"]["s"]["bytes"]
    assert summary["distinct"] == 2 and summary["distinct_exact"]
    assert summary["top"] == [{"value": "x" * 100, "count": 2}, {"value": "x" * 100, "count": 1}]
