"""`tfrecord-pipeline verify`: prove that TFRecord output is intact.

For every file: every record's length and data CRCs, and that every payload parses as a
`tf.train.Example` or `tf.train.SequenceExample` (which `sequence:` specs write). For an
output folder with a manifest, also that the shards listed exist with the recorded size,
sha256 and record count, that dead-letter files, side files (`files`) and the previous
generation's files kept for its readers (`superseded`, never read as shards) match their
size and sha256, that no stray shard sits beside them, and that the counts reconcile. A
shard's `.tfindex` sidecar (listed in the manifest, or beside a bare file) must match the
shard's records (and the manifest's size and sha256).

A file's compression comes from its name (`.gz`; `.zz`, `.zlib`, Beam's `.deflate`), else
is sniffed from its first bytes (Beam's suffix-less `prefix-00000-of-00001`). A folder
without a manifest stands for its `*.tfrecord*` files and its files named like shards
(`*-NNNNN-of-NNNNN`, optionally with a compression suffix), never its indexes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.errors import UsageError
from transforms import fs, output_files
from transforms import manifest as manifest_lib
from transforms.format.compression import Compression, compression_from_path
from transforms.format.example_codec import decode_example
from transforms.format.manifest_format import MANIFEST_NAME, FileEntry, Manifest, ShardEntry
from transforms.format.tfrecord_format import framed_size
from transforms.format.tfrecord_index import INDEX_SUFFIX, index_line
from transforms.format.tfrecord_reader import (
    SNIFF_BYTES,
    TFRecordCorruptError,
    iter_records,
    sniff_compression,
)

__all__ = ["HashingFile", "Problem", "compression_of_file", "format_report", "resolve_tfrecord_paths",
           "verify_paths"]

_READ_CHUNK = 8 * 1024 * 1024

#: Files named like shards (ours, and Beam's `WriteToTFRecord` default template, which adds
#: no suffix unless asked): the only suffix-less names a folder without manifest stands for.
_SHARD_NAME = re.compile(r"^[^.].*-\d{5,}-of-\d{5,}(\.tfrecords?)?(\.(gz|zz|zlib|deflate))?$")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One defect found: where it is and what is wrong."""

    path: str
    message: str
    offset: int | None = None
    record: int | None = None

    def __str__(self) -> str:
        where = self.path
        if self.offset is not None:
            where += f" offset {self.offset}"
        if self.record is not None:
            where += f" record {self.record}"
        return f"{where}: {self.message}"


@dataclasses.dataclass
class _FileResult:
    records: int = 0
    bytes: int = 0
    sha256: str = ""
    compressed: bool = False
    # sha256 and size of the index the records call for (uncompressed files, when asked).
    index_sha256: str | None = None
    index_bytes: int = 0


class HashingFile:
    """A raw file that hashes and counts every byte read from it or written to it."""

    def __init__(self, raw):
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def _count(self, data: bytes) -> bytes:
        self.sha256.update(data)
        self.bytes += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        return self._count(self._raw.read(size))

    def write(self, data: bytes) -> int:
        self._raw.write(self._count(data))
        return len(data)

    def drain(self) -> None:
        while self.read(_READ_CHUNK):
            pass


def compression_of_file(path: str) -> Compression:
    """The file's compression: from its name, or sniffed when the name says nothing."""
    compression = compression_from_path(path)
    if compression is not Compression.NONE or path.lower().endswith(".tfrecord"):
        return compression
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        return sniff_compression(raw.read(SNIFF_BYTES))


