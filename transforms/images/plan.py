"""Planning image conversions on the launcher: class-folder trees (`plan_image_folder`) and
CSV/TSV/JSONL manifests (`plan_image_manifest`) become an `ImagePlan` of `WorkUnit`s, planned
as data (slices of folder listings, byte ranges of manifests: no row per image).

Planning never reads an image. Inputs already known to be bad are planned as items carrying
their dead-letter reason, so that input == written + dead-lettered holds.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.images.config import IMAGE_FEATURES, SPLIT_DIRECTORIES, ImagePlan
from transforms.images.folder_slices import FolderSlices, survey_folder
from transforms.images.labels import check_label_list, label_problem, parse_labels_text, sorted_labels
from transforms.images.manifest_rows import ManifestRows, ManifestSurvey
from transforms.images.paths import default_allowed_roots, normalize_root, normalize_uri
from transforms.input_formats import TABULAR_EXTENSIONS
from transforms.records import DEFAULT_SPLIT, WorkUnit
from transforms.tabular.infer import resolve_spec
from transforms.tabular.plan import plan_tabular
from transforms.tabular.spec import ConversionSpec, CsvOptions
from transforms.tabular.split_units import split_text_units

__all__ = ["DEFAULT_IMAGES_PER_UNIT", "MANIFEST_FORMATS", "manifest_format", "plan_image_folder",
           "plan_image_manifest"]

DEFAULT_IMAGES_PER_UNIT = 64
#: The tabular formats a manifest may have.
MANIFEST_FORMATS = ("csv", "tsv", "jsonl")
# Compression suffixes a manifest name may end with (Beam decompresses them when reading).
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".deflate")
_FOLDER_SLICES = 256  # a folder tree becomes about this many slices (at least one per folder)
# A manifest becomes up to this many byte ranges (the plan's size stays flat) of at least
# _MIN_RANGE_BYTES (~100 rows of a typical manifest, so a small one still spreads out).
_MANIFEST_RANGES = 256
_MIN_RANGE_BYTES = 8 << 10


def _units(source: str, items: Sequence[dict], roots: tuple[str, ...],
           images_per_unit: int, first_index: int = 0) -> list[WorkUnit]:
    if images_per_unit < 1:
        raise ValueError(f"images_per_unit must be positive, got {images_per_unit}")
    chunks = [items[start:start + images_per_unit] for start in range(0, len(items), images_per_unit)]
    return [WorkUnit(path=source, index=index, paths=tuple(item["uri"] for item in chunk),
                     extra={"items": list(chunk), "allowed_roots": list(roots)})
            for index, chunk in enumerate(chunks, first_index)]


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
    folder is named train, validation or test, as about `_FOLDER_SLICES` slices of whole
    multiples of `images_per_unit` files (the tree's rules and dead letters:
    `transforms.images.folder_slices`). Symlinks leading outside `allowed_roots` (default:
    ROOT) are refused when read.

    Labels are the sorted names of the label folders holding at least one image; a
    label's index is its position. `labels` (a list, or the path of a labels.txt) fixes
    the map instead, so indices stay the same when a class has no images in a run; images
    in a folder it does not list are dead letters (`unknown_label`).

    Raises:
      FileNotFoundError: ROOT holds no file.
      ValueError: ROOT mixes split folders with other folders.
    """
    if images_per_unit < 1:
        raise ValueError(f"images_per_unit must be positive, got {images_per_unit}")
    root_uri = normalize_uri(root).rstrip("/\\") if "://" not in root else root.rstrip("/")
    roots = tuple(normalize_root(r) for r in (allowed_roots or (root_uri,)))
    survey = survey_folder(root_uri, images_per_unit)
    label_map = _read_labels(labels) if labels is not None else survey.label_folders
    units = survey.slices(images_per_unit, _FOLDER_SLICES)
    return ImagePlan(
        work_units=units,
        labels=label_map,
        splits=_split_order(survey.splits),
        allowed_roots=roots,
        input_count=survey.files,
        source=FolderSlices(root_uri, roots, survey.split_mode, label_map,
                            plan_token=survey.listing_digest),
        planning=(f"planned as data: {len(units)} slices of the folder listings, listed again "
                  f"in the workers"),
        listing_digest=survey.listing_digest,
    )


