"""The report's feature table (from `stats.json`, else `feature_spec.json`) and image
statistics. Read defensively: a field missing or of an unexpected type shows as a dash, never
an error, because `stats.json` may be older or newer than this renderer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transforms.format.manifest_format import Manifest
from transforms.report.charts import bar_chart_svg, histogram_svg
from transforms.report.markup import MISSING, as_dict, as_list, esc, fmt_number, fmt_percent, section, table

__all__ = ["features_section", "image_stats_section", "ordered_splits"]

_TOP_VALUES_SHOWN = 3
_TOP_VALUE_CHARS = 40
_LABEL_BARS = 50
#: Features shown per split: a page stays readable (and small) for very wide data.
_FEATURES_SHOWN = 1000


def ordered_splits(names: Sequence[str], manifest: Manifest) -> list[str]:
    """`names` in the manifest's split order, the others after them sorted."""
    declared = [split for split in as_list(manifest.metadata.get("splits")) if split in names]
    return declared + sorted(name for name in names if name not in declared)


def _quantile(numeric: dict[str, Any], q: float) -> Any:
    for pair in as_list(numeric.get("quantiles")):
        if isinstance(pair, list) and len(pair) == 2 and pair[0] == q:
            return pair[1]
    return None


def _numeric_cell(numeric: dict[str, Any]) -> str:
    lines = [
        f"min {fmt_number(numeric.get('min'))} \u00b7 median {fmt_number(_quantile(numeric, 0.5))} "
        f"\u00b7 max {fmt_number(numeric.get('max'))}",
        f"mean {fmt_number(numeric.get('mean'))} \u00b7 std {fmt_number(numeric.get('std'))}",
    ]
    if numeric.get("zeros"):
        lines.append(f"zeros {fmt_number(numeric['zeros'])}")
    # NaN and infinities are worth a look (a model sees them as they are): in warning colour.
    special = [f"{name} {fmt_number(numeric.get(key))}" for key, name in (("nan", "NaN"), ("inf", "inf"))
               if numeric.get(key)]
    if special:
        lines.append('<span class="warn">' + " \u00b7 ".join(special) + "</span>")
    return "<br>".join(lines)


def _short(text: str) -> str:
    if not text:
        return "(empty)"
    return text if len(text) <= _TOP_VALUE_CHARS else text[: _TOP_VALUE_CHARS - 1] + "\u2026"


def _bytes_cell(summary: dict[str, Any]) -> str:
    length = as_dict(summary.get("length"))
    # Estimates say so: "~" with their range or error (older stats.json: no flags, estimates).
    distinct = fmt_number(summary.get("distinct"))
    if summary.get("distinct_exact") is not True:
        low, high = (as_list(summary.get("distinct_range")) + [None, None])[:2]
        distinct = f"\u2248{distinct}" + (f" ({fmt_number(low)}\u2013{fmt_number(high)})" if low else "")
    lines = [f"distinct {distinct} \u00b7 length {fmt_number(length.get('min'))}\u2013"
             f"{fmt_number(length.get('max'))} (mean {fmt_number(length.get('mean'))})"]
    top = [entry for entry in as_list(summary.get("top")) if isinstance(entry, dict)]
    if top:
        shown = ", ".join(f"<code>{esc(_short(str(entry.get('value'))))}</code> "
                          f"({fmt_number(entry.get('count'))})" for entry in top[:_TOP_VALUES_SHOWN])
        if summary.get("top_exact") is True:
            lines.append(f"top: {shown}")
        else:
            error = summary.get("top_error")
            bound = f", each up to {fmt_number(error)} more" if isinstance(error, int) else ""
            lines.append(f"top \u2248 (lower bounds{bound}): {shown}")
    return "<br>".join(lines)


def _histogram_cell(name: str, stats: dict[str, Any]) -> str:
    numeric = as_dict(stats.get("numeric"))
    histogram = as_dict(numeric.get("histogram"))
    counts = [count for count in as_list(histogram.get("counts")) if isinstance(count, (int, float))]
    if counts:
        return histogram_svg(counts, as_list(histogram.get("edges")), title=f"{name}: histogram")
    top = [entry for entry in as_list(as_dict(stats.get("bytes")).get("top")) if isinstance(entry, dict)]
    counts = [entry.get("count") for entry in top if isinstance(entry.get("count"), (int, float))]
    if counts:
        values = "\n".join(f"{_short(str(entry.get('value')))}: {entry.get('count')}" for entry in top)
        return histogram_svg(counts, title=f"{name}: most frequent values\n{values}")
    return ""


def _span(low: Any, high: Any, mean: str = "") -> str:
    """Values per record: `low` alone when it is `high`, else the range (and its mean)."""
    return fmt_number(low) if low == high else f"{fmt_number(low)}\u2013{fmt_number(high)}{mean}"


