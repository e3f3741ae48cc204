"""Seeded tabular inputs for the statistics tests, and the checks every run's stats.json must pass
against numpy computed directly on the source values."""

from __future__ import annotations

import collections
import json
import pathlib

import numpy as np

from transforms.stats.sketches import EXACT_VALUES

SPEC = """\
features:
  - name: id
    type: int64
    required: true
  - name: score
    type: float
  - name: city
    type: string
  - name: note
    type: string
  - name: tags
    type: string
    list: true
    separator: "|"
"""
CITIES = ("Lisbon", "Austin", "Kraków", "東京", "Zürich", "Oslo", "Lima")


def source_values(rows: int = 3000, seed: int = 7) -> dict:
    """Column values of the generated rows (None: an empty cell)."""
    rng = np.random.default_rng(seed)
    score = rng.normal(10.0, 3.0, rows).round(3)
    score[rng.choice(rows, 20, replace=False)] = 0.0
    specials = rng.choice(rows, 9, replace=False)
    score_text = [repr(float(v)) for v in score]
    for i, position in enumerate(specials):
        score_text[position] = ("nan", "inf", "-inf")[i % 3]
    city = [CITIES[i] for i in rng.choice(len(CITIES), rows, p=[.4, .2, .1, .1, .1, .05, .05])]
    note = [None if rng.random() < 0.3 else f"note {int(rng.integers(0, 1500))}" for _ in range(rows)]
    tags = ["|".join(f"t{int(t)}" for t in rng.integers(0, 5, int(rng.integers(1, 4))))
            for _ in range(rows)]
    return {"id": list(range(rows)), "score": score_text, "city": city, "note": note, "tags": tags}