def _read_labels(labels: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(labels, str):
        try:
            with FileSystems.open(labels) as handle:
                text = handle.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"cannot read the labels file {labels}: "
                             f"{getattr(error, 'strerror', None) or error}") from None
        return parse_labels_text(text)
    return check_label_list(labels)


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
    range_bytes: int | None = None,
) -> ImagePlan:
    """Plans a CSV/TSV/JSONL manifest with one image per row: byte ranges read in the workers
    (`transforms.images.manifest_rows`), or, for a manifest that cannot be cut (compressed,
    or see `transforms.tabular.split_units`), its rows read on the launcher as items of
    `images_per_unit` images; `ImagePlan.planning` says which.

    Args:
      manifest_path: the manifest on any Beam filesystem, named .csv, .tsv or .jsonl (see
        `TABULAR_EXTENSIONS`), optionally compressed (.gz is read transparently); or a glob
        of manifests of one format, planned together (one label map, one row count).
      image_column: column holding a local path, a path relative to the manifest's
        folder, or a URI (gs://...); `label_column`: the label text.
      split_column: optional column naming each row's split. Its values must be declared:
        the spec's `splits` names when the spec has them, else `SPLIT_DIRECTORIES`; any
        other value (a typo, another case) is a dead letter (`unknown_split`). Without it,
        the spec's `splits` (hashing the spec's `split_key` columns, else the image URI) or
        one split "data".
      spec: a `transforms.tabular.spec.ConversionSpec` for the other columns, converted exactly as
        in the tabular conversion (its `csv:` options also parse the manifest). Without
        a spec every other column becomes a feature of an inferred type (int64, else
        float, else string); `ImagePlan.extra_spec` is the spec that was used.
      allowed_roots: image URIs must lie inside one of these; default: each manifest's
        folder tree and, for a gs:// manifest, its bucket (see `default_allowed_roots`).
      labels: the label map (a list, or the path of a labels.txt); default: the sorted
        distinct labels of the manifest (numeric order when all are integers). Labels not
        in a given map are dead letters (`unknown_label`).
      images_per_unit, range_bytes: images per work unit of a manifest read on the launcher;
        the size of its byte ranges otherwise (default: up to `_MANIFEST_RANGES` ranges).

    Raises:
      ValueError: unknown manifest type, a named column the manifest lacks, spec
        features named like the image features.
    """
    glob_ = any(ch in manifest_path for ch in "*?[")
    fmt = manifest_format(manifest_path) if not glob_ else None
    files = plan_tabular(manifest_path, fmt or "csv")  # one unit per manifest it matches
    fmt = fmt or manifest_format(files[0].path)  # a glob's own name may not say ("m.*")
    other = next((unit.path for unit in files if manifest_format(unit.path) != fmt), None)
    if other is not None:
        raise ValueError(f"{other} is not a {fmt} manifest as {manifest_path} says: the "
                         f"manifests of one conversion have one format")
    roots = tuple(dict.fromkeys(normalize_root(r) for r in (
        allowed_roots or [root for unit in files for root in default_allowed_roots(unit.path)])))
    declared = tuple(spec.split_names) if spec is not None and spec.splits else ()
    rows = ManifestRows(
        fmt=fmt, image_column=image_column,
        label_column=label_column, split_column=split_column, roots=roots,
        csv=spec.csv if spec is not None else CsvOptions(),
        splits=spec.splits if spec is not None else (),
        split_key=spec.split_key if spec is not None else (),
        declared_splits=declared or SPLIT_DIRECTORIES,
    )
    survey = ManifestSurvey.of(rows.survey(unit) for unit in files)
    # A manifest without rows has no value to infer the other columns' types from: it
    # converts to nothing, rather than failing the inference.
    extra_spec = (_extra_spec(spec, files, fmt, set(rows.named_columns))
                  if survey.rows or spec is not None else None)
    if labels is not None:
        label_map = _read_labels(labels)
    elif label_column is not None:
        label_map = sorted_labels(t for t in survey.label_texts if label_problem(t) is None)
    else:
        label_map = ()
    rows = dataclasses.replace(rows, extra_spec=extra_spec, labels=label_map)
    size = sum(unit.size for unit in files)
    range_bytes = range_bytes or max(_MIN_RANGE_BYTES, -(-size // _MANIFEST_RANGES))
    cut = split_text_units(files, fmt, rows.csv, range_bytes)
    kept_whole = next((f.kept_whole for f in cut.files if f.kept_whole), None)
    if any(CompressionTypes.detect_compression_type(unit.path) != CompressionTypes.UNCOMPRESSED
           for unit in files):
        kept_whole = "compressed: a compressed stream is read from its start"
    named_manifests = "the manifest" if len(files) == 1 else f"{len(files)} manifests"
    if kept_whole is None:
        units, source = cut.units, rows
        planning = (f"planned as data: {named_manifests} in {len(units)} byte range"
                    f"{'s' if len(units) != 1 else ''}, read in the workers")
    else:
        units, source = [], None
        for unit in files:
            units += _units(unit.path, list(rows.items(unit)), roots, images_per_unit, len(units))
        planning = f"read on the launcher ({named_manifests}: {kept_whole.split(':')[0]})"
    assigned = () if split_column is not None else declared
    return ImagePlan(
        work_units=tuple(units),
        labels=label_map,
        splits=_split_order([*declared, *(survey.splits or assigned or (DEFAULT_SPLIT,))]),
        allowed_roots=roots,
        input_count=survey.rows,
        extra_features=(extra_spec.to_feature_spec()["features"] if extra_spec is not None else {}),
        extra_spec=extra_spec,
        source=source,
        planning=planning,
    )


def manifest_format(path: str) -> str:
    """The tabular format ("csv", "tsv" or "jsonl") of a manifest, from its name; raises
    ValueError when the name does not end like one of `MANIFEST_FORMATS`."""
    name = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    extension = os.path.splitext(name)[1]
    for fmt in MANIFEST_FORMATS:
        if extension in TABULAR_EXTENSIONS[fmt]:
            return fmt
    raise ValueError(f"{path}: a manifest must be .csv, .tsv or .jsonl (optionally .gz)")


def _extra_spec(spec: ConversionSpec | None, units: Sequence[WorkUnit], fmt: str,
                reserved: set[str]) -> ConversionSpec | None:
    """The spec of the manifest's extra features, resolved exactly as the tabular
    conversion resolves one (inference from a sample when `spec` is None or has
    `include_unlisted`); inferred features reading the image, label or split column are
    dropped. None when no extra feature remains."""
    resolved = resolve_spec(units, fmt, spec)
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
