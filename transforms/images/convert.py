"""Images to tf.train.Example: class-folder trees and CSV/JSONL manifests.

Planning runs on the launcher and returns `WorkUnit`s of ~64 images each; `ConvertImages`
reads the files inside the DoFn through Beam's FileSystems (so gs:// works exactly like a
local path) and yields one `RecordBatch` per split and unit. Every planned file ends up
either as a record or as a dead letter with a stable reason code (`REASONS`), including
files the planner already knows are bad (hidden files, non-image extensions, unknown
labels, paths outside the allowed roots): those ride in the work units too, so the sink
counts them and input == written + dead-lettered holds.

Default mode keeps the original bytes and reads height/width/channels from the header
(`image_headers`), never decoding pixels. Formats TensorFlow cannot decode (TIFF, ...)
are converted losslessly to PNG; optional transforms (EXIF orientation, mode, resize,
re-encode) go through Pillow (`image_processing`).

Output features (the TF object-detection / TFDS convention):
  image/encoded, image/format, image/height, image/width, image/channels,
  image/filename, image/key/sha256, image/class/label, image/class/text,
  plus the manifest's extra columns as the conversion spec says.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from PIL import Image

from transforms.coders import RecordBatchCoder  # noqa: F401 - registers the coder
from transforms.format.example_codec import encode_varint
from transforms.format.tfrecord_format import FramedRecords, frame_parts
from transforms.images.headers import HeaderError, ImageInfo, parse_header, sniff_format
from transforms.images.paths import (
    default_allowed_roots,
    is_real_path_within_roots,
    is_remote,
    is_within_roots,
    normalize_root,
    normalize_uri,
    opened_real_path,
    resolve_reference,
    uri_dirname,
)
from transforms.images.processing import (
    ImageError,
    RenderOptions,
    decode_fully,
    exif_orientation,
    needs_render,
    render,
)
from transforms.ordered_pool import check_threads, default_threads, ordered_map
from transforms.records import DEFAULT_SPLIT, RecordBatch, WorkUnit, batch_key, dead_letter
from transforms.tabular.spec import ConversionSpec, CsvOptions
from transforms.tabular.values import ESCAPE_BASE, RowConverter, has_escapes, unescape
from transforms.worker import prepare_worker

__all__ = [
    "IMAGE_EXTENSIONS",
    "IMAGE_FEATURES",
    "REASONS",
    "SPLIT_DIRECTORIES",
    "ConvertImages",
    "ImageConfig",
    "ImagePlan",
    "default_allowed_roots",
    "plan_image_folder",
    "plan_image_manifest",
]

#: File extensions (lower case) taken as images in a class-folder tree.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")
#: Top-level folder names that make ROOT/<split>/<label>/<file> trees.
SPLIT_DIRECTORIES = ("train", "validation", "test")
DEFAULT_IMAGES_PER_UNIT = 64
# A work unit's records leave in several RecordBatches beyond this many bytes.
_MAX_CHUNK_BYTES = 64 * 1024 * 1024
_COUNTERS = "tfrecord_pipeline"

#: Dead-letter reason codes of the image converters (stable; documented in the README).
REASONS = {
    "empty_file": "the file has zero bytes",
    "truncated_image": "the image data ends early (no JPEG EOI, PNG IEND, short GIF/BMP/WebP)",
    "not_an_image": "the bytes are not an image (e.g. a text or HTML file named .jpg)",
    "unsupported_format": "an image format or variant that cannot be stored decodably",
    "corrupt_image": "the image structure is invalid or its data does not decode",
    "decompression_bomb": "more pixels (over all frames) than --max-pixels",
    "image_too_large": "the file is larger than --max-image-bytes (not read)",
    "unreadable_uri": "the path exists but cannot be read (permissions, I/O, bad URI)",
    "missing_file": "the path does not exist",
    "unknown_label": "the label (or label folder) is not in the given label list",
    "missing_label": "the manifest row has no label although --label-column is given",
    "outside_allowed_roots": "the path (after .. and symlinks) is outside --allowed-roots",
    "hidden_file": "a hidden file or a file inside a hidden folder of the image tree",
    "not_an_image_extension": "a file in the image tree without an image extension",
    "no_label": "a file directly in the image-folder root, not in a label folder",
    "missing_image_path": "the manifest row's image column is empty",
    "invalid_split": "the manifest row's split column is empty or not a valid split name",
    # Manifest rows that cannot be parsed (the tabular conversion's codes):
    "ragged_row": "a CSV/TSV manifest row with the wrong number of fields",
    "invalid_json": "a JSONL manifest line that is not a JSON object",
    "invalid_encoding": "a manifest row with bytes invalid in its encoding",
}

#: The image features every record carries (the class features only with labels).
IMAGE_FEATURES = {
    "image/encoded": "string",
    "image/format": "string",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/filename": "string",
    "image/key/sha256": "string",
    "image/class/label": "int64",
    "image/class/text": "string",
}

_VALIDATE = ("header", "full")
_MODES = (None, "RGB", "L")
_RESIZE_MODES = ("fit", "fill", "stretch")
_ENCODINGS = (None, "jpeg", "png")
_MANIFEST_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                     ".json": "jsonl"}


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """How `ConvertImages` validates and transforms images (all transforms off by default).

    Attributes:
      validate: "header" (default) parses headers and checks the container structure
        without decoding pixels; "full" also decodes every frame with Pillow.
      apply_exif_orientation: rotate/flip pixels as the EXIF orientation says (only
        images whose orientation is not 1 are re-encoded).
      convert_mode: None, "RGB" or "L".
      resize: (width, height) or None; `resize_mode` says how the aspect ratio is kept:
        "fit" scales into the box and pads (black / transparent), "fill" scales to cover
        and centre-crops, "stretch" ignores the aspect ratio. All give exactly w x h.
      max_side: shrink (never enlarge) so the longer side is at most this; excludes `resize`.
      encode: None (keep the format; TF-undecodable formats become PNG), "jpeg" or "png".
      quality: JPEG quality (1-100) of re-encoded JPEGs.
      max_image_bytes: larger files are dead letters (`image_too_large`), never read whole.
      max_pixels: images with more pixels, summed over frames, are `decompression_bomb`.
      allowed_roots: if given, URIs must also lie inside one of these roots (in addition
        to the roots the planner put in each work unit).
      threads: images of one work unit converted at once; 0 means one per CPU the worker
        may use (`transforms.ordered_pool.default_threads`). Default 1 (Beam's thread):
        per-image work is mostly Python holding the GIL, and a second thread measured
        slower on 2 cores (5,200 JPEGs: 2.75 s vs 3.0 s); it pays off with resizing.
    """

    validate: str = "header"
    apply_exif_orientation: bool = False
    convert_mode: str | None = None
    resize: tuple[int, int] | None = None
    resize_mode: str = "fit"
    max_side: int | None = None
    encode: str | None = None
    quality: int = 90
    max_image_bytes: int = 64 * 1024 * 1024
    max_pixels: int = 89_478_485
    allowed_roots: tuple[str, ...] | None = None
    threads: int = 1

    def __post_init__(self):
        if self.validate not in _VALIDATE:
            raise ValueError(f"validate must be one of {_VALIDATE}, got {self.validate!r}")
        if self.convert_mode not in _MODES:
            raise ValueError(f"convert_mode must be RGB, L or None, got {self.convert_mode!r}")
        if self.resize_mode not in _RESIZE_MODES:
            raise ValueError(f"resize_mode must be one of {_RESIZE_MODES}, got {self.resize_mode!r}")
        if self.encode not in _ENCODINGS:
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
        check_threads(self.threads)
        for name in ("max_image_bytes", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.allowed_roots is not None:
            roots = (self.allowed_roots,) if isinstance(self.allowed_roots, str) else self.allowed_roots
            object.__setattr__(self, "allowed_roots", tuple(normalize_root(r) for r in roots))

    @property
    def render_options(self) -> RenderOptions:
        return RenderOptions(
            apply_exif_orientation=self.apply_exif_orientation,
            convert_mode=self.convert_mode,
            resize=self.resize,
            resize_mode=self.resize_mode,
            max_side=self.max_side,
            encode=self.encode,
            quality=self.quality,
            max_pixels=self.max_pixels,
        )

    @property
    def transforms_requested(self) -> bool:
        """True when some option asks for re-encoding (not just format conversion)."""
        return bool(self.apply_exif_orientation or self.convert_mode or self.resize
                    or self.max_side or self.encode)


@dataclasses.dataclass(frozen=True)
class ImagePlan:
    """The result of planning, for the launcher.

    Attributes:
      work_units: feed to `beam.Create`; each holds its images in `extra["items"]`.
      labels: the label map; a label's index is its position.
      splits: split names the work units use, in a stable order.
      allowed_roots: the roots every image URI is confined to.
      input_count: number of planned inputs (images and dead-lettered entries).
      extra_features: {name: feature_spec entry} of the manifest's extra columns.
      extra_spec: the conversion spec of those columns (given or inferred), or None.
    """

    work_units: tuple[WorkUnit, ...]
    labels: tuple[str, ...]
    splits: tuple[str, ...]
    allowed_roots: tuple[str, ...]
    input_count: int
    extra_features: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_spec: ConversionSpec | None = None

    @property
    def labels_txt(self) -> bytes:
        """DIR/labels.txt: one label per line, line number (from 0) = label index."""
        return "".join(f"{label}\n" for label in self.labels).encode("utf-8")

    def feature_spec(self) -> dict[str, Any]:
        """A `feature_spec.json` document for the records (see transforms.tabular.spec)."""
        features: dict[str, Any] = {}
        for name, dtype in IMAGE_FEATURES.items():
            if name.startswith("image/class/") and not self.labels:
                continue
            features[name] = {"dtype": dtype, "kind": "fixed", "shape": [], "default": None}
        features.update(self.extra_features)
        return {"version": 1, "features": features}

    def extra_files(self) -> dict[str, bytes]:
        """Files to commit beside the shards: labels.txt (when labelled), feature_spec.json."""
        files = {"feature_spec.json": (json.dumps(self.feature_spec(), indent=2, sort_keys=True)
                                       + "\n").encode()}
        if self.labels:
            files["labels.txt"] = self.labels_txt
        return files


# --------------------------------------------------------------------------- planning


def _item(uri: str, split: str, *, filename: str, label: int | None = None,
          text: str | None = None, size: int | None = None, row: int | None = None,
          features: Mapping[str, tuple[str, list]] | None = None,
          reject: tuple[str, str, str | None] | None = None, raw: str | None = None) -> dict:
    """One planned input; `reject` = (reason, message, column) for known-bad entries."""
    return {"uri": uri, "split": split, "filename": filename, "label": label, "text": text,
            "size": size, "row": row, "features": dict(features or {}), "reject": reject,
            "raw": raw}


def _units(source: str, items: Sequence[dict], roots: tuple[str, ...],
           images_per_unit: int) -> tuple[WorkUnit, ...]:
    if images_per_unit < 1:
        raise ValueError(f"images_per_unit must be positive, got {images_per_unit}")
    units = []
    for index, start in enumerate(range(0, len(items), images_per_unit)):
        chunk = items[start:start + images_per_unit]
        units.append(WorkUnit(
            path=source, index=index, paths=tuple(item["uri"] for item in chunk),
            extra={"items": list(chunk), "allowed_roots": list(roots)},
        ))
    return tuple(units)


def _split_order(names: Iterable[str]) -> tuple[str, ...]:
    names = set(names)
    known = [s for s in SPLIT_DIRECTORIES if s in names]
    return tuple(known + sorted(names - set(known)))


def plan_image_folder(
    root: str,
    *,
    images_per_unit: int = DEFAULT_IMAGES_PER_UNIT,
    allowed_roots: Sequence[str] | None = None,
    labels: Sequence[str] | str | None = None,
) -> ImagePlan:
    """Plans ROOT/<label>/**/<file>, or ROOT/<split>/<label>/**/<file> when a top-level
    folder is named train, validation or test.

    Labels are the sorted names of the label folders holding at least one image; a
    label's index is its position. `labels` (a list, or the path of a labels.txt) fixes
    the map instead, so indices stay the same when a class has no images in a run; images
    in a folder it does not list are dead letters (`unknown_label`). Hidden files, files
    without an image extension and files directly in ROOT (or a split folder) are planned
    as dead letters. Symlinks leading outside `allowed_roots` (default: ROOT) are refused
    when read.

    Raises:
      FileNotFoundError: ROOT holds no file.
      ValueError: ROOT mixes split folders with other folders.
    """
    root_uri = normalize_uri(root).rstrip("/\\") if "://" not in root else root.rstrip("/")
    roots = tuple(normalize_root(r) for r in (allowed_roots or (root_uri,)))
    separator = "/" if "://" in root_uri else os.sep
    prefix = root_uri + separator
    files = sorted(_list_files(root_uri, prefix))
    if not files:
        raise FileNotFoundError(f"no files under {root}")
    relative = [(path, size, path[len(prefix):].split(separator)) for path, size in files]
    top = {parts[0] for _, _, parts in relative if len(parts) > 1 and not parts[0].startswith(".")}
    split_mode = bool(top & set(SPLIT_DIRECTORIES))
    if split_mode and top - set(SPLIT_DIRECTORIES):
        raise ValueError(
            f"{root} mixes split folders ({', '.join(sorted(top & set(SPLIT_DIRECTORIES)))}) with "
            f"other folders ({', '.join(sorted(top - set(SPLIT_DIRECTORIES)))}) at its top level"
        )
    given = _read_labels(labels) if labels is not None else None
    entries = []
    for path, size, parts in relative:
        split = DEFAULT_SPLIT
        rest = parts
        if split_mode and len(parts) > 1 and parts[0] in SPLIT_DIRECTORIES:
            split, rest = parts[0], parts[1:]
        label = rest[0] if len(rest) > 1 else None
        if any(part.startswith(".") for part in parts):
            reject = ("hidden_file", "hidden file or folder", None)
        elif label is None:
            reject = ("no_label", "file is not inside a label folder", None)
        elif os.path.splitext(parts[-1])[1].lower() not in IMAGE_EXTENSIONS:
            reject = ("not_an_image_extension",
                      f"extension {os.path.splitext(parts[-1])[1] or '(none)'!r} is not one of "
                      f"{', '.join(IMAGE_EXTENSIONS)}", None)
        elif given is not None and label not in given:
            reject = ("unknown_label", f"label folder {label!r} is not in the label list", None)
        else:
            reject = None
        entries.append((path, size, split, label, "/".join(parts), reject))
    labels = given if given is not None else tuple(
        sorted({label for *_, label, _, reject in entries if reject is None}))
    index = {label: i for i, label in enumerate(labels)}
    items = [
        _item(path, split, filename=filename, label=index.get(label), text=label, size=size,
              reject=reject)
        for path, size, split, label, filename, reject in entries
    ]
    return ImagePlan(
        work_units=_units(root_uri, items, roots, images_per_unit),
        labels=labels,
        splits=_split_order(item["split"] for item in items),
        allowed_roots=roots,
        input_count=len(items),
    )


def _list_files(root_uri: str, prefix: str) -> list[tuple[str, int | None]]:
    """(path, size or None) of every file under a root.

    Remote roots are listed by Beam's FileSystems. Local roots are walked here with the
    same rules as Beam's local listing (symlinked folders are not followed) except that
    dangling symlinks are kept (size None, reported as `missing_file` when read) instead
    of silently dropped.
    """
    if "://" in root_uri:
        matched = FileSystems.match([prefix + "**"])[0].metadata_list
        return [(m.path, m.size_in_bytes) for m in matched if not m.path.endswith("/")]
    if not os.path.isdir(root_uri):
        raise FileNotFoundError(f"{root_uri} is not a folder")
    found = []
    for folder, _, names in os.walk(root_uri):
        for name in names:
            path = os.path.join(folder, name)
            try:
                found.append((path, os.path.getsize(path)))
            except OSError:
                found.append((path, None))
    return found


def _read_labels(labels: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(labels, str):
        with FileSystems.open(labels) as handle:
            text = handle.read().decode("utf-8")
        labels = [line.strip() for line in text.splitlines()]
        labels = [line for line in labels if line]
    labels = tuple(str(label) for label in labels)
    if not labels:
        raise ValueError("the label list is empty")
    if len(set(labels)) != len(labels):
        raise ValueError("the label list has duplicates")
    return labels


def _sorted_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Sorted label names; when every label is an integer, in numeric order."""
    labels = set(labels)
    if labels and all(re.fullmatch(r"-?\d+", label) for label in labels):
        return tuple(sorted(labels, key=int))
    return tuple(sorted(labels))


def _manifest_format(path: str) -> str:
    name = path.lower()
    for suffix in (".gz", ".bz2", ".zst", ".deflate"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    fmt = _MANIFEST_FORMATS.get(os.path.splitext(name)[1])
    if fmt is None:
        raise ValueError(f"{path}: a manifest must be .csv, .tsv or .jsonl (optionally .gz)")
    return fmt


# Invalid bytes in a CSV manifest's encoding become the tabular code's escape characters,
# so the row they are in is dead-lettered (invalid_encoding) instead of failing the plan.
_SURROGATE_ESCAPES = {0xDC80 + b: chr(ESCAPE_BASE + 0x80 + b) for b in range(128)}


def _manifest_rows(path: str, fmt: str, spec) -> Iterator[tuple[int, Any, Any, tuple | None]]:
    """(row number, row dict or None, raw record, (reason, message) or None) per data row.

    CSV/TSV cells follow the tabular rules: text, None for an empty unquoted cell, "" for
    a quoted empty one; ragged rows, invalid JSON lines and bytes invalid in the
    encoding become failures with the tabular reason codes.
    """
    with FileSystems.open(path) as handle:  # AUTO: .gz manifests are decompressed
        data = handle.read()
    if fmt == "jsonl":
        number = 0
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            number += 1
            try:
                text = line.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                yield number, None, line.strip(), ("invalid_encoding", f"line is not UTF-8: {error}")
                continue
            try:
                row = json.loads(text)
            except ValueError as error:
                yield number, None, text, ("invalid_json", f"invalid JSON: {error}")
                continue
            if not isinstance(row, dict):
                yield number, None, text, ("invalid_json", f"a JSON {type(row).__name__}, not an object")
                continue
            yield number, row, text, None
        return
    options = spec.csv if spec is not None else CsvOptions()
    delimiter = options.delimiter_for(fmt)
    text = data.decode(options.encoding, errors="surrogateescape").translate(_SURROGATE_ESCAPES)
    if options.header:
        header = next(csv.reader(io.StringIO(text), delimiter=delimiter,
                                 quotechar=options.quotechar or '"'), None)
        if header is None:
            return
        names = list(options.column_names or header)
    else:
        names = list(options.column_names)
    ragged: dict[int, str] = {}

    def on_invalid_row(row) -> str:
        ragged[row.number - (1 if options.header else 0)] = row.text
        return "skip"

    table = pacsv.read_csv(
        io.BytesIO(text.encode("utf-8")),
        read_options=pacsv.ReadOptions(use_threads=False,
                                       column_names=None if options.header else names),
        parse_options=pacsv.ParseOptions(
            delimiter=delimiter, quote_char=options.quotechar or False, double_quote=True,
            newlines_in_values=True, ignore_empty_lines=True, invalid_row_handler=on_invalid_row),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in (header if options.header else names)},
            strings_can_be_null=True, null_values=[""], quoted_strings_can_be_null=False),
    )
    if len(names) != table.num_columns:
        raise ValueError(f"{path}: csv.column_names names {len(names)} columns, the file has "
                         f"{table.num_columns}")
    columns = [column.to_pylist() for column in table.columns]
    good = iter(range(table.num_rows))
    for number in range(1, table.num_rows + len(ragged) + 1):
        if number in ragged:
            raw = unescape(ragged[number], options.encoding)
            yield number, None, raw, ("ragged_row", f"expected {len(names)} fields")
            continue
        i = next(good)
        cells = [column[i] for column in columns]
        raw_text = delimiter.join("" if cell is None else cell for cell in cells)
        if has_escapes(raw_text):
            yield number, None, unescape(raw_text, options.encoding), (
                "invalid_encoding", f"the row has bytes that are not valid {options.encoding}")
            continue
        yield number, dict(zip(names, cells, strict=True)), raw_text, None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip()
    return text or None


