"""Image inputs planned as data. Manifests: byte ranges of the manifest read in the workers
give exactly the records and dead letters of the manifest read whole on the launcher, the
plan stays small however many rows, and the dry run still counts every row. Folder trees:
slices of the folders' listings read every file once, whatever the slice size."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import random

import pytest
from apache_beam.io.filesystem import FileMetadata, MatchResult

from pipeline.cli import run
from tests.images import image_samples as samples
from tests.images.test_images import convert, planned_items, write
from transforms.images import folder_slices
from transforms.images import plan as plan_module
from transforms.images.plan import plan_image_folder, plan_image_manifest
from transforms.records import WorkUnit
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
    return records, sorted(dead, key=lambda doc: (doc.get("row") or 0, doc["source"])), splits


@pytest.mark.parametrize("fmt, build", [("csv", _csv_manifest), ("jsonl", _jsonl_manifest)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_byte_ranges_give_the_records_of_the_whole_manifest(tmp_path, fmt, build, seed):
    base = tmp_path / "data"
    text = build(base, 150, seed)
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
    # Image names of 200 characters: the manifests cross the size of the most ranges
    # (`_MANIFEST_RANGES` of `_MIN_RANGE_BYTES`, 2 MiB) with few rows, which the launcher reads
    # one by one to count them.
    images = [name.replace("images/", "images/" + "n" * 200) for name in _images(base)]
    for name in images:
        os.rename(base / name.replace("n" * 200, ""), base / name)
    sizes = {}
    for rows in (12_000, 24_000):
        lines = "".join(f"{images[i % 4]},{'cat' if i % 3 else 'dog'}\n" for i in range(rows))
        write(base / f"m{rows}.csv", ("image,label\n" + lines).encode())
        most_ranges = plan_module._MANIFEST_RANGES * plan_module._MIN_RANGE_BYTES
        assert os.path.getsize(base / f"m{rows}.csv") > most_ranges
        plan = plan_image_manifest(str(base / f"m{rows}.csv"), "image", label_column="label")
        assert plan.input_count == rows and plan.labels == ("cat", "dog")
        assert all("items" not in (unit.extra or {}) for unit in plan.work_units)
        sizes[rows] = (len(plan.work_units), len(pickle.dumps((plan.work_units, plan.source))))
    # As many units either way, each a few dozen bytes: nothing in the plan is per row.
    assert sizes[12_000][0] == sizes[24_000][0] == plan_module._MANIFEST_RANGES
    assert sizes[24_000][1] < 32 * 1024


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


# --------------------------------------------------------------------------- folder trees


def _tree(root, seed: int) -> list[str]:
    """A split tree with nested folders, hidden files, non-images and files in the wrong
    place; returns every file's relative path."""
    rng = random.Random(seed)
    data = {".jpg": samples.build("jpeg_rgb"), ".png": samples.build("png_gray"), ".txt": b"text"}
    paths = []
    for i in range(rng.randint(150, 250)):
        split = rng.choice(["train", "test"])
        folder = rng.choice(["cat", "dog", "cat/nested", ".hidden", ""])
        name = rng.choice(["", "."]) + f"{i:04d}" + rng.choice([".jpg", ".png", ".txt"])
        relative = "/".join(part for part in (split, folder, name) if part)
        write(root / relative, data[os.path.splitext(name)[1]])
        paths.append(relative)
    return paths


@pytest.mark.parametrize("seed", [4, 5])
def test_folder_slices_read_every_file_once(tmp_path, seed):
    root = tmp_path / "tree"
    paths = _tree(root, seed)
    one_slice = plan_image_folder(str(root), images_per_unit=10_000)
    sliced = plan_image_folder(str(root), images_per_unit=random.Random(seed).randint(1, 7))
    assert len(sliced.work_units) > 2 * len(one_slice.work_units)
    assert sliced.input_count == one_slice.input_count == len(paths)
    assert (sliced.labels, sliced.splits) == (one_slice.labels, one_slice.splits) == (
        ("cat", "dog"), ("train", "test"))
    expected = _outcome(one_slice)
    records, dead, splits = _outcome(sliced)
    assert records == expected[0] and sum(map(len, records.values())) > 0
    assert sorted(doc["source"] for doc in dead) == sorted(doc["source"] for doc in expected[1])
    assert sum(count for _, count in splits) == len(paths)
    filenames = [item["filename"] for item in planned_items(sliced)]
    assert sorted(filenames) == sorted(paths)  # every file in exactly one slice


