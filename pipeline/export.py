"""`tfrecord-pipeline export PATH --to parquet OUT [--split NAME]`: TFRecord files of Examples
to Parquet, without TensorFlow.

PATH is an output folder of this tool (its manifest lists the shards; `feature_spec.json` gives
the columns, and which are lists; an older output that does not say is completed from the
records) or any TFRecord file, folder or glob (the columns are learnt from the records in a
first pass; compression as `verify` finds it). Records are read with every CRC checked,
decoded in batches (`transforms.format.example_decoder`) and written batch by batch as row
groups, so memory stays bounded whatever the size of the input.
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import os
import uuid
from collections.abc import Iterator

import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.errors import OutputProblems, UsageError
from pipeline.verify import compression_of_file, resolve_tfrecord_paths
from transforms import fs
from transforms.format.compression import parse_compression
from transforms.format.example_decoder import ExampleDecodeError, MixedKindError, decode_examples
from transforms.format.example_table import (
    ColumnSchema,
    SchemaLearner,
    SchemaMismatch,
    arrow_schema,
    batch_to_table,
    column_from_feature_spec,
)
from transforms.format.manifest_format import FEATURE_SPEC_NAME
from transforms.format.tfrecord_reader import TFRecordCorruptError, iter_records
from transforms.tfrecord_io import listed_shard_paths

__all__ = ["BATCH_RECORDS", "export_command"]

#: Records decoded (and written as one Parquet row group) at a time, unless they exceed
#: `_BATCH_BYTES` first: large enough that numpy's per-call costs vanish, small enough that a
#: batch of images stays a few hundred MB.
BATCH_RECORDS = 65536
_BATCH_BYTES = 64 << 20
_READ_STEP = 1024  # records read between checks of the batch's size
_FRAME_BYTES = 16  # a TFRecord frame's length, length CRC and payload CRC
_MAX_SIDE_FILE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class _Source:
    """The TFRecord files of one Parquet output; `compression` None: each file's own."""

    name: str  # the split, or "" for plain files
    files: tuple[str, ...]
    compression: str | None


@dataclasses.dataclass
class _Batch:
    """Payloads read, with where each came from (for error messages)."""

    # Payloads and offsets, not the reader's RecordInfo tuples: holding 64K tuples would make
    # the garbage collector scan them again and again (measured: +30 % time).
    payloads: list[bytes] = dataclasses.field(default_factory=list)
    offsets: list[int] = dataclasses.field(default_factory=list)
    file_starts: list[int] = dataclasses.field(default_factory=list)  # first index per file
    files: list[str] = dataclasses.field(default_factory=list)
    size: int = 0  # framed bytes

    def where(self, index: int) -> str:
        file = self.files[bisect.bisect_right(self.file_starts, index) - 1]
        return f"{file}: record at byte offset {self.offsets[index]}"


def export_command(path: str, to: str, out: str, split: str | None = None) -> None:
    """Exports the Examples at `path` to Parquet at `out`; prints one line per file written.
    Raises `UsageError` (unknown format, nothing at `path`, unknown split, SequenceExample
    output, an OUT that cannot hold the splits) or `OutputProblems` (corrupt input, file and
    byte offset named; a payload that is not an Example; a record that does not fit)."""
    if to != "parquet":
        raise UsageError(f"cannot export to {to!r}; supported: parquet")
    sources, columns = _plan(path, split)
    targets = _targets(sources, out, from_folder=sources[0].name != "")
    if not columns or any(c.is_list is None for c in columns):  # learn from the records
        columns = _complete_columns(columns, sources)
    # All or nothing: every file is written under a temporary name first, so an export that
    # fails on a later split leaves no earlier split's file behind (nor replaces one).
    temporaries = [f"{target}.tmp-{uuid.uuid4().hex[:12]}" for target in targets]
    try:
        rows = [_write_parquet(source, columns, temporary)
                for source, temporary in zip(sources, temporaries, strict=True)]
    except BaseException:
        fs.delete([temporary for temporary in temporaries if FileSystems.exists(temporary)])
        raise
    for temporary, target, count in zip(temporaries, targets, rows, strict=True):
        _replace(temporary, target)
        print(f"wrote {target} ({count} rows)")


# ------------------------------------------------------------------------------ planning


def _plan(path: str, split: str | None) -> tuple[list[_Source], list[ColumnSchema]]:
    """The sources to export and their columns: [] when no feature spec declares them,
    is_list None where it does not say."""
    try:
        files, manifest = resolve_tfrecord_paths(path)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    except ValueError as error:  # a manifest that cannot be read: the output is damaged
        raise OutputProblems(str(error)) from None
    if manifest is None:
        if split is not None:
            raise UsageError("--split needs an output folder with a manifest.json",
                             hint=f"{path} is a file or glob: export it without --split")
        if not files:
            raise UsageError(f"no TFRecord file found at {path}")
        return [_Source("", tuple(files), None)], []
    folder = path.rstrip("/")
    splits = list(dict.fromkeys(shard.split for shard in manifest.shards))
    if split is not None:
        if split not in splits:
            raise UsageError(f"{folder} has no split {split!r}; it has {', '.join(splits) or 'none'}")
        splits = [split]
    sources = [_Source(name, tuple(listed_shard_paths(folder, manifest, name)), manifest.compression)
               for name in splits]
    if not sources:
        raise UsageError(f"{folder} holds no shard to export")
    texts = {feature.get("name") for feature in (manifest.metadata.get("spec") or {}).get("features") or ()
             if isinstance(feature, dict) and feature.get("type") == "string"}
    return sources, [dataclasses.replace(column, text=column.name in texts)
                     for column in _spec_columns(folder)]