def plan_image_manifest(
    manifest_path: str,
    image_column: str,
    label_column: str | None = None,
    split_column: str | None = None,
    spec: ConversionSpec | None = None,
    allowed_roots: Sequence[str] | None = None,
    *,
    labels: Sequence[str] | str | None = None,
    images_per_unit: int = DEFAULT_IMAGES_PER_UNIT,
) -> ImagePlan:
    """Plans a CSV/TSV/JSONL manifest with one image per row.

    Args:
      manifest_path: the manifest on any Beam filesystem (.gz is read transparently).
      image_column: column holding a local path, a path relative to the manifest's
        folder, or a URI (gs://...).
      label_column: optional column holding the label text.
      split_column: optional column naming each row's split; without it, the spec's
        `splits` (hashing the spec's `split_key` columns, else the image URI) or one
        split "data".
      spec: a `pipeline.spec.ConversionSpec` for the other columns, converted exactly as
        in the tabular conversion (its `csv:` options also parse the manifest). Without
        a spec every other column becomes a feature of an inferred type (int64, else
        float, else string); `ImagePlan.extra_spec` is the spec that was used.
      allowed_roots: image URIs must lie inside one of these; default: the manifest's
        folder tree and, for a gs:// manifest, its bucket (see `default_allowed_roots`).
      labels: the label map (a list, or the path of a labels.txt); default: the sorted
        distinct labels of the manifest (numeric order when all are integers). Labels not
        in a given map are dead letters (`unknown_label`).
      images_per_unit: images per work unit.

    Raises:
      ValueError: unknown manifest type, a named column the manifest lacks, spec
        features named like the image features.
    """
    fmt = _manifest_format(manifest_path)
    base_dir = uri_dirname(manifest_path)
    roots = tuple(normalize_root(r) for r in (allowed_roots or default_allowed_roots(manifest_path)))
    rows = list(_manifest_rows(manifest_path, fmt, spec))
    reserved = {c for c in (image_column, label_column, split_column) if c is not None}
    seen_columns: dict[str, None] = {}
    for _, row, _, _ in rows:
        if row is not None:
            seen_columns.update(dict.fromkeys(row))
    missing = [c for c in (image_column, label_column, split_column)
               if c is not None and c not in seen_columns]
    if rows and missing and any(row is not None for _, row, _, _ in rows):
        raise ValueError(f"{manifest_path}: no column {missing[0]!r}; columns: {list(seen_columns)}")
    extra_spec = _extra_spec(spec, manifest_path, fmt, reserved)
    converter = RowConverter(extra_spec, fmt) if extra_spec is not None else None
    assigner = None
    if split_column is None and spec is not None and spec.splits:
        from transforms.splits import SplitAssigner

        assigner = SplitAssigner(dict(spec.splits))
    if labels is not None:
        label_map = _read_labels(labels)
    elif label_column is not None:
        label_map = _sorted_labels(
            t for _, row, _, _ in rows if row is not None and (t := _text(row.get(label_column)))
        )
    else:
        label_map = ()
    context = _ManifestContext(
        manifest_path=manifest_path, base_dir=base_dir, roots=roots, image_column=image_column,
        label_column=label_column, split_column=split_column,
        index={label: i for i, label in enumerate(label_map)}, converter=converter,
        assigner=assigner, split_key=spec.split_key if spec is not None else (),
    )
    items = [_manifest_item(context, *row) for row in rows]
    declared = spec.split_names if assigner is not None else ()
    return ImagePlan(
        work_units=_units(manifest_path, items, roots, images_per_unit),
        labels=label_map,
        splits=_split_order([*declared, *(item["split"] for item in items)]),
        allowed_roots=roots,
        input_count=len(items),
        extra_features=(extra_spec.to_feature_spec()["features"] if extra_spec is not None else {}),
        extra_spec=extra_spec,
    )


