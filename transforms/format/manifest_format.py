"""The shape of `manifest.json`, Beam-free: its name, format version, size cap, the one
definition of what a sound manifest holds, parsing its bytes, and the one template of the
names of the files it lists (`shard_name`, with `SHARD_GLOB` and `SHARD_NAME` derived from it).

`transforms.manifest` reads it from any Beam filesystem; the Beam-free readers
(`transforms.reading`) and `verify` use the same rules.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "FEATURE_SPEC_NAME",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "is_plain_relative",
    "manifest_problems",
    "parse_manifest",
    "SHARD_GLOB",
    "SHARD_NAME",
    "shard_name",
]

MANIFEST_NAME = "manifest.json"
#: The side file describing the features (dtypes, kinds, defaults, presence) for readers.
FEATURE_SPEC_NAME = "feature_spec.json"
#: A manifest lists one entry per shard: even a million shards stay far below this.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
FORMAT_VERSION = 1

#: Shard numbers are padded to this many digits, or more when the count needs more (as
#: Beam's `-SSSSS-of-NNNNN` and TFDS's `SHARD_X_OF_Y` pad them).
SHARD_DIGITS = 5
#: Every name `shard_name` makes (any prefix and suffix), as a glob and as a pattern.
SHARD_GLOB = "*-" + "[0-9]" * SHARD_DIGITS + "*-of-" + "[0-9]" * SHARD_DIGITS + "*"
_DIGITS = rf"\d{{{SHARD_DIGITS},}}"
SHARD_NAME = re.compile(rf"^(?P<prefix>.+)-(?P<index>{_DIGITS})-of-(?P<count>{_DIGITS})(?P<suffix>\.[^/]*)?$")


def shard_name(prefix: str, index: int, count: int, suffix: str = "") -> str:
    """`<prefix>-SSSSS-of-NNNNN<suffix>`: the name of file `index` of `count`."""
    digits = max(SHARD_DIGITS, len(str(count)))
    return f"{prefix}-{index:0{digits}d}-of-{count:0{digits}d}{suffix}"


def parse_manifest(raw: bytes, path: str) -> dict[str, Any]:
    """Parses the bytes of the manifest at `path` (read with at most `MAX_MANIFEST_BYTES`+1
    bytes); raises ValueError naming `path` when it is too large, not JSON or malformed."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, nested too deep
        raise ValueError(f"{path}: manifest is not valid JSON: {error}") from None
    problems = manifest_problems(manifest)
    if problems:
        raise ValueError(f"{path}: manifest is malformed: " + "; ".join(problems[:5]))
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
    problems += _counts_problems(manifest.get("counts", {}))
    problems += _side_file_problems(manifest.get("files", {}))
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


def _counts_problems(counts: Any) -> list[str]:
    """What is wrong with a manifest's `counts`: totals, per split, rows of sequences and
    dead letters by reason."""
    if not isinstance(counts, dict) or not all(
            _is_count(counts.get(key)) for key in ("input", "written", "dead_letter")):
        return [f"'counts' is {counts!r}, not input/written/dead_letter counts"]
    problems = []
    splits = counts.get("splits", {})
    if not isinstance(splits, dict) or not all(
            isinstance(entry, dict) and all(_is_count(entry.get(key)) for key in
                                            ("input", "written", "dead_letter"))
            for entry in splits.values()):
        problems.append(f"'counts.splits' is {splits!r}, not counts per split")
    if "written_rows" in counts and not _is_count(counts["written_rows"]):
        problems.append(f"'counts.written_rows' is {counts['written_rows']!r}, not a count")
    reasons = counts.get("dead_letter_reasons") or {}  # readers take a null as none
    if not isinstance(reasons, dict) or not all(
            isinstance(reason, str) and _is_count(count) for reason, count in reasons.items()):
        problems.append(f"'counts.dead_letter_reasons' is {reasons!r}, not counts per reason")
    return problems


def _side_file_problems(files: Any) -> list[str]:
    """What is wrong with a manifest's `files`: {name: {"bytes": ..., "sha256": ...}} of the
    side files, every name inside the folder."""
    if not isinstance(files, dict):
        return [f"'files' is {files!r}, not an object of side files"]
    problems = []
    for name, entry in files.items():
        if not is_plain_relative(name):
            problems.append(f"'files' names {name!r}, a path outside the folder")
        elif not (isinstance(entry, dict) and _is_count(entry.get("bytes"))
                  and isinstance(entry.get("sha256"), str)):
            problems.append(f"'files' entry {name!r} is {entry!r}, not its bytes and sha256")
    return problems
