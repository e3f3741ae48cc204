"""Worker set-up: the allocator thresholds applied by every DoFn's `setup()`
(`prepare_worker`), and both converter configs refusing a bad thread count."""

from __future__ import annotations

import platform
import sys

import pytest

from transforms import allocator, worker
from transforms.images.config import ImageConfig
from transforms.images.convert import ConvertImages
from transforms.shard_writers import SinkConfig
from transforms.sink import ConvertAndWrite
from transforms.tabular.spec import ConversionSpec, FeatureSpec
from transforms.tabular.transform import ConvertTabular, TabularConfig

SPEC = ConversionSpec(features=(FeatureSpec(name="a", type="int64"),))


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="mallopt thresholds are a glibc feature")
def test_retain_freed_memory_is_applied_once_and_by_every_worker_setup(monkeypatch):
    assert allocator.retain_freed_memory() is True
    assert allocator.retain_freed_memory() is True  # idempotent
    calls = []
    monkeypatch.setattr(worker, "retain_freed_memory", lambda: calls.append(1) or True)
    ConvertTabular(TabularConfig(spec=SPEC, fmt="csv")).setup()
    ConvertImages(ImageConfig()).setup()
    assert len(calls) == 2
    ConvertAndWrite(ConvertTabular(TabularConfig(spec=SPEC, fmt="csv")),
                    SinkConfig(output_dir="/tmp/unused")).setup()  # its own and its converter's
    assert len(calls) == 4


@pytest.mark.parametrize("threads", [-1, 1.5, "2"])
def test_both_converter_configs_refuse_a_bad_thread_count(threads):
    with pytest.raises(ValueError, match="threads must be 0"):
        TabularConfig(spec=SPEC, fmt="csv", threads=threads)
    with pytest.raises(ValueError, match="threads must be 0"):
        ImageConfig(threads=threads)
