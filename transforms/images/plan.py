"""Planning image conversions on the launcher: class-folder trees (`plan_image_folder`) and
CSV/TSV/JSONL manifests (`plan_image_manifest`) become an `ImagePlan` of `WorkUnit`s of
~64 images each.

Planning lists files and reads the manifest but never reads an image. Inputs it already
knows to be bad (hidden files, non-image extensions, unknown labels, paths outside the
allowed roots, manifest rows that do not parse) are planned too, as items carrying their
dead-letter reason, so that the converter counts them and input == written + dead-lettered
holds. Manifest rows are read by the tabular readers (`transforms.tabular.read`), so a
manifest's cells follow exactly the tabular conversion's rules.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from transforms.images.config import IMAGE_FEATURES, ImagePlan
from transforms.images.paths import (
    default_allowed_roots,
    is_within_roots,
    normalize_root,
    normalize_uri,
    resolve_reference,
    uri_dirname,
)
from transforms.input_formats import TABULAR_EXTENSIONS
from transforms.records import DEFAULT_SPLIT, WorkUnit
from transforms.splits import SplitAssigner, check_split_name
from transforms.tabular.chunks import Chunk
from transforms.tabular.infer import resolve_spec
from transforms.tabular.plan import plan_tabular
from transforms.tabular.read import read_chunks
from transforms.tabular.spec import ConversionSpec, CsvOptions, FeatureSpec
from transforms.tabular.values import RowConverter, has_escapes

__all__ = [
    "DEFAULT_IMAGES_PER_UNIT",
    "IMAGE_EXTENSIONS",
    "MANIFEST_FORMATS",
    "SPLIT_DIRECTORIES",
    "manifest_format",
    "plan_image_folder",
    "plan_image_manifest",
]

#: File extensions (lower case) taken as images in a class-folder tree.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")
#: Top-level folder names that make ROOT/<split>/<label>/<file> trees.
SPLIT_DIRECTORIES = ("train", "validation", "test")
DEFAULT_IMAGES_PER_UNIT = 64
#: The tabular formats a manifest may have.
MANIFEST_FORMATS = ("csv", "tsv", "jsonl")
# Compression suffixes a manifest name may end with (Beam decompresses them when reading).
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".deflate")
# Rows per chunk read from a manifest: the whole manifest is planned at once anyway.
_MANIFEST_BATCH_ROWS = 1 << 16
# Feature names under which the read spec reads the image, label, split and split-key
# columns (as text); no real feature is named like this.
_READ_PREFIX = "\x00manifest column "


# --------------------------------------------------------------------------- shared


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



# --------------------------------------------------------------------------- manifests


def _text(value: Any) -> str | None:
    """A manifest cell as label, split or path text: stripped, None when missing or blank."""
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
      manifest_path: the manifest on any Beam filesystem, named .csv, .tsv or .jsonl (see
        `TABULAR_EXTENSIONS`), optionally compressed (.gz is read transparently).
      image_column: column holding a local path, a path relative to the manifest's
        folder, or a URI (gs://...).
      label_column: optional column holding the label text.
      split_column: optional column naming each row's split. Its values must be declared:
        the spec's `splits` names when the spec has them, else `SPLIT_DIRECTORIES`; any
        other value (a typo, another case) is a dead letter (`unknown_split`). Without it,
        the spec's `splits` (hashing the spec's `split_key` columns, else the image URI) or
        one split "data".
      spec: a `transforms.tabular.spec.ConversionSpec` for the other columns, converted exactly as
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
    fmt = manifest_format(manifest_path)
    base_dir = uri_dirname(manifest_path)
    roots = tuple(normalize_root(r) for r in (allowed_roots or default_allowed_roots(manifest_path)))
    named = [c for c in (image_column, label_column, split_column) if c is not None]
    extra_spec = _extra_spec(spec, manifest_path, fmt, set(named))
    split_key = spec.split_key if spec is not None else ()
    rows = _manifest_rows(manifest_path, fmt, _read_spec(spec, extra_spec, [*named, *split_key]))
    _check_columns(manifest_path, fmt, rows, named)
    converter = RowConverter(extra_spec, fmt) if extra_spec is not None else None
    assigner = None
    if split_column is None and spec is not None and spec.splits:
        assigner = SplitAssigner(dict(spec.splits))
    if labels is not None:
        label_map = _read_labels(labels)
    elif label_column is not None:
        label_map = _sorted_labels(
            t for row in rows if row.values is not None and (t := _text(row.values.get(label_column)))
        )
    else:
        label_map = ()
    context = _ManifestContext(
        manifest_path=manifest_path, base_dir=base_dir, roots=roots, image_column=image_column,
        label_column=label_column, split_column=split_column,
        index={label: i for i, label in enumerate(label_map)}, converter=converter,
        assigner=assigner, split_key=split_key,
        declared_splits=tuple(spec.split_names) if spec is not None and spec.splits else SPLIT_DIRECTORIES,
    )
    items = [_manifest_item(context, *row) for row in rows]
    declared = spec.split_names if spec is not None and spec.splits else ()
    return ImagePlan(
        work_units=_units(manifest_path, items, roots, images_per_unit),
        labels=label_map,
        # A rejected row's split names no output: it is only where its dead letter counts.
        splits=_split_order([*declared, *(item["split"] for item in items if item["reject"] is None)]),
        allowed_roots=roots,
        input_count=len(items),
        extra_features=(extra_spec.to_feature_spec()["features"] if extra_spec is not None else {}),
        extra_spec=extra_spec,
    )


def manifest_format(path: str) -> str:
    """The tabular format ("csv", "tsv" or "jsonl") of a manifest, from its name.

    Raises:
      ValueError: the name does not end like one of `MANIFEST_FORMATS`.
    """
    name = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    extension = os.path.splitext(name)[1]
    for fmt in MANIFEST_FORMATS:
        if extension in TABULAR_EXTENSIONS[fmt]:
            return fmt
    raise ValueError(f"{path}: a manifest must be .csv, .tsv or .jsonl (optionally .gz)")


class _Row(NamedTuple):
    """One data row of a manifest: its cells, or why it cannot be read."""

    number: int  # 1-based data row number (header and blank lines not counted)
    values: Mapping[str, Any] | None  # column -> cell; None for a failed row
    raw: Any  # the raw record, for dead letters
    failure: tuple[str, str] | None  # (reason, message) of a failed row


def _read_spec(spec: ConversionSpec | None, extra_spec: ConversionSpec | None,
               columns: Sequence[str]) -> ConversionSpec:
    """The spec the tabular reader reads the manifest with: the extra features, plus the
    named columns read as text (a JSON value of another type makes the reader take its
    line-by-line path, so every value arrives as the JSON line holds it)."""
    features = list(extra_spec.features) if extra_spec is not None else []
    features += [FeatureSpec(name=_READ_PREFIX + column, column=column, type="string")
                 for column in dict.fromkeys(columns)]
    csv_options = spec.csv if spec is not None else CsvOptions()
    return ConversionSpec(features=tuple(features), csv=csv_options)


def _manifest_rows(path: str, fmt: str, read_spec: ConversionSpec) -> list[_Row]:
    """Every data row of the manifest, in file order, read by the tabular reader.

    CSV/TSV cells follow the tabular rules: text, None for an empty unquoted cell, "" for
    a quoted empty one; ragged rows, invalid JSON lines and bytes invalid in the
    encoding become failed rows with the tabular reason codes.
    """
    rows: list[_Row] = []
    unit = WorkUnit(path=path, index=0)
    for chunk in read_chunks(unit, fmt, read_spec, _MANIFEST_BATCH_ROWS):
        rows += (_Row(int(f.row), None, f.raw, (f.reason, f.message)) for f in chunk.failures)
        rows += _parsed_rows(chunk, read_spec.csv.encoding)
    if fmt == "jsonl":
        rows = [_utf8_line(row) for row in rows]
    # A reader reports a chunk's failed rows apart from its parsed ones.
    rows.sort(key=lambda row: row.number)
    return rows


def _parsed_rows(chunk: Chunk, encoding: str) -> Iterator[_Row]:
    columns = {name: _python_values(values, chunk.num_rows) for name, values in chunk.columns.items()}
    for i in range(chunk.num_rows):
        number = int(chunk.row_numbers[i])
        cells = {name: values[i] for name, values in columns.items()}
        # Bytes invalid in a CSV's encoding arrive as escape characters in the cells.
        if chunk.escapes and any(isinstance(c, str) and has_escapes(c) for c in cells.values()):
            yield _Row(number, None, chunk.raw(i),
                       ("invalid_encoding", f"the row has bytes that are not valid {encoding}"))
            continue
        yield _Row(number, cells, chunk.raw(i), None)


def _python_values(values: Any, num_rows: int) -> list:
    """A chunk's column as Python values. Arrow's JSON reader keeps bytes that are not
    UTF-8 in string columns: such a value becomes None (`_utf8_line` fails its line)."""
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        return list(values)
    try:
        return values.to_pylist()
    except UnicodeDecodeError:
        return [_python_value(values, i) for i in range(num_rows)]


def _python_value(values: pa.Array | pa.ChunkedArray, index: int) -> Any:
    try:
        return values[index].as_py()
    except UnicodeDecodeError:
        return None


def _utf8_line(row: _Row) -> _Row:
    """A JSON Lines row with its raw line as text, or failed as `invalid_encoding` when the
    line is not UTF-8 (JSON Lines are UTF-8, whatever else the JSON parser would take)."""
    if not isinstance(row.raw, bytes):
        return row
    try:
        return row._replace(raw=row.raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        return _Row(row.number, None, row.raw, ("invalid_encoding", f"line is not UTF-8: {error}"))


def _check_columns(path: str, fmt: str, rows: Sequence[_Row], named: Sequence[str]) -> None:
    """Raises ValueError when a named column is in no row of a manifest with parsed rows.

    CSV rows hold every column of the file. The JSON reader reads only the columns asked
    for, an absent key as None: when a named column is None in every row, the lines say
    whether the key is there at all (and which keys are, for the message).
    """
    parsed = [row for row in rows if row.values is not None]
    if not parsed:
        return
    if fmt == "jsonl":
        unseen = [c for c in named if all(row.values.get(c) is None for row in parsed)]
        if not unseen:
            return
        seen: dict[str, None] = {}
        for row in parsed:
            seen.update(dict.fromkeys(json.loads(row.raw)))
    else:
        seen = dict.fromkeys(parsed[0].values)
    missing = [c for c in named if c not in seen]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r}; columns: {list(seen)}")


@dataclasses.dataclass(frozen=True)
class _ManifestContext:
    """What turning one manifest row into an item needs."""

    manifest_path: str
    base_dir: str
    roots: tuple[str, ...]
    image_column: str
    label_column: str | None
    split_column: str | None
    index: Mapping[str, int]
    converter: RowConverter | None
    assigner: SplitAssigner | None
    split_key: tuple[str, ...]
    declared_splits: tuple[str, ...] = ()


def _extra_spec(spec: ConversionSpec | None, manifest_path: str, fmt: str,
                reserved: set[str]) -> ConversionSpec | None:
    """The spec of the manifest's extra features, resolved exactly as the tabular
    conversion resolves one (inference from a sample when `spec` is None or has
    `include_unlisted`); inferred features reading the image, label or split column are
    dropped. None when no extra feature remains."""
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


def _manifest_item(context: _ManifestContext, number: int, row: Mapping[str, Any] | None, raw: Any,
                   failure: tuple[str, str] | None) -> dict:
    """The planned item of one manifest row (a rejected one when the row cannot be used)."""
    def rejected(reason, message, column=None, split=DEFAULT_SPLIT, uri=context.manifest_path,
                 filename=None, text=None):
        return _item(uri, split, filename=filename or "", row=number, raw=raw, text=text,
                     reject=(reason, message, column))

    if row is None:
        return rejected(*failure)
    split = DEFAULT_SPLIT
    if context.split_column is not None:
        split = _text(row.get(context.split_column)) or ""
        try:
            check_split_name(split)
        except ValueError as error:
            return rejected("invalid_split", str(error), context.split_column)
        if split not in context.declared_splits:
            close = difflib.get_close_matches(split.lower(), context.declared_splits, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return rejected("unknown_split", f"split {split!r} is not declared{hint}; declared: "
                            f"{', '.join(context.declared_splits)} (declare others in the spec's "
                            f"splits)", context.split_column)
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


