"""Both converter configs refuse a bad thread count."""

from __future__ import annotations

import pytest

from transforms.images.config import ImageConfig
from transforms.tabular.spec import ConversionSpec, FeatureSpec
from transforms.tabular.transform import TabularConfig

SPEC = ConversionSpec(features=(FeatureSpec(name="a", type="int64"),))


@pytest.mark.parametrize("threads", [-1, 1.5, "2"])
def test_both_converter_configs_refuse_a_bad_thread_count(threads):
    with pytest.raises(ValueError, match="threads must be 0"):
        TabularConfig(spec=SPEC, fmt="csv", threads=threads)
    with pytest.raises(ValueError, match="threads must be 0"):
        ImageConfig(threads=threads)
