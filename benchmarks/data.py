"""Benchmark inputs: deterministic (seeded numpy) CSV datasets with their spec, and JPEG trees.

Every path of a benchmark reads the same generated files; see benchmarks/README.md, "Data".
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ANIMALS", "DISTINCT_IMAGES", "IMAGE_LABELS", "IMAGE_QUALITY", "IMAGE_SIZE", "NUM_PARTS",
    "ImageData", "TabularData", "tutorial_columns", "wide_columns", "write_images", "write_tabular",
]

# 20,000 images: a plain loop takes ~5 s on them, so (as with 2M rows) the comparison is
# about throughput, not about our ~1.8 s of start-up (Python, Beam, planning). Only this
# many are generated; the others are byte copies (see `write_images`).
DISTINCT_IMAGES = 2000
NUM_PARTS = 8
ANIMALS = ("cat", "dog", "chicken", "horse", "goat")
IMAGE_SIZE = (640, 480)
IMAGE_QUALITY = 90
IMAGE_LABELS = ("label_a", "label_b")


@dataclasses.dataclass(frozen=True)
class TabularData:
    """A generated CSV dataset: part files, the spec feeding our CLI, its column kinds."""

    name: str
    rows: int
    columns: tuple[tuple[str, str], ...]  # (name, spec type: int64 / float / string)
    directory: str
    files: tuple[str, ...]
    spec_path: str
    input_bytes: int

    @property
    def pattern(self) -> str:
        return os.path.join(self.directory, "*.csv")


@dataclasses.dataclass(frozen=True)
class ImageData:
    """A generated image-folder tree ROOT/<label>/<file>.jpg."""

    root: str
    count: int
    labels: tuple[str, ...]
    input_bytes: int
    distinct: int  # images generated; the other files are copies of them


def tutorial_columns(rows: int, rng) -> dict[str, Any]:
    """TensorFlow's TFRecord tutorial data: bool, int in [0, 5), its animal, a normal float."""
    import numpy as np

    feature1 = rng.integers(0, len(ANIMALS), rows)
    return {
        "feature0": ("int64", rng.integers(0, 2, rows)),  # the tutorial's bool, as 0/1
        "feature1": ("int64", feature1),
        "feature2": ("string", np.array(ANIMALS)[feature1]),
        "feature3": ("float", rng.standard_normal(rows)),
    }


def _words(rng, count: int, min_len: int, max_len: int, alphabet: str) -> Any:
    import numpy as np

    letters = np.array(list(alphabet))
    lengths = rng.integers(min_len, max_len + 1, count)
    return np.array(["".join(letters[rng.integers(0, len(letters), n)]) for n in lengths])


def wide_columns(rows: int, rng) -> dict[str, Any]:
    """20 columns: 8 int64 of varied ranges and signs, 8 floats, 4 short strings."""
    int_ranges = [
        (0, 2), (0, 10), (0, 1_000), (-1_000_000, 1_000_000), (0, 2**31),
        (-(2**40), 2**40), (0, 100_000), (-(2**62), 2**62),
    ]
    columns: dict[str, Any] = {}
    for i, (low, high) in enumerate(int_ranges):
        columns[f"int_{i}"] = ("int64", rng.integers(low, high, rows))
    for i in range(8):
        scale = 10.0 ** (i - 3)
        values = rng.standard_normal(rows) if i % 2 else rng.random(rows)
        columns[f"float_{i}"] = ("float", values * scale)
    vocabularies = [
        _words(rng, 10, 3, 8, "abcdefghijklmnopqrstuvwxyz"),
        _words(rng, 1_000, 8, 8, "0123456789abcdef"),
        _words(rng, 100, 4, 12, "abcdefghijklmnopqrstuvwxyzéüß"),
        _words(rng, 5_000, 1, 16, "abcdefghijklmnopqrstuvwxyz "),
    ]
    for i, vocabulary in enumerate(vocabularies):
        columns[f"str_{i}"] = ("string", vocabulary[rng.integers(0, len(vocabulary), rows)])
    return columns


