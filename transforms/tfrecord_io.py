"""Reading TFRecord files in Beam: `ReadTFRecordFiles`.

Files are matched and read inside DoFns (not through `beam.io.Read`), so the transform
runs on every runner this project supports, DaskRunner included. Every record's CRCs are
checked; a corrupt file fails the read with the file, offset and record index.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms import manifest as manifest_lib
from transforms.format.compression import Compression, compression_from_path, parse_compression
from transforms.format.example_codec import decode_example
from transforms.format.manifest_format import MANIFEST_NAME, Manifest
from transforms.format.tfrecord_reader import iter_records

__all__ = ["ReadTFRecordFiles", "listed_shard_paths", "manifest_shard_paths", "read_tfrecord_file"]


def manifest_shard_paths(output_dir: str, split: str | None = None) -> list[str]:
    """The shard paths a committed output's manifest lists (optionally one split only).

    Raises FileNotFoundError when `output_dir` has no manifest: without one, nothing in
    the folder is committed output.
    """
    manifest = manifest_lib.read_manifest(output_dir)
    if manifest is None:
        raise FileNotFoundError(f"{output_dir} has no {MANIFEST_NAME}")
    return listed_shard_paths(output_dir, manifest, split)


def listed_shard_paths(output_dir: str, manifest: Manifest, split: str | None = None) -> list[str]:
    """The shard paths an already-read `manifest` of `output_dir` lists."""
    return [fs.join_path(output_dir, shard.path) for shard in manifest.shards
            if split is None or shard.split == split]


def read_tfrecord_file(path: str, compression: str | Compression | None = None) -> Iterator[bytes]:
    """Yields the payloads of one TFRecord file on any Beam filesystem; `compression` None:
    from the file's suffix (`compression_from_path`). Raises `TFRecordCorruptError`."""
    resolved = compression_from_path(path) if compression is None else parse_compression(compression)
    # Open raw: decompression is ours, so gzip errors get a record offset and index.
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for record in iter_records(f, resolved, path=path):
            yield record.payload


def _expand_patterns(patterns: Sequence[str]):
    for result in fs.match(list(patterns)):
        if not result.metadata_list:
            raise FileNotFoundError(f"no file matches {result.pattern!r}")
        for metadata in sorted(result.metadata_list, key=lambda m: m.path):
            yield metadata.path


def _existing_files(paths: Sequence[str]):
    for path in paths:
        if not FileSystems.exists(path):
            raise FileNotFoundError(f"{path} is listed in the manifest but does not exist")
        yield path


class ReadTFRecordFiles(beam.PTransform):
    """Reads TFRecord files matching glob patterns, yielding payloads or Example dicts.

    `patterns`: a glob or globs on any Beam filesystem; `compression`: "none", "gzip" or
    "zlib", or None (default) to decide per file by suffix (.gz: gzip, .zz/.zlib: zlib);
    `parse`: yield each record as a dict {feature name: list of values}, not as bytes.

    Use `ReadTFRecordFiles.from_output(dir, split)` to read exactly what a committed
    output's manifest lists.
    """

    def __init__(self, patterns: str | Sequence[str], compression=None, parse: bool = False):
        super().__init__()
        self._patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        self._exact = False  # from_output: the manifest's paths, not patterns
        self._compression = None if compression is None else parse_compression(compression)
        self._parse = parse

    @classmethod
    def from_output(cls, output_dir: str, split: str | None = None, parse: bool = False):
        """Reads the shards listed in `output_dir`'s manifest (one split, or all): those
        paths exactly, not as patterns (an output folder may be named `out[1]`)."""
        reader = cls(manifest_shard_paths(output_dir, split), parse=parse)
        reader._exact = True
        return reader

    def expand(self, pbegin):
        match = _existing_files if self._exact else _expand_patterns
        records = (
            pbegin
            | "Patterns" >> beam.Create(self._patterns)
            | "MatchFiles" >> beam.FlatMap(lambda pattern: match([pattern]))
            | "ReadRecords" >> beam.FlatMap(read_tfrecord_file, self._compression)
        )
        if self._parse:
            records = records | "ParseExamples" >> beam.Map(
                lambda payload: {name: values for name, (_, values) in decode_example(payload).items()})
        return records