@dataclasses.dataclass(frozen=True)
class _ManifestContext:
    manifest_path: str
    base_dir: str
    roots: tuple[str, ...]
    image_column: str
    label_column: str | None
    split_column: str | None
    index: Mapping[str, int]
    converter: Any
    assigner: Any
    split_key: tuple[str, ...]


def _extra_spec(spec: ConversionSpec | None, manifest_path: str, fmt: str,
                reserved: set[str]) -> ConversionSpec | None:
    """The spec of the manifest's extra features, resolved exactly as the tabular
    conversion resolves one (inference from a sample when `spec` is None or has
    `include_unlisted`); inferred features reading the image, label or split column are
    dropped. None when no extra feature remains."""
    from transforms.tabular.infer import resolve_spec
    from transforms.tabular.read import plan_tabular

    resolved = resolve_spec(plan_tabular(manifest_path, fmt), fmt, spec)
    listed = set(spec.features) if spec is not None else set()
    features = tuple(f for f in resolved.features
                     if f in listed or (f.source_column not in reserved and f.name not in reserved))
    clashing = [f.name for f in features if f.name in IMAGE_FEATURES]
    if clashing:
        raise ValueError(f"manifest features {clashing} clash with the image features; "
                         f"rename them in the spec")
    if not features:
        return None
    return ConversionSpec(features=features, csv=resolved.csv,
                          max_bytes_length=resolved.max_bytes_length)


