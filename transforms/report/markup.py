"""HTML building blocks shared by the report's renderers: escaping, number formatting, tables,
and the defensive reading of JSON documents (`as_dict`, `as_list`). Everything shown comes
from user data, so every piece of text goes through `esc` (the charts' labels too)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["MISSING", "as_dict", "as_list", "esc", "fmt_bytes", "fmt_number", "fmt_percent", "section",
           "table"]

#: What a cell shows for a value the input lacks.
MISSING = "\u2014"


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (documents may be older or newer)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def esc(value: Any) -> str:
    """`value` as text, escaped for HTML text and attributes, and encodable as UTF-8."""
    return html.escape(_encodable(str(value)), quote=True)


def _encodable(text: str) -> str:
    """`text` with what UTF-8 cannot encode as backslash escapes: the lone surrogates of a
    non-UTF-8 file name's bytes as those bytes (`f\\xe9.csv`), any other its code point
    (`\\ud800`): a name the disk holds must not keep the UTF-8 page from being written."""
    try:  # text without surrogates comes back as it was
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def fmt_number(value: Any) -> str:
    """An escaped number: ints with thousands separators, floats to 4 significant digits,
    NaN and infinities by name, None as a dash, anything else as its escaped text."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return esc(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "\u2212inf"
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:.4g}"
    return esc(value)


def fmt_bytes(value: Any) -> str:
    """A byte count in binary units (`1.5 MiB`), escaped."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return fmt_number(value)
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size):,} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def fmt_percent(part: Any, whole: Any) -> str:
    """`part` of `whole` as a percentage; a dash when either is not a number or whole is 0."""
    numbers = (int, float)
    if not isinstance(part, numbers) or not isinstance(whole, numbers) or not whole:
        return MISSING
    share = 100.0 * part / whole
    return f"{share:.0f}%" if share in (0.0, 100.0) else f"{share:.1f}%"


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[str]], css_class: str = "") -> str:
    """A table: `headers` are plain text (escaped here; None: no header row), each row's cells
    HTML (escaped by the caller)."""
    head = "".join(f"<th>{esc(header)}</th>" for header in headers or ())
    head = f"<thead><tr>{head}</tr></thead>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    attribute = f' class="{esc(css_class)}"' if css_class else ""
    return f"<table{attribute}>{head}<tbody>{body}</tbody></table>"


def section(anchor: str, title: str, body: str) -> str:
    """A titled section of the page; `anchor` is the id the navigation links to."""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body}</section>'