def test_a_file_added_after_planning_is_read_once(tmp_path):
    root = tmp_path / "tree"
    for i in range(0, 40, 2):
        write(root / "cat" / f"{i:03d}.jpg", samples.build("jpeg_rgb"))
    plan = plan_image_folder(str(root), images_per_unit=4)
    for i in (1, 17, 99):  # before the first cut, between cuts, after the last
        write(root / "cat" / f"{i:03d}.jpg", samples.build("jpeg_rgb"))
    filenames = [item["filename"] for item in planned_items(plan)]
    assert len(filenames) == len(set(filenames)) == 23
    assert {"cat/001.jpg", "cat/017.jpg", "cat/099.jpg"} <= set(filenames)


def test_a_worker_lists_a_folder_again_once_it_changed(tmp_path, monkeypatch):
    """Slices of one settled folder share its listing in a worker until a file is added or
    removed; a folder changed just now is listed for every slice."""
    root = tmp_path / "tree"
    for i in range(0, 40, 2):
        write(root / "cat" / f"{i:03d}.jpg", samples.build("jpeg_rgb"))
    plan = plan_image_folder(str(root), images_per_unit=4)
    listings = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir",
                        lambda folder: listings.append(folder) or real_listdir(folder))
    assert len([item["filename"] for item in planned_items(plan)]) == 20
    assert len(listings) == len(plan.work_units) > 1  # changed just now: listed each time
    os.utime(root / "cat", (1e9, 1e9))  # settled long ago
    listings.clear()
    before = [item["filename"] for item in planned_items(plan)]
    assert len(listings) == 1
    assert len(before) == 20
    write(root / "cat" / "017.jpg", samples.build("jpeg_rgb"))
    (root / "cat" / "000.jpg").unlink()
    after = [item["filename"] for item in planned_items(plan)]
    assert sorted(after) == sorted({*before, "cat/017.jpg"} - {"cat/000.jpg"})


def test_a_worker_lists_a_remote_folder_once_per_plan(monkeypatch):
    """An object store Beam lists whole (not gs://) has no folder time to check: its listing
    is kept for the slices of one plan (its token), listed again for another plan, never
    kept without a token."""
    names = [f"{i:03d}.jpg" for i in range(12)]
    listings = []

    def match(patterns, limits=None):
        listings.append(patterns[0])
        return [MatchResult(patterns[0], [FileMetadata(f"s3://b/tree/cat/{n}", 10, 1.0)
                                          for n in reversed(names)])]

    monkeypatch.setattr(folder_slices.fs, "match", match)
    cuts = [None, "004.jpg", "008.jpg", None]
    units = [WorkUnit("s3://b/tree/cat", k, extra={"first": cuts[k], "stop": cuts[k + 1]})
             for k in range(3)]

    def read(token):
        source = folder_slices.FolderSlices("s3://b/tree", ("s3://b/tree",), False, ("cat",),
                                            plan_token=token)
        return [item["filename"] for unit in units for item in source.items(unit)]

    assert read("plan-1") == [f"cat/{n}" for n in names] and len(listings) == 1
    assert read("plan-1") == [f"cat/{n}" for n in names] and len(listings) == 1
    assert read("plan-2") == [f"cat/{n}" for n in names] and len(listings) == 2
    assert read("") == [f"cat/{n}" for n in names] and len(listings) == 5


def test_a_large_tree_becomes_a_bounded_number_of_slices(tmp_path):
    root = tmp_path / "tree"
    for folder in ("a", "b", "c"):
        (root / folder).mkdir(parents=True)
        for i in range(1500):
            (root / folder / f"{i:05d}.jpg").write_bytes(b"x")
    plan = plan_image_folder(str(root), images_per_unit=4)
    assert plan.input_count == 4500
    assert 200 <= len(plan.work_units) <= plan_module._FOLDER_SLICES + 3
    assert "planned as data" in plan.planning
