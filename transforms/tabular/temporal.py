"""The text of Arrow date and time values, made from their integers (Beam-free).

pyarrow's `as_py()` raises on values Python's datetime types cannot hold (nanoseconds that
are no whole microsecond, as pandas writes by default; years outside 1-9999; more than
999999999 days), and one such value in a split key or a dead letter's `raw` failed the whole
job. `temporal_text` computes every value's text from its integers with numpy (and Arrow's
time zone database for zoned timestamps): `str()` of the Python object where there is one, so
split keys stay what they were, and beyond, the same pattern carried on. `python_values` is
`to_pylist()` with such values as `TemporalText`; `arrow_writable` says which values Arrow's
own cast to string writes as they are. One difference remains: Arrow applies no daylight
saving time after 2037 where Python's zoneinfo carries the rules on (named zones only).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["TemporalText", "arrow_writable", "is_temporal", "python_values", "temporal_text"]

_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_SECONDS_PER_DAY = 86400


class TemporalText(str):
    """The text of a date/time value, standing for the Python object `as_py()` would give
    (see `transforms.tabular.values.canonical_text`, which writes both alike)."""


def is_temporal(t: pa.DataType) -> bool:
    """A date, time, timestamp or duration type (intervals convert to Python as they are)."""
    return (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)
            or pa.types.is_duration(t))


def _holds_temporal(t: pa.DataType) -> bool:
    if is_temporal(t):
        return True
    if pa.types.is_dictionary(t):
        return _holds_temporal(t.value_type)
    if pa.types.is_map(t):
        return _holds_temporal(t.key_type) or _holds_temporal(t.item_type)
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return _holds_temporal(t.value_type)
    if pa.types.is_struct(t):
        return any(_holds_temporal(field.type) for field in t)
    return False


# ---------------------------------------------------------------------------------------
# Integers -> text pieces (Arrow string arrays), all rows at once.


def _digits(values: np.ndarray, width: int = 1) -> pa.Array:
    """Decimal text of `values`, zero-padded to `width` after the sign ("-0001")."""
    text = pc.cast(pa.array(np.abs(values)), pa.string())
    if width > 1:
        text = pc.utf8_lpad(text, width=width, padding="0")
    if (values < 0).any():
        text = pc.if_else(pa.array(values < 0), pc.binary_join_element_wise("-", text, ""), text)
    return text


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _split(values: np.ndarray, per: int) -> tuple[np.ndarray, np.ndarray]:
    """(whole, rest) with whole * per + rest == values and 0 <= rest < per."""
    whole = np.floor_divide(values, per)
    return whole, values - whole * per


def _fraction(sub: np.ndarray, per_second: int) -> pa.Array:
    """What Python writes after the seconds: "" for none, else ".ffffff" (microseconds), and
    ".fffffffff" for nanoseconds that are no whole microsecond."""
    if per_second == 1:
        return pa.array([""] * len(sub), pa.string())
    if per_second == 10**9:
        whole_micros = sub % 1000 == 0
        text = pc.if_else(pa.array(whole_micros), _digits(sub // 1000, 6), _digits(sub, 9))
    else:
        text = _digits(sub * (10**6 // per_second), 6)
    return pc.if_else(pa.array(sub == 0), "", _join(".", text))


def _clock(seconds_of_day: np.ndarray, hour_width: int) -> pa.Array:
    hours, rest = _split(seconds_of_day, 3600)
    minutes, seconds = _split(rest, 60)
    return _join(_digits(hours, hour_width), ":", _digits(minutes, 2), ":", _digits(seconds, 2))


def _civil(days: np.ndarray) -> pa.Array:
    """"YYYY-MM-DD" of days since 1970-01-01, proleptic Gregorian (H. Hinnant's
    civil_from_days, exact for every int64 count of days)."""
    z = days + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return _join(_digits(year, 4), "-", _digits(month, 2), "-", _digits(day, 2))


def _offset(seconds: np.ndarray) -> pa.Array:
    """A UTC offset as Python writes it: +HH:MM, with :SS when it has seconds."""
    hours, rest = _split(np.abs(seconds), 3600)
    minutes, secs = _split(rest, 60)
    sign = pc.if_else(pa.array(seconds < 0), "-", "+")
    text = _join(sign, _digits(hours, 2), ":", _digits(minutes, 2))
    return pc.if_else(pa.array(secs == 0), text, _join(text, ":", _digits(secs, 2)))


def _integers(arr: pa.Array) -> np.ndarray:
    storage = pa.int32() if pa.types.is_date32(arr.type) or pa.types.is_time32(arr.type) \
        else pa.int64()
    return arr.view(storage).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _wall_time(arr: pa.Array, values: np.ndarray):
    """(days, seconds of the day, units below the second, UTC offset in seconds or None) of
    a timestamp array's values, in local time for a zoned one, as `as_py()` gives them."""
    per_second = _PER_SECOND[arr.type.unit]
    seconds, sub = _split(values, per_second)
    days, seconds_of_day = _split(seconds, _SECONDS_PER_DAY)
    if arr.type.tz is None:
        return days, seconds_of_day, sub, None
    # Arrow's time zone database says the offset (a difference of int64s that wrap alike, so
    # exact even where the local time overflows).
    local = _integers(pc.local_timestamp(arr))
    offset = (local - values) // per_second
    extra_days, seconds_of_day = _split(seconds_of_day + offset, _SECONDS_PER_DAY)
    return days + extra_days, seconds_of_day, sub, offset


