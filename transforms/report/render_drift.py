"""The report's drift section: what `drift.json` found against the previous run. Read
defensively: a change's sides are `previous`/`current` (as `transforms.stats.drift` writes
them) or `before`/`after`; a PSI threshold comes with the entry or from `thresholds`;
labels are one entry per split or one overall."""

from __future__ import annotations

from typing import Any

from transforms.report.markup import MISSING, as_dict, as_list, esc, fmt_number, fmt_percent, section, table

__all__ = ["drift_section"]


def _entries(value: Any) -> list[dict[str, Any]]:
    return [as_dict(entry) for entry in as_list(value)]


def _sides(entry: dict[str, Any]) -> tuple[Any, Any]:
    """The `previous` (or `before`) and `current` (or `after`) sides of a change."""
    return entry.get("previous", entry.get("before")), entry.get("current", entry.get("after"))


def _text(value: Any) -> str:
    return MISSING if value is None else esc(value)


def _titled(title: str, headers: list[str], rows: list[list[str]]) -> str:
    """A drift table under its heading, or "" when nothing changed."""
    return f"<h3>{title}</h3>" + table(headers, rows, "drift") if rows else ""


def _share(value: Any) -> str:
    """A presence share (0..1) as a percentage."""
    return fmt_percent(value, 1) if isinstance(value, (int, float)) else _text(value)


def _schema(drift: dict[str, Any]) -> str:
    rows = [[_text(entry.get("split")),
             "(the whole split)" if entry.get("feature") is None else f"<code>{esc(entry['feature'])}</code>",
             f'<span class="warn">{_text(entry.get("change"))}</span>',
             *map(_text, _sides(entry))]
            for entry in _entries(drift.get("schema"))]
    return _titled("Schema", ["split", "feature", "change", "previous", "current"], rows)


def _presence(drift: dict[str, Any]) -> str:
    rows = [[_text(entry.get("split")), f"<code>{_text(entry.get('feature'))}</code>",
             *map(_share, _sides(entry))]
            for entry in _entries(drift.get("presence"))]
    return _titled("Presence", ["split", "feature", "previously present", "now present"], rows)


def _distribution(drift: dict[str, Any]) -> str:
    default = as_dict(drift.get("thresholds")).get("psi")
    rows = []
    for entry in _entries(drift.get("distribution")):
        psi, threshold = entry.get("psi"), entry.get("threshold", default)
        drifted = (isinstance(psi, (int, float)) and isinstance(threshold, (int, float))
                   and psi > threshold)
        verdict = '<span class="warn">drifted</span>' if drifted else "within threshold"
        rows.append([_text(entry.get("split")), f"<code>{_text(entry.get('feature'))}</code>",
                     fmt_number(psi), fmt_number(threshold), fmt_number(entry.get("previous_mean")),
                     fmt_number(entry.get("current_mean")), verdict])
    return _titled("Distributions (population stability index)",
                   ["split", "feature", "PSI", "threshold", "previous mean", "current mean", ""], rows)


def _names(value: Any) -> str:
    return ", ".join(f"<code>{esc(name)}</code>" for name in as_list(value)) or MISSING


def _labels(drift: dict[str, Any]) -> str:
    labels = drift.get("labels")
    entries = [labels] if isinstance(labels, dict) else _entries(labels)
    rows = [[_text(entry.get("split", "all")), _names(entry.get("added")), _names(entry.get("vanished"))]
            for entry in entries if entry.get("added") or entry.get("vanished")]
    return _titled("Labels", ["split", "added", "vanished"], rows)


def drift_section(drift: dict[str, Any] | None) -> str:
    """The comparison with a previous run, when `drift.json` exists (else "")."""
    if drift is None:
        return ""
    yes = '<span class="warn">yes</span>'
    verdicts = [f"{kind} drift: {yes if drift[key] else 'no'}"
                for key, kind in (("schema_drift", "schema"), ("distribution_drift", "distribution"))
                if isinstance(drift.get(key), bool)]
    intro = (f"<p>Compared to <code>{_text(drift.get('compared_to'))}</code>"
             + (" \u2014 " + " \u00b7 ".join(verdicts) if verdicts else "") + ".</p>")
    changes = _schema(drift) + _presence(drift) + _distribution(drift) + _labels(drift)
    return section("drift", "Drift", intro + (changes or "<p>No change found.</p>"))
