"""TensorFlow Datasets metadata for an output: the `dataset_info.json` and `features.json`
that `tfds.builder_from_directory(DIR)` reads, built as plain JSON (TFDS is never imported).

What TFDS is told, and why:
  - Splits: each split's `shardLengths` (records per shard, in shard order), `numBytes` and
    `filepathTemplate` `{SPLIT}-{SHARD_X_OF_Y}.tfrecord`, which TFDS expands to exactly our
    shard names (`train-00000-of-00004.tfrecord`), so the shards stay where they are.
    A split without records (a declared split's one empty shard) is left out, as TFDS
    itself never writes one: TFDS refuses a split of no examples ("Instruction []
    corresponds to no data"), and `as_dataset()` reads every split listed.
  - Features: a flat `FeaturesDict` keyed by our feature names ("image/encoded" included:
    TFDS flattens nested dicts with "/", so a flat "/" name parses the same feature).
    A dense feature (the `transforms.reading` rule, shared by every reader: from the spec
    alone) is a `Tensor` of that shape, `()` for a scalar; a varlen one is a `Tensor` of
    shape `(None,)`, which TFDS parses with `FixedLenSequenceFeature(allow_missing=True)`:
    an absent feature reads as empty. A masked scalar is an `optional` scalar `Tensor`: TFDS
    reads its own fill where a record lacks it (the dtype's minimum, or b""), and has no
    `<name>/present` companion (TFDS parses only what records hold); test for that fill.
  - Strings are `Tensor(dtype=string)`, never `Text`: both hand back the stored bytes, but
    `Text` is a scalar-only UTF-8 claim, while our "string" dtype also holds raw bytes
    (image/encoded, `bytes` features) and lists. One type for all returns our bytes exactly.
  - `image/class/label` is a `ClassLabel` whose names are the labels (embedded in
    `features.json`, so no `*.labels.txt` file is needed); with `image/encoded` it makes the
    supervised keys, for `as_supervised=True`. Images stay encoded bytes rather than a TFDS
    `Image`: their channels and formats differ per record (and a GIF decodes to 4-D), which
    a TFDS `Image` with one shape cannot read; decode with `tf.io.decode_image`.

Not representable (a `ValueError`): compressed shards (TFDS reads only uncompressed
TFRecord), SequenceExample outputs (TFDS parses only tf.train.Example), shard names TFDS
would spell differently, and split names TFDS cannot select (`[A-Za-z0-9_-]+`).
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from transforms.format.manifest_format import FEATURE_SPEC_NAME, SHARD_NAME, ShardEntry, shard_name
from transforms.reading.features import feature_layout, shapes_counted

__all__ = ["DATASET_INFO_NAME", "DEFAULT_DATASET_NAME", "FEATURES_NAME", "TFDS_FILE_NAMES", "TFDS_VERSION",
           "dataset_name_for", "tfds_metadata", "tfds_side_files"]

_LOG = logging.getLogger(__name__)

DATASET_INFO_NAME = "dataset_info.json"
FEATURES_NAME = "features.json"
#: The side files this module writes, in the output folder.
TFDS_FILE_NAMES = (DATASET_INFO_NAME, FEATURES_NAME)
TFDS_VERSION = "1.0.0"
#: The name used when the output folder's name yields no valid TFDS name.
DEFAULT_DATASET_NAME = "tfrecord_pipeline"
#: TFDS's template for our shard names; SHARD_X_OF_Y is "00000-of-00004" as ours.
SHARD_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.tfrecord"
LABEL_FEATURE = "image/class/label"
IMAGE_FEATURE = "image/encoded"

_FEATURE_CLASSES = "tensorflow_datasets.core.features."
_FEATURES_DICT = _FEATURE_CLASSES + "features_dict.FeaturesDict"
_TENSOR = _FEATURE_CLASSES + "tensor_feature.Tensor"
_CLASS_LABEL = _FEATURE_CLASSES + "class_label_feature.ClassLabel"
# What TFDS's split instructions accept as a split name (`splits._SUB_SPEC_RE`).
_TFDS_SPLIT_NAME = re.compile(r"^[\w-]+$", re.ASCII)


def dataset_name_for(output_dir: str) -> str:
    """A valid TFDS dataset name from the output folder's name: snake_case letters, digits
    and "_", starting with a letter ("out/2024-05-01" -> "ds_2024_05_01"); the default when
    the folder's name has no letter or digit."""
    folder = posixpath.basename(output_dir.replace("\\", "/").rstrip("/"))
    name = re.sub(r"[^a-z0-9]+", "_", folder.lower()).strip("_")
    if not name:
        return DEFAULT_DATASET_NAME
    return name if name[0].isalpha() else f"ds_{name}"


