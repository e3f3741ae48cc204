"""`tfrecord-pipeline index PATH...`: write a `.tfindex` sidecar beside existing uncompressed
TFRecord files (ours, TensorFlow's, Beam's), for the `tfrecord` package and NVIDIA DALI.

PATH is resolved as `verify` resolves it. For an output folder with a manifest, the shards it
lists are indexed and the manifest is rewritten with each shard's `index` entry, so that
`verify` checks the indexes and later runs know the files are the tool's own; the folder is
locked meanwhile, as a conversion locks it. Every file is checked up front: a compressed one
is refused before anything is written (a gzip or zlib stream cannot be entered at an
offset). A corrupt file gets no index; the others still do, and the command then fails
naming the first corruption.
"""
from __future__ import annotations

import dataclasses

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.errors import OutputProblems, UsageError
from pipeline.output_lock import output_lock
from pipeline.verify import HashingFile, compression_of_file, resolve_tfrecord_paths
from transforms import fs
from transforms import manifest as manifest_lib
from transforms.format.compression import Compression
from transforms.format.manifest_format import MANIFEST_NAME, FileEntry, Manifest, ShardEntry
from transforms.format.tfrecord_index import INDEX_SUFFIX, write_index
from transforms.format.tfrecord_reader import TFRecordCorruptError

__all__ = ["index_command"]


@dataclasses.dataclass
class _Output:
    """A committed output folder whose listed shards are being indexed: the index entries
    written so far, by shard path."""

    folder: str
    manifest: Manifest
    indexes: dict[str, FileEntry] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Target:
    """One file to index; `output` and `entry` when a manifest lists it."""

    path: str
    output: _Output | None = None
    entry: ShardEntry | None = None


def _refuse_compressed(what: str, name: str) -> None:
    """`what` ("x.tfrecord.gz is", "the shards of DIR are") is `name`-compressed: refused."""
    raise UsageError(
        f"{what} {name}-compressed: an index holds byte offsets into the file, and a {name} "
        f"stream cannot be entered at an offset; only uncompressed TFRecord files can be indexed")


def _targets_of(path: str) -> list[_Target]:
    """The files PATH stands for (see the module docstring)."""
    try:
        files, manifest = resolve_tfrecord_paths(path)
    except ValueError as error:  # a manifest that cannot be read: the output is damaged
        raise OutputProblems(str(error)) from None
    if manifest is not None:
        folder = path.rstrip("/") or "/"
        if manifest.compression != Compression.NONE.value:
            _refuse_compressed(f"the shards of {folder} are", manifest.compression)
        output = _Output(folder, manifest)
        return [_Target(fs.join_path(folder, entry.path), output, entry) for entry in manifest.shards]
    if not files:
        raise UsageError(f"no TFRecord file found at {path} (give files, quoted globs or "
                         f"output folders)")
    return [_Target(file_path) for file_path in files]


def _write_one(path: str) -> tuple[int, int, str]:
    """Writes `path`'s index (to a temporary name, renamed when complete); returns the
    record count and the index's size and sha256."""
    index_path = path + INDEX_SUFFIX
    partial = index_path + ".partial"
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
            with FileSystems.create(partial, compression_type=CompressionTypes.UNCOMPRESSED) as out:
                sink = HashingFile(out)
                # Payload CRCs too: an index vouches for the records a reader seeks to.
                records = write_index(raw, sink, path=path, check_payloads=True)
    except BaseException:
        if FileSystems.exists(partial):
            fs.delete([partial])
        raise
    if FileSystems.exists(index_path):
        fs.delete([index_path])
    FileSystems.rename([partial], [index_path])
    return records, sink.bytes, sink.sha256.hexdigest()


def _rewrite_manifest(output: _Output) -> None:
    """Puts the manifest back with the new `index` entries (same layout as the commit's)."""
    shards = tuple(dataclasses.replace(shard, index=output.indexes.get(shard.path, shard.index))
                   for shard in output.manifest.shards)
    manifest = dataclasses.replace(output.manifest, shards=shards)
    fs.write_bytes_atomically(fs.join_path(output.folder, MANIFEST_NAME), manifest.to_json())


def _check_unchanged(output: _Output) -> None:
    """Refuses to go on when another run committed into the folder since it was read."""
    try:
        current = manifest_lib.read_manifest(output.folder)
    except ValueError as error:
        raise OutputProblems(str(error)) from None
    if current is None or current.metadata.get("run_id") != output.manifest.metadata.get("run_id"):
        raise UsageError(f"{output.folder} was rewritten by another run while it was being "
                         f"indexed", hint="run the index command again")


def _index_targets(targets: list[_Target]) -> list[TFRecordCorruptError]:
    corrupt = []
    for target in targets:
        try:
            records, size, digest = _write_one(target.path)
        except TFRecordCorruptError as error:
            corrupt.append(error)
            continue
        if target.output is not None and target.entry is not None:
            name = target.entry.path + INDEX_SUFFIX
            target.output.indexes[target.entry.path] = FileEntry(name, size, digest)
        print(f"wrote {target.path}{INDEX_SUFFIX} ({records} records)")
    return corrupt


def index_command(paths: list[str]) -> None:
    """Runs `tfrecord-pipeline index`; raises `UsageError` (a compressed file, nothing
    found) or `OutputProblems` (a corrupt file, a damaged manifest)."""
    targets = [target for path in paths for target in _targets_of(path)]
    for target in targets:  # all refused before any index is written
        try:
            compression = compression_of_file(target.path)
        except Exception as error:  # noqa: BLE001 - any I/O failure: one line, exit 4
            raise OutputProblems(f"{target.path}: cannot open: {error}") from None
        if compression is not Compression.NONE:
            _refuse_compressed(f"{target.path} is", compression.value)
    outputs = {id(t.output): t.output for t in targets if t.output is not None}
    corrupt = _index_targets([target for target in targets if target.output is None])
    for output in outputs.values():
        # A conversion into the folder would rewrite the manifest under us: take its lock.
        with output_lock(output.folder):
            _check_unchanged(output)
            corrupt += _index_targets([t for t in targets if t.output is output])
            _rewrite_manifest(output)
    if corrupt:
        more = f" (and {len(corrupt) - 1} more corrupt files)" if len(corrupt) > 1 else ""
        raise OutputProblems(f"{corrupt[0]}{more}; no index was written for it")