def _check_file(path: str, problems: list[Problem], with_index: bool = False) -> _FileResult:
    """Checks every record of one file; with `with_index`, also computes the digest of the
    index its records call for (see `_check_index`), in the same pass."""
    result = _FileResult()
    try:
        compression = compression_of_file(path)
        raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as error:  # noqa: BLE001 - report any I/O failure as a problem
        problems.append(Problem(path, f"cannot open: {error}"))
        return result
    result.compressed = compression is not Compression.NONE
    index_hash = hashlib.sha256() if with_index and not result.compressed else None
    with raw:
        reader = HashingFile(raw)
        try:
            for info in iter_records(reader, compression, path=path):
                result.records += 1
                if index_hash is not None:
                    line = index_line(info.offset, framed_size(len(info.payload)))
                    index_hash.update(line)
                    result.index_bytes += len(line)
                try:
                    decode_example(info.payload)
                except ValueError as error:
                    problems.append(Problem(path, f"payload is not a tf.train.Example: {error}",
                                            info.offset, info.index))
        except TFRecordCorruptError as error:
            problems.append(Problem(path, error.reason, error.offset, error.index))
        reader.drain()
    result.bytes = reader.bytes
    result.sha256 = reader.sha256.hexdigest()
    if index_hash is not None:
        result.index_sha256 = index_hash.hexdigest()
    return result


def _check_index(index_path: str, shard_path: str, shard: _FileResult, problems: list[Problem],
                 listed: FileEntry | None = None) -> None:
    """Checks a shard's index sidecar: as the manifest lists it (`listed`: its entry), and
    equal to the index of the shard's records."""
    found = _file_digest(index_path) if listed is None else _check_listed_file(
        index_path, listed, problems, "index ")
    if found is None:
        return
    if shard.compressed:
        problems.append(Problem(index_path, f"an index beside {shard_path}, which is compressed: "
                                            f"offsets in a compressed stream are not seekable"))
    elif shard.index_sha256 is not None and found != (shard.index_bytes, shard.index_sha256):
        problems.append(Problem(index_path, f"index does not match the records of {shard_path}"))


def _file_digest(path: str) -> tuple[int, str]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        reader = HashingFile(raw)
        reader.drain()
    return reader.bytes, reader.sha256.hexdigest()


def _check_sizes(path: str, entry: FileEntry | ShardEntry, actual: dict[str, object],
                 problems: list[Problem], what: str = "") -> None:
    """Compares what a file holds (`actual`: "bytes", "sha256", ...) with its manifest entry."""
    for key, value in actual.items():
        if getattr(entry, key) != value:
            problems.append(Problem(path, f"{what}{key} is {value!r}, manifest says {getattr(entry, key)!r}"))


def _check_listed_file(path: str, entry: FileEntry | ShardEntry, problems: list[Problem],
                       what: str = "") -> tuple[int, str] | None:
    """Checks a file the manifest lists by size and sha256 only (dead letters, side files,
    superseded files, indexes); returns its (size, sha256), None when it is missing."""
    if not FileSystems.exists(path):
        problems.append(Problem(path, f"{what}listed in the manifest but missing"))
        return None
    size, digest = _file_digest(path)
    _check_sizes(path, entry, {"bytes": size, "sha256": digest}, problems, what)
    return size, digest


