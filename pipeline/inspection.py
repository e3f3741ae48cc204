"""`tfrecord-pipeline inspect`: print Examples as JSON lines plus a feature summary."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import TextIO

from pipeline.verify import resolve_tfrecord_paths
from transforms.format.example_codec import decode_example, example_to_jsonable
from transforms.format.tfrecord_format import read_tfrecord_file
from transforms.tfrecord_io import listed_shard_paths

__all__ = ["FeatureSummary", "inspect_paths"]


@dataclasses.dataclass
class FeatureSummary:
    """What `inspect` learned about one feature over the examples it read."""

    kinds: set[str] = dataclasses.field(default_factory=set)
    examples: int = 0
    min_values: int | None = None
    max_values: int = 0

    def add(self, kind: str, count: int) -> None:
        self.kinds.add(kind)
        self.examples += 1
        self.min_values = count if self.min_values is None else min(self.min_values, count)
        self.max_values = max(self.max_values, count)


def _files(path: str) -> list[str]:
    files, manifest = resolve_tfrecord_paths(path)
    if manifest is not None:
        return listed_shard_paths(path.rstrip("/"), manifest)
    if not files:
        raise FileNotFoundError(f"no TFRecord file found at {path}")
    return files


def _payloads(paths: Sequence[str]) -> Iterator[bytes]:
    for path in paths:
        for file_path in _files(path):
            yield from read_tfrecord_file(file_path)


def inspect_paths(
    paths: Sequence[str], limit: int | None, out: TextIO
) -> tuple[int, dict[str, FeatureSummary]]:
    """Writes up to `limit` examples as JSON lines to `out`.

    Returns (examples printed, feature summary over them).
    """
    summary: dict[str, FeatureSummary] = {}
    printed = 0
    for payload in _payloads(paths):
        if limit is not None and printed >= limit:
            break
        printed += 1
        out.write(json.dumps(example_to_jsonable(payload), ensure_ascii=False, sort_keys=True))
        out.write("\n")
        for name, (kind, values) in decode_example(payload).items():
            summary.setdefault(name, FeatureSummary()).add(kind, len(values))
    return printed, summary


def format_summary(summary: dict[str, FeatureSummary], examples: int) -> str:
    """A fixed-width table: feature, type, how many examples have it, values per example."""
    rows = [("feature", "type", "present", "values/example")]
    for name in sorted(summary):
        entry = summary[name]
        spread = (
            str(entry.max_values)
            if entry.min_values == entry.max_values
            else f"{entry.min_values}..{entry.max_values}"
        )
        rows.append((name, "|".join(sorted(entry.kinds)), f"{entry.examples}/{examples}", spread))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