def _spec_columns(folder: str) -> list[ColumnSchema]:
    """The columns `feature_spec.json` declares ([] without one: learnt from the records)."""
    path = fs.join_path(folder, FEATURE_SPEC_NAME)
    if not FileSystems.exists(path):
        return []
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        raw = handle.read(_MAX_SIDE_FILE_BYTES)
    try:
        feature_spec = json.loads(raw)
        sequences = "sequence" in feature_spec or "context" in feature_spec
        features = {} if sequences else feature_spec["features"]
        columns = [column_from_feature_spec(name, features[name])
                   for name in sorted(features, key=lambda name: name.encode("utf-8"))]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise OutputProblems(f"{path} is not a valid feature spec: {error}") from None
    if sequences:
        raise UsageError(f"{folder} holds SequenceExamples: export supports Examples only")
    return columns


def _targets(sources: list[_Source], out: str, from_folder: bool) -> list[str]:
    if not from_folder or (len(sources) == 1 and out.endswith(".parquet")):
        return [out]
    if out.endswith(".parquet"):
        raise UsageError(f"{len(sources)} splits are exported: OUT must be a folder, got {out}",
                         hint="name a folder (one <split>.parquet each) or add --split NAME")
    return [fs.join_path(out, f"{source.name}.parquet") for source in sources]


def _complete_columns(columns: list[ColumnSchema], sources: list[_Source]) -> list[ColumnSchema]:
    """A first pass over the records: the kinds and list-ness they show (kinds declared by
    the spec win; a column the spec declares stays, even if no record holds it)."""
    learner = SchemaLearner()
    for source in sources:
        for batch, decoded in _decoded_batches(source):
            try:
                learner.add(decoded)
            except SchemaMismatch as error:
                raise OutputProblems(f"{batch.where(error.index)}: {error}") from None
    if not columns:
        return learner.columns()
    return [c if c.is_list is not None else dataclasses.replace(c, is_list=bool(learner.is_list(c.name)))
            for c in columns]


# ------------------------------------------------------------------------------- reading


def _read_batches(source: _Source) -> Iterator[_Batch]:
    batch = _Batch()
    for file in source.files:
        batch.file_starts.append(len(batch.payloads))
        batch.files.append(file)
        try:
            # Sniffed when the name does not say (Beam's suffix-less shards), as verify does.
            compression = (compression_of_file(file) if source.compression is None
                           else parse_compression(source.compression))
            handle = FileSystems.open(file, compression_type=CompressionTypes.UNCOMPRESSED)
        except OSError as error:
            raise OutputProblems(f"{file}: cannot open: {error}") from None
        with handle:
            records = iter_records(handle, compression, path=file)
            while True:
                # Taken in steps, by islice in C: no Python code runs per record here.
                step = min(_READ_STEP, BATCH_RECORDS - len(batch.payloads))
                try:
                    chunk = list(itertools.islice(records, step))
                except TFRecordCorruptError as error:
                    raise OutputProblems(str(error)) from None
                if not chunk:
                    break
                batch.payloads += [record.payload for record in chunk]
                batch.offsets += [record.offset for record in chunk]
                # Offsets grow through a file: the chunk's framed bytes without a sum.
                batch.size += chunk[-1].offset + _FRAME_BYTES + len(chunk[-1].payload) - chunk[0].offset
                if len(batch.payloads) >= BATCH_RECORDS or batch.size >= _BATCH_BYTES:
                    yield batch
                    batch = _Batch(file_starts=[0], files=[file])
    if batch.payloads:
        yield batch


def _decoded_batches(source: _Source):
    for batch in _read_batches(source):
        try:
            decoded = decode_examples(batch.payloads)
        except ExampleDecodeError as error:
            raise OutputProblems(f"{batch.where(error.index)} is not a tf.train.Example: "
                                 f"{error}") from None
        except MixedKindError as error:
            raise OutputProblems(f"{batch.where(error.index)}: {error}") from None
        yield batch, decoded


# ------------------------------------------------------------------------------- writing


def _write_parquet(source: _Source, columns: list[ColumnSchema], path: str) -> int:
    """Writes one Parquet file (a row group per batch) at `path`; returns the rows written."""
    fs.ensure_parent(path)
    rows = 0
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        with pq.ParquetWriter(handle, arrow_schema(columns)) as writer:
            for batch, decoded in _decoded_batches(source):
                try:
                    table = batch_to_table(decoded, columns)
                except SchemaMismatch as error:
                    raise OutputProblems(f"{batch.where(error.index)}: {error}") from None
                writer.write_table(table)
                rows += table.num_rows
    return rows


def _replace(temporary: str, target: str) -> None:
    """Renames `temporary` to `target`, replacing an earlier export."""
    if "://" not in target:
        os.replace(temporary, target)  # atomic
        return
    if FileSystems.exists(target):
        fs.delete([target])
    FileSystems.rename([temporary], [target])
