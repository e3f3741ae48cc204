"""Image URIs: resolving manifest paths and confining reads to allowed roots.

A manifest names files, so a hostile or careless manifest could make a worker read any
file it can reach (`/etc/passwd`, `../../secrets`, a symlink planted in the image folder,
another bucket). Every image URI is therefore checked against a set of allowed roots
before it is opened: lexically after normalising `.` and `..` segments, and, for local
files, again after resolving symlinks (a link inside a root pointing outside is refused).

Beam-free; local paths use `os.path`, every other scheme (gs://, s3://, ...) POSIX rules.
"""

from __future__ import annotations

import functools
import io
import os
import posixpath
import re
from collections.abc import Iterable, Sequence

from transforms import fs

__all__ = ["default_allowed_roots", "is_remote", "is_real_path_within_roots", "is_within_roots",
           "normalize_root", "normalize_uri", "opened_real_path", "resolve_reference", "uri_dirname"]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$", re.DOTALL)


def is_remote(uri: str) -> bool:
    """True for scheme://... URIs other than file://."""
    match = _SCHEME.match(uri)
    return bool(match) and match.group(1).lower() != "file"


def normalize_uri(uri: str) -> str:
    """An absolute, `..`-free form of a path or URI (symlinks are not resolved here); raises
    ValueError for an empty URI, one containing a NUL byte, or a file:// URI of another host."""
    if not uri or "\x00" in uri:
        raise ValueError(f"invalid path {uri!r}")
    if is_remote(uri):
        scheme, rest = _SCHEME.match(uri).groups()
        bucket, _, key = rest.partition("/")
        trailing = key.endswith("/")
        key = posixpath.normpath("/" + key).lstrip("/") if key else ""
        return f"{scheme.lower()}://{bucket}/{key}" + ("/" if trailing and key else "")
    return os.path.abspath(os.path.normpath(fs.without_file_scheme(uri)))


def normalize_root(root: str) -> str:
    """A root in the form `is_within_roots` compares against (remote roots end with /)."""
    root = normalize_uri(root)
    if is_remote(root) and not root.endswith("/"):
        root += "/"
    return root


def uri_dirname(uri: str) -> str:
    """The folder holding a file, as a root (gs://b/x/m.csv -> gs://b/x/)."""
    if is_remote(uri):
        scheme, rest = _SCHEME.match(uri).groups()
        return f"{scheme.lower()}://{posixpath.dirname(rest)}/"
    return os.path.dirname(normalize_uri(uri))


def default_allowed_roots(manifest_path: str, command_line_uris: Iterable[str] = ()) -> tuple[str, ...]:
    """The manifest's own folder tree plus every gs:// bucket named on the command line (the
    manifest's and `command_line_uris`, the other paths the user typed, e.g. --output)."""
    roots = [uri_dirname(manifest_path)]
    for uri in (manifest_path, *command_line_uris):
        match = _SCHEME.match(uri or "")
        bucket = match.group(2).split("/", 1)[0] if match and match.group(1).lower() == "gs" else ""
        if bucket:
            roots.append(f"gs://{bucket}/")
    return tuple(dict.fromkeys(normalize_root(root) for root in roots))


def resolve_reference(value: str, base_dir: str) -> str:
    """The URI a manifest cell names: absolute paths and URIs as they are, relative paths
    against the manifest's folder; always normalised. Raises ValueError for an empty value
    or one containing a NUL byte."""
    value = value.strip()
    if not value or "\x00" in value:
        raise ValueError(f"invalid image path {value!r}")
    if _SCHEME.match(value) or os.path.isabs(value):
        return normalize_uri(value)
    if is_remote(base_dir):
        return normalize_uri(base_dir.rstrip("/") + "/" + value)
    return normalize_uri(os.path.join(base_dir, value))


def _inside(path: str, root: str, remote: bool) -> bool:
    if remote:
        return path.startswith(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.lru_cache(maxsize=256)
def _real_root(root: str) -> str:
    return os.path.realpath(root)


def opened_real_path(handle, path: str) -> str:
    """The real path of an open local file: what was actually opened, symlinks resolved. On
    Linux the kernel says which file the descriptor refers to (one readlink, and no race
    between checking a path and opening it); elsewhere `path` is resolved."""
    try:
        real = os.readlink(f"/proc/self/fd/{handle.fileno()}")
        if real.startswith("/"):
            return real
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    return os.path.realpath(path)


def is_within_roots(uri: str, roots: Sequence[str], *, resolve_symlinks: bool = True) -> bool:
    """Whether `uri` lies inside one of `roots` (already normalised by `normalize_root`). Local
    paths must be inside a root both as written (after `..` normalisation) and after resolving
    symlinks (against the roots' own resolved forms), so a symlink escaping the tree is
    refused while a root that is itself a symlink still works."""
    try:
        path = normalize_uri(uri)
    except ValueError:
        return False
    remote = is_remote(path)
    candidates = [root for root in roots if is_remote(root) == remote]
    if not any(_inside(path, root, remote) for root in candidates):
        return False
    if remote or not resolve_symlinks:
        return True
    return is_real_path_within_roots(os.path.realpath(path), candidates)


def is_real_path_within_roots(real_path: str, roots: Sequence[str]) -> bool:
    """Whether a resolved local path lies inside one of the (symlink-resolved) local roots."""
    return any(_inside(real_path, _real_root(root), False) for root in roots if not is_remote(root))
