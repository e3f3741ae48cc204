"""`tfrecord_pipeline`: the one stable import place for user code (installed from `pipeline/api/`).

    from tfrecord_pipeline import read_examples, tf_dataset, WriteToShardedTFRecord, load_spec

The names below keep their meaning whatever module of `transforms/` or `pipeline/` holds them
today; those module paths are internal and move. Each name is imported when first used, so
`import tfrecord_pipeline` has no side effects and costs nothing: a reader that never touches
a Beam transform never imports Beam (and TensorFlow, PyTorch or Grain only when their adapter
is called). This package sits above both `pipeline` and `transforms`; nothing of ours imports it.
"""

from __future__ import annotations

import importlib

# Public name -> the internal module that holds it.
_HOMES = {
    # Reading an output back, without Beam.
    "read_examples": "transforms.reading.examples",
    "ExampleReader": "transforms.reading.examples",
    "tf_dataset": "transforms.reading.tensorflow",
    "tf_parse_spec": "transforms.reading.tensorflow",
    "torch_dataset": "transforms.reading.torch",
    "collate_examples": "transforms.reading.torch",
    "grain_source": "transforms.reading.grain",
    "TFRecordSource": "transforms.reading.grain",
    # The Beam transforms and their planners.
    "WriteToShardedTFRecord": "transforms.sink",
    "plan_tabular": "transforms.tabular.plan",
    "ConvertTabular": "transforms.tabular.transform",
    "TabularConfig": "transforms.tabular.transform",
    "ConvertToSequences": "transforms.sequence.transform",
    "plan_image_folder": "transforms.images.plan",
    "plan_image_manifest": "transforms.images.plan",
    "ConvertImages": "transforms.images.convert",
    "ImageConfig": "transforms.images.config",
    "RenderOptions": "transforms.images.config",
    "ReadTFRecordFiles": "transforms.tfrecord_io",
    "read_tfrecord_file": "transforms.tfrecord_io",
    # The conversion spec.
    "ConversionSpec": "transforms.tabular.spec",
    "FeatureSpec": "transforms.tabular.spec",
    "CsvOptions": "transforms.tabular.spec",
    "SpecError": "transforms.tabular.spec",
    "load_spec": "transforms.tabular.spec",
    "parse_spec": "transforms.tabular.spec",
    "SequenceSpec": "transforms.tabular.sequence_spec",
    "infer_spec": "transforms.tabular.infer",
    "resolve_spec": "transforms.tabular.infer",
    # A CLI command in-process: run(["convert", ...]) -> exit code.
    "run": "pipeline.cli",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'tfrecord_pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
