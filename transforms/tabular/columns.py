"""Vectorised conversion of whole Arrow columns to feature values (Beam-free).

The rules are those of `values` (the per-value definition): each function decides the common
case for all rows at once with `pyarrow.compute` / numpy and hands only the rows its fast path
cannot decide (a "+5", a "true", an overflow, garbage) to the per-value functions, so one bad
row never costs the batch its fast path. Every function returns a `FeatureColumn`: an Arrow
array of the feature's target type (a null is a missing value) and the failed rows' errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.format.example_codec import INT64_MAX
from transforms.tabular.spec import FeatureSpec
from transforms.tabular.temporal import arrow_writable, is_temporal, python_values, temporal_text
from transforms.tabular.values import (
    ASCII_WHITESPACE,
    ESCAPE_PATTERN,
    FLOAT_PATTERN,
    FLOAT_RANGE,
    INT_RANGE,
    MISSING_REQUIRED,
    NAN_REJECTED,
    NESTED,
    NOT_IN_ENCODING,
    NOT_UTF8,
    NULL_ELEMENT,
    TOO_LONG,
    RowError,
    canonical_text,
    convert_value,
    row_error,
    text_to_float,
    text_to_int,
)

__all__ = [
    "FeatureColumn",
    "TARGET_TYPES",
    "feature_type",
    "finish_feature",
    "key_text_array",
    "python_feature",
    "text_feature",
    "typed_feature",
]

TARGET_TYPES = {"int64": pa.int64(), "float": pa.float32(), "bytes": pa.binary(),
                "string": pa.binary()}
# Up to 18 digits always fit in int64; longer numbers are checked one by one.
_SHORT_INT = r"^[+-]?[0-9]{1,18}$"
_FLOAT = f"^{FLOAT_PATTERN}$"


@dataclasses.dataclass
class FeatureColumn:
    """One feature's values for a chunk: `values` (null = missing) and row errors."""

    values: pa.Array
    errors: dict[int, RowError]


