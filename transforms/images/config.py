"""What an image conversion is told and what it promises: the converter's `ImageConfig` with
its pixel transforms `RenderOptions` (every option's choices and defaults, which the command
line uses too), the planner's `ImagePlan` (with the side files it commits) and the output
features `IMAGE_FEATURES` (reason codes: `transforms.records.IMAGE_REASONS`). Beam-free.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from transforms.format.manifest_format import FEATURE_SPEC_NAME
from transforms.images.paths import normalize_root
from transforms.ordered_pool import check_threads
from transforms.records import WorkUnit
from transforms.tabular.spec import FEATURE_SPEC_VERSION, ConversionSpec

__all__ = ["CONVERT_MODES", "DEFAULT_QUALITY", "ENCODINGS", "RESIZE_MODES", "RenderOptions", "ImageConfig",
           "DEFAULT_MAX_IMAGE_BYTES", "DEFAULT_MAX_PIXELS", "IMAGE_FEATURES", "VALIDATE_MODES", "ImagePlan",
           "SPLIT_DIRECTORIES", "planned_item"]

#: The choices of `ImageConfig.validate`, the default first.
VALIDATE_MODES = ("header", "full")
DEFAULT_MAX_IMAGE_BYTES = 64 * 1024 * 1024
#: Pillow's own default limit (MAX_IMAGE_PIXELS), so both guards agree out of the box.
DEFAULT_MAX_PIXELS = 89_478_485

#: Top-level folder names that make ROOT/<split>/<label>/<file> trees, and the split names a
#: manifest's split column may use when the spec declares none.
SPLIT_DIRECTORIES = ("train", "validation", "test")

#: The image features every record carries (the class features only with labels): the TF
#: object-detection / TFDS convention.
IMAGE_FEATURES = {
    "image/encoded": "string", "image/format": "string", "image/height": "int64", "image/width": "int64",
    "image/channels": "int64", "image/filename": "string", "image/key/sha256": "string",
    "image/class/label": "int64", "image/class/text": "string",
}


#: The choices of `RenderOptions.convert_mode`, `.resize_mode` and `.encode` (None: unchanged).
CONVERT_MODES = ("RGB", "L")
RESIZE_MODES = ("fit", "fill", "stretch")
ENCODINGS = ("jpeg", "png")
#: JPEG quality of re-encoded JPEGs unless `RenderOptions.quality` says otherwise.
DEFAULT_QUALITY = 90


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    """The pixel transforms asked for (all off by default); part of an `ImageConfig`. Raises
    ValueError for a value outside its choices or range.

    `resize_mode` says how `resize` keeps the aspect ratio: "fit" scales into the box and
    pads (black / transparent), "fill" scales to cover and centre-crops, "stretch" ignores
    it. All give exactly width x height.
    """

    apply_exif_orientation: bool = False  # only images whose orientation is not 1 change
    convert_mode: str | None = None
    resize: tuple[int, int] | None = None  # (width, height)
    resize_mode: str = "fit"
    max_side: int | None = None  # shrink (never enlarge) to this longer side; excludes `resize`
    encode: str | None = None  # None: keep the format (TF-undecodable formats become PNG)
    quality: int = DEFAULT_QUALITY  # of re-encoded JPEGs

    def __post_init__(self):
        if self.convert_mode is not None and self.convert_mode not in CONVERT_MODES:
            raise ValueError(f"convert_mode must be RGB, L or None, got {self.convert_mode!r}")
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(f"resize_mode must be one of {RESIZE_MODES}, got {self.resize_mode!r}")
        if self.encode is not None and self.encode not in ENCODINGS:
            raise ValueError(f"encode must be jpeg, png or None, got {self.encode!r}")
        if self.resize is not None:
            size = tuple(self.resize)
            if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
                raise ValueError(f"resize must be (width, height) of positive ints, got {self.resize!r}")
            object.__setattr__(self, "resize", size)
            if self.max_side is not None:
                raise ValueError("resize and max_side exclude each other")
        if self.max_side is not None and (not isinstance(self.max_side, int) or self.max_side < 1):
            raise ValueError(f"max_side must be a positive int, got {self.max_side!r}")
        if not isinstance(self.quality, int) or not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be within 1..100, got {self.quality!r}")

    @property
    def transforms_requested(self) -> bool:
        """True when some option asks for re-encoding (not just format conversion)."""
        return bool(self.apply_exif_orientation or self.convert_mode or self.resize
                    or self.max_side or self.encode)


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """How `ConvertImages` validates and transforms images (all transforms off by default).
    Raises ValueError for a value outside its choices or range.

    `validate`: "header" parses headers and checks the container structure without decoding
    pixels; "full" also decodes every frame with Pillow (and inflates a PNG's compressed
    stream as libpng reads it). `threads`: images of one work unit converted at once; 0 is
    one per CPU the worker may use (`transforms.ordered_pool.default_threads`). Default 1
    (Beam's thread): per-image work is mostly Python holding the GIL, and a second thread
    measured slower on 2 cores (5,200 JPEGs: 2.75 s vs 3.0 s); it pays off with resizing.
    """

    render: RenderOptions = RenderOptions()
    validate: str = VALIDATE_MODES[0]
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES  # larger files: image_too_large, never read whole
    max_pixels: int = DEFAULT_MAX_PIXELS  # more pixels, summed over frames: decompression_bomb
    allowed_roots: tuple[str, ...] | None = None  # URIs must also lie inside one (besides the planner's)
    threads: int = 1
    chunk_bytes: int = 64 * 1024 * 1024  # a work unit's records leave in several RecordBatches beyond

    def __post_init__(self):
        if not isinstance(self.render, RenderOptions):
            raise ValueError(f"render must be RenderOptions, got {type(self.render).__name__}")
        if self.validate not in VALIDATE_MODES:
            raise ValueError(f"validate must be one of {VALIDATE_MODES}, got {self.validate!r}")
        check_threads(self.threads)
        for name in ("max_image_bytes", "max_pixels", "chunk_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.allowed_roots is not None:
            roots = (self.allowed_roots,) if isinstance(self.allowed_roots, str) else self.allowed_roots
            object.__setattr__(self, "allowed_roots", tuple(normalize_root(r) for r in roots))


def planned_item(uri: str, split: str, *, filename: str, label: int | None = None,
                 text: str | None = None, size: int | None = None, row: int | None = None,
                 features: Mapping[str, tuple[str, list]] | None = None,
                 reject: tuple[str, str, str | None] | None = None, raw: str | None = None) -> dict:
    """One planned input, as the converter takes it: the image at `uri` for `split`, or,
    with `reject` = (reason, message, column), an entry already known to be a dead letter."""
    return {"uri": uri, "split": split, "filename": filename, "label": label, "text": text,
            "size": size, "row": row, "features": dict(features or {}), "reject": reject,
            "raw": raw}


@dataclasses.dataclass(frozen=True)
class ImagePlan:
    """The result of planning, for the launcher. `work_units` (for `beam.Create`) each hold
    their images in `extra["items"]` (planned on the launcher), or name a part of the input
    that `source` (its `items(unit)`; `ConvertImages` takes it) reads in the worker."""

    work_units: tuple[WorkUnit, ...]
    labels: tuple[str, ...]  # the label map; a label's index is its position
    splits: tuple[str, ...]  # split names the work units use, in a stable order
    allowed_roots: tuple[str, ...]  # the roots every image URI is confined to
    input_count: int  # planned inputs (images and dead-lettered entries)
    # The manifest's extra columns as {name: feature_spec entry}, and their spec (given or inferred).
    extra_features: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_spec: ConversionSpec | None = None
    source: Any = None  # None when every unit has items
    planning: str = ""  # how the input was planned, for the plan summary
    listing_digest: str = ""  # run fingerprint: SHA-256 of a tree's listing (paths, sizes,
    # mtimes); "" for a manifest

    @property
    def labels_txt(self) -> bytes:
        """DIR/labels.txt: one label per line, line number (from 0) = label index."""
        return "".join(f"{label}\n" for label in self.labels).encode("utf-8")

    def feature_spec(self) -> dict[str, Any]:
        """A `feature_spec.json` document for the records (see transforms.tabular.spec)."""
        features = {name: {"dtype": dtype, "kind": "fixed", "shape": [], "default": None}
                    for name, dtype in IMAGE_FEATURES.items()
                    if self.labels or not name.startswith("image/class/")}
        features.update(self.extra_features)
        return {"version": FEATURE_SPEC_VERSION, "features": features}

    def extra_files(self) -> dict[str, bytes]:
        """Files to commit beside the shards: labels.txt (when labelled), feature_spec.json."""
        files = {FEATURE_SPEC_NAME: (json.dumps(self.feature_spec(), indent=2, sort_keys=True)
                                       + "\n").encode()}
        if self.labels:
            files["labels.txt"] = self.labels_txt
        return files
