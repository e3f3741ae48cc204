"""Image manifests planned as data: byte ranges of the manifest read in the workers give
exactly the records and dead letters of the manifest read whole on the launcher, the plan
stays small however many rows, and the dry run still counts every row."""

from __future__ import annotations

import gzip
import json
import pickle
import random

import pytest

from pipeline.cli import run
from tests.images import image_samples as samples
from tests.images.test_images import convert, write
from transforms.images import plan as plan_module
from transforms.images.plan import plan_image_manifest
from transforms.tabular.spec import parse_spec

SPEC = parse_spec("""
features:
  - name: caption
    type: string
  - name: score
    type: float
""")


def _images(base):
    names = []
    for index, variant in enumerate(["jpeg_rgb", "png_gray", "webp_alpha", "gif"]):
        names.append(write(base / "images" / f"{index}{samples.extension(variant)}",
                           samples.build(variant)))
    return [f"images/{name.rsplit('/', 1)[1]}" for name in names]


def _csv_manifest(base, rows: int, seed: int) -> bytes:
    """A CSV manifest that is hard to cut: quoted delimiters, quoted newlines (CRLF too),
    escaped quotes, multi-byte characters, ragged rows, bad values, unknown labels and
    splits, and a last line without a newline."""
    rng = random.Random(seed)
    images = _images(base)
    lines = ["image,label,split,caption,score"]
    for i in range(rows):
        kind = rng.random()
        caption = rng.choice(['"a, b"', '"two\nlines"', '"crlf\r\nline"', '"say ""hi"""',
                              "héllo wörld ✓", "", '""'])
        score = rng.choice(["0.5", "1e3", "", "abc"])
        label = rng.choice(["cat", "dog", "", "bird"])
        split = rng.choice(["train", "test", "validation", "Train"])
        image = rng.choice([*images, "images/missing.jpg", "", "../escape.jpg"])
        if kind < 0.03:
            lines.append(f"{image},{label}")  # ragged
        else:
            lines.append(f"{image},{label},{split},{caption},{score},"[:-1])
        if i == rows // 2:
            lines.append("")  # a blank line is no row
    return "\r\n".join(lines).encode("utf-8")  # no newline after the last row


def _jsonl_manifest(base, rows: int, seed: int) -> bytes:
    rng = random.Random(seed)
    images = _images(base)
    lines = []
    for _ in range(rows):
        kind = rng.random()
        if kind < 0.03:
            lines.append("{not json")
            continue
        row = {"image": rng.choice([*images, "images/missing.jpg", ""]),
               "label": rng.choice(["cat", "dog", None]), "split": rng.choice(["train", "test"]),
               "caption": rng.choice(["plain", "é\nline", "✓✓✓"]), "score": rng.choice([1, 2.5, "x"])}
        lines.append(json.dumps(row, ensure_ascii=kind < 0.5))
    return "\n".join(lines).encode("utf-8")


def _outcome(plan):
    """Every split's records in order, every dead letter, and the input count of every batch."""
    batches, _, dead = convert(plan)
    records = {}
    for batch in sorted(batches, key=lambda b: b.key):
        records.setdefault(batch.split, []).extend(batch.records)
    splits = sorted((batch.split, batch.input_count) for batch in batches)
    return records, sorted(dead, key=lambda doc: doc["row"]), splits


@pytest.mark.parametrize("fmt, build", [("csv", _csv_manifest), ("jsonl", _jsonl_manifest)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_byte_ranges_give_the_records_of_the_whole_manifest(tmp_path, fmt, build, seed):
    base = tmp_path / "data"
    text = build(base, 300, seed)
    write(base / f"m.{fmt}", text)
    write(base / f"m.{fmt}.gz", gzip.compress(text))  # compressed: read on the launcher
    arguments = dict(image_column="image", label_column="label", split_column="split", spec=SPEC,
                     labels=["cat", "dog"])
    whole = plan_image_manifest(str(base / f"m.{fmt}.gz"), **arguments)
    assert whole.source is None and "read on the launcher" in whole.planning
    expected = _outcome(whole)
    assert expected[0] and expected[1]  # records and dead letters both
    for range_bytes in (random.Random(seed).randint(40, 400), 997, 1 << 20):
        ranged = plan_image_manifest(str(base / f"m.{fmt}"), range_bytes=range_bytes, **arguments)
        assert "planned as data" in ranged.planning
        assert all("items" not in (unit.extra or {}) for unit in ranged.work_units)
        assert (ranged.input_count, ranged.labels, ranged.splits) == (
            whole.input_count, whole.labels, whole.splits)
        records, dead, splits = _outcome(ranged)
        # Dead letters name the manifest itself, compressed or not.
        for doc in dead:
            doc["source"] = doc["source"].replace(f"m.{fmt}.gz", f"m.{fmt}")
        for doc in expected[1]:
            doc["source"] = doc["source"].replace(f"m.{fmt}.gz", f"m.{fmt}")
        assert records == expected[0]
        assert dead == expected[1]
        assert sum(count for _, count in splits) == whole.input_count
    assert len(plan_image_manifest(str(base / f"m.{fmt}"), range_bytes=40, **arguments)
               .work_units) > 10


def test_the_plan_does_not_grow_with_the_rows(tmp_path):
    base = tmp_path / "data"
    images = _images(base)
    sizes = {}
    for rows in (150_000, 300_000):
        lines = "".join(f"{images[i % 4]},{'cat' if i % 3 else 'dog'}\n" for i in range(rows))
        write(base / f"m{rows}.csv", ("image,label\n" + lines).encode())
        plan = plan_image_manifest(str(base / f"m{rows}.csv"), "image", label_column="label")
        assert plan.input_count == rows and plan.labels == ("cat", "dog")
        assert all("items" not in (unit.extra or {}) for unit in plan.work_units)
        sizes[rows] = (len(plan.work_units), len(pickle.dumps((plan.work_units, plan.source))))
    # As many units either way, each a few dozen bytes: nothing in the plan is per row.
    assert sizes[150_000][0] == sizes[300_000][0] == plan_module._MANIFEST_RANGES
    assert sizes[300_000][1] < 32 * 1024


def test_dry_run_counts_the_rows_of_a_manifest_planned_as_data(tmp_path, capsys):
    base = tmp_path / "data"
    images = _images(base)
    lines = "".join(f"{images[i % 4]},{'cat' if i % 2 else 'dog'}\n" for i in range(5000))
    write(base / "m.csv", ("image,label\n" + lines + "a.jpg\n").encode())
    code = run(["convert", "--input", str(base / "m.csv"), "--format", "image-manifest",
                "--image-column", "image", "--label-column", "label",
                "--output", str(tmp_path / "out"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "images_planned: 5001" in out or '"images_planned": 5001' in out
    assert "planned as data" in out
