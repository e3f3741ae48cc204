"""Opening the files of an output for reading, Beam-free: local paths with `open()`, any
URI (`gs://`, `s3://`, ...) through `fsspec` when it is installed."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import BinaryIO

__all__ = ["is_uri", "join", "open_binary", "path_exists"]


def is_uri(path: str) -> bool:
    """Whether `path` names a file through a scheme (`gs://bucket/x`) rather than locally."""
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path.removeprefix("file://")


def join(root: str, relative: str) -> str:
    """`relative` (a plain relative path, as the manifest lists) under `root`."""
    if is_uri(root):
        return posixpath.join(root, relative)
    return str(Path(_local(root)) / relative)


def _fsspec():
    try:
        import fsspec
    except ImportError:
        raise ImportError("reading an output at a URI (gs://, s3://, ...) needs fsspec and its "
                          "filesystem (for gs://: pip install fsspec gcsfs); local paths need "
                          "neither") from None
    return fsspec


def open_binary(path: str) -> BinaryIO:
    """`path` opened for raw bytes (never decompressed on the fly: the readers decompress,
    so a bad stream is reported with its record offset)."""
    if is_uri(path):
        return _fsspec().open(path, "rb", compression=None).open()
    return open(_local(path), "rb")  # noqa: SIM115 - the caller closes it


def path_exists(path: str) -> bool:
    if is_uri(path):
        filesystem, _, [resolved] = _fsspec().get_fs_token_paths(path)
        return filesystem.exists(resolved)
    return Path(_local(path)).is_file()
