"""The input formats `convert` reads, and the file name endings of each: the one list the
planning, the options, the tabular readers and the image planners take them from. Beam-free.
"""

from __future__ import annotations

__all__ = ["FORMATS", "IMAGE_FORMATS", "TABULAR_EXTENSIONS", "TABULAR_FORMATS", "check_tabular_format"]

TABULAR_FORMATS = ("csv", "tsv", "jsonl", "parquet")
IMAGE_FORMATS = ("image-folder", "image-manifest")
FORMATS = TABULAR_FORMATS + IMAGE_FORMATS

#: File name endings of each tabular format (before an optional `.gz`).
TABULAR_EXTENSIONS = {
    "csv": (".csv",),
    "tsv": (".tsv", ".tab"),
    "jsonl": (".jsonl", ".ndjson", ".json"),
    "parquet": (".parquet", ".pq"),
}


def check_tabular_format(fmt: str) -> str:
    """Returns `fmt` when it is a tabular format; raises ValueError naming the choices."""
    if fmt not in TABULAR_FORMATS:
        raise ValueError(f"unknown tabular format {fmt!r}; expected one of {', '.join(TABULAR_FORMATS)}")
    return fmt
