"""`tfrecord_pipeline`, the one import place for user code: what it offers and what importing it costs.

The README's examples (run by `tests/e2e/test_readme.py`) and the consumer tests import from it;
here: every public name is the internal object itself, the package comes from this checkout,
and importing it imports nothing else.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import tfrecord_pipeline

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("apache_beam", "tensorflow", "torch", "grain", "pyarrow")


def test_the_installed_package_is_this_checkouts():
    assert Path(tfrecord_pipeline.__file__).resolve() == REPO / "pipeline" / "api" / "__init__.py", (
        f"tfrecord_pipeline comes from {tfrecord_pipeline.__file__}: run `pip install -e .` here")


def test_importing_it_imports_no_library_and_none_of_our_modules():
    code = ("import sys, tfrecord_pipeline\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{(*HEAVY, 'pipeline', 'transforms', 'protos')!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_reading_function_imports_no_beam():
    code = ("import sys\n"
            "from tfrecord_pipeline import read_examples, tf_dataset, torch_dataset, grain_source\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('apache_beam', 'tensorflow', "
            "'torch', 'grain', 'pipeline')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("name", tfrecord_pipeline.__all__)
def test_each_public_name_is_the_internal_object(name):
    public = getattr(tfrecord_pipeline, name)
    assert public.__module__.split(".")[0] in ("transforms", "pipeline")
    assert getattr(importlib.import_module(public.__module__), name) is public
    assert name in dir(tfrecord_pipeline)


def test_the_api_covers_reading_beam_transforms_specs_and_the_cli():
    assert {"read_examples", "tf_dataset", "torch_dataset", "collate_examples", "grain_source",
            "WriteToShardedTFRecord", "ConvertTabular", "ConvertImages", "ConvertToSequences",
            "ReadTFRecordFiles", "ConversionSpec", "load_spec", "parse_spec", "SpecError",
            "run"} <= set(tfrecord_pipeline.__all__)


def test_star_import_and_unknown_names():
    namespace: dict = {}
    exec("from tfrecord_pipeline import *", namespace)
    assert set(tfrecord_pipeline.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="module 'tfrecord_pipeline' has no attribute 'ExampleCodec'"):
        tfrecord_pipeline.ExampleCodec  # noqa: B018
    with pytest.raises(ImportError):
        exec("from tfrecord_pipeline import iter_records", {})
