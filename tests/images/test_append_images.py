"""`convert --append` of image manifests and class-folder trees, through the CLI: each
generation converts only what the committed output lacks, with its label map, and the
records of all generations equal one conversion of every input."""

from __future__ import annotations

import collections
import json
import os

from pipeline.cli import run
from tests.helpers import in_memory_args
from tests.images import image_samples as samples
from tests.images.test_images_cli import read_output, write

_JPEG = samples.encode(samples.rgb(side=8), "JPEG")
_PNG = samples.encode(samples.gray(side=8), "PNG")


def _convert(fmt, source, out, *more):
    return run(["convert", "--format", fmt, "--input", str(source), "--output", str(out),
                "--max-error-rate", "1", *more, *in_memory_args()])


def _records(tf, out):
    manifest, examples, dead = read_output(tf, out)
    counts = manifest["counts"]
    assert counts["input"] == counts["written"] + counts["dead_letter"]
    assert counts["written"] == len(examples) and counts["dead_letter"] == len(dead)
    kept = ("image/filename", "image/class/label", "image/class/text", "size")
    records = collections.Counter(tuple((k, _plain(e[k])) for k in kept if k in e) for e in examples)
    return manifest, records


def _parsed_by_tensorflow(tf, out, manifest) -> int:
    """How many records TensorFlow parses with the output's feature spec, all shards in one
    batch (one parse, not one per record as `read_output` does, for the generations between
    the first and the last)."""
    with open(os.path.join(out, "feature_spec.json")) as handle:
        spec = json.load(handle)["features"]
    parse = {name: (tf.io.FixedLenFeature([], tf.as_dtype(entry["dtype"])) if entry["kind"] == "fixed"
                    else tf.io.VarLenFeature(tf.as_dtype(entry["dtype"])))
             for name, entry in spec.items()}
    assert manifest["compression"] == "none"
    shards = [os.path.join(out, shard["path"]) for shard in manifest["shards"]]
    records = list(tf.data.TFRecordDataset(shards))
    parsed = tf.io.parse_example(tf.stack(records), parse)
    return int(parsed["image/filename"].shape[0])


def _plain(value):
    value = value.tolist() if hasattr(value, "tolist") else value
    value = value[0] if isinstance(value, list) and len(value) == 1 else value
    return value.decode() if isinstance(value, bytes) else value


def _verified(out, capsys) -> bool:
    """`verify` passes, but for the previous generation's files kept under `superseded`,
    which main's verify still reports as unlisted (a fix of verify is on its own branch)."""
    capsys.readouterr()
    if run(["verify", str(out)]) == 0:
        return True
    manifest, said = _manifest(out), capsys.readouterr()
    superseded = {entry["path"] for entry in manifest.get("superseded") or ()}
    problems = [line for line in (said.out + said.err).splitlines() if line.startswith(str(out))]
    return bool(problems) and all(line.endswith(": shard not listed in the manifest")
                                  and os.path.basename(line.split(":")[0]) in superseded
                                  for line in problems)


def _manifest(out):
    with open(os.path.join(out, "manifest.json")) as handle:
        return json.load(handle)


