"""Everything the report shows, read from a committed output folder (on any Beam filesystem):
`collect_report_data`. The manifest is required; a side file that is missing, too large or
malformed is left out with a note rather than failing the report, which then degrades to what
the manifest and the dead letters say. Every read is bounded."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms import fs
from transforms.format.manifest_format import FEATURE_SPEC_NAME, Manifest
from transforms.manifest import read_manifest
from transforms.report.dead_letters import DeadLetterSample, sample_dead_letters
from transforms.report.thumbnails import ContactSheet, contact_sheets
from transforms.stats.document import STATS_NAME
from transforms.stats.drift import DRIFT_NAME

__all__ = ["EXAMPLES_PER_REASON", "ReportData", "collect_report_data"]

LABELS_NAME = "labels.txt"
#: The feature holding an image's encoded bytes: its presence makes an image output.
IMAGE_FEATURE = "image/encoded"
#: Side files are small (per-feature summaries); anything larger is not what we wrote.
_MAX_SIDE_FILE_BYTES = 64 << 20
#: The stats.json schema this renderer was written for (not the writer's current one: a newer
#: schema may have moved fields, and is left out with a note rather than misread).
_READS_SCHEMA_VERSION = 1
#: Dead letters sampled per reason: the overview shows 3, the image section lists more.
EXAMPLES_PER_REASON = 3
_IMAGE_EXAMPLES_PER_REASON = 20


@dataclasses.dataclass
class ReportData:
    """What `transforms.report.render` turns into a page: the side files that could be read
    (`stats` only of a known schema version), the label names (the manifest's, else
    `labels.txt`) and contact sheets of an image output, and `notes` on what is missing."""

    output_dir: str
    manifest: Manifest
    feature_spec: dict[str, Any] | None = None
    labels: list[str] | None = None
    stats: dict[str, Any] | None = None
    drift: dict[str, Any] | None = None
    dead_letters: DeadLetterSample = dataclasses.field(default_factory=DeadLetterSample)
    is_image_output: bool = False
    contact_sheets: list[ContactSheet] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


def _read_side_file(output_dir: str, name: str) -> bytes | None:
    """The bytes of `name` in `output_dir`, None when absent; ValueError when too large."""
    path = fs.join_path(output_dir, name)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        raw = handle.read(_MAX_SIDE_FILE_BYTES + 1)
    if len(raw) > _MAX_SIDE_FILE_BYTES:
        raise ValueError(f"{name} is larger than {_MAX_SIDE_FILE_BYTES} bytes")
    return raw


def _read_json_object(output_dir: str, name: str, notes: list[str]) -> dict[str, Any] | None:
    """`name` parsed as a JSON object; None (with a note) when it is absent or unusable."""
    try:
        raw = _read_side_file(output_dir, name)
        if raw is None:
            return None
        document = json.loads(raw)
    except (ValueError, RecursionError, OSError) as error:
        notes.append(f"{name} could not be read ({type(error).__name__}: {error}); left out")
        return None
    if not isinstance(document, dict):
        notes.append(f"{name} is not a JSON object; left out")
        return None
    return document


def _read_stats(output_dir: str, notes: list[str]) -> dict[str, Any] | None:
    stats = _read_json_object(output_dir, STATS_NAME, notes)
    if stats is None:
        return None
    version = stats.get("schema_version")
    if version != _READS_SCHEMA_VERSION or not isinstance(stats.get("splits"), dict):
        notes.append(f"{STATS_NAME} has schema_version {version!r}, this report reads "
                     f"{_READS_SCHEMA_VERSION}; statistics left out")
        return None
    return stats


def _read_labels(output_dir: str, manifest: Manifest, notes: list[str]) -> list[str] | None:
    labels = manifest.metadata.get("labels")
    if isinstance(labels, list) and all(isinstance(label, str) for label in labels):
        return labels
    try:
        raw = _read_side_file(output_dir, LABELS_NAME)
    except (ValueError, OSError) as error:
        notes.append(f"{LABELS_NAME} could not be read ({error}); left out")
        return None
    return None if raw is None else raw.decode("utf-8", errors="replace").splitlines()


def _is_image_output(manifest: Manifest, feature_spec: dict[str, Any] | None) -> bool:
    features = (feature_spec or {}).get("features")
    if isinstance(features, dict):
        return IMAGE_FEATURE in features
    options = manifest.metadata.get("options") or {}
    return str(options.get("format") or "").startswith("image")


def collect_report_data(output_dir: str) -> ReportData:
    """Reads what the report of `output_dir` shows: FileNotFoundError without a committed
    manifest, ValueError for a malformed one."""
    output_dir = output_dir.rstrip("/") or "/"
    manifest = read_manifest(output_dir)
    if manifest is None:
        raise FileNotFoundError(f"{output_dir} has no manifest.json: it holds no committed output")
    data = ReportData(output_dir=output_dir, manifest=manifest)
    data.feature_spec = _read_json_object(output_dir, FEATURE_SPEC_NAME, data.notes)
    data.stats = _read_stats(output_dir, data.notes)
    data.drift = _read_json_object(output_dir, DRIFT_NAME, data.notes)
    data.is_image_output = _is_image_output(manifest, data.feature_spec)
    if data.stats is None and not any(note.startswith(STATS_NAME) for note in data.notes):
        data.notes.append(f"no {STATS_NAME}: the overview comes from the manifest and the dead "
                          f"letters, the features from {FEATURE_SPEC_NAME}")
    per_reason = _IMAGE_EXAMPLES_PER_REASON if data.is_image_output else EXAMPLES_PER_REASON
    data.dead_letters = sample_dead_letters(output_dir, manifest, per_reason)
    if data.dead_letters.problem:
        data.notes.append(data.dead_letters.problem)
    if data.is_image_output:
        data.labels = _read_labels(output_dir, manifest, data.notes)
        data.contact_sheets = contact_sheets(output_dir, manifest, data.labels)
    return data