def _write_spec(path: str, columns: Sequence[tuple[str, str]]) -> None:
    from transforms.tabular.spec import ConversionSpec, FeatureSpec, parse_spec

    spec = ConversionSpec(features=tuple(FeatureSpec(name=n, type=t) for n, t in columns))
    text = spec.to_yaml()
    parse_spec(text)  # the CLI must accept what we write
    Path(path).write_text(text, encoding="utf-8")


def write_tabular(name: str, rows: int, make_columns: Callable, work: str, seed: int) -> TabularData:
    """Generates `rows` rows and writes them as NUM_PARTS CSV files plus a spec."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    columns = make_columns(rows, np.random.default_rng(seed))
    table = pa.table({n: values for n, (_, values) in columns.items()})
    directory = os.path.join(work, name)
    os.makedirs(directory, exist_ok=True)
    bounds = np.linspace(0, rows, NUM_PARTS + 1).astype(int)
    files = []
    header = (",".join(table.column_names) + "\n").encode()
    options = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    for part in range(NUM_PARTS):
        path = os.path.join(directory, f"part-{part:05d}-of-{NUM_PARTS:05d}.csv")
        with open(path, "wb") as f:
            f.write(header)
            chunk = table.slice(bounds[part], bounds[part + 1] - bounds[part])
            pacsv.write_csv(chunk, f, options)
        files.append(path)
    kinds = tuple((n, t) for n, (t, _) in columns.items())
    spec_path = os.path.join(work, f"{name}.spec.yaml")
    _write_spec(spec_path, kinds)
    return TabularData(
        name=name, rows=rows, columns=kinds, directory=directory, files=tuple(files),
        spec_path=spec_path, input_bytes=sum(os.path.getsize(p) for p in files),
    )


def write_images(count: int, root: str, seed: int, distinct: int = DISTINCT_IMAGES) -> ImageData:
    """`count` 640x480 JPEGs (quality 90) of gradients and smooth noise, 2 label folders.

    Only `distinct` of them are generated (Pillow takes ~40 ms per image); the other files
    are byte copies of those, each in its original's label folder. Nothing in any path
    looks at content across files, so copies cost what distinct images would.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = IMAGE_SIZE
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    xs /= width
    ys /= height
    total = 0
    for label in IMAGE_LABELS:
        os.makedirs(os.path.join(root, label), exist_ok=True)
    distinct = max(2, min(count, distinct)) // 2 * 2  # even: a copy keeps its label
    for i in range(min(count, distinct)):
        angle = rng.uniform(0, 2 * np.pi)
        ramp = np.cos(angle) * xs + np.sin(angle) * ys
        ramp = (ramp - ramp.min()) / (np.ptp(ramp) or 1.0)
        colors = rng.uniform(0, 255, (2, 3)).astype(np.float32)
        pixels = colors[0] * (1 - ramp[..., None]) + colors[1] * ramp[..., None]
        blobs = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
        blobs = np.asarray(blobs.resize(IMAGE_SIZE, Image.BICUBIC), np.float32)
        pixels = 0.6 * pixels + 0.4 * blobs + rng.normal(0, 6, (height, width, 3))
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
        path = os.path.join(root, IMAGE_LABELS[i % len(IMAGE_LABELS)], f"image_{i:05d}.jpg")
        image.save(path, "JPEG", quality=IMAGE_QUALITY)
        total += os.path.getsize(path)
    for i in range(distinct, count):
        label = IMAGE_LABELS[i % len(IMAGE_LABELS)]
        source = os.path.join(root, label, f"image_{i % distinct:05d}.jpg")
        path = os.path.join(root, label, f"image_{i:05d}.jpg")
        shutil.copyfile(source, path)
        total += os.path.getsize(path)
    return ImageData(root=root, count=count, labels=IMAGE_LABELS, input_bytes=total,
                     distinct=min(count, distinct))
