"""Path and file helpers for any Beam filesystem (local, gs://, ...).

Beam's `FileSystems.match` and its local `delete` take glob patterns, and an output folder
may be named `out[1]` (as a pattern, `out1`): our paths go through `literal` before a
`match`, and are deleted with `delete`, never `FileSystems.delete`."""

from __future__ import annotations

import glob
import os
import posixpath
import shutil
import warnings
from collections.abc import Iterable

from apache_beam.io.filesystems import FileSystems

__all__ = ["cannot_list", "delete", "delete_tree", "ensure_parent", "join_path", "input_pattern", "literal",
           "match", "path_exists", "sync_files", "unreadable_folder", "without_file_scheme",
           "write_bytes_atomically"]


def unreadable_folder(folder: str, error: OSError) -> str:
    """The one line saying that `folder` could not be listed, and why."""
    return f"cannot read the folder {folder}: {error.strerror or error}"


def cannot_list(folder: str) -> str | None:
    """Why the local `folder` cannot be listed, or None (it can, is missing, is no folder or
    is not local): Beam's local match and `os.walk` pass over a folder they may not read,
    which then looks empty."""
    if "://" in folder:
        return None
    try:
        with os.scandir(folder):
            return None
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        return unreadable_folder(folder, error)


def join_path(root: str, *parts: str) -> str:
    """Joins `parts` onto `root` for any Beam filesystem (local or URI)."""
    if "://" in root:
        return posixpath.join(root, *parts)
    return FileSystems.join(root, *parts)


def path_exists(path: str) -> bool:
    return FileSystems.exists(path)


def literal(path: str) -> str:
    """`path` as a `FileSystems.match` pattern matching `path` only (glob characters escaped,
    which Beam's local and object-store matching both honour)."""
    return glob.escape(path)


def without_file_scheme(uri: str) -> str:
    """The local path a `file://` URI names (`file:///x` and `file://localhost/x` are `/x`;
    Beam has no `file` scheme); other paths unchanged. ValueError: the URI names another host."""
    if not uri[:7].lower() == "file://":
        return uri
    host, slash, path = uri[7:].partition("/")
    if host.lower() not in ("", "localhost"):
        raise ValueError(f"{uri} names a file on the host {host!r}, not on this machine")
    return slash + path


def match(patterns: list[str], limits: list[int] | None = None) -> list:
    """`FileSystems.match`, quiet about `literal`'s escapes: Beam turns the `[[]` standing for
    `[` into the regex `[[]`, right but warned of by `re` as a "possible nested set"."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Possible nested set", FutureWarning)
        return FileSystems.match(patterns, limits)


def input_pattern(path: str) -> str:
    """The match pattern for a user's input path: the path itself (`literal`) when it holds
    glob characters and a file or folder of exactly that name exists, as a shell does; else
    the path as a glob. So an input named `photos[1].csv` is that file, not `photos1.csv`."""
    if any(ch in path for ch in "*?[") and FileSystems.exists(path.rstrip("/") or path):
        # Absolute: Beam lists a relative pattern's folder from before its first glob
        # character, and a relative `g[1]/x` would be looked for from "", finding nothing.
        return literal(path if "://" in path else os.path.abspath(path))
    return path


def delete(paths: Iterable[str]) -> None:
    """Deletes exactly `paths` (files; local folders with everything in them)."""
    remote = []
    for path in paths:
        if "://" in path:
            remote.append(path)
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    if remote:  # object stores delete the names given, not patterns
        FileSystems.delete(remote)


def delete_tree(path: str) -> None:
    """Deletes a folder and everything in it (on object stores, every object under the
    prefix); a missing folder is not an error."""
    if "://" in path:
        objects = match([literal(path.rstrip("/")) + "/**"])[0].metadata_list
        if objects:
            FileSystems.delete([metadata.path for metadata in objects])
    elif os.path.lexists(path):
        delete([path])


def ensure_parent(path: str) -> None:
    """Creates the parent folder of `path` where the filesystem has real folders."""
    if "://" in path:
        return  # object stores have no folders to create
    parent = FileSystems.split(path)[0]
    if parent and not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)
        except Exception:  # noqa: BLE001 - created concurrently is fine
            if not FileSystems.exists(parent):
                raise


def _fsync_path(path: str, directory: bool = False) -> None:
    descriptor = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sync_files(paths: Iterable[str]) -> None:
    """Makes local files durable: fsync of each file, then of each folder holding one (its
    entry). Remote paths are skipped: durable when a write returns."""
    folders = set()
    for path in paths:
        if "://" in path:
            continue
        _fsync_path(path)
        folders.add(os.path.dirname(os.path.abspath(path)))
    for folder in sorted(folders):
        _fsync_path(folder, directory=True)


def write_bytes_atomically(path: str, data: bytes) -> None:
    """Writes `data` so that `path` is either absent, old, or complete, and durable.

    gs:// publishes an object only when its upload completes; on local disk the bytes go to
    `path.partial`, are synced and renamed into place (then the folder entry is synced);
    other filesystems write a temporary name and rename. A failed write removes its temporary.
    """
    if path.startswith("gs://"):
        with FileSystems.create(path) as handle:
            handle.write(data)
        return
    ensure_parent(path)
    temporary = f"{path}.partial"
    local = "://" not in path
    try:
        if local:
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
            _fsync_path(os.path.dirname(os.path.abspath(path)), directory=True)
        else:
            with FileSystems.create(temporary) as handle:
                handle.write(data)
            if FileSystems.exists(path):
                delete([path])
            FileSystems.rename([temporary], [path])
    except BaseException:
        # A failed write (`path` a folder, a full disk, an interrupt) leaves nothing behind;
        # a folder of that name is not ours (the write could not have created it).
        if os.path.isfile(temporary) if local else FileSystems.exists(temporary):
            delete([temporary])
        raise
