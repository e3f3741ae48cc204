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
                "path", "--split-column", "split", "--output", out, *in_memory_args()]) == 0
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
                *in_memory_args()]) == 0
    committed = json.load(open(os.path.join(out, "manifest.json")))
    assert committed["counts"]["splits"]["dev"]["written"] == 2
    assert committed["counts"]["splits"]["holdout"]["written"] == 1
    assert [letter["reason"] for letter in _dead_letters(out)] == ["unknown_split"]