def _manifest_item(context: _ManifestContext, number: int, row, raw, failure) -> dict:
    def rejected(reason, message, column=None, split=DEFAULT_SPLIT, uri=context.manifest_path,
                 filename=None, text=None):
        return _item(uri, split, filename=filename or "", row=number, raw=raw, text=text,
                     reject=(reason, message, column))

    if row is None:
        return rejected(*failure)
    split = DEFAULT_SPLIT
    if context.split_column is not None:
        split = _text(row.get(context.split_column)) or ""
        if not split or "/" in split or split.startswith(".") or split == "dead_letter":
            return rejected("invalid_split", f"invalid split name {split!r}", context.split_column)
    value = _text(row.get(context.image_column))
    if value is None:
        return rejected("missing_image_path", "the image column is empty", context.image_column,
                        split)
    try:
        uri = resolve_reference(value, context.base_dir)
    except ValueError as error:
        return rejected("unreadable_uri", str(error), context.image_column, split, filename=value)
    label_column = context.label_column
    text = _text(row.get(label_column)) if label_column is not None else None
    if context.assigner is not None:
        key = ("\x1f".join(str(row.get(c)) for c in context.split_key) if context.split_key
               else uri)
        split = context.assigner.assign(key.encode("utf-8"))
    common = {"split": split, "uri": uri, "filename": value, "text": text}
    if not is_within_roots(uri, context.roots, resolve_symlinks=False):
        return rejected("outside_allowed_roots",
                        f"{uri} is outside the allowed roots {list(context.roots)}",
                        context.image_column, **common)
    label = None
    if label_column is not None:
        if text is None:
            return rejected("missing_label", "the label column is empty", label_column, **common)
        if text not in context.index:
            return rejected("unknown_label", f"label {text!r} is not in the label list",
                            label_column, **common)
        label = context.index[text]
    features = {}
    if context.converter is not None:
        try:
            features = context.converter.convert(row)
        except ValueError as error:  # tabular RowError(reason, column, message)
            return rejected(getattr(error, "reason", "invalid_value"),
                            getattr(error, "message", str(error)),
                            getattr(error, "column", None), **common)
    return _item(uri, split, filename=value, label=label, text=text, row=number,
                 features=features, raw=raw)


