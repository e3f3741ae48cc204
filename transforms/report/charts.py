"""Small charts as inline SVG text: a sparkline-sized histogram and a horizontal bar chart.

Hand-built SVG rather than matplotlib: a few rectangles make a few hundred bytes (a PNG data
URI is ~10x that), sharp at any zoom, with no new dependency (matplotlib and its font cache
cost seconds on first import); every label is user data, escaped by `markup.esc`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from transforms.report.markup import esc

__all__ = ["bar_chart_svg", "histogram_svg"]

BAR_COLOR = "#3b6ea8"
_WARN_COLOR = "#c0504d"
_CHAR_PIXELS = 7  # an average glyph of the 12 px sans-serif labels
_MAX_LABEL_CHARS = 32


def _short(text: str, limit: int = _MAX_LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _number(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return f"{int(value):,}"


def histogram_svg(counts: Sequence[int], edges: Sequence[float] | None = None, width: int = 120,
                  height: int = 28, title: str = "") -> str:
    """A sparkline histogram: one bar per bin, scaled to the fullest bin. The tooltip
    (`title`, then one line per bin when `edges` has len(counts) + 1 values) explains it."""
    counts = [max(0, int(count)) if isinstance(count, (int, float)) else 0 for count in counts]
    if not counts:
        return ""
    tallest = max(counts) or 1
    step = width / len(counts)
    lines = [title] if title else []
    if edges is not None and len(edges) == len(counts) + 1:
        lines += [f"[{_number(edges[i])}, {_number(edges[i + 1])}): {counts[i]:,}"
                  for i in range(len(counts))]
    bars = []
    for i, count in enumerate(counts):
        bar = max((height - 1) * count / tallest, 1.0 if count else 0.0)  # a non-empty bin shows
        bars.append(f'<rect x="{i * step + 0.5:.1f}" y="{height - 1 - bar:.1f}" '
                    f'width="{max(step - 1, 1):.1f}" height="{bar:.1f}"/>')
    tooltip = f"<title>{esc(chr(10).join(lines))}</title>" if lines else ""
    return (f'<svg class="spark" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title or "histogram")}">'
            f'{tooltip}<line x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}" '
            f'stroke="#bbb" stroke-width="1"/><g fill="{BAR_COLOR}">{"".join(bars)}</g></svg>')


def bar_chart_svg(items: Sequence[tuple[str, float]], width: int = 520, bar_height: int = 18,
                  title: str = "", warn: Sequence[str] = ()) -> str:
    """A horizontal bar chart of (label, value) pairs, in the given order; labels in `warn`
    are drawn in the warning colour (dead letters, drift over its threshold)."""
    if not items:
        return ""
    label_chars = min(_MAX_LABEL_CHARS, max(len(str(label)) for label, _ in items))
    label_width = label_chars * _CHAR_PIXELS + 8
    value_width = 80
    plot = max(width - label_width - value_width, 40)
    largest = max((value for _, value in items if value > 0), default=1)
    gap = 4
    height = len(items) * (bar_height + gap) + gap
    rows = []
    for i, (label, value) in enumerate(items):
        y = gap + i * (bar_height + gap)
        length = max(plot * max(value, 0) / largest, 1.0 if value > 0 else 0.0)
        color = _WARN_COLOR if label in warn else BAR_COLOR
        text_y = y + bar_height / 2 + 4
        rows.append(
            f'<text x="{label_width - 6}" y="{text_y:.1f}" text-anchor="end">'
            f'<title>{esc(label)}</title>{esc(_short(str(label)))}</text>'
            f'<rect x="{label_width}" y="{y}" width="{length:.1f}" height="{bar_height}" fill="{color}"/>'
            f'<text x="{label_width + length + 4:.1f}" y="{text_y:.1f}">{esc(_number(value))}</text>')
    return (f'<svg class="bars" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title or "bar chart")}" '
            f'font-size="12" font-family="system-ui, sans-serif">'
            f'{"<title>" + esc(title) + "</title>" if title else ""}{"".join(rows)}</svg>')
