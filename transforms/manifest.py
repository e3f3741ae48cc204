"""The output manifest: the commit marker of a conversion and the only index readers trust:
its name and format version, reading it, and the one definition of its shape.

`manifest.json` is written last, at the output root, after every shard has been moved to
its final name. A folder without it holds no committed output. Beam-free apart from the
use of Beam's `FileSystems` for I/O, so it works for any filesystem Beam knows (gs://).
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

from apache_beam.io.filesystems import FileSystems

from transforms.fs import join_path

__all__ = [
    "MANIFEST_NAME",
    "FORMAT_VERSION",
    "is_plain_relative",
    "manifest_problems",
    "read_manifest",
    "tool_version",
]

MANIFEST_NAME = "manifest.json"
#: A manifest lists one entry per shard: even a million shards stay far below this.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
FORMAT_VERSION = 1


def tool_version() -> str:
    """The installed version of this tool, recorded in every manifest."""
    try:
        return metadata.version("tfrecord-pipeline")
    except metadata.PackageNotFoundError:
        return "0+unknown"












def read_manifest(output_dir: str) -> dict[str, Any] | None:
    """Returns the parsed manifest of `output_dir`, or None when there is none.

    Raises ValueError when a manifest exists but is not valid JSON of the expected shape.
    """
    path = join_path(output_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        raw = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, nested too deep
        raise ValueError(f"{path}: manifest is not valid JSON: {error}") from None
    _check_shape(manifest, path)
    return manifest


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_plain_relative(path: Any) -> bool:
    """True for a path that stays inside the folder it is relative to: no absolute path, no
    URI, no `..`, no empty part. Every file a manifest lists must be one."""
    if not isinstance(path, str) or not path or "\\" in path or "://" in path or path.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def manifest_problems(manifest: Any) -> list[str]:
    """Everything wrong with the shape of a parsed manifest (empty when it is sound): the
    one definition of what a manifest must hold, used by `read_manifest` and `verify`."""
    if not isinstance(manifest, dict):
        return [f"the manifest is a JSON {type(manifest).__name__}, not an object"]
    problems = []
    required = ("shards", "counts", "compression", "created_at", "tool_version", "options")
    missing = [key for key in required if key not in manifest]
    if missing:
        problems.append(f"lacks required keys {missing}")
    if not isinstance(manifest.get("compression", ""), str):
        problems.append(f"'compression' is {manifest['compression']!r}, not a codec name")
    counts = manifest.get("counts", {})
    if not isinstance(counts, dict) or not all(
            _is_count(counts.get(key)) for key in ("input", "written", "dead_letter")):
        problems.append(f"'counts' is {counts!r}, not input/written/dead_letter counts")
    else:
        splits = counts.get("splits", {})
        if not isinstance(splits, dict) or not all(
                isinstance(entry, dict) and all(_is_count(entry.get(key)) for key in
                                                ("input", "written", "dead_letter"))
                for entry in splits.values()):
            problems.append(f"'counts.splits' is {splits!r}, not counts per split")
        if "written_rows" in counts and not _is_count(counts["written_rows"]):
            problems.append(f"'counts.written_rows' is {counts['written_rows']!r}, not a count")
    for key, fields in (("shards", ("path", "split", "records", "bytes", "sha256")),
                        ("dead_letter_files", ("path", "records", "bytes", "sha256"))):
        entries = manifest.get(key, [])
        if not isinstance(entries, list):
            problems.append(f"{key!r} is {entries!r}, not a list")
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                problems.append(f"{key!r} entry {entry!r} is not an object")
                continue
            lacking = [field for field in fields if field not in entry]
            if lacking:
                problems.append(f"{key!r} entry {entry!r} lacks {lacking}")
            elif not is_plain_relative(entry["path"]):
                problems.append(f"{key!r} entry names {entry['path']!r}, a path outside the folder")
            elif not (_is_count(entry["records"]) and _is_count(entry["bytes"])
                      and isinstance(entry["sha256"], str)
                      and (key != "shards" or isinstance(entry["split"], str))):
                problems.append(f"{key!r} entry {entry!r} has a value of the wrong type")
    return problems


def _check_shape(manifest: Any, path: str) -> None:
    problems = manifest_problems(manifest)
    if problems:
        raise ValueError(f"{path}: manifest is malformed: " + "; ".join(problems[:5]))