# --------------------------------------------------------------------------- conversion


class _Chunk:
    """Records, dead letters and input counts of one chunk of a work unit, per split."""

    def __init__(self):
        self.order: list[str] = []
        self.records = collections.defaultdict(list)
        self.dead = collections.defaultdict(list)
        self.counts = collections.Counter()
        self.size = 0

    def count(self, split: str) -> None:
        if split not in self.counts:
            self.order.append(split)
        self.counts[split] += 1

    def add_record(self, split: str, framed: bytes) -> None:
        self.records[split].append(framed)
        self.size += len(framed)

    def add_dead_letter(self, split: str, document: bytes) -> None:
        self.dead[split].append(document)
        self.size += len(document)

    def batches(self, unit_index: int, chunk_index: int) -> Iterator[RecordBatch]:
        for split in self.order:
            framed = self.records[split]
            sizes = np.fromiter(map(len, framed), dtype=np.int64, count=len(framed))
            yield RecordBatch(
                key=batch_key(unit_index, chunk_index), split=split,
                records=FramedRecords(b"".join(framed), np.cumsum(sizes)),
                dead_letters=self.dead[split], input_count=self.counts[split],
            )


class _Converted(NamedTuple):
    framed: bytes  # the Example, framed as a TFRecord
    reencoded: bool  # the image was rendered again (resized, converted, ...)