def _mask(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy, null as False."""
    if array.null_count:
        array = array.fill_null(False)
    return array.to_numpy(zero_copy_only=False)


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), bool)
    return array.is_valid().to_numpy(zero_copy_only=False)


def feature_type(feature: FeatureSpec) -> pa.DataType:
    """The Arrow type of a feature's converted values (a list type for list features)."""
    target = TARGET_TYPES[feature.type]
    return pa.list_(target) if feature.is_list else target


def _scalar_view(feature: FeatureSpec) -> FeatureSpec:
    """The feature as a scalar, to convert the elements of its lists."""
    return dataclasses.replace(feature, is_list=False, separator=None, default=None,
                               required=False)


def _fallback(rows: np.ndarray, get, convert, values, ok, errors) -> None:
    """Per-value path for `rows`: values[i] = convert(get(i)) or errors[i]."""
    for i in rows.tolist():
        try:
            values[i] = convert(get(i))
            ok[i] = True
        except RowError as e:
            # Without its traceback: the error would hold every frame up the stack in a
            # cycle (frame -> errors -> error -> traceback -> frame) that only the garbage
            # collector frees, keeping e.g. the estimate's CSV reader open until then.
            errors[i] = e.with_traceback(None)


def _finish_floats(feature: FeatureSpec, f64: np.ndarray, ok: np.ndarray,
                   errors: dict[int, RowError]) -> np.ndarray:
    """float64 -> float32 with the range and NaN checks of `values.check_float`."""
    column = feature.source_column
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = f64.astype(np.float32)
    finite = np.isfinite(f64)
    overflow = ok & finite & ~np.isfinite(f32)
    for i in np.flatnonzero(overflow).tolist():
        errors[i] = row_error("float_out_of_range", column, FLOAT_RANGE.format(repr(float(f64[i]))))
    ok &= ~overflow
    if feature.nan == "reject":
        rejected = ok & ~finite
        for i in np.flatnonzero(rejected).tolist():
            errors[i] = row_error("nan_rejected", column, NAN_REJECTED.format(float(f64[i])))
        ok &= ~rejected
    return f32


def _check_lengths(feature: FeatureSpec, values: pa.Array, ok: np.ndarray, max_length: int,
                   errors: dict[int, RowError]) -> None:
    lengths = pc.binary_length(values).fill_null(0).to_numpy(zero_copy_only=False)
    too_long = ok & (lengths > max_length)
    column = feature.source_column
    for i in np.flatnonzero(too_long).tolist():
        errors[i] = row_error("value_too_long", column, TOO_LONG.format(int(lengths[i]), max_length))
    ok &= ~too_long


# ---------------------------------------------------------------------------------------
# Text (CSV cells, as a string array; null = missing).


def _has_any_byte(arr: pa.Array, chars: bytes, *, first: bool = False) -> bool:
    """Whether any value of a string array contains (`first`: starts with) one of `chars`
    (a scan of its data, or of each value's first byte)."""
    _, offsets, data = arr.buffers()
    if data is None or len(arr) == 0:
        return False
    bounds = np.frombuffer(offsets, np.int32, len(arr) + 1, arr.offset * 4)
    if first:
        values = np.frombuffer(data, np.uint8)[bounds[:-1][bounds[1:] > bounds[:-1]]]
    else:
        values = np.frombuffer(data, np.uint8, int(bounds[-1] - bounds[0]), int(bounds[0]))
    found = np.zeros(values.shape, bool)
    for char in chars:
        found |= values == char
    return bool(found.any())


def _text_ints(arr: pa.Array, ok: np.ndarray, column: str, errors) -> np.ndarray:
    try:
        values = pc.cast(arr, pa.int64())
        # Arrow also parses "0x1F"; the rules do not.
        if not _has_any_byte(arr, b"xX"):
            return values.fill_null(0).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    trimmed = pc.utf8_trim(arr, ASCII_WHITESPACE)
    gate = _mask(pc.match_substring_regex(trimmed, _SHORT_INT)) & ok
    source = pc.if_else(gate, pc.utf8_ltrim(trimmed, "+"), "0")
    values = pc.cast(source, pa.int64()).to_numpy(zero_copy_only=False).copy()
    rest = np.flatnonzero(ok & ~gate)
    ok &= gate
    _fallback(rest, lambda i: arr[i].as_py(), lambda s: text_to_int(s, column),
              values, ok, errors)
    return values


def _text_floats(feature: FeatureSpec, arr: pa.Array, ok: np.ndarray, errors) -> np.ndarray:
    column = feature.source_column
    try:
        # Arrow accepts exactly the numbers of FLOAT_PATTERN, and some spellings of NaN
        # and infinity of its own ("nan(1)"): non-finite results are decided per value.
        f64 = pc.cast(arr, pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
        rest = np.flatnonzero(ok & ~np.isfinite(f64))
        if rest.size:
            f64 = f64.copy()
            ok[rest] = False
            _fallback(rest, lambda i: arr[i].as_py(), lambda s: text_to_float(s, column),
                      f64, ok, errors)
        return _finish_floats(feature, f64, ok, errors)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    trimmed = pc.utf8_trim(arr, ASCII_WHITESPACE)
    gate = _mask(pc.match_substring_regex(trimmed, _FLOAT)) & ok
    source = trimmed if gate.all() else pc.if_else(gate, trimmed, "0")
    f64 = pc.cast(source, pa.float64()).fill_null(0).to_numpy(zero_copy_only=False).copy()
    # Non-numbers, and numbers written beyond float64 (1e400 casts to inf), are decided per value.
    per_value = ok & (~gate | ~np.isfinite(f64))
    rest = np.flatnonzero(per_value)
    ok &= ~per_value
    _fallback(rest, lambda i: arr[i].as_py(), lambda s: text_to_float(s, column),
              f64, ok, errors)
    return _finish_floats(feature, f64, ok, errors)


def _text_scalars(feature: FeatureSpec, arr: pa.Array, ok: np.ndarray, max_length: int,
                  errors: dict[int, RowError]) -> pa.Array:
    """Converts the rows where `ok`; clears `ok` for rows that fail."""
    if feature.type == "int64":
        values = _text_ints(arr, ok, feature.source_column, errors)
    elif feature.type == "float":
        values = _text_floats(feature, arr, ok, errors)
    else:
        values = arr.view(pa.binary()) if pa.types.is_string(arr.type) else arr
        _check_lengths(feature, values, ok, max_length, errors)
        return pc.if_else(ok, values, pa.scalar(None, pa.binary()))
    return pa.array(values, type=TARGET_TYPES[feature.type], mask=~ok)


def text_feature(feature: FeatureSpec, arr: pa.Array, *, max_length: int,
                 escapes: bool, missing: Collection[str]) -> FeatureColumn:
    """Converts a column of CSV cells (string array, null = missing). `escapes`: the input
    held bytes invalid in its encoding (`Chunk.escapes`); `missing`: the feature's
    `values.missing_tokens`."""
    errors: dict[int, RowError] = {}
    null = pa.scalar(None, pa.string())
    if "" in missing:
        arr = pc.if_else(pc.equal(arr, ""), null, arr)
    words = sorted(token for token in missing if token)
    # Hashing every cell costs as much as parsing it: only where a cell starts as a token
    # does (none does in a column of plain numbers).
    if words and _has_any_byte(arr, bytes({word.encode()[0] for word in words}), first=True):
        arr = pc.if_else(pc.is_in(arr, value_set=pa.array(words, pa.string())), null, arr)
    ok = _valid(arr)
    if escapes:
        bad = _mask(pc.match_substring_regex(arr, ESCAPE_PATTERN)) & ok
        for i in np.flatnonzero(bad).tolist():
            errors[i] = row_error("invalid_encoding", feature.source_column, NOT_IN_ENCODING)
        ok &= ~bad
    if not feature.is_list:
        return FeatureColumn(_text_scalars(feature, arr, ok, max_length, errors), errors)
    # Lists: an empty cell is the empty list, other cells are split on the separator.
    to_split = pc.if_else(ok & ~_mask(pc.equal(arr, "")), arr, pa.scalar(None, pa.string()))
    parts = pc.split_pattern(to_split, feature.separator)
    counts = pc.list_value_length(parts).fill_null(0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(parts)
    flat_ok = np.ones(len(flat), bool)
    flat_errors: dict[int, RowError] = {}
    flat_values = _text_scalars(_scalar_view(feature), flat, flat_ok, max_length, flat_errors)
    _lift_errors(flat_errors, counts, errors, ok)
    return FeatureColumn(_list_array(counts, flat_values, ok), errors)


def _lift_errors(flat_errors: dict[int, RowError], counts: np.ndarray,
                 errors: dict[int, RowError], ok: np.ndarray) -> None:
    """Turns errors of list elements into errors of their rows."""
    if not flat_errors:
        return
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for j, error in sorted(flat_errors.items()):
        row = int(np.searchsorted(offsets, j, side="right") - 1)
        if row not in errors:
            errors[row] = RowError(error.reason, error.column,
                                   f"{error.message} (list element {j - int(offsets[row])})")
        ok[row] = False


def _list_array(counts: np.ndarray, flat_values: pa.Array, ok: np.ndarray) -> pa.Array:
    """A list array of the rows where `ok`; row i owns counts[i] of `flat_values`."""
    keep = np.repeat(ok, counts)
    if not keep.all():
        flat_values = flat_values.filter(pa.array(keep))
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(np.where(ok, counts, 0), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat_values, mask=pa.array(~ok))


# ---------------------------------------------------------------------------------------
# Typed values (Parquet columns, JSON read by Arrow).


def _wrong_type_rows(feature: FeatureSpec, arr: pa.Array, rows: np.ndarray, errors) -> None:
    column = feature.source_column
    for i in rows.tolist():
        value = python_values(arr.slice(i, 1))[0]  # as_py() fails on some dates (`temporal`)
        errors[i] = row_error("wrong_type", column,
                              f"{arr.type} value {value!r:.80} cannot be a {feature.type} value")


def _typed_scalars(feature: FeatureSpec, arr: pa.Array, ok: np.ndarray, max_length: int,
                   errors: dict[int, RowError]) -> pa.Array:
    """Converts the rows where `ok` of a flat typed array; clears `ok` for failures."""
    t = arr.type
    column = feature.source_column
    kind = feature.type
    target = TARGET_TYPES[kind]
    if pa.types.is_null(t):
        return pa.nulls(len(arr), target)
    if kind == "int64" and (pa.types.is_integer(t) or pa.types.is_boolean(t)):
        if t == pa.uint64():
            over = _mask(pc.greater(arr, pa.scalar(INT64_MAX, pa.uint64()))) & ok
            for i in np.flatnonzero(over).tolist():
                errors[i] = row_error("int_out_of_range", column, INT_RANGE.format(arr[i].as_py()))
            ok &= ~over
            arr = pc.if_else(ok, arr, pa.scalar(0, t))
        values = pc.cast(arr, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return pa.array(values, type=target, mask=~ok)
    if kind == "float" and (pa.types.is_floating(t) or pa.types.is_integer(t)
                            or pa.types.is_boolean(t) or pa.types.is_decimal(t)):
        f64 = pc.cast(arr, pa.float64(), safe=False).fill_null(0)
        f64 = f64.to_numpy(zero_copy_only=False).copy()
        f32 = _finish_floats(feature, f64, ok, errors)
        return pa.array(f32, type=target, mask=~ok)
    if kind in ("bytes", "string"):
        values = _typed_bytes(feature, arr, ok, errors)
        if values is not None:
            _check_lengths(feature, values, ok, max_length, errors)
            return pc.if_else(ok, values, pa.scalar(None, pa.binary()))
    _wrong_type_rows(feature, arr, np.flatnonzero(ok), errors)
    ok[:] = False
    return pa.nulls(len(arr), target)


def _typed_bytes(feature: FeatureSpec, arr: pa.Array, ok: np.ndarray, errors) -> pa.Array | None:
    """Binary values of a typed array for a bytes/string feature; None if it has none."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pc.cast(arr, pa.binary())
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)):
        values = pc.cast(arr, pa.binary())
        if feature.type == "string":
            try:
                pc.cast(values, pa.string())
            except pa.ArrowInvalid:
                column = feature.source_column
                for i in np.flatnonzero(ok).tolist():
                    try:
                        values[i].as_py().decode("utf-8")
                    except UnicodeDecodeError:
                        errors[i] = row_error("invalid_encoding", column, NOT_UTF8)
                        ok[i] = False
        return values
    if pa.types.is_floating(t):
        # float16/float32 values as numpy scalars of their own precision, whose shortest text
        # canonical_text writes (float32 0.1 is "0.1", as in a CSV cell, not 0.10000000149011612).
        numbers = arr.to_pylist() if pa.types.is_float64(t) else arr.to_numpy(zero_copy_only=False)
        texts = [canonical_text(v).encode("utf-8") if valid else None
                 for v, valid in zip(numbers, _valid(arr).tolist(), strict=True)]
        return pa.array(texts, type=pa.binary())
    if is_temporal(t) and not (writable := arrow_writable(arr)).all():
        _unwritable_dates(feature, arr, ok & ~writable, errors)
        ok &= writable
        # Kept from the cast: it would write them wrong, or raise.
        arr = pc.if_else(pa.array(writable), arr, pa.scalar(None, t))
    if not (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t)):
        return None
    return pc.cast(pc.cast(arr, pa.string()), pa.binary())


def _unwritable_dates(feature: FeatureSpec, arr: pa.Array, rows: np.ndarray, errors) -> None:
    """Dates and times Arrow cannot write as text (see `temporal.arrow_writable`) are no
    string: `wrong_type`, named by their text (`temporal_text`) in the message."""
    column = feature.source_column
    texts = temporal_text(arr)
    for i in np.flatnonzero(rows).tolist():
        errors[i] = row_error("wrong_type", column,
                              f"{arr.type} value {texts[i].as_py()} is outside the dates and times "
                              f"Arrow writes as text (years -32767 to 32767, times of day within 24 h)")


def _is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _durations(feature: FeatureSpec, arr: pa.Array, ok: np.ndarray,
               errors: dict[int, RowError]) -> pa.Array:
    """A duration array as int64 counts of the feature's `unit`; rows that cannot be (no
    unit, not an int64 feature, not a whole number of the unit) fail."""
    column = feature.source_column
    flat = pc.list_flatten(arr) if _is_list_type(arr.type) else arr
    if feature.type != "int64" or feature.unit is None:
        for row in np.flatnonzero(ok).tolist():
            errors[row] = row_error("wrong_type", column, f"{flat.type} values need an int64 feature with "
                                    "'unit' (one of s, ms, us, ns) in the spec")
        ok[:] = False
        return arr
    target = pa.duration(feature.unit)
    counts = None
    if _is_list_type(arr.type):
        counts = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    try:
        converted = pc.cast(flat, target).cast(pa.int64())
    except pa.ArrowInvalid:  # some value is not a whole number of the unit: decide per value
        values = []
        for j, value in enumerate(flat.cast(pa.int64()).to_pylist()):
            try:
                values.append(None if value is None else
                              pc.cast(flat.slice(j, 1), target)[0].cast(pa.int64()).as_py())
            except pa.ArrowInvalid:
                row = j if counts is None else int(np.searchsorted(np.cumsum(counts), j, side="right"))
                errors[row] = row_error("wrong_type", column,
                                        f"{flat.type} value {value} is not a whole number of {feature.unit}")
                ok[row] = False
                values.append(None)
        converted = pa.array(values, pa.int64())
    if counts is None:
        return converted
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), converted, mask=pa.array(~_valid(arr)))


def typed_feature(feature: FeatureSpec, arr: pa.Array, *, max_length: int) -> FeatureColumn:
    """Converts a typed column (Parquet, or JSON read by Arrow); null = missing."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    errors: dict[int, RowError] = {}
    ok = _valid(arr)
    element_type = arr.type.value_type if _is_list_type(arr.type) else arr.type
    if pa.types.is_duration(element_type):
        arr = _durations(feature, arr, ok, errors)
        if not ok.any():
            return FeatureColumn(pa.nulls(len(arr), feature_type(feature)), errors)
    if not feature.is_list:
        if _is_list_type(arr.type) or pa.types.is_struct(arr.type) or pa.types.is_map(arr.type):
            _wrong_type_rows(feature, arr, np.flatnonzero(ok), errors)
            return FeatureColumn(pa.nulls(len(arr), feature_type(feature)), errors)
        return FeatureColumn(_typed_scalars(feature, arr, ok, max_length, errors), errors)
    element = _scalar_view(feature)
    if not _is_list_type(arr.type):
        # A scalar given to a list feature is a one-element list.
        values = _typed_scalars(element, arr, ok, max_length, errors)
        counts = ok.astype(np.int64)
        return FeatureColumn(_list_array(counts, values.filter(pa.array(ok)), ok), errors)
    counts = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(arr)
    flat_ok = _valid(flat)
    column = feature.source_column
    if not flat_ok.all():
        offsets = np.concatenate([[0], np.cumsum(counts)])
        for j in np.flatnonzero(~flat_ok).tolist():
            row = int(np.searchsorted(offsets, j, side="right") - 1)
            if row not in errors:
                errors[row] = row_error("wrong_type", column, NULL_ELEMENT.format(j - int(offsets[row])))
            ok[row] = False
    flat_errors: dict[int, RowError] = {}
    if _is_list_type(flat.type) or pa.types.is_struct(flat.type) or pa.types.is_map(flat.type):
        bad_rows = np.flatnonzero(ok & (counts > 0))
        for row in bad_rows.tolist():
            errors[row] = row_error("wrong_type", column, NESTED.format(flat.type, 0))
        ok[bad_rows] = False
        flat_values = pa.nulls(len(flat), TARGET_TYPES[feature.type])
    else:
        flat_values = _typed_scalars(element, flat, flat_ok, max_length, flat_errors)
    _lift_errors(flat_errors, counts, errors, ok)
    return FeatureColumn(_list_array(counts, flat_values, ok), errors)


# ---------------------------------------------------------------------------------------
# Python values (JSON lines parsed one by one).


def python_feature(feature: FeatureSpec, values: Sequence[Any], *,
                   max_length: int) -> FeatureColumn:
    """Converts typed Python values (parsed JSON) one by one with `convert_value`."""
    errors: dict[int, RowError] = {}
    out: list = [None] * len(values)
    for i, value in enumerate(values):
        if value is None:
            continue
        try:
            out[i] = convert_value(feature, value, text=False, max_length=max_length)
        except RowError as e:
            errors[i] = e.with_traceback(None)  # see `_fallback`
    if not feature.is_list:
        out = [None if v is None else v[0] for v in out]
    return FeatureColumn(pa.array(out, type=feature_type(feature)), errors)


# ---------------------------------------------------------------------------------------


def finish_feature(feature: FeatureSpec, column: FeatureColumn) -> FeatureColumn:
    """Applies `default` (fills missing values) and `required` (missing -> error)."""
    values = column.values
    if values.null_count == 0:
        return column
    if feature.default is not None:
        default = feature.default
        if feature.type in ("bytes", "string"):
            default = ([v.encode("utf-8") for v in default] if feature.is_list
                       else default.encode("utf-8"))
        scalar = pa.scalar(list(default) if feature.is_list else default, feature_type(feature))
        return FeatureColumn(pc.fill_null(values, scalar), column.errors)
    if feature.required:
        missing = ~_valid(values)
        for i in np.flatnonzero(missing).tolist():
            if i not in column.errors:
                column.errors[i] = row_error("missing_required", feature.source_column,
                                             MISSING_REQUIRED.format(feature.name))
    return column


def key_text_array(arr: pa.Array | None, num_rows: int, *, text: bool) -> pa.Array:
    """The split-key text of each value as a binary array ("" for missing): CSV cells are
    their own text, typed values their `values.canonical_text`."""
    if arr is None:
        return pa.array([b""] * num_rows, pa.binary())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if (text or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        out = pc.cast(arr, pa.binary())
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        out = pc.cast(pc.cast(arr, pa.string()), pa.binary())
    elif is_temporal(t):  # canonical_text of their TemporalText, all rows at once
        out = pc.cast(pc.binary_join_element_wise('"', temporal_text(arr), '"', ""), pa.binary())
    else:
        # float32 values as Python floats: their float64 text, as they always hashed (their
        # shortest text, which a string feature holds, would move rows to other splits).
        texts = [canonical_text(v) for v in python_values(arr)]
        out = pa.array([v if isinstance(v, bytes) else v.encode("utf-8") for v in texts],
                       pa.binary())
    return out.fill_null(b"")
