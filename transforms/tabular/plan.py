"""Planning a tabular conversion's input: `plan_tabular` lists the files matching the input
patterns (any Beam filesystem) and cuts them into work units, one per file, or one per row
group of a Parquet file, so the runner can spread them (`split_units.split_text_units` then
cuts large CSV/JSON Lines files into byte ranges). Launcher side; the readers read the units
in the workers."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.input_formats import TABULAR_EXTENSIONS, check_tabular_format
from transforms.records import WorkUnit

__all__ = ['input_files', 'plan_tabular']


def _is_folder(pattern: str) -> bool:
    """Whether `pattern` names a folder: a local one, or on an object store (which has no
    folders) a name ending in "/", or one no object has while objects lie under it."""
    if any(ch in pattern for ch in "*?[") and fs.input_pattern(pattern) == pattern:
        return False  # a glob (not the name of something that exists)
    if pattern.endswith("/"):
        return True
    if "://" not in pattern:
        return os.path.isdir(pattern)
    if FileSystems.exists(pattern):
        return False
    return bool(fs.match([fs.literal(pattern) + "/*"], limits=[1])[0].metadata_list)


def _unlistable(pattern: str) -> str | None:
    """Why the local folder `pattern` names (or its glob's folder) cannot be listed, or None
    (see `fs.cannot_list`): a folder without read permission would look empty."""
    folder = pattern if _is_folder(pattern) else os.path.dirname(pattern)
    if not folder or any(ch in folder for ch in "*?["):
        return None
    return fs.cannot_list(folder)


def input_files(patterns: str | Sequence[str], fmt: str) -> list:
    """The files (Beam `FileMetadata`, sorted by path) the patterns stand for: what they
    match, and for a folder its files named like `fmt` (`TABULAR_EXTENSIONS`, optionally
    + .gz); a folder holding none of them is refused."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    endings = tuple(e + gz for e in TABULAR_EXTENSIONS[fmt] for gz in ("", ".gz"))
    found = {}
    folders = {pattern for pattern in patterns if _is_folder(pattern)}
    queries = [fs.literal(p.rstrip("/")) + "/*" if p in folders else fs.input_pattern(p)
               for p in patterns]
    for pattern, result in zip(patterns, fs.match(queries), strict=True):
        matched = result.metadata_list
        problem = None if matched else _unlistable(pattern)
        if problem:
            raise ValueError(problem)
        if pattern in folders:
            named = [m for m in matched if m.path.lower().endswith(endings)]
            if not named:
                held = sorted({os.path.splitext(m.path)[1] or "(no extension)" for m in matched})
                raise FileNotFoundError(
                    f"the folder {pattern} holds no {fmt} file (names ending in "
                    f"{', '.join(TABULAR_EXTENSIONS[fmt])}, optionally .gz)"
                    + (f"; it holds {', '.join(held)} files" if held else "; it is empty"))
            matched = named
        if not matched:
            raise FileNotFoundError(f"no input file matches {pattern!r}")
        for metadata in matched:
            found[metadata.path] = metadata
    return [found[path] for path in sorted(found)]


def plan_tabular(input_glob: str | Sequence[str], fmt: str) -> list[WorkUnit]:
    """The work units of a tabular input, in a deterministic order.

    One unit per file (sorted by path; a folder stands for its files named like the format,
    see `input_files`); for Parquet one unit per row group
    (start/end = row group range, extra = {"size", "rows", "row_offset"}). CSV and JSON
    units carry extra = {"size": bytes}. Raises FileNotFoundError when a pattern matches
    nothing and ValueError for an unknown format.
    """
    check_tabular_format(fmt)
    units: list[WorkUnit] = []
    for metadata in input_files(input_glob, fmt):
        if fmt != "parquet":
            units.append(WorkUnit(metadata.path, len(units), extra={"size": metadata.size_in_bytes}))
            continue
        try:
            with FileSystems.open(metadata.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                meta = pq.ParquetFile(f).metadata
        except Exception:  # noqa: BLE001 - the converter dead-letters the unreadable file
            units.append(WorkUnit(metadata.path, len(units), extra={"size": metadata.size_in_bytes}))
            continue
        offset = 0
        for group in range(meta.num_row_groups):
            rows = meta.row_group(group).num_rows
            size = meta.row_group(group).total_byte_size
            units.append(WorkUnit(metadata.path, len(units), start=group, end=group + 1,
                                  extra={"size": size, "rows": rows, "row_offset": offset}))
            offset += rows
        if meta.num_row_groups == 0:
            units.append(WorkUnit(metadata.path, len(units), start=0, end=0,
                                  extra={"size": 0, "rows": 0, "row_offset": 0}))
    return units
