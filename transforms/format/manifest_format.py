"""The shape of `manifest.json`, Beam-free: its name, format version, size cap, the typed
`Manifest` every reader takes (parsed, validated and written here alone), the one definition of
what a sound manifest holds (`manifest_problems`), and the one template of the names of the
files it lists (`shard_name`, with `SHARD_GLOB` and `SHARD_NAME` derived from it).

`transforms.manifest` reads it from any Beam filesystem; the Beam-free readers
(`transforms.reading`) and `verify` use the same rules.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["Counts", "FEATURE_SPEC_NAME", "FORMAT_VERSION", "FileEntry", "MANIFEST_NAME",
           "MAX_MANIFEST_BYTES", "Manifest", "ShardEntry", "SplitCounts", "is_plain_relative",
           "manifest_problems", "SHARD_GLOB", "SHARD_NAME", "shard_name"]

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


def _plain(entry: Any) -> dict[str, Any]:
    """An entry as the manifest's JSON holds it: its fields, those that are None left out."""
    return dataclasses.asdict(entry, dict_factory=lambda items: {k: v for k, v in items if v is not None})


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """A file the manifest lists by size and digest (a side file, a shard's index sidecar, a
    superseded file), `path` relative to the output folder."""

    path: str
    bytes: int
    sha256: str

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any], path: str | None = None) -> FileEntry:
        return cls(entry["path"] if path is None else path, entry["bytes"], entry["sha256"])


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """A file of records: a TFRecord shard (with its `split`, and its `index` sidecar when one
    was written) or a dead-letter file (`split` None)."""

    path: str
    records: int
    bytes: int
    sha256: str
    split: str | None = None
    index: FileEntry | None = None

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> ShardEntry:
        index = entry.get("index")
        return cls(entry["path"], entry["records"], entry["bytes"], entry["sha256"], entry.get("split"),
                   None if index is None else FileEntry.from_dict(index))


@dataclasses.dataclass(frozen=True)
class SplitCounts:
    """Records read (`input`, in rows), written and dead-lettered; `written_rows` (the rows in
    the written records) only for SequenceExamples, which hold several rows each."""

    input: int
    written: int
    dead_letter: int
    written_rows: int | None = None

    @property
    def rows_written(self) -> int:
        """What `input` reconciles with: input == rows_written + dead_letter."""
        return self.written if self.written_rows is None else self.written_rows

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclasses.dataclass(frozen=True)
class Counts(SplitCounts):
    """The run's totals, its dead letters by reason, and the counts of each split."""

    dead_letter_reasons: Mapping[str, int] = dataclasses.field(default_factory=dict)
    splits: Mapping[str, SplitCounts] = dataclasses.field(default_factory=dict)


def _counted(counts: Mapping[str, Any]) -> tuple[Any, ...]:
    return counts["input"], counts["written"], counts["dead_letter"], counts.get("written_rows")


