"""A bounded sample of an output's dead letters, by reason: the files the manifest lists are
read line by line (never whole: a run may have dead-lettered millions of rows, each with its
raw record) until every reason counted has its examples, or a byte budget is spent. Only the
fields that find the record are kept, never `raw`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.format.manifest_format import Manifest

__all__ = ["DeadLetterSample", "sample_dead_letters"]

#: Bytes of dead-letter files read at most: past it, the sample is what was found so far.
MAX_SCAN_BYTES = 64 << 20
#: A longer line (a huge raw record) is skipped: its JSON cannot be parsed without holding it.
MAX_LINE_BYTES = 1 << 20
_READ_CHUNK = 1 << 20
_KEPT_FIELDS = ("source", "row", "column", "split", "message", "filename", "label")


@dataclasses.dataclass
class DeadLetterSample:
    """Examples of dead letters by reason, in file order; `complete` is False when the scan
    stopped at its byte budget; `problem` says why a file could not be read."""

    by_reason: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    complete: bool = True
    problem: str | None = None


def _lines(handle, budget: list[int]) -> Iterator[bytes]:
    """The lines of a binary file, skipping any longer than `MAX_LINE_BYTES`; `budget[0]`
    counts down the bytes read, and reading stops when it is spent."""
    pending = b""
    skipping = False
    while budget[0] > 0:
        chunk = handle.read(min(_READ_CHUNK, budget[0]))
        if not chunk:
            break
        budget[0] -= len(chunk)
        pieces = (pending + chunk).split(b"\n")
        pending = pieces.pop()
        for piece in pieces:
            if skipping:
                skipping = False  # the end of the overlong line
            elif len(piece) <= MAX_LINE_BYTES:
                yield piece
        if len(pending) > MAX_LINE_BYTES:
            pending, skipping = b"", True
    if pending and not skipping and len(pending) <= MAX_LINE_BYTES:
        yield pending


def sample_dead_letters(output_dir: str, manifest: Manifest, per_reason: int) -> DeadLetterSample:
    """Up to `per_reason` dead letters of each reason, from the files `manifest` lists."""
    sample = DeadLetterSample()
    counts = manifest.counts.dead_letter_reasons
    wanted = {reason: min(count, per_reason) for reason, count in counts.items() if count > 0}
    budget = [MAX_SCAN_BYTES]
    for entry in manifest.dead_letter_files:
        if budget[0] <= 0 or (counts and not any(wanted.values())):
            break
        path = fs.join_path(output_dir, entry.path)
        try:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                for line in _lines(handle, budget):
                    _take(line, sample.by_reason, wanted, per_reason)
                    if counts and not any(wanted.values()):
                        break
        except OSError as error:
            sample.problem = f"dead letters could not be read ({error}); the sample is partial"
    sample.complete = budget[0] > 0
    return sample


def _take(line: bytes, by_reason: dict[str, list[dict[str, Any]]], wanted: dict[str, int],
          per_reason: int) -> None:
    """Keeps the dead letter on `line` if its reason still wants examples."""
    try:
        document = json.loads(line)
    except ValueError:
        return  # a line that is not JSON is not a dead letter this tool wrote
    if not isinstance(document, dict):
        return
    reason = str(document.get("reason") or "unknown")
    if wanted:
        if wanted.get(reason, 0) <= 0:
            return
        wanted[reason] -= 1
    elif len(by_reason.get(reason, ())) >= per_reason:
        return
    kept = {field: document.get(field) for field in _KEPT_FIELDS if field in document}
    by_reason.setdefault(reason, []).append(kept)
