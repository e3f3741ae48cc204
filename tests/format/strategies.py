"""Hypothesis strategies for Example values and feature names, shared by the codec tests:
the edge cases of the wire format (varint lengths of 1 and 2 bytes, NaN and infinities,
non-UTF-8 bytes, names with NUL and non-ASCII characters)."""

from __future__ import annotations

from hypothesis import strategies as st

__all__ = ["BYTES", "FLOAT", "INT64", "KINDS", "NAMES", "VALUES"]

KINDS = ("int64", "float", "bytes")

INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-300, 300),
    st.sampled_from([0, -1, 127, 128, 16383, 16384, 2**63 - 1, -(2**63)]),
)
FLOAT = st.floats(width=32)  # NaN, infinities, -0.0, subnormals included
BYTES = st.one_of(
    st.binary(max_size=12),  # non-UTF-8 bytes included
    st.text(max_size=6).map(lambda s: s.encode("utf-8")),  # non-ASCII text
    st.binary(min_size=120, max_size=300),  # 2-byte length varints; the slice-copy path
)
VALUES = {"int64": INT64, "float": FLOAT, "bytes": BYTES}
NAMES = st.one_of(
    st.text(min_size=1, max_size=6),
    st.sampled_from(["a", "aa", "ab", "a\x00", "B", "é", "日本語", "feature_0"]),
    st.text(alphabet="xyz", min_size=126, max_size=130),  # name length varint 1 or 2 bytes
)