def _timestamp_text(arr: pa.Array, values: np.ndarray) -> pa.Array:
    days, seconds_of_day, sub, offset = _wall_time(arr, values)
    text = _join(_civil(days), " ", _clock(seconds_of_day, 2),
                 _fraction(sub, _PER_SECOND[arr.type.unit]))
    return text if offset is None else _join(text, _offset(offset))


def _duration_text(arr: pa.Array, values: np.ndarray) -> pa.Array:
    """As `str(timedelta)`: "[D day[s], ]H:MM:SS[.ffffff]", days rounded down."""
    per_second = _PER_SECOND[arr.type.unit]
    seconds, sub = _split(values, per_second)
    days, seconds_of_day = _split(seconds, _SECONDS_PER_DAY)
    unit = pc.if_else(pa.array(np.abs(days) == 1), " day, ", " days, ")
    prefix = pc.if_else(pa.array(days == 0), "", _join(_digits(days), unit))
    return _join(prefix, _clock(seconds_of_day, 1), _fraction(sub, per_second))


def temporal_text(arr: pa.Array) -> pa.Array:
    """The text of each value of a date, time, timestamp or duration array (module
    docstring) as a string array; null stays null."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    values = _integers(arr)
    if pa.types.is_timestamp(t):
        text = _timestamp_text(arr, values)
    elif pa.types.is_duration(t):
        text = _duration_text(arr, values)
    elif pa.types.is_date32(t):
        text = _civil(values)
    elif pa.types.is_date64(t):
        text = _civil(np.floor_divide(values, 1000 * _SECONDS_PER_DAY))
    elif pa.types.is_time(t):
        per_second = _PER_SECOND[t.unit]
        seconds, sub = _split(values, per_second)
        text = _join(_clock(seconds, 2), _fraction(sub, per_second))
    else:
        raise TypeError(f"not a date/time type: {t}")
    if arr.null_count:
        text = pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.string()))
    return text


#: The days (since 1970-01-01) of the dates Arrow's cast to string writes: years -32767 to
#: 32767. It writes other dates as "<value out of range: N>", and zoned timestamps beyond them
#: with a wrong year or not at all (an error).
_ARROW_DAYS = (-12687428, 11248738)


def arrow_writable(arr: pa.Array) -> np.ndarray:
    """Which values of a date, time, timestamp or duration array Arrow's cast to string writes
    as what they are (nulls count as written): dates in `_ARROW_DAYS`, in local time for a
    zoned timestamp, times of day from 0 to 24 h, every duration."""
    t = arr.type
    values = _integers(arr)
    if pa.types.is_duration(t):
        return np.ones(len(arr), bool)
    if pa.types.is_time(t):
        writable = (values >= 0) & (values < _SECONDS_PER_DAY * _PER_SECOND[t.unit])
    else:
        if pa.types.is_timestamp(t):
            days = _wall_time(arr, values)[0]
        elif pa.types.is_date64(t):
            days = np.floor_divide(values, 1000 * _SECONDS_PER_DAY)
        else:
            days = values
        writable = (days >= _ARROW_DAYS[0]) & (days < _ARROW_DAYS[1])
    return writable | ~arr.is_valid().to_numpy(zero_copy_only=False)


# ---------------------------------------------------------------------------------------
# Arrays -> Python values.


def _regroup(values: list, arr: pa.Array) -> list:
    """Rows of a list-like array from its flattened `values` (null lists hold none)."""
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    ends = np.cumsum(lengths).tolist()
    out, start = [], 0
    for end, is_valid in zip(ends, valid.tolist(), strict=True):
        out.append(values[start:end] if is_valid else None)
        start = end
    return out


def python_values(arr: pa.Array | pa.ChunkedArray) -> list:
    """`arr.to_pylist()`, with every date/time value, at any depth, as its `TemporalText`
    (never a datetime object: see the module docstring)."""
    if isinstance(arr, pa.ChunkedArray):
        return [value for chunk in arr.chunks for value in python_values(chunk)]
    t = arr.type
    if not _holds_temporal(t):
        return arr.to_pylist()
    if pa.types.is_dictionary(t):
        return python_values(arr.dictionary_decode())
    if is_temporal(t):
        return [None if text is None else TemporalText(text)
                for text in temporal_text(arr).to_pylist()]
    if pa.types.is_struct(t):
        names = [field.name for field in t]
        fields = [python_values(child) for child in arr.flatten()]
        valid = arr.is_valid().to_numpy(zero_copy_only=False).tolist()
        return [dict(zip(names, row, strict=True)) if ok else None
                for ok, row in zip(valid, zip(*fields, strict=True), strict=True)]
    if pa.types.is_map(t):  # as_py(): a list of (key, value) pairs
        entries = pa.struct([t.key_field, t.item_field])
        rows = python_values(arr.cast(pa.list_(entries)))
        return [None if row is None else [(e["key"], e["value"]) for e in row] for row in rows]
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return python_values(arr.cast(pa.large_list(t.value_field)))
    return _regroup(python_values(arr.flatten()), arr)
