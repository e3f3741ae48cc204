"""Image labels: one rule for trees and manifests (`transforms.images.labels`). A label map
is written as labels.txt, one label per line, and read back (TFDS, --labels-file): a label
it cannot hold is a dead letter, never a shifted index; the order never depends on chance."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.images import image_samples as samples
from tests.images.test_images_cli import read_output, write

BAD_LABELS = ["new\nline", "uni\u2028sep", " lead", "trail "]


def _convert(*args: str) -> int:
    """A conversion whose dead letters (labels the map cannot hold) are the point."""
    return run(["convert", *args, "--max-error-rate", "1", *in_memory_args()])


def _labels_txt(out) -> list[str]:
    with open(os.path.join(out, "labels.txt"), encoding="utf-8") as handle:
        return handle.read().split("\n")[:-1]


def test_tree_labels_that_labels_txt_cannot_hold_are_dead_letters(tf, tmp_path):
    root, out = tmp_path / "tree", str(tmp_path / "out")
    for label in ["cat", *BAD_LABELS, "zebra"]:
        write(root / label / "a.jpg", samples.build("jpeg_rgb"))
    os.makedirs(os.fsencode(root) + b"/ba\xfed")  # a folder name that is not UTF-8
    write(os.fsdecode(os.fsencode(root) + b"/ba\xfed/a.jpg"), samples.build("jpeg_rgb"))
    assert _convert("--format", "image-folder", "--input", str(root), "--output", out) == 0
    manifest, examples, dead = read_output(tf, out)
    assert manifest["labels"] == _labels_txt(out) == ["cat", "zebra"]
    assert sorted((e["image/class/text"], e["image/class/label"]) for e in examples) == [
        (b"cat", 0), (b"zebra", 1)]
    assert sorted(d["label"] for d in dead) == sorted([*BAD_LABELS, "ba\\xfed"])
    assert {d["reason"] for d in dead} == {"invalid_label"}
    assert manifest["counts"]["input"] == 7 and manifest["counts"]["dead_letter"] == 5


def test_manifest_labels_that_labels_txt_cannot_hold_are_dead_letters(tf, tmp_path):
    data, out = tmp_path / "data", str(tmp_path / "out")
    write(data / "a.jpg", samples.build("jpeg_rgb"))
    # A manifest's cells are trimmed (the tabular rule): " lead" is the label "lead".
    rows = "".join(json.dumps({"path": "a.jpg", "label": label}) + "\n"
                   for label in ["cat", *BAD_LABELS, "zebra"])
    write(data / "m.jsonl", rows.encode("utf-8"))
    assert _convert("--format", "image-manifest", "--input", str(data / "m.jsonl"),
                    "--image-column", "path", "--label-column", "label", "--output", out) == 0
    manifest, examples, dead = read_output(tf, out)
    assert manifest["labels"] == _labels_txt(out) == ["cat", "lead", "trail", "zebra"]
    assert sorted(e["image/class/label"] for e in examples) == [0, 1, 2, 3]
    assert sorted(d["label"] for d in dead) == sorted(BAD_LABELS[:2])
    assert {(d["reason"], d["column"]) for d in dead} == {("invalid_label", "label")}


def test_the_labels_txt_a_run_writes_is_a_labels_file_giving_the_same_map(tmp_path):
    root = tmp_path / "tree"
    for label in ["b", "a", "c"]:
        write(root / label / "x.jpg", samples.build("jpeg_rgb"))
    assert _convert("--format", "image-folder", "--input", str(root),
                    "--output", str(tmp_path / "one")) == 0
    assert _convert("--format", "image-folder", "--input", str(root), "--output",
                    str(tmp_path / "two"), "--labels-file", str(tmp_path / "one" / "labels.txt")) == 0
    assert _labels_txt(tmp_path / "two") == _labels_txt(tmp_path / "one") == ["a", "b", "c"]


def test_a_labels_file_with_a_byte_order_mark_and_crlf_lines(tf, tmp_path):
    root, out = tmp_path / "tree", str(tmp_path / "out")
    for label in ["bird", "cat"]:
        write(root / label / "a.jpg", samples.build("jpeg_rgb"))
    (tmp_path / "labels.txt").write_bytes(b"\xef\xbb\xbfbird\r\ncat\r\n")
    assert _convert("--format", "image-folder", "--input", str(root), "--output", out,
                    "--labels-file", str(tmp_path / "labels.txt")) == 0
    manifest, examples, dead = read_output(tf, out)
    assert manifest["labels"] == _labels_txt(out) == ["bird", "cat"] and not dead


def test_integer_labels_have_the_same_numeric_order_in_a_tree_and_a_manifest(tmp_path):
    root = tmp_path / "tree"
    names = ["0", "1", "2", "10", "11"]
    for label in names:
        write(root / label / "a.jpg", samples.build("jpeg_rgb"))
    (root.parent / "m.csv").write_text("path,label\n" + "".join(
        f"tree/{label}/a.jpg,{label}\n" for label in reversed(names)))
    assert _convert("--format", "image-folder", "--input", str(root),
                    "--output", str(tmp_path / "from_tree")) == 0
    assert _convert("--format", "image-manifest", "--input", str(tmp_path / "m.csv"),
                    "--image-column", "path", "--label-column", "label",
                    "--output", str(tmp_path / "from_manifest")) == 0
    assert _labels_txt(tmp_path / "from_tree") == _labels_txt(tmp_path / "from_manifest") == names


def _set_order(labels: list[str], seed: int) -> tuple[str, ...]:
    """The order in which a set of `labels` iterates in a fresh interpreter (no site, so
    about 10 ms) whose PYTHONHASHSEED is `seed`."""
    shown = subprocess.run([sys.executable, "-S", "-c", f"print(*{{*{labels!r}}}, sep=',')"],
                           env={"PYTHONHASHSEED": str(seed)}, capture_output=True, text=True,
                           check=True).stdout
    return tuple(shown.strip().split(","))


def test_the_label_order_of_integers_with_equal_values_never_depends_on_hashing(tmp_path):
    # "1", "01" and "001" are one number: they were ordered as the set of labels iterated,
    # which changes with PYTHONHASHSEED from run to run. The CLI runs (each costs a Beam
    # import) use two seeds under which such a set iterates in two different orders, both
    # unlike the right one: ordered by the set, either run alone would fail.
    labels, expected = ["2", "1", "01", "001"], ("001", "01", "1", "2")
    seeds, seen = [], {expected}
    for seed in range(50):
        order = tuple(label for label in _set_order(labels, seed) if label != "2")
        if order not in seen:
            seeds.append(seed)
            seen.add(order)
        if len(seeds) == 2:
            break
    assert len(seeds) == 2, "no two hash seeds order the set differently"
    (tmp_path / "a.jpg").write_bytes(samples.build("jpeg_rgb"))
    (tmp_path / "m.csv").write_text("path,label\n" + "".join(f"a.jpg,{label}\n" for label in labels))
    orders = set()
    for seed in seeds:
        shown = subprocess.run(
            [sys.executable, "-m", "pipeline", "convert", "--format", "image-manifest",
             "--input", str(tmp_path / "m.csv"), "--image-column", "path", "--label-column",
             "label", "--output", str(tmp_path / "out"), "--dry-run"],
            env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True, text=True,
            check=True).stdout
        orders.add(tuple(json.loads(shown)["labels"]))
    assert orders == {expected}


def test_a_file_name_that_is_not_utf8_keeps_its_bytes(tf, tmp_path):
    root, out = tmp_path / "tree", str(tmp_path / "out")
    write(root / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    write(os.fsdecode(os.fsencode(root) + b"/cat/f\xfe.jpg"), samples.build("jpeg_rgb"))
    assert _convert("--format", "image-folder", "--input", str(root), "--output", out) == 0
    manifest, examples, dead = read_output(tf, out)
    assert sorted(e["image/filename"] for e in examples) == [b"cat/a.jpg", b"cat/f\xfe.jpg"]
    assert not dead


@pytest.mark.parametrize("labels", [["cat", " lead"], ["cat", "a\nb"]])
def test_a_label_list_holding_a_label_labels_txt_cannot_hold_is_refused(labels):
    from transforms.images.labels import check_label_list

    with pytest.raises(ValueError, match="the label list: label"):
        check_label_list(labels)


def test_a_missing_labels_file_is_named_in_one_line(tmp_path, capsys):
    write(tmp_path / "tree" / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    assert _convert("--format", "image-folder", "--input", str(tmp_path / "tree"), "--output",
                    str(tmp_path / "out"), "--labels-file", str(tmp_path / "nowhere.txt")) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"cannot read the labels file {tmp_path / 'nowhere.txt'}: "
                         f"No such file or directory")


def test_a_manifest_with_a_header_only_converts_to_nothing(tmp_path):
    # Its other columns' types could not be inferred from no row: it failed with "no
    # convertible column found ...; give a spec with --spec".
    (tmp_path / "m.csv").write_text("path,label,weight\n")
    assert _convert("--format", "image-manifest", "--input", str(tmp_path / "m.csv"),
                    "--image-column", "path", "--label-column", "label",
                    "--output", str(tmp_path / "out")) == 0
    with open(tmp_path / "out" / "manifest.json") as handle:
        assert json.load(handle)["counts"]["input"] == 0