def _split_infos(shards: Iterable[ShardEntry]) -> list[dict[str, Any]]:
    """One TFDS SplitInfo per split with records (see the module docstring: TFDS cannot
    read an empty split), checking TFDS finds each shard under its name by `SHARD_TEMPLATE`."""
    by_split: dict[str, list[tuple[int, ShardEntry]]] = defaultdict(list)
    for shard in shards:
        split, path = str(shard.split), shard.path
        match = SHARD_NAME.match(path)
        if match is None or match["prefix"] != split or match["suffix"] != ".tfrecord":
            raise ValueError(f"shard {path!r} is not named <split>-NNNNN-of-NNNNN.tfrecord: "
                             f"TFDS reads only uncompressed shards named so")
        by_split[split].append((int(match["index"]), shard))
    infos = []
    for split in sorted(by_split):
        ordered = [shard for _, shard in sorted(by_split[split], key=lambda pair: pair[0])]
        if not any(shard.records for shard in ordered):
            continue
        if not _TFDS_SPLIT_NAME.match(split):
            raise ValueError(f"split {split!r}: TFDS selects only splits named with letters, "
                             f"digits, '_' and '-'")
        for index, shard in enumerate(ordered):
            expected = shard_name(split, index, len(ordered), ".tfrecord")
            if shard.path != expected:
                raise ValueError(f"shard {shard.path!r}: TFDS would look for {expected!r}")
        infos.append({
            "name": split,
            # int64 fields are strings in proto3 JSON, as TFDS writes them.
            "shardLengths": [str(shard.records) for shard in ordered],
            "numBytes": str(sum(shard.bytes for shard in ordered)),
            "filepathTemplate": SHARD_TEMPLATE,
        })
    return infos


def _tensor(shape: tuple[int, ...] | None, dtype: str, optional: bool = False) -> dict[str, Any]:
    """A TFDS `Tensor` feature proto (as JSON); shape None means (None,): any count, or absent."""
    dims = [-1] if shape is None else list(shape)
    tensor = {"shape": {"dimensions": [str(dim) for dim in dims]} if dims else {},
              "dtype": dtype, "encoding": "none"}
    return {"pythonClassName": _TENSOR, "tensor": {**tensor, "optional": True} if optional else tensor}


def _class_label(names: Sequence[str]) -> dict[str, Any]:
    """A TFDS `ClassLabel` with its names. The `jsonFeature` form is the one TFDS restores
    as `ClassLabel(names=...)`; its proto form carries only a count, the names then coming
    from a `<feature>.labels.txt` that TFDS strips of surrounding spaces."""
    return {"pythonClassName": _CLASS_LABEL,
            "jsonFeature": {"json": json.dumps({"names": list(names)})}}


def _features(features: Mapping[str, Mapping[str, Any]], labels: Sequence[str] | None,
              counted: bool) -> dict[str, dict[str, Any]]:
    connectors = {}
    for name, entry in features.items():
        layout = feature_layout(name, entry, counted=counted)
        if name == LABEL_FEATURE and labels and layout.dtype == "int64" and layout.shape == ():
            connectors[name] = _class_label(labels)
        else:
            connectors[name] = _tensor(layout.shape, layout.dtype, layout.masked)
    return connectors


def _dumps(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def tfds_metadata(shards: Sequence[ShardEntry], feature_spec: Mapping[str, Any],
                  labels: Sequence[str] | None = None, *, name: str = DEFAULT_DATASET_NAME,
                  compression: str = "none") -> dict[str, bytes]:
    """`{"dataset_info.json": bytes, "features.json": bytes}` for an output: a pure function of
    its shards, its parsed `feature_spec.json` and its label names (for `image/class/label`).

    Raises:
      ValueError: when TFDS cannot read the output as described (see the module docstring).
    """
    if compression != "none":
        raise ValueError(f"{compression} shards: TFDS reads only uncompressed TFRecord files")
    if "sequence" in feature_spec or "context" in feature_spec:
        raise ValueError("SequenceExample records: TFDS parses only tf.train.Example")
    if not isinstance(feature_spec.get("features"), Mapping):
        raise ValueError("feature_spec.json has no 'features' object")
    connectors = _features(feature_spec["features"], labels, shapes_counted(feature_spec))
    info: dict[str, Any] = {
        "name": name,
        "version": TFDS_VERSION,
        "fileFormat": "tfrecord",
        "description": "tf.train.Example records written by tfrecord-pipeline; "
                       "manifest.json lists the files and their hashes.",
        "splits": _split_infos(shards),
    }
    if connectors.get(LABEL_FEATURE, {}).get("pythonClassName") == _CLASS_LABEL \
            and IMAGE_FEATURE in connectors:
        info["supervisedKeys"] = {"input": IMAGE_FEATURE, "output": LABEL_FEATURE}
    features = {"pythonClassName": _FEATURES_DICT, "featuresDict": {"features": connectors}}
    return {DATASET_INFO_NAME: _dumps(info), FEATURES_NAME: _dumps(features)}


def tfds_side_files(output_dir: str, compression: str, shards: Sequence[ShardEntry],
                    extra_files: Iterable[tuple[str, bytes]]) -> dict[str, bytes]:
    """The TFDS files the commit writes beside an output, or {} for an output TFDS cannot
    read: compressed, SequenceExamples, or without a `feature_spec.json` among its
    `extra_files` ((name, bytes) pairs). Never raises: the metadata is a convenience that
    must not fail a conversion, so an output it cannot describe gets none (and a warning).
    """
    files = dict(extra_files)
    if compression != "none" or FEATURE_SPEC_NAME not in files:
        return {}
    try:
        feature_spec = json.loads(files[FEATURE_SPEC_NAME])
        if "sequence" in feature_spec:
            return {}
        labels_txt = files.get("labels.txt")
        # One name per line, line number = index (as `ImagePlan.labels_txt`).
        labels = None if labels_txt is None else labels_txt.decode("utf-8").split("\n")[:-1]
        return tfds_metadata(shards, feature_spec, labels, name=dataset_name_for(output_dir))
    except ValueError as error:
        _LOG.warning("no TFDS metadata written for %s: %s", output_dir, error)
        return {}