class _Reject(Exception):
    def __init__(self, reason: str, message: str, column: str | None = None):
        super().__init__(message)
        self.reason, self.message, self.column = reason, message, column


@beam.typehints.with_output_types(RecordBatch)  # encoded by RecordBatchCoder
class ConvertImages(beam.DoFn):
    """Reads and converts the images of a `WorkUnit`; yields one RecordBatch per split.

    Records are serialized tf.train.Examples (see the module docstring for features);
    every image that cannot be stored becomes one dead letter with its reason code.
    """

    def __init__(self, config: ImageConfig | None = None):
        super().__init__()
        self._config = config or ImageConfig()

    def __getstate__(self):
        # Runtime caches (filesystem clients, counters) are rebuilt on the worker.
        return {"_config": self._config}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def setup(self):
        prepare_worker()
        # Our own pixel check runs first with config.max_pixels; lift Pillow's global
        # guard to at least that so it does not refuse images the user allowed.
        if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < self._config.max_pixels:
            Image.MAX_IMAGE_PIXELS = self._config.max_pixels
        self._written = Metrics.counter(_COUNTERS, "images_written")
        self._converted = Metrics.counter(_COUNTERS, "images_reencoded")
        self._dead = Metrics.counter(_COUNTERS, "images_dead_lettered")
        self._reasons = {}

    def _count_reason(self, reason: str) -> None:
        counter = self._reasons.get(reason)
        if counter is None:
            counter = self._reasons[reason] = Metrics.counter(_COUNTERS, f"image_dead_letter_{reason}")
        counter.inc()

    def process(self, unit: WorkUnit) -> Iterator[RecordBatch]:
        if not hasattr(self, "_written"):
            self.setup()
        extra = unit.extra or {}
        roots = tuple(extra.get("allowed_roots") or ())
        items = extra.get("items", ())
        chunk = _Chunk()
        chunk_index = 0
        # Images are read, checked and framed on `threads` threads (file reads, hashing,
        # CRCs and Pillow release the GIL); results arrive in item order.
        outcomes = ordered_map(functools.partial(self._outcome, roots=roots), items,
                               self._config.threads or default_threads())
        for item, outcome in zip(items, outcomes, strict=True):
            split = item["split"]
            chunk.count(split)
            if isinstance(outcome, _Converted):
                chunk.add_record(split, outcome.framed)
                self._written.inc()
                if outcome.reencoded:
                    self._converted.inc()
            else:
                reject = outcome
                self._dead.inc()
                self._count_reason(reject.reason)
                chunk.add_dead_letter(split, dead_letter(
                    source=item["uri"], reason=reject.reason, message=reject.message,
                    split=split, row=item.get("row"), column=reject.column, raw=item.get("raw"),
                    filename=item.get("filename"), label=item.get("text"),
                ))
            # Memory stays bounded even for a unit of very large images: its records
            # leave in several chunks once they hold more than _MAX_CHUNK_BYTES.
            if chunk.size >= _MAX_CHUNK_BYTES:
                yield from chunk.batches(unit.index, chunk_index)
                chunk, chunk_index = _Chunk(), chunk_index + 1
        yield from chunk.batches(unit.index, chunk_index)

    def _outcome(self, item: Mapping[str, Any], roots: tuple[str, ...]) -> _Converted | _Reject:
        """The framed record of one image, or why it was refused (runs on a pool thread:
        Beam metrics are counted by the caller)."""
        try:
            return self._convert(item, roots)
        except _Reject as reject:
            return reject

    def _convert(self, item: Mapping[str, Any], roots: tuple[str, ...]) -> _Converted:
        if item.get("reject"):
            raise _Reject(*item["reject"])
        uri = item["uri"]
        data = self._read(uri, item.get("size"), roots)
        stored, info, reencoded = self._store(data)
        features = {
            "image/encoded": ("bytes", [stored]),
            "image/format": ("bytes", [info.format]),
            "image/height": ("int64", [info.height]),
            "image/width": ("int64", [info.width]),
            "image/channels": ("int64", [info.channels]),
            "image/filename": ("bytes", [item.get("filename") or os.path.basename(uri)]),
            "image/key/sha256": ("bytes", [hashlib.sha256(stored).hexdigest()]),
        }
        if item.get("label") is not None:
            features["image/class/label"] = ("int64", [item["label"]])
            features["image/class/text"] = ("bytes", [item["text"]])
        features.update(item.get("features") or {})
        return _Converted(frame_parts(_record_parts(features)), reencoded)

    def _read(self, uri: str, size: int | None, roots: tuple[str, ...]) -> bytes:
        config = self._config
        checks = [allowed for allowed in (roots, config.allowed_roots) if allowed]
        for allowed in checks:  # lexical check first: nothing outside is even stat'ed
            if not is_within_roots(uri, allowed, resolve_symlinks=False):
                raise _Reject("outside_allowed_roots", f"{uri} is outside the allowed roots {list(allowed)}")
        if size is None:
            filesystem = self._filesystem(uri)
            try:
                size = filesystem.metadata(uri).size_in_bytes
            except Exception as error:  # noqa: BLE001 - BeamIOError, NotFound, ...
                if not _exists(filesystem, uri):
                    raise _Reject("missing_file", f"{uri} does not exist") from None
                raise _Reject("unreadable_uri", f"cannot stat {uri}: {error}") from None
        # Sizes are checked before opening: an empty "file" may be a FIFO or a device.
        if size == 0:
            raise _Reject("empty_file", "the file is empty")
        if size > config.max_image_bytes:
            raise _Reject("image_too_large",
                          f"{size} bytes exceeds --max-image-bytes {config.max_image_bytes}")
        try:
            filesystem = self._filesystem(uri)
            with filesystem.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                if not is_remote(uri):  # symlinks: check the file that was actually opened
                    real = opened_real_path(handle, uri)
                    for allowed in checks:
                        if not is_real_path_within_roots(real, allowed):
                            raise _Reject("outside_allowed_roots",
                                          f"{uri} resolves to {real}, outside the allowed roots "
                                          f"{list(allowed)}")
                data = _read_bounded(handle, size, config.max_image_bytes)
        except _Reject:
            raise
        except FileNotFoundError:
            raise _Reject("missing_file", f"{uri} does not exist") from None
        except Exception as error:  # noqa: BLE001 - permissions, I/O, directories, ...
            if not _exists(self._filesystem(uri), uri):
                raise _Reject("missing_file", f"{uri} does not exist") from None
            raise _Reject("unreadable_uri", f"cannot read {uri}: {type(error).__name__}: {error}") from None
        if len(data) > config.max_image_bytes:  # the file grew after it was listed
            raise _Reject("image_too_large", f"more than --max-image-bytes {config.max_image_bytes}")
        if not data:
            raise _Reject("empty_file", "the file is empty")
        return data

    def _filesystem(self, uri: str):
        """The Beam filesystem of `uri`, cached per scheme (Beam's lookup is slow)."""
        scheme = uri.split("://", 1)[0] if "://" in uri else ""
        cache = self.__dict__.setdefault("_filesystems", {})
        if scheme not in cache:
            try:
                cache[scheme] = FileSystems.get_filesystem(uri)
            except Exception as error:  # noqa: BLE001 - unknown scheme
                raise _Reject("unreadable_uri", f"no filesystem for {uri}: {error}") from None
        return cache[scheme]

    def _store(self, data: bytes) -> tuple[bytes, ImageInfo, bool]:
        """(bytes to store, what TF decodes them to, re-encoded?), or raises _Reject."""
        config = self._config
        try:
            info = parse_header(data)
        except HeaderError as error:
            if error.reason != "unsupported_format" or sniff_format(data) is None:
                raise _Reject(error.reason, error.message) from None
            info = None  # an image format TF cannot decode: Pillow converts it
        if info is not None and info.pixels > config.max_pixels:
            raise _Reject("decompression_bomb",
                          f"{info.width}x{info.height}x{info.frames} frames = {info.pixels} pixels "
                          f"exceeds --max-pixels {config.max_pixels}")
        try:
            if config.validate == "full":
                decode_fully(data, config.max_pixels)
            orientation = exif_orientation(data) if config.apply_exif_orientation else 1
            options = config.render_options
            if not needs_render(info, options, orientation):
                return data, info, False
            if info is not None and not info.tf_native and info.frames > 1 \
                    and not config.transforms_requested:
                raise _Reject("unsupported_format",
                              f"{info.note}: TensorFlow cannot decode it and converting would drop "
                              f"frames; pass --encode png to keep the first frame")
            if info is None and not config.transforms_requested and _frame_count(data) > 1:
                raise _Reject("unsupported_format",
                              f"multi-frame {sniff_format(data)}: converting would drop frames; "
                              f"pass --encode png to keep the first frame")
            rendered = render(data, options, info.format if info is not None else sniff_format(data))
        except ImageError as error:
            raise _Reject(error.reason, error.message) from None
        return rendered.data, rendered.info, True


