"""Reading the output manifest from any Beam filesystem, and the tool version every manifest
records. `manifest.json` is written last (a folder without it holds no committed output); its
shape and parsing are in `transforms.format.manifest_format`, Beam-free.
"""

from __future__ import annotations

from importlib import metadata

from apache_beam.io.filesystems import FileSystems

from transforms.format.manifest_format import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest
from transforms.fs import join_path

__all__ = ["read_manifest", "tool_version"]


def tool_version() -> str:
    """The installed version of this tool, recorded in every manifest."""
    try:
        return metadata.version("tfrecord-pipeline")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def read_manifest(output_dir: str) -> Manifest | None:
    """The manifest of `output_dir`, or None; ValueError when it is not of the expected shape."""
    path = join_path(output_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        raw = handle.read(MAX_MANIFEST_BYTES + 1)
    return Manifest.from_json(raw, path)
