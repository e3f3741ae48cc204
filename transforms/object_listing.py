"""Streaming listings of gs:// folders, optionally of a range of names only.

Beam's `FileSystems.match` returns a listing whole (and its GCS client keeps every name it
listed, to drop repeats), so millions of objects cost memory in proportion. Here a gs://
folder is listed one page at a time through the client Beam's GCS filesystem makes
(`GcsIO().client`: its credentials, and the emulator `STORAGE_EMULATOR_HOST` names), and a
range of names is asked of the server (`start_offset`/`end_offset`), so a worker reading one
slice of a folder lists that slice.

Names come in UTF-8 byte order, which is Python's `str` order: a folder's own objects come
sorted, but a recursive listing may interleave them with its subfolders' (`a/b/x` lies
between `a/a` and `a/c`). Names ending in "/" (folder placeholders) are not objects. Other
object stores (s3://, ...) are listed by Beam's FileSystems (`streams` is False).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

from transforms import fs

__all__ = ["ListedObject", "list_objects", "streams"]

#: (name relative to the listed folder, size in bytes, modification time in seconds or None)
ListedObject = tuple[str, int, float | None]

_FIELDS = "items(name,size,updated),nextPageToken"


def streams(uri: str) -> bool:
    """True where `list_objects` can list `uri` (a gs:// folder)."""
    return uri.startswith("gs://")


def list_objects(folder: str, *, recursive: bool, first: str | None = None,
                 stop: str | None = None) -> Iterator[ListedObject]:
    """The objects under the gs:// `folder` (names relative to it), in name order, one page
    in memory at a time; `recursive`: also those in subfolders. `first`/`stop`: only names in
    [first, stop) (None: open), asked of the server and checked here too, for emulators that
    ignore the range. FileNotFoundError: no such bucket; ValueError: the store refuses the
    listing (as for a local folder that cannot be read)."""
    from google.api_core import exceptions

    bucket, _, path = folder[len("gs://"):].partition("/")
    if not bucket:
        raise ValueError(f"{folder} names no bucket")
    # "path/in/it/", empty for a bucket's top. Nothing is stripped: object names may hold empty
    # segments (`a//b`), whose folder `gs://bucket/a/` is another folder than `gs://bucket/a`.
    prefix = path + "/" if path else ""
    query: dict = {"prefix": prefix, "fields": _FIELDS}
    if not recursive:
        query["delimiter"] = "/"
    if first is not None:
        query["start_offset"] = prefix + first
    if stop is not None:
        query["end_offset"] = prefix + stop
    try:
        for blob in _client().list_blobs(bucket, **query):
            name = blob.name[len(prefix):]
            if not name or name.endswith("/") or (not recursive and "/" in name):
                continue
            if (first is not None and name < first) or (stop is not None and name >= stop):
                continue
            yield name, int(blob.size or 0), blob.updated.timestamp() if blob.updated else None
    except exceptions.NotFound as error:
        raise FileNotFoundError(f"cannot list {folder}: bucket gs://{bucket} does not exist") from error
    except (exceptions.Forbidden, exceptions.Unauthorized) as error:
        denied = PermissionError(errno.EACCES, f"permission denied ({error.code} {error.message})")
        raise ValueError(fs.unreadable_folder(folder, denied)) from error


_CLIENTS: dict[tuple, object] = {}


def _client():
    """Beam's GCS client, one per process (one made before a fork keeps connections its
    children must not share) and emulator address (`STORAGE_EMULATOR_HOST`)."""
    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"))
    if key not in _CLIENTS:
        from apache_beam.io.gcp.gcsio import GcsIO

        _CLIENTS.clear()
        _CLIENTS[key] = GcsIO().client
    return _CLIENTS[key]
