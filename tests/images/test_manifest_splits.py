"""Image manifest split values are checked against the declared splits (issue 19)."""

from __future__ import annotations

import glob
import json
import os

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.images import image_samples as samples


def _manifest(tmp_path, splits):
    image = samples.encode(samples.rgb(), "PNG")
    lines = ["id,path,split"]
    for i, split in enumerate(splits):
        (tmp_path / f"{i}.png").write_bytes(image)
        lines.append(f"{i},{i}.png,{split}")
    (tmp_path / "manifest.csv").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "manifest.csv")


def _dead_letters(out):
    return [json.loads(line) for path in glob.glob(os.path.join(out, "dead_letter", "*.jsonl"))
            for line in open(path)]


def test_undeclared_split_values_are_dead_letters_with_a_hint(tmp_path):
    manifest = _manifest(tmp_path, ["train", "Train", "bogus split", "test", "validation"])
    out = str(tmp_path / "out")
    assert run(["convert", "--format", "image-manifest", "--input", manifest, "--image-column",
                "path", "--split-column", "split", "--output", out, "--max-error-rate", "1",
                *in_memory_args()]) == 0
    committed = json.load(open(os.path.join(out, "manifest.json")))
    assert committed["splits"] == ["test", "train", "validation"]
    assert committed["counts"]["written"] == 3 and committed["counts"]["dead_letter"] == 2
    letters = {letter["raw"].split(",")[0]: letter for letter in _dead_letters(out)}
    assert letters["1"]["reason"] == "unknown_split" and "did you mean 'train'" in letters["1"]["message"]
    assert letters["2"]["reason"] == "unknown_split"
    assert not glob.glob(os.path.join(out, "bogus*")) and not glob.glob(os.path.join(out, "Train*"))


def test_a_spec_declares_other_split_names(tmp_path):
    manifest = _manifest(tmp_path, ["dev", "holdout", "dev", "test"])
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64}\nsplits: {dev: 1, holdout: 1}\n")
    out = str(tmp_path / "out")
    assert run(["convert", "--format", "image-manifest", "--input", manifest, "--image-column",
                "path", "--split-column", "split", "--spec", str(spec), "--output", out,
                "--max-error-rate", "1", *in_memory_args()]) == 0
    committed = json.load(open(os.path.join(out, "manifest.json")))
    assert committed["counts"]["splits"]["dev"]["written"] == 2
    assert committed["counts"]["splits"]["holdout"]["written"] == 1
    assert [letter["reason"] for letter in _dead_letters(out)] == ["unknown_split"]


# -- A row of no declared split is counted in the totals, under no split --------------------

def _convert(manifest, out, *extra) -> int:
    return run(["convert", "--format", "image-manifest", "--input", manifest, "--image-column",
                "path", "--split-column", "split", "--output", out, "--max-error-rate", "1", *extra,
                *in_memory_args()])


def _json(out, name):
    with open(os.path.join(out, name)) as handle:
        return json.load(handle)


def test_an_undeclared_split_value_creates_no_split_and_no_drift(tmp_path):
    first, clean = tmp_path / "first", tmp_path / "clean"
    first.mkdir(), clean.mkdir()
    out, out_clean = str(tmp_path / "out"), str(tmp_path / "out-clean")
    assert _convert(_manifest(first, ["train", "Train"]), out) == 0
    counts = _json(out, "manifest.json")["counts"]
    assert counts["splits"] == {"train": {"input": 1, "written": 1, "dead_letter": 0}}
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (2, 1, 1)
    assert counts["dead_letter_reasons"] == {"unknown_split": 1}
    stats = _json(out, "stats.json")
    assert list(stats["splits"]) == ["train"]
    assert stats["dead_letters"]["by_reason"] == {"unknown_split": 1}
    [letter] = _dead_letters(out)
    assert letter["reason"] == "unknown_split" and letter["split"] is None
    assert run(["verify", out]) == 0

    # The same images with the typo fixed: the same splits, so no schema drift.
    assert _convert(_manifest(clean, ["train", "train"]), out_clean, "--compare-to", out,
                    "--fail-on-drift", "schema") == 0
    assert _json(out_clean, "drift.json")["schema"] == []


def test_rows_failing_before_their_split_is_assigned_create_no_split(tmp_path):
    manifest = _manifest(tmp_path, ["x", "x", "x"])
    # Row 2 has no image path: it is rejected before the spec's splits hash its URI.
    lines = (tmp_path / "manifest.csv").read_text().splitlines()
    lines[2] = "1,,x"
    (tmp_path / "manifest.csv").write_text("\n".join(lines) + "\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("features:\n- {name: id, type: int64}\n- {name: split, type: string}\n"
                    "splits: {dev: 1, holdout: 1}\n")
    out = str(tmp_path / "out")
    assert run(["convert", "--format", "image-manifest", "--input", manifest, "--image-column",
                "path", "--spec", str(spec), "--output", out, "--max-error-rate", "1",
                *in_memory_args()]) == 0
    committed = _json(out, "manifest.json")
    assert set(committed["counts"]["splits"]) <= {"dev", "holdout"}
    assert committed["splits"] == ["dev", "holdout"]
    assert sum(entry["input"] for entry in committed["counts"]["splits"].values()) == 2
    assert committed["counts"]["input"] == 3 and committed["counts"]["dead_letter"] == 1
    assert set(_json(out, "stats.json")["splits"]) == {"dev", "holdout"}
    assert [letter["reason"] for letter in _dead_letters(out)] == ["missing_image_path"]