def test_growing_image_manifest(tf, tmp_path, capsys):
    folder = tmp_path / "in"
    for i in range(6):
        write(folder / f"img{i}.{'jpg' if i % 2 else 'png'}", _JPEG if i % 2 else _PNG)
    lines = ["image,label,size"] + [f"img{i}.{'jpg' if i % 2 else 'png'},{'ab'[i % 2]},{i}" for i in range(6)]
    first = folder / "a.csv"
    first.write_text("\n".join(lines[:3]) + "\n")
    args = ("--image-column", "image", "--label-column", "label", "--append")
    out = tmp_path / "out"
    assert _convert("image-manifest", folder / "*.csv", out, *args) == 0
    assert _records(tf, out)[0]["counts"]["written"] == 2
    with open(first, "a") as handle:  # a grown manifest: only its new row converts ...
        handle.write(lines[3] + "\n")
    (folder / "b.csv").write_text("\n".join([lines[0], *lines[4:]]) + "\n")  # ... and a new one
    assert _convert("image-manifest", folder / "*.csv", out, *args) == 0
    manifest, appended = _records(tf, out)
    assert manifest["counts"]["written"] == 6 and manifest["labels"] == ["a", "b"] and _verified(out, capsys)
    assert _convert("image-manifest", folder / "*.csv", out, *args) == 0  # nothing new
    whole = tmp_path / "whole"
    assert _convert("image-manifest", folder / "*.csv", whole, *args[:-1]) == 0
    assert _records(tf, whole)[1] == appended

    first.write_text("\n".join(lines[:2]) + "\n")  # a committed manifest edited: refused
    assert _convert("image-manifest", folder / "*.csv", out, *args) != 0


def test_new_manifest_label_refused_then_extended(tf, tmp_path, capsys):
    folder, out = tmp_path / "in", tmp_path / "out"
    for i in range(3):
        write(folder / f"img{i}.png", _PNG)
    manifest = folder / "m.jsonl"
    manifest.write_text('{"image": "img0.png", "label": "b"}\n')
    args = ("--image-column", "image", "--label-column", "label", "--append")
    assert _convert("image-manifest", manifest, out, *args) == 0
    with open(manifest, "a") as handle:
        handle.write('{"image": "img1.png", "label": "a"}\n{"image": "img2.png", "label": "b"}\n')
    capsys.readouterr()
    assert _convert("image-manifest", manifest, out, *args) != 0
    error = capsys.readouterr().err
    assert "'a'" in error and "--extend-labels" in error
    assert _convert("image-manifest", manifest, out, *args, "--extend-labels") == 0
    committed, records = _records(tf, out)
    assert committed["labels"] == ["b", "a"]  # the committed label keeps its index
    assert sorted(dict(r)["image/class/label"] for r in records.elements()) == [0, 0, 1]


def test_image_tree_receiving_files(tf, tmp_path, capsys):
    root, out = tmp_path / "photos", tmp_path / "out"
    write(root / "cat/a.jpg", _JPEG)
    write(root / "dog/b.png", _PNG)
    write(root / "dog/notes.txt", b"not an image")
    assert _convert("image-folder", root, out, "--append") == 0
    write(root / "cat/c.png", _PNG)  # new files, in committed folders and ...
    write(root / "dog/a0.jpg", _JPEG)
    write(root / "dog/z.png", _PNG)
    write(root / "bird/d.jpg", _JPEG)  # ... a new label folder: refused, then numbered after
    capsys.readouterr()
    assert _convert("image-folder", root, out, "--append") != 0
    assert "'bird'" in capsys.readouterr().err
    assert _convert("image-folder", root, out, "--append", "--extend-labels") == 0
    manifest, records = _records(tf, out)
    assert manifest["labels"] == ["cat", "dog", "bird"] and _verified(out, capsys)
    assert manifest["counts"]["written"] == 6 and manifest["counts"]["dead_letter"] == 1
    labels = {dict(r)["image/filename"]: dict(r)["image/class/label"] for r in records}
    assert labels == {"cat/a.jpg": 0, "cat/c.png": 0, "dog/b.png": 1, "dog/a0.jpg": 1,
                      "dog/z.png": 1, "bird/d.jpg": 2}

    whole = tmp_path / "whole"
    assert _convert("image-folder", root, whole, "--labels-file", str(out / "labels.txt")) == 0
    assert _records(tf, whole)[1] == records

    write(root / "cat/a.jpg", _JPEG + b"\x00")  # a committed image changed: refused, named
    capsys.readouterr()
    assert _convert("image-folder", root, out, "--append") != 0
    assert "cat/a.jpg" in capsys.readouterr().err
    os.remove(root / "cat/a.jpg")
    assert _convert("image-folder", root, out, "--append") != 0


