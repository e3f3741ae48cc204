"""Path and file helpers for any Beam filesystem (local, gs://, ...): joining, existence,
deleting a folder tree, creating parent folders, writing a small file atomically."""

from __future__ import annotations

import posixpath

from apache_beam.io.filesystems import FileSystems

__all__ = [
    "delete_tree",
    "ensure_parent",
    "join_path",
    "path_exists",
    "write_bytes_atomically",
]


def join_path(root: str, *parts: str) -> str:
    """Joins `parts` onto `root` for any Beam filesystem (local or URI)."""
    if "://" in root:
        return posixpath.join(root, *parts)
    return FileSystems.join(root, *parts)


def path_exists(path: str) -> bool:
    return FileSystems.exists(path)


def delete_tree(path: str) -> None:
    """Deletes a folder and everything in it; on object stores, every object under the prefix.

    A missing folder is not an error.
    """
    if "://" in path:
        objects = FileSystems.match([path.rstrip("/") + "/**"])[0].metadata_list
        if objects:
            FileSystems.delete([metadata.path for metadata in objects])
    elif FileSystems.exists(path):
        FileSystems.delete([path])


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


def write_bytes_atomically(path: str, data: bytes) -> None:
    """Writes `data` so that `path` is either absent, old, or complete.

    Object stores (gs://) publish an object only when its upload completes; on local and
    other filesystems the bytes go to a sibling temporary name that is then renamed.
    """
    if path.startswith("gs://"):
        with FileSystems.create(path) as handle:
            handle.write(data)
        return
    ensure_parent(path)
    temporary = f"{path}.partial"
    with FileSystems.create(temporary) as handle:
        handle.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])