def _split_features_table(split_stats: dict[str, Any]) -> str:
    records = split_stats.get("records")
    features = sorted(as_dict(split_stats.get("features")).items())
    rows = []
    for name, stats in features[:_FEATURES_SHOWN]:
        stats = as_dict(stats)
        summary = (_numeric_cell(as_dict(stats["numeric"])) if stats.get("numeric")
                   else _bytes_cell(as_dict(stats["bytes"])) if stats.get("bytes") else MISSING)
        per_record = as_dict(stats.get("values_per_record"))
        mean = f" (mean {fmt_number(per_record.get('mean'))})"
        rows.append([f"<code>{esc(name)}</code>", esc(stats.get("kind", MISSING)),
                     fmt_percent(stats.get("records"), records),
                     _span(per_record.get("min"), per_record.get("max"), mean) if per_record else MISSING,
                     summary, _histogram_cell(name, stats)])
    if not rows:
        return "<p>No features.</p>"
    hidden = len(features) - _FEATURES_SHOWN
    more = f'<p class="note">and {hidden:,} more features (see stats.json)</p>' if hidden > 0 else ""
    return table(["feature", "kind", "present", "values per record", "statistics", "distribution"],
                 rows, "features") + more


def _spec_features(feature_spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, entry) of every feature a spec lists (SequenceExamples: `context:` and
    `sequence:` names)."""
    if "sequence" in feature_spec:
        return [(f"{part}:{name}", as_dict(entry)) for part in ("context", "sequence")
                for name, entry in sorted(as_dict(feature_spec.get(part)).items())]
    return [(name, as_dict(entry)) for name, entry in sorted(as_dict(feature_spec.get("features")).items())]


def _spec_features_table(feature_spec: dict[str, Any]) -> str:
    rows = []
    for name, entry in _spec_features(feature_spec):
        presence = as_dict(entry.get("presence"))
        low, high = presence.get("min_values"), presence.get("max_values")
        per_record = MISSING if low is None else _span(low, high)
        rows.append([f"<code>{esc(name)}</code>", esc(entry.get("dtype", MISSING)),
                     esc(entry.get("kind", MISSING)),
                     fmt_percent(presence.get("records"), presence.get("of")), per_record])
    if not rows:
        return "<p>No features.</p>"
    return table(["feature", "dtype", "kind", "present", "values per record"], rows, "features")


def _has_feature_stats(stats: dict[str, Any]) -> bool:
    """Whether `stats.json` describes any feature: it does not for SequenceExample outputs
    (it counts their records only)."""
    return any(as_dict(as_dict(split).get("features")) for split in as_dict(stats.get("splits")).values())


def features_section(stats: dict[str, Any] | None, feature_spec: dict[str, Any] | None,
                     manifest: Manifest) -> str:
    """Per split from `stats.json`, else (none, or one without feature statistics, as for
    SequenceExamples) the feature spec's dtypes, kinds and presence over all splits."""
    if stats is not None and (feature_spec is None or _has_feature_stats(stats)):
        splits = as_dict(stats.get("splits"))
        parts = []
        for split in ordered_splits(list(splits), manifest):
            split_stats = as_dict(splits[split])
            records = split_stats.get("records")
            parts.append(f"<h3>{esc(split)} <small>{fmt_number(records)} record"
                         f"{'' if records == 1 else 's'}</small></h3>{_split_features_table(split_stats)}")
        body = "".join(parts) or "<p>No statistics.</p>"
    elif feature_spec is not None:
        body = ('<p class="note">No feature statistics for this output (stats.json counts its '
                'records only): dtypes and kinds from feature_spec.json.</p>' if stats is not None else
                '<p class="note">No statistics for this output (no stats.json): dtypes, kinds '
                'and presence over all splits from feature_spec.json.</p>')
        body += _spec_features_table(feature_spec)
    else:
        body = "<p>No stats.json and no feature_spec.json.</p>"
    return section("features", "Features", body)


def _counts_inline(counts: dict[str, Any]) -> str:
    items = sorted(((str(key), value) for key, value in counts.items()), key=lambda item: item[0])
    return " \u00b7 ".join(f"{esc(key)}: {fmt_number(value)}" for key, value in items) or MISSING


def _dimension_cell(name: str, numeric: dict[str, Any]) -> str:
    histogram = as_dict(numeric.get("histogram"))
    chart = histogram_svg(as_list(histogram.get("counts")), as_list(histogram.get("edges")),
                          title=f"{name}: histogram")
    return (f"{chart} {fmt_number(numeric.get('min'))}\u2013{fmt_number(numeric.get('max'))} "
            f"(mean {fmt_number(numeric.get('mean'))})")


def image_stats_section(stats: dict[str, Any] | None, manifest: Manifest) -> str:
    """Per split: image formats, sizes, channels and labels, when `stats.json` has them."""
    splits = as_dict((stats or {}).get("splits"))
    parts = []
    for split in ordered_splits(list(splits), manifest):
        images = as_dict(as_dict(splits[split]).get("images"))
        if not images:
            continue
        rows = [["formats", _counts_inline(as_dict(images.get("formats")))],
                ["width", _dimension_cell("width", as_dict(images.get("width")))],
                ["height", _dimension_cell("height", as_dict(images.get("height")))],
                ["channels", _counts_inline(as_dict(images.get("channels")))]]
        labels = as_dict(images.get("labels"))
        parts.append(f"<h3>{esc(split)}</h3>" + table(None, rows, "images"))
        if labels:
            bars = sorted(((str(label), count) for label, count in labels.items()
                           if isinstance(count, (int, float))), key=lambda item: (-item[1], item[0]))
            more = len(bars) - _LABEL_BARS
            parts.append("<h4>records per label</h4>"
                         + bar_chart_svg(bars[:_LABEL_BARS], title=f"{split}: records per label"))
            if more > 0:
                parts.append(f"<p class=\"note\">and {more:,} more labels</p>")
    if not parts:
        return ""
    return section("images", "Images", "".join(parts))
