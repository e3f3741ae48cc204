"""`tfrecord-pipeline inspect`: print Examples as strict JSON lines plus a feature summary.

Each line is `{"file": PATH, "record": INDEX, "features": {NAME: {KIND: [VALUES]}}}` (for a
SequenceExample `"context": {...}` like features and `"feature_lists": {NAME: {KIND: [[VALUES
of one step], ...]}}` instead of "features"; its summary counts steps per feature list), valid
JSON for any JSON parser: non-finite floats are the strings "NaN", "Infinity" and
"-Infinity"; bytes are UTF-8 text when they decode, else {"base64": ...}; a bytes value
longer than `max_bytes` is shown as {"length": N, "prefix": ...} (text) or
{"length": N, "base64_prefix": ...} (binary) unless the whole value is asked for.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import numpy as np

from pipeline.verify import compression_of_file, resolve_tfrecord_paths
from transforms.format.example_codec import decode_example, decode_sequence_example, is_sequence_example
from transforms.tfrecord_io import listed_shard_paths, read_tfrecord_file

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


#: Bytes values longer than this are shown as their length and a prefix of this many bytes.
DEFAULT_MAX_BYTES = 64


def _records(paths: Sequence[str]) -> Iterator[tuple[str, int, bytes]]:
    for path in paths:
        files, manifest = resolve_tfrecord_paths(path)
        if manifest is not None:
            files = listed_shard_paths(path.rstrip("/"), manifest)
        elif not files:
            raise FileNotFoundError(f"no TFRecord file found at {path}")
        for file_path in files:
            # Sniffed when the name does not say (Beam's suffix-less shards), as verify does.
            compression = compression_of_file(file_path)
            for index, payload in enumerate(read_tfrecord_file(file_path, compression)):
                yield file_path, index, payload


def _float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(str(np.float32(value)))  # the shortest decimal of the stored float32


def _bytes(value: bytes, max_bytes: int | None) -> str | dict[str, Any]:
    whole = max_bytes is None or len(value) <= max_bytes
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        encoded = base64.b64encode(value if whole else value[:max_bytes]).decode("ascii")
        return {"base64": encoded} if whole else {"length": len(value), "base64_prefix": encoded}
    if whole:
        return text
    # A prefix may cut a multi-byte character: drop the partial character.
    return {"length": len(value), "prefix": value[:max_bytes].decode("utf-8", errors="ignore")}


def _render_values(kind: str | None, values: list, max_bytes: int | None) -> list:
    if kind == "bytes":
        return [_bytes(v, max_bytes) for v in values]
    if kind == "float":
        return [_float(v) for v in values]
    return list(values)


def _render_features(decoded: dict, max_bytes: int | None) -> dict[str, Any]:
    return {name: ({} if kind is None else {kind: _render_values(kind, values, max_bytes)})
            for name, (kind, values) in sorted(decoded.items())}


def inspect_paths(
    paths: Sequence[str], limit: int | None, out: TextIO, max_bytes: int | None = DEFAULT_MAX_BYTES
) -> tuple[int, dict[str, FeatureSummary]]:
    """Writes up to `limit` examples as JSON lines to `out` (`max_bytes=None`: bytes whole);
    returns (examples printed, feature summary over them)."""
    summary: dict[str, FeatureSummary] = {}
    printed = 0
    for path, index, payload in _records(paths):
        if limit is not None and printed >= limit:
            break
        printed += 1
        line: dict[str, Any] = {"file": path, "record": index}
        if is_sequence_example(payload):
            context, lists = decode_sequence_example(payload)
            line["context"] = _render_features(context, max_bytes)
            line["feature_lists"] = {name: {} if kind is None else {
                kind: [_render_values(kind, step, max_bytes) for step in steps]}
                for name, (kind, steps) in lists.items()}
            counted = {**context, **lists}
        else:
            counted = decode_example(payload)
            line["features"] = _render_features(counted, max_bytes)
        out.write(json.dumps(line, ensure_ascii=False, sort_keys=True, allow_nan=False))
        out.write("\n")
        for name, (kind, values) in counted.items():
            summary.setdefault(name, FeatureSummary()).add(kind, len(values))
    return printed, summary


def format_summary(summary: dict[str, FeatureSummary], examples: int) -> str:
    """A fixed-width table: feature, type, how many examples have it, values per example."""
    rows = [("feature", "type", "present", "values/example")]
    for name in sorted(summary):
        entry = summary[name]
        spread = (str(entry.max_values) if entry.min_values == entry.max_values
                  else f"{entry.min_values}..{entry.max_values}")
        rows.append((name, "|".join(sorted(entry.kinds)), f"{entry.examples}/{examples}", spread))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