def _verify_output_dir(output_dir: str, manifest: Manifest, problems: list[Problem]) -> int:
    manifest_path = fs.join_path(output_dir, MANIFEST_NAME)
    listed = {entry.path for entry in manifest.listed_files()}
    records_per_split: dict[str | None, int] = {}
    checked = 0
    for shard in manifest.shards:
        path = fs.join_path(output_dir, shard.path)
        if not FileSystems.exists(path):
            problems.append(Problem(path, "listed in the manifest but missing"))
            continue
        result = _check_file(path, problems, with_index=shard.index is not None)
        checked += 1
        if shard.index is not None:
            _check_index(fs.join_path(output_dir, shard.index.path), path, result, problems, shard.index)
        records_per_split[shard.split] = records_per_split.get(shard.split, 0) + result.records
        _check_sizes(path, shard, {"records": result.records, "bytes": result.bytes,
                                   "sha256": result.sha256}, problems)
    for entry in manifest.dead_letter_files + manifest.files + manifest.superseded:
        _check_listed_file(fs.join_path(output_dir, entry.path), entry, problems)
    # The files an interrupted commit's journal names (an append's next generation, before
    # its manifest) are not this generation's, nor strangers: the same command finishes them.
    listed |= output_files.owned_paths(output_dir, manifest)
    for metadata in fs.match([fs.join_path(fs.literal(output_dir), "*.tfrecord*")])[0].metadata_list:
        relative = metadata.path[len(output_dir):].lstrip("/")
        # No shard name starts with "." (split names cannot): hidden files are not shards.
        if relative not in listed and not relative.startswith("."):
            problems.append(Problem(metadata.path, "shard not listed in the manifest"))
    counts = manifest.counts
    # SequenceExamples hold several input rows each: input rows reconcile with written_rows.
    if counts.input != counts.rows_written + counts.dead_letter:
        problems.append(Problem(manifest_path, f"counts do not reconcile: {counts.to_dict()}"))
    for split, entry in counts.splits.items():
        held = records_per_split.get(split, 0)
        if entry.written != held:
            problems.append(Problem(manifest_path, f"split {split!r}: manifest counts {entry.written} "
                                                   f"written records, shards hold {held}"))
    return checked


def resolve_tfrecord_paths(path: str) -> tuple[list[str], Manifest | None]:
    """A folder (with or without a manifest), a file, or a glob -> files to check.

    Raises ValueError when a manifest exists but cannot be read.
    """
    manifest = manifest_lib.read_manifest(path.rstrip("/"))
    if manifest is not None:
        return [], manifest
    if any(ch in path for ch in "*?["):
        matched = fs.match([path])[0].metadata_list
        # Index sidecars sit beside the shards a glob names, but are no TFRecord files.
        return sorted(m.path for m in matched if not m.path.endswith(INDEX_SUFFIX)), None
    if ("://" in path or not os.path.isdir(path)) and FileSystems.exists(path):
        return [path], None
    matched = fs.match([fs.join_path(fs.literal(path), "*")])[0].metadata_list
    names = [(m.path, m.path.rstrip("/").rsplit("/", 1)[-1]) for m in matched]
    return sorted(full for full, name in names if _stands_for_tfrecord(name)), None


def _stands_for_tfrecord(name: str) -> bool:
    """Whether a file in a folder without manifest is one of its TFRecord files."""
    if name.startswith(".") or name.endswith(INDEX_SUFFIX):
        return False
    return ".tfrecord" in name or bool(_SHARD_NAME.match(name))


def verify_paths(paths: Sequence[str]) -> tuple[int, list[Problem]]:
    """Verifies files, globs or output folders; returns (files checked, problems).

    Every path is resolved first: one that stands for nothing raises `UsageError` (exit 2, as
    for inspect, index and export) before any file is checked; an unreadable manifest is a
    problem of its folder.
    """
    problems: list[Problem] = []
    resolved = []
    for path in paths:
        try:
            files, manifest = resolve_tfrecord_paths(path)
        except ValueError as error:
            problems.append(Problem(path, str(error)))
            continue
        if manifest is None and not files:
            raise UsageError(f"no TFRecord file found at {path}")
        resolved.append((path, files, manifest))
    checked = 0
    for path, files, manifest in resolved:
        if manifest is not None:
            checked += _verify_output_dir(path.rstrip("/"), manifest, problems)
            continue
        for file_path in files:
            index_path = file_path + INDEX_SUFFIX
            has_index = FileSystems.exists(index_path)
            result = _check_file(file_path, problems, with_index=has_index)
            if has_index:
                _check_index(index_path, file_path, result, problems)
            checked += 1
    return checked, problems


def format_report(checked: int, problems: Iterable[Problem]) -> str:
    problems = list(problems)
    summary = {"files_checked": checked, "problems": len(problems), "status": "corrupt" if problems else "ok"}
    return "\n".join([*map(str, problems), json.dumps(summary)])