_FEATURE_KEYS: dict[str, bytes] = {}  # encoded map-entry keys of the feature names seen


def _feature_key(name: str) -> bytes:
    key = _FEATURE_KEYS.get(name)
    if key is None:
        raw = name.encode("utf-8")
        key = b"\x0a" + encode_varint(len(raw)) + raw
        if len(_FEATURE_KEYS) < 4096:
            _FEATURE_KEYS[name] = key
    return key


def _list_parts(kind: str, values: Sequence[Any]) -> tuple[bytes, list, int]:
    """(Feature oneof tag + list length, list body parts, list body length) of one feature."""
    if kind == "bytes":
        parts, size = [], 0
        for value in values:
            if isinstance(value, str):
                value = value.encode("utf-8")
            head = b"\x0a" + encode_varint(len(value))
            parts += (head, value)
            size += len(head) + len(value)
        return b"\x0a" + encode_varint(size), parts, size
    if kind == "int64":
        tag = b"\x1a"
        packed = b"".join(encode_varint(int(v) & 0xFFFFFFFFFFFFFFFF) for v in values)
    elif kind == "float":
        tag = b"\x12"
        packed = np.asarray(values, dtype="<f4").tobytes()
    else:
        raise ValueError(f"unknown feature kind {kind!r}")
    body = b"\x0a" + encode_varint(len(packed)) + packed if len(values) else b""
    return tag + encode_varint(len(body)), [body], len(body)


