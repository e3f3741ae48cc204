"""Serialized records to values, TF-free, shaped by `features.RecordLayout`: a dense
feature as an array of its shape (0-d for a scalar), a varlen one as a 1-D array; with
`as_numpy=False`, Python values (a scalar, or a list).

An absent feature is left out (TensorFlow cannot tell it from an empty varlen list; this
reader can), or given its spec default when asked; a masked scalar is always there (its
fill where absent) with its `<name>/present`. Features the spec does not name are left out,
as `tf.io.parse_example` does; without a spec every feature is varlen, typed by its kind."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transforms.format.example_codec import decode_example, decode_sequence_example
from transforms.reading.features import DTYPES, KIND_OF_DTYPE, MASK_SUFFIX, FeatureLayout, RecordLayout

__all__ = ["decode_record"]

_DTYPE_OF_KIND = {"int64": "int64", "float": "float32", "bytes": "string", None: "float32"}


def _array(values: Sequence[Any], dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "O":  # bytes values, as TensorFlow's .numpy() gives them
        out = np.empty(len(values), object)
        out[:] = list(values)
        return out
    return np.asarray(values, dtype)


def _value(layout: FeatureLayout, values: Sequence[Any], as_numpy: bool) -> Any:
    if layout.shape is None:
        return _array(values, layout.numpy_dtype) if as_numpy else list(values)
    size = math.prod(layout.shape)
    if len(values) != size:
        raise ValueError(f"feature {layout.name!r} has {len(values)} values; its dense shape "
                         f"{list(layout.shape)} holds {size}")
    if as_numpy:
        return _array(values, layout.numpy_dtype).reshape(layout.shape)
    return values[0] if layout.shape == () else list(values)


def _checked(layout: FeatureLayout, kind: str | None) -> None:
    if kind is not None and kind != KIND_OF_DTYPE[layout.dtype]:
        raise ValueError(f"feature {layout.name!r} holds {kind} values; the spec says "
                         f"{layout.dtype}")


def _features(decoded: Mapping[str, tuple[str | None, list]],
              layouts: Mapping[str, FeatureLayout] | None, fill_defaults: bool,
              as_numpy: bool) -> dict[str, Any]:
    if layouts is None:
        return {name: _array(values, DTYPES[_DTYPE_OF_KIND[kind]]) if as_numpy else values
                for name, (kind, values) in decoded.items()}
    out = {}
    for name, layout in layouts.items():
        # A masked scalar with no values is missing, as TensorFlow's parse sees it.
        present = name in decoded and (bool(decoded[name][1]) or not layout.masked)
        if present:
            kind, values = decoded[name]
            _checked(layout, kind)
            out[name] = _value(layout, values, as_numpy)
        elif (fill_defaults or layout.masked) and layout.default is not None:
            values = layout.default if isinstance(layout.default, list) else [layout.default]
            if layout.dtype == "string":  # JSON holds text; records hold its UTF-8 bytes
                values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
            out[name] = _value(layout, values, as_numpy)
        if layout.masked:
            out[name + MASK_SUFFIX] = np.array(present) if as_numpy else present
    return out


def _feature_lists(decoded: Mapping[str, tuple[str | None, list]],
                   layouts: Mapping[str, FeatureLayout], as_numpy: bool) -> dict[str, Any]:
    """Each feature list: a dense one as an array [steps, *shape], a varlen one as a list
    of each step's values."""
    out = {}
    for name, layout in layouts.items():
        if name not in decoded:
            continue
        kind, steps = decoded[name]
        _checked(layout, kind)
        values = [_value(layout, step, as_numpy) for step in steps]
        if as_numpy and layout.dense:
            values = (np.stack(values) if values
                      else np.empty((0, *layout.shape), layout.numpy_dtype))
        out[name] = values
    return out


def decode_record(payload: bytes, layout: RecordLayout | None, *, fill_defaults: bool = False,
                  as_numpy: bool = True) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
    """One record's values: a dict for an Example, a (context, feature lists) pair for a
    SequenceExample. ValueError naming the feature when a value disagrees with the spec's
    dtype or dense shape, or when the payload does not parse."""
    if layout is not None and layout.sequence is not None:
        context, lists = decode_sequence_example(payload)
        return (_features(context, layout.features, fill_defaults, as_numpy),
                _feature_lists(lists, layout.sequence, as_numpy))
    return _features(decode_example(payload), layout and layout.features, fill_defaults, as_numpy)