def write_csv(folder: pathlib.Path, columns: dict, files: int = 3, spec: str | None = SPEC,
              bad_rows: int = 0) -> pathlib.Path:
    """Writes the columns as `files` CSV parts (+ spec.yaml); `bad_rows` extra rows per file
    hold an id that is not a number (dead letters, reason invalid_int)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(columns)
    rows = len(columns[names[0]])
    bounds = np.linspace(0, rows, files + 1).astype(int)
    for part in range(files):
        lines = [",".join(names)]
        for i in range(bounds[part], bounds[part + 1]):
            cells = []
            for name in names:
                value = columns[name][i]
                cells.append("" if value is None else f'"{value}"' if "," in str(value) else str(value))
            lines.append(",".join(cells))
        lines += [",".join(f"x{k}" if name == "id" else "" for name in names) for k in range(bad_rows)]
        (folder / f"part-{part}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if spec is not None:
        (folder / "spec.yaml").write_text(spec)
    return folder


def read_stats(output) -> dict:
    output = pathlib.Path(output)
    manifest = json.loads((output / "manifest.json").read_text())
    assert "stats.json" in manifest["files"]
    return json.loads((output / "stats.json").read_text(encoding="utf-8"))


def check_quantiles(numeric: dict, values: np.ndarray) -> None:
    """Quantiles 0/1 are the exact min/max; the others, and the histogram, within the rank
    error stats.json states (exact, with fewer distinct values than the bound)."""
    error = numeric["rank_error"]
    assert numeric["quantiles_exact"] == (error == 0) and error <= 0.02
    if np.unique(values).size <= EXACT_VALUES:
        assert numeric["quantiles_exact"]
    quantiles = dict((rank, value) for rank, value in numeric["quantiles"])
    assert quantiles[0.0] == values.min() and quantiles[1.0] == values.max()
    for rank, value in quantiles.items():
        at_most = np.count_nonzero(values <= value) / values.size
        below = np.count_nonzero(values < value) / values.size
        assert at_most >= rank - error and below < rank + error or rank == 0.0, (rank, value)
        if error == 0 and rank:  # the smallest value with at least this share at or below it
            assert below < rank <= at_most, (rank, value)
    counts = numeric["histogram"]["counts"]
    assert len(counts) == 10 and len(numeric["histogram"]["edges"]) == 11
    assert sum(counts) == values.size
    exact, _ = np.histogram(values, bins=np.asarray(numeric["histogram"]["edges"]))
    assert np.abs(np.cumsum(counts) - np.cumsum(exact)).max() <= error * values.size


def check_against_source(stats: dict, columns: dict) -> None:
    """Every statistic of the single split "data" against numpy on the source columns."""
    split = stats["splits"]["data"]
    rows = len(columns["id"])
    assert split["records"] == rows
    features = split["features"]
    assert sorted(features) == ["city", "id", "note", "score", "tags"]

    ids = np.asarray(columns["id"], dtype=np.int64)
    entry = features["id"]
    assert entry["kind"] == "int64" and entry["records"] == rows
    assert entry["values_per_record"] == {"min": 1, "max": 1, "mean": 1.0}
    numeric = entry["numeric"]
    assert (numeric["count"], numeric["min"], numeric["max"]) == (rows, int(ids.min()), int(ids.max()))
    assert numeric["zeros"] == 1 and numeric["nan"] == 0 and numeric["inf"] == 0
    assert numeric["mean"] == pytest_approx(ids.mean()) and numeric["std"] == pytest_approx(ids.std())
    check_quantiles(numeric, ids.astype(np.float64))

    score = np.asarray([float(v) for v in columns["score"]], dtype=np.float32).astype(np.float64)
    finite = score[np.isfinite(score)]
    numeric = features["score"]["numeric"]
    assert features["score"]["kind"] == "float"
    assert numeric["count"] == rows and numeric["nan"] == 3 and numeric["inf"] == 6
    assert numeric["zeros"] == np.count_nonzero(finite == 0)
    assert (numeric["min"], numeric["max"]) == (finite.min(), finite.max())
    assert numeric["mean"] == pytest_approx(finite.mean())
    assert numeric["std"] == pytest_approx(finite.std())
    check_quantiles(numeric, finite)

    city = features["city"]["bytes"]
    encoded = [c.encode("utf-8") for c in columns["city"]]
    assert city["count"] == rows and city["distinct"] == len(set(encoded)) and city["distinct_exact"]
    assert city["top_exact"] and city["top_error"] == 0
    lengths = np.array([len(c) for c in encoded])
    assert city["length"] == {"min": int(lengths.min()), "max": int(lengths.max()),
                              "mean": pytest_approx(lengths.mean())}
    expected_top = sorted(collections.Counter(columns["city"]).items(), key=lambda p: (-p[1], p[0]))
    assert [(t["value"], t["count"]) for t in city["top"]] == expected_top

    notes = [n for n in columns["note"] if n is not None]
    assert features["note"]["records"] == len(notes)
    assert features["note"]["bytes"]["distinct"] == len(set(notes))  # ~1,500: within the bound
    assert features["note"]["bytes"]["distinct_range"] == [len(set(notes))] * 2

    per_record = np.array([len(t.split("|")) for t in columns["tags"]])
    tags = features["tags"]
    assert tags["values_per_record"] == {"min": int(per_record.min()), "max": int(per_record.max()),
                                         "mean": pytest_approx(per_record.mean())}
    assert tags["bytes"]["count"] == per_record.sum()
    tag_counts = collections.Counter(t for row in columns["tags"] for t in row.split("|"))
    assert {t["value"]: t["count"] for t in tags["bytes"]["top"]} == dict(tag_counts)


def pytest_approx(value):
    import pytest

    return pytest.approx(float(value), rel=1e-9, abs=1e-9)


def exact_part(stats: dict) -> dict:
    """stats.json without what a sketch or float rounding may change (quantiles, histograms,
    means, standard deviations): the part that must be identical whatever the bundles."""
    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items()
                    if k not in ("quantiles", "histogram", "mean", "std")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(stats)