def test_tree_converted_without_append_is_refused(tmp_path, capsys):
    root, out = tmp_path / "photos", tmp_path / "out"
    write(root / "cat/a.jpg", _JPEG)
    assert _convert("image-folder", root, out) == 0
    write(root / "cat/b.jpg", _JPEG)
    assert _convert("image-folder", root, out, "--append") != 0
    assert "--append" in capsys.readouterr().err


#: Appends per source. The generations an append commits are the same code for every
#: source (`transforms.generations`, which never sees the input); a source decides only what
#: an append finds new: the images a class-folder tree lacks in its listing
#: (`pipeline.appending.new_images`, the tree's `image_listing.json` rewritten every
#: generation), and the rows a manifest gained past its committed size (the growing-CSV path
#: of `pipeline.appending._new_rows`, which tests/e2e/test_append.py appends to ten times).
#: The tree appends ten times, the manifest three: it grows from a size an append committed
#: (and again), and the generation after next deletes a superseded name. The lines of
#: pipeline/ and transforms/ run by the manifest's three appends are those run by its ten
#: (measured with a line tracer when the count was cut from ten).
APPENDS = {"image-folder": 10, "image-manifest": 3}


def test_ten_appends_of_a_tree_and_three_of_a_growing_manifest_keep_readers_of_the_previous_generation(
        tf, tmp_path, capsys):
    """Each generation adds an image to a class-folder tree and a row (and its image) to a
    manifest (`APPENDS` times each); a reader opened on the previous generation reads its
    whole snapshot after the append commits; counts and `verify` hold every time; the end
    equals one conversion."""
    from tfrecord_pipeline import read_examples

    def add(fmt: str, i: int) -> None:
        data, ext, label = (_JPEG, "jpg", "b") if i % 2 else (_PNG, "png", "a")
        if fmt == "image-folder":
            write(tmp_path / "tree" / label / f"img{i}.{ext}", data)
            return
        write(tmp_path / "in" / f"img{i}.{ext}", data)
        with open(tmp_path / "in" / "m.csv", "a") as handle:
            handle.write(f"img{i}.{ext},{label}\n")

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "m.csv").write_text("image,label\n")
    sources = {"image-folder": (tmp_path / "tree", ()),
               "image-manifest": (tmp_path / "in" / "*.csv",
                                  ("--image-column", "image", "--label-column", "label"))}
    for fmt, (source, args) in sources.items():
        for i in range(2):
            add(fmt, i)
        assert _convert(fmt, source, tmp_path / fmt, *args, "--append") == 0

    def names(examples):
        return sorted(str(_plain(example["image/filename"])) for example in examples)

    for generation in range(1, max(APPENDS.values()) + 1):
        appending = {fmt: given for fmt, given in sources.items() if generation <= APPENDS[fmt]}
        readers = {}
        for fmt in appending:
            snapshot = names(read_examples(str(tmp_path / fmt), "data"))
            reader = iter(read_examples(str(tmp_path / fmt), "data"))
            readers[fmt] = (snapshot, [next(reader)], reader)
            add(fmt, generation + 1)
        for fmt, (source, args) in appending.items():
            out = tmp_path / fmt
            assert _convert(fmt, source, out, *args, "--append") == 0
            snapshot, started, reader = readers[fmt]
            assert names([*started, *reader]) == snapshot  # the previous generation still reads
            manifest = _manifest(out)
            assert manifest["generation"] == generation and manifest["counts"]["written"] == generation + 2
            assert _parsed_by_tensorflow(tf, out, manifest) == generation + 2
            counts = manifest["counts"]
            assert counts["input"] == counts["written"] + counts["dead_letter"] == generation + 2
            capsys.readouterr()
            assert run(["verify", str(out)]) == 0
    for fmt, (source, args) in sources.items():
        whole = tmp_path / f"whole-{fmt}"
        assert _convert(fmt, source, whole, *args) == 0
        assert _records(tf, whole)[1] == _records(tf, tmp_path / fmt)[1]
