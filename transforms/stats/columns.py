"""A batch's statistics from the Arrow arrays of its features (Beam-free), vectorised: numbers
through numpy, bytes values through Arrow's `value_counts`, so only a batch's distinct bytes
values reach Python (once each, for the HLL sketch). An array holds one feature over the
batch's records: null is an absent feature, a list array holds the values of each record.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.stats.sketches import BatchStats, FeaturePartial, bytes_partial, numeric_partial

__all__ = ["arrow_batch_stats", "display_texts", "feature_partial"]


def display_texts(values: pa.Array) -> list[str]:
    """The text stats.json shows for bytes values: the UTF-8 text, else "base64:..."."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values.to_pylist()
    try:
        return values.cast(pa.large_string() if pa.types.is_large_binary(values.type)
                           else pa.string()).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # some value is not UTF-8
        texts = []
        for value in values.to_pylist():
            try:
                texts.append(value.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append("base64:" + base64.b64encode(value).decode("ascii"))
        return texts


def feature_partial(name: str, kind: str, values: pa.Array | pa.ChunkedArray) -> FeaturePartial | None:
    """One feature's partial for a batch (None when no record carries it)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    records = len(values) - values.null_count
    if not records:
        return None
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    low = high = 1  # values per record
    total = records
    flat = values
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or \
            pa.types.is_fixed_size_list(values.type):
        lengths = pc.list_value_length(values)
        per_record = (lengths.drop_null() if lengths.null_count else lengths).to_numpy(zero_copy_only=False)
        low, high, total = int(per_record.min()), int(per_record.max()), int(per_record.sum())
        flat = pc.list_flatten(values)
        if pa.types.is_dictionary(flat.type):
            flat = flat.dictionary_decode()
    if flat.null_count:  # the values of the records carrying the feature
        flat = flat.drop_null()
    numeric = bytes_part = None
    if kind == "bytes":
        if pa.types.is_fixed_size_binary(flat.type):
            flat = flat.cast(pa.binary())
        lengths = pc.binary_length(flat).to_numpy(zero_copy_only=False)
        counts = pc.value_counts(flat)
        bytes_part = bytes_partial(lengths, display_texts(counts.field("values")),
                                   counts.field("counts").to_numpy(zero_copy_only=False))
    else:  # int64, or float: the float32 values an Example stores
        integral = kind == "int64"
        numbers = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.int64 if integral else np.float32)
        numeric = numeric_partial(numbers, integral)
    return FeaturePartial(name, kind, records, low, high, total, numeric, bytes_part)


def arrow_batch_stats(columns: Iterable[tuple[str, str, pa.Array]]) -> BatchStats:
    """The statistics of a batch given as (feature, kind, Arrow array) per feature."""
    parts = (feature_partial(name, kind, values) for name, kind, values in columns)
    return BatchStats(features=tuple(part for part in parts if part is not None))
