"""End to end: `tfrecord-pipeline convert --format image-folder|image-manifest`, read back by TF."""

from __future__ import annotations

import glob
import hashlib
import json
import os

import pytest

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.images import image_samples as samples


def write(path, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def read_output(tf, out, split: str | None = None):
    """(manifest, parsed examples as dicts, dead letters) of a committed output folder."""
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    with open(os.path.join(out, "feature_spec.json")) as handle:
        spec = json.load(handle)["features"]
    parse = {name: (tf.io.FixedLenFeature([], tf.as_dtype(entry["dtype"])) if entry["kind"] == "fixed"
                    else tf.io.VarLenFeature(tf.as_dtype(entry["dtype"])))
             for name, entry in spec.items()}
    examples = []
    for shard in manifest["shards"]:
        if split is not None and shard["split"] != split:
            continue
        compression = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[manifest["compression"]]
        dataset = tf.data.TFRecordDataset(os.path.join(out, shard["path"]), compression_type=compression)
        for record in dataset:
            parsed = tf.io.parse_single_example(record, parse)
            examples.append({name: value.values.numpy().tolist()
                             if isinstance(value, tf.SparseTensor) else value.numpy()
                             for name, value in parsed.items()})
    dead = []
    for path in sorted(glob.glob(os.path.join(out, "dead_letter", "*.jsonl"))):
        with open(path) as handle:
            dead += [json.loads(line) for line in handle if line.strip()]
    return manifest, examples, dead


def test_image_folder_with_good_and_bad_files(tf, tmp_path):
    root, out = tmp_path / "photos", str(tmp_path / "out")
    good = {"cat/a.jpg": "jpeg_cmyk", "cat/b.png": "png_palette_transparent", "dog/c.gif": "gif_animated",
            "dog/d.webp": "webp_alpha", "dog/e.bmp": "bmp_rgb", "dog/f.tiff": "tiff_gray16"}
    for relative, variant in good.items():
        write(root / relative, samples.build(variant))
    jpeg = samples.build("jpeg_rgb")
    bad = {"cat/empty.jpg": b"", "cat/cut.jpg": jpeg[:1000], "dog/text.jpg": b"not an image",
           "dog/notes.txt": b"notes", "cat/.DS_Store": b"\x00"}
    for relative, data in bad.items():
        write(root / relative, data)
    code = run(["convert", "--format", "image-folder", "--input", str(root), "--output", out,
                "--max-error-rate", "1", *in_memory_args()])
    assert code == 0
    manifest, examples, dead = read_output(tf, out)
    assert manifest["counts"]["input"] == 11
    assert manifest["counts"]["written"] == 6 == len(examples)
    assert manifest["counts"]["dead_letter"] == 5 == len(dead)
    assert manifest["labels"] == ["cat", "dog"]
    with open(os.path.join(out, "labels.txt")) as handle:
        assert handle.read() == "cat\ndog\n"
    assert {os.path.relpath(d["source"], root): d["reason"] for d in dead} == {
        "cat/empty.jpg": "empty_file", "cat/cut.jpg": "truncated_image", "dog/text.jpg": "not_an_image",
        "dog/notes.txt": "not_an_image_extension", "cat/.DS_Store": "hidden_file"}
    for example in examples:
        filename = example["image/filename"].decode()
        image = tf.io.decode_image(example["image/encoded"])
        assert tuple(image.shape[-3:]) == (example["image/height"], example["image/width"],
                                           example["image/channels"]), filename
        if not filename.endswith(".tiff"):
            with open(root / filename, "rb") as handle:
                assert example["image/encoded"] == handle.read()
        assert example["image/key/sha256"].decode() == hashlib.sha256(example["image/encoded"]).hexdigest()
        assert example["image/class/text"].decode() == filename.split("/")[0]
    assert run(["verify", out]) == 0


def test_resize_and_encode_jpeg_end_to_end(tf, tmp_path):
    root, out = tmp_path / "photos", str(tmp_path / "out")
    for name in ("jpeg_gray", "png_rgba", "png_gray16", "gif_animated", "webp_alpha", "tiff_cmyk",
                 "bmp_palette", "jpeg_exif_rotated"):
        write(root / "any" / f"{name}{samples.extension(name)}", samples.build(name))
    code = run(["convert", "--format", "image-folder", "--input", str(root), "--output", out,
                "--resize", "224x224", "--encode", "jpeg", "--exif-orientation", "--compression", "gzip",
                *in_memory_args()])
    assert code == 0
    manifest, examples, dead = read_output(tf, out)
    assert dead == [] and len(examples) == 8
    for example in examples:
        assert example["image/format"] == b"jpeg"
        assert tuple(tf.io.decode_image(example["image/encoded"]).shape) == (224, 224, 3)
        assert (example["image/height"], example["image/width"], example["image/channels"]) == (224, 224, 3)


def test_image_manifest_with_splits_spec_and_allowed_roots(tf, tmp_path):
    data, elsewhere, out = tmp_path / "data", tmp_path / "elsewhere", str(tmp_path / "out")
    write(data / "img" / "a.jpg", samples.build("jpeg_rgb"))
    write(data / "img" / "b.png", samples.build("png_la"))
    write(elsewhere / "c.webp", samples.build("webp_lossless"))
    rows = ["path,label,split,caption",
            "img/a.jpg,cat,train,first",
            "img/b.png,dog,test,second",
            f"{elsewhere / 'c.webp'},dog,train,third",
            "img/missing.jpg,cat,train,fourth",
            "../elsewhere/c.webp,cat,test,fifth"]
    write(data / "manifest.csv", ("\n".join(rows) + "\n").encode())
    write(data / "spec.yaml", b"features:\n  - {name: caption, type: string}\n")
    base = ["convert", "--format", "image-manifest", "--input", str(data / "manifest.csv"),
            "--image-column", "path", "--label-column", "label", "--split-column", "split",
            "--spec", str(data / "spec.yaml"), "--max-error-rate", "1", *in_memory_args()]
    assert run([*base, "--output", out]) == 0
    manifest, train, dead = read_output(tf, out, "train")
    _, test, _ = read_output(tf, out, "test")
    assert manifest["counts"]["input"] == 5
    assert manifest["counts"]["splits"]["train"] == {"input": 3, "written": 1, "dead_letter": 2}
    assert manifest["counts"]["splits"]["test"] == {"input": 2, "written": 1, "dead_letter": 1}
    assert [e["caption"] for e in train] == [[b"first"]]
    assert [e["caption"] for e in test] == [[b"second"]]
    assert sorted(d["reason"] for d in dead) == ["missing_file", "outside_allowed_roots",
                                                 "outside_allowed_roots"]
    assert {shard["split"] for shard in manifest["shards"]} == {"train", "test"}
    # Allowing the other folder explicitly admits exactly those rows.
    wider = str(tmp_path / "out_wider")
    assert run([*base, "--output", wider, "--allowed-roots", f"{data},{elsewhere}"]) == 0
    manifest, _, dead = read_output(tf, wider)
    assert manifest["counts"]["written"] == 4
    assert [d["reason"] for d in dead] == ["missing_file"]


def test_error_rate_limit_fails_after_writing_dead_letters(tmp_path):
    root, out = tmp_path / "photos", str(tmp_path / "out")
    write(root / "cat" / "ok.jpg", samples.build("jpeg_rgb"))
    for i in range(3):
        write(root / "cat" / f"bad{i}.jpg", b"garbage")
    code = run(["convert", "--format", "image-folder", "--input", str(root), "--output", out,
                "--max-error-rate", "0.5", *in_memory_args()])
    assert code == 3
    lines = [line for path in glob.glob(os.path.join(out, "**", "*.jsonl"), recursive=True)
             for line in open(path) if line.strip()]
    assert len(lines) == 3 and all(json.loads(line)["reason"] == "not_an_image" for line in lines)


@pytest.mark.parametrize("flags", [["--resize", "10x10", "--max-side", "5"]])
def test_conflicting_image_flags_are_a_usage_error(tmp_path, flags):
    write(tmp_path / "photos" / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    code = run(["convert", "--format", "image-folder", "--input", str(tmp_path / "photos"),
                "--output", str(tmp_path / "out"), *flags, *in_memory_args()])
    assert code == 2


def test_labels_file_fixes_the_label_map_of_a_folder_tree(tf, tmp_path):
    # Day 1 has cat, dog and owl; day 2 has no dog. With day 1's labels.txt the indices
    # stay put, and a folder the list does not name is a dead letter, not a new index.
    day1, day2 = tmp_path / "day1", tmp_path / "day2"
    for label in ("cat", "dog", "owl"):
        write(day1 / label / "a.jpg", samples.build("jpeg_rgb"))
    for label in ("cat", "owl", "yak"):
        write(day2 / label / "a.jpg", samples.build("jpeg_rgb"))
    first, second = str(tmp_path / "out1"), str(tmp_path / "out2")
    base = ["--format", "image-folder", "--max-error-rate", "1", *in_memory_args()]
    assert run(["convert", *base, "--input", str(day1), "--output", first]) == 0
    labels_txt = tmp_path / "labels.txt"
    labels_txt.write_bytes(open(os.path.join(first, "labels.txt"), "rb").read())
    day2_args = ["convert", *base, "--input", str(day2), "--output", second,
                 "--labels-file", str(labels_txt)]
    assert run(day2_args) == 0
    manifest, examples, dead = read_output(tf, second)
    assert manifest["labels"] == ["cat", "dog", "owl"]
    with open(os.path.join(second, "labels.txt")) as handle:
        assert handle.read() == "cat\ndog\nowl\n"
    assert sorted((e["image/class/text"], e["image/class/label"]) for e in examples) == [
        (b"cat", 0), (b"owl", 2)]
    assert [(d["reason"], d["label"]) for d in dead] == [("unknown_label", "yak")]
    assert manifest["counts"]["input"] == 3 and manifest["counts"]["dead_letter"] == 1
    # The same list again is the same conversion; another list under the same path is
    # another conversion: refused without --overwrite.
    assert run(day2_args) == 0
    assert read_output(tf, second)[0]["run_id"] == manifest["run_id"]
    labels_txt.write_text("owl\ncat\n")
    assert run(day2_args) == 2


def test_labels_file_for_a_manifest(tf, tmp_path):
    data, out = tmp_path / "data", str(tmp_path / "out")
    write(data / "a.jpg", samples.build("jpeg_rgb"))
    write(data / "b.jpg", samples.build("jpeg_rgb"))
    write(data / "manifest.csv", b"path,label\na.jpg,7\nb.jpg,3\n")
    write(data / "labels.txt", b"3\n5\n7\n")
    assert run(["convert", "--format", "image-manifest", "--input", str(data / "manifest.csv"),
                "--image-column", "path", "--label-column", "label",
                "--labels-file", str(data / "labels.txt"), "--output", out, *in_memory_args()]) == 0
    manifest, examples, dead = read_output(tf, out)
    assert manifest["labels"] == ["3", "5", "7"] and not dead
    assert sorted((e["image/class/text"], e["image/class/label"]) for e in examples) == [
        (b"3", 0), (b"7", 2)]


@pytest.mark.parametrize("case", ["tabular", "manifest_without_label_column", "missing_file",
                                  "empty_file", "duplicates"])
def test_bad_labels_flag_is_a_usage_error(tmp_path, capsys, case):
    write(tmp_path / "photos" / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    write(tmp_path / "m.csv", b"path\nphotos/cat/a.jpg\n")
    write(tmp_path / "t.csv", b"x\n1\n")
    labels = tmp_path / "labels.txt"
    labels.write_text({"empty_file": "\n", "duplicates": "cat\ncat\n"}.get(case, "cat\n"))
    if case == "missing_file":
        labels = tmp_path / "nowhere.txt"
    source = {"tabular": ["--format", "csv", "--input", str(tmp_path / "t.csv")],
              "manifest_without_label_column": ["--format", "image-manifest", "--input",
                                                str(tmp_path / "m.csv"), "--image-column", "path"]
              }.get(case, ["--format", "image-folder", "--input", str(tmp_path / "photos")])
    code = run(["convert", *source, "--labels-file", str(labels), "--output", str(tmp_path / "out"),
                *in_memory_args()])
    assert code == 2
    assert "label" in capsys.readouterr().err.lower() or case == "missing_file"
    assert not (tmp_path / "out").exists()


def test_a_file_beside_the_split_folders_creates_no_split(tmp_path):
    root, out = tmp_path / "photos", str(tmp_path / "out")
    png = samples.encode(samples.rgb(side=8), "PNG")
    write(root / "train" / "cat" / "a.png", png)
    write(root / "test" / "cat" / "b.png", png)
    write(root / "notes.txt", b"not in a split folder")
    assert run(["convert", "--format", "image-folder", "--input", str(root), "--output", out,
                "--max-error-rate", "1", *in_memory_args()]) == 0
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["splits"] == ["test", "train"]
    assert {shard["split"] for shard in manifest["shards"]} == {"test", "train"}
    counts = manifest["counts"]
    assert set(counts["splits"]) == {"test", "train"}
    assert (counts["input"], counts["written"], counts["dead_letter"]) == (3, 2, 1)
    assert counts["dead_letter_reasons"] == {"no_label": 1}
    with open(os.path.join(out, "stats.json")) as handle:
        assert set(json.load(handle)["splits"]) == {"test", "train"}


def test_a_symlinked_folder_in_a_tree_is_a_dead_letter_not_a_silent_gap(tf, tmp_path):
    # os.walk does not follow it: the images behind it used to vanish without a trace.
    root, elsewhere, out = tmp_path / "tree", tmp_path / "elsewhere", str(tmp_path / "out")
    write(root / "cat" / "a.jpg", samples.build("jpeg_rgb"))
    write(elsewhere / "b.jpg", samples.build("jpeg_rgb"))
    os.symlink(elsewhere, root / "linked_class")
    os.symlink(elsewhere, root / "cat" / "inner")
    assert run(["convert", "--format", "image-folder", "--input", str(root), "--output", out,
                "--max-error-rate", "1", *in_memory_args()]) == 0
    manifest, examples, dead = read_output(tf, out)
    assert len(examples) == 1 and manifest["labels"] == ["cat"]
    assert sorted((d["reason"], d["filename"]) for d in dead) == [
        ("symlinked_folder", "cat/inner"), ("symlinked_folder", "linked_class")]
    assert manifest["counts"]["input"] == 3