#: The keys `Manifest` types; every other key is run metadata, kept verbatim in `metadata`.
_TYPED_KEYS = {"shards", "dead_letter_files", "counts", "files", "compression", "generation", "superseded"}


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A committed output's manifest, typed where readers walk it.

    Attributes:
      compression: the codec of every shard ("none", "gzip", ...).
      files: the side files (feature_spec.json, stats.json, ...).
      generation: 0 for an output written once; each later generation of the same folder
        counts one up. Absent from the JSON when 0.
      superseded: files of the previous generation kept for readers still holding its
        manifest: the tool's own (`output_files.owned_paths`), checked by `verify` by size and
        digest, never read as shards. Absent from the JSON when empty.
      metadata: every other key (run_id, created_at, tool_version, options, fingerprint,
        spec, labels, inputs, sharding, splits, format_version, ...), verbatim.
    """

    shards: tuple[ShardEntry, ...]
    counts: Counts
    compression: str
    dead_letter_files: tuple[ShardEntry, ...] = ()
    files: tuple[FileEntry, ...] = ()
    generation: int = 0
    superseded: tuple[FileEntry, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: bytes, path: str) -> Manifest:
        """The manifest at `path` from its bytes (read with at most `MAX_MANIFEST_BYTES`+1
        bytes); raises ValueError naming `path` when it is too large, not JSON or malformed."""
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ValueError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, nested too deep
            raise ValueError(f"{path}: manifest is not valid JSON: {error}") from None
        return cls.from_dict(document, path)

    @classmethod
    def from_dict(cls, document: Any, path: str = MANIFEST_NAME) -> Manifest:
        """The manifest of parsed JSON; raises ValueError naming `path` when it is malformed."""
        problems = manifest_problems(document)
        if problems:
            raise ValueError(f"{path}: manifest is malformed: " + "; ".join(problems[:5]))
        counts = document["counts"]
        splits = {name: SplitCounts(*_counted(entry)) for name, entry in counts.get("splits", {}).items()}
        return cls(
            tuple(map(ShardEntry.from_dict, document["shards"])),
            Counts(*_counted(counts), dict(counts.get("dead_letter_reasons") or {}), splits),
            document["compression"], tuple(map(ShardEntry.from_dict, document.get("dead_letter_files", ()))),
            tuple(FileEntry.from_dict(entry, name) for name, entry in document.get("files", {}).items()),
            document.get("generation", 0), tuple(map(FileEntry.from_dict, document.get("superseded", ()))),
            {key: value for key, value in document.items() if key not in _TYPED_KEYS})

    def to_json(self) -> bytes:
        """The manifest's bytes: sorted keys, indented, one final newline (same manifest, same bytes)."""
        typed = _plain(self)
        document = {**typed.pop("metadata"), **typed}
        document["files"] = {entry.path: {"bytes": entry.bytes, "sha256": entry.sha256}
                             for entry in self.files}
        for key in ("generation", "superseded"):  # absent until an output has generations
            if not document[key]:
                del document[key]
        return json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n"

    def side_file(self, name: str) -> FileEntry | None:
        """The side file `name`, when the manifest lists it."""
        return next((entry for entry in self.files if entry.path == name), None)

    def listed_files(self) -> list[FileEntry]:
        """Every file the manifest names (itself aside), with its size and digest: shards,
        their index sidecars, dead-letter files, side files and superseded files."""
        entries = self.shards + self.dead_letter_files
        listed = [FileEntry(entry.path, entry.bytes, entry.sha256) for entry in entries]
        listed += [entry.index for entry in entries if entry.index is not None]
        return listed + list(self.files) + list(self.superseded)


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
                        ("dead_letter_files", ("path", "records", "bytes", "sha256")),
                        ("superseded", ("path", "bytes", "sha256"))):
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
            elif not (_is_count(entry.get("records", 0)) and _is_count(entry["bytes"])
                      and isinstance(entry["sha256"], str) and isinstance(entry.get("split", ""), str)):
                problems.append(f"{key!r} entry {entry!r} has a value of the wrong type")
            elif "index" in entry and not _is_file_entry(entry["index"]):
                problems.append(f"{key!r} entry {entry['path']!r} lists the index {entry['index']!r}, "
                                f"not its path inside the folder, bytes and sha256")
    return problems or _generation_problems(manifest)


def _is_file_entry(entry: Any) -> bool:
    """Whether `entry` is {"path": <inside the folder>, "bytes": <count>, "sha256": <text>}."""
    return (isinstance(entry, dict) and is_plain_relative(entry.get("path"))
            and _is_count(entry.get("bytes")) and isinstance(entry.get("sha256"), str))


def _generation_problems(manifest: dict[str, Any]) -> list[str]:
    """What is wrong with `generation` and `superseded` (of a manifest otherwise sound): a count,
    and the files of an earlier generation (so none in generation 0), none listed as current."""
    generation, superseded = manifest.get("generation", 0), manifest.get("superseded", [])
    if not _is_count(generation):
        return [f"'generation' is {generation!r}, not a count"]
    if superseded and not generation:
        return ["'superseded' lists files of an earlier generation, but 'generation' is 0"]
    entries = manifest["shards"] + manifest.get("dead_letter_files", [])
    current = {entry["path"] for entry in entries} | set(manifest.get("files", {}))
    current |= {entry["index"]["path"] for entry in entries if "index" in entry}
    both = sorted(entry["path"] for entry in superseded if entry["path"] in current)
    return [f"'superseded' lists {both[0]!r}, a file of the current generation"] if both else []


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
    return [f"'files' entry {name!r} is {entry!r}: not its bytes and sha256, or a name outside the folder"
            for name, entry in files.items()
            if not (isinstance(entry, dict) and _is_file_entry({**entry, "path": name}))]