_SMALL_ENTRIES: dict[tuple, bytes] = {}  # map entries of small values seen (labels, sizes, ...)
_SMALL_ENTRIES_MAX = 4096
_SMALL_VALUE_BYTES = 16  # longer strings (file names, hashes) rarely repeat


def _small_entry(name: str, kind: str, values: Sequence[Any]) -> bytes | None:
    """The whole encoded map entry of a feature with few short values, cached: most image
    features (format, size, channels, label) repeat from record to record."""
    # Not floats: 0.0 == -0.0 as a key, but their encodings differ.
    if kind == "float" or len(values) > 4 or any(
            isinstance(v, (bytes, str)) and len(v) > _SMALL_VALUE_BYTES for v in values):
        return None
    try:
        cache_key = (name, kind, tuple(values))
        entry = _SMALL_ENTRIES.get(cache_key)
    except TypeError:  # unhashable values: encoded without the cache
        return None
    if entry is None:
        entry = b"".join(_entry_parts(name, kind, values)[0])
        if len(_SMALL_ENTRIES) >= _SMALL_ENTRIES_MAX:
            _SMALL_ENTRIES.clear()
        _SMALL_ENTRIES[cache_key] = entry
    return entry


def _entry_parts(name: str, kind: str, values: Sequence[Any]) -> tuple[list, int]:
    """The parts of one feature's map entry (values not copied) and their total length."""
    key = _feature_key(name)
    if kind == "bytes" and len(values) == 1:  # the common case, written directly
        value = values[0]
        if isinstance(value, str):
            value = value.encode("utf-8")
        size = len(value)
        inner = encode_varint(size)
        list_size = 1 + len(inner) + size
        list_head = encode_varint(list_size)
        feature_size = 1 + len(list_head) + list_size
        value_head = encode_varint(feature_size)
        entry_size = len(key) + 1 + len(value_head) + feature_size
        entry_head = encode_varint(entry_size)
        parts = [b"\x0a", entry_head, key, b"\x12", value_head, b"\x0a", list_head, b"\x0a", inner,
                 value]
        return parts, 1 + len(entry_head) + entry_size
    try:
        list_head, list_parts, list_size = _list_parts(kind, values)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"feature {name!r} ({kind}): {error}") from None
    feature_size = len(list_head) + list_size
    value_head = b"\x12" + encode_varint(feature_size)
    entry_size = len(key) + len(value_head) + feature_size
    entry_head = b"\x0a" + encode_varint(entry_size)
    return [entry_head, key, value_head, list_head, *list_parts], len(entry_head) + entry_size


def _record_parts(features: Mapping[str, tuple[str, Sequence[Any]]]) -> list:
    """The serialized Example as a list of parts (see `_encode_record`)."""
    parts: list = []
    total = 0
    for name in sorted(features):
        kind, values = features[name]
        entry = _small_entry(name, kind, values)
        if entry is not None:
            parts.append(entry)
            total += len(entry)
            continue
        entry_parts, size = _entry_parts(name, kind, values)
        parts += entry_parts
        total += size
    return [b"\x0a", encode_varint(total), *parts]


def _encode_record(features: Mapping[str, tuple[str, Sequence[Any]]]) -> bytes:
    """Serializes an Example exactly as `example_codec.encode_example` does (features
    sorted by name) without building protobuf messages: several times faster, which
    matters next to the ~100 us an image costs in total (tests compare the two encoders
    byte for byte). Sorting str names sorts their UTF-8 bytes too. The converter frames
    the parts directly (`frame_parts`), so the image bytes are copied once.
    """
    return b"".join(_record_parts(features))


def _read_bounded(handle, size: int, limit: int) -> bytes:
    """Reads a file expected to hold `size` bytes, never more than `limit` + 1 bytes.

    Asking for exactly the expected size (plus one byte, to notice growth) avoids
    allocating a `limit`-sized buffer per image.
    """
    first = handle.read(min(size, limit) + 1)
    if len(first) <= size or len(first) > limit:
        return first
    parts = [first]
    total = len(first)
    while total <= limit:
        part = handle.read(min(1 << 20, limit + 1 - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def _exists(filesystem, uri: str) -> bool:
    try:
        return bool(filesystem.exists(uri))
    except Exception:  # noqa: BLE001 - cannot tell: report unreadable, not missing
        return True


def _frame_count(data: bytes) -> int:
    try:
        with Image.open(io.BytesIO(data)) as image:
            return int(getattr(image, "n_frames", 1))
    except Exception:  # noqa: BLE001 - render() reports the real error
        return 1
