"""What a committed output holds for one split, read Beam-free from its manifest and feature
spec: the split's shards exactly as the manifest lists them (never a glob: a folder may hold
leftovers of other runs), with their record counts, compression and index sidecars."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from transforms.format.compression import Compression, parse_compression
from transforms.format.manifest_format import (
    FEATURE_SPEC_NAME,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    ShardEntry,
)
from transforms.reading.files import join, open_binary, path_exists
from transforms.reading.sidecars import SIDECAR_SUFFIX, RecordIndex, read_sidecar

__all__ = ["Shard", "SplitOutput", "load_split"]

# feature_spec.json lists one small entry per feature.
_MAX_FEATURE_SPEC_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard the manifest lists: its records (checked when read), its size in bytes and
    its index sidecar (when the shard is uncompressed and one exists)."""

    path: str
    records: int
    size: int
    sidecar: str | None = None

    def record_index(self) -> RecordIndex:
        """The offsets and lengths of its records, from its sidecar (see `sidecars`)."""
        if self.sidecar is None:
            raise ValueError(f"{self.path} has no index sidecar ({self.path}{SIDECAR_SUFFIX})")
        return read_sidecar(self.sidecar, self.path, self.records, self.size)


@dataclasses.dataclass(frozen=True)
class SplitOutput:
    """One split of a committed output: its shards in the manifest's order and the parsed
    `feature_spec.json` (None when the output has none)."""

    output_dir: str
    split: str
    compression: Compression
    shards: tuple[Shard, ...]
    feature_spec: dict[str, Any] | None

    @property
    def is_sequence(self) -> bool:
        """Whether the records are SequenceExamples (the feature spec has its two parts)."""
        return self.feature_spec is not None and "sequence" in self.feature_spec


def _read_feature_spec(output_dir: str) -> dict[str, Any] | None:
    path = join(output_dir, FEATURE_SPEC_NAME)
    if not path_exists(path):
        return None
    with open_binary(path) as handle:
        raw = handle.read(_MAX_FEATURE_SPEC_BYTES + 1)
    if len(raw) > _MAX_FEATURE_SPEC_BYTES:
        raise ValueError(f"{path}: the feature spec is larger than {_MAX_FEATURE_SPEC_BYTES} bytes")
    try:
        spec = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"{path}: the feature spec is not valid JSON: {error}") from None
    parts = ("context", "sequence") if isinstance(spec, dict) and "sequence" in spec else ("features",)
    if not isinstance(spec, dict) or not all(isinstance(spec.get(part), dict) for part in parts):
        raise ValueError(f"{path}: the feature spec lacks {' and '.join(map(repr, parts))}")
    return spec


def _sidecar(output_dir: str, entry: ShardEntry, shard_path: str) -> str | None:
    """The sidecar the manifest names for a shard, else `<shard>.tfindex` when it exists."""
    if entry.index is not None:
        return join(output_dir, entry.index.path)
    beside = shard_path + SIDECAR_SUFFIX
    return beside if path_exists(beside) else None


def load_split(output_dir: str, split: str) -> SplitOutput:
    """The shards, compression and feature spec of `split` in the output at `output_dir`.
    FileNotFoundError when it has no manifest; ValueError for a malformed manifest or spec,
    or a split the output lacks (naming the ones it has)."""
    output_dir = output_dir.rstrip("/") or "/"
    path = join(output_dir, MANIFEST_NAME)
    try:
        with open_binary(path) as handle:
            manifest = Manifest.from_json(handle.read(MAX_MANIFEST_BYTES + 1), path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{output_dir} has no {MANIFEST_NAME}: it holds no committed "
                                "output") from None
    entries = [entry for entry in manifest.shards if entry.split == split]
    declared = set(manifest.counts.splits) | {entry.split for entry in manifest.shards}
    if not entries and split not in declared:
        raise ValueError(f"{output_dir} has no split {split!r}; it has {sorted(declared)}")
    compression = parse_compression(manifest.compression)
    shards = []
    for entry in entries:
        path = join(output_dir, entry.path)
        # Only an uncompressed file can be entered at a byte offset.
        sidecar = _sidecar(output_dir, entry, path) if compression is Compression.NONE else None
        shards.append(Shard(path, entry.records, entry.bytes, sidecar))
    return SplitOutput(output_dir, split, compression, tuple(shards), _read_feature_spec(output_dir))
