"""`render_report`: a `ReportData` as one self-contained, inert HTML page: inline CSS and SVG,
`data:` thumbnails, no script, font or file to fetch, and a Content-Security-Policy meta tag
forbidding any (so a hostile value that escaped escaping still could not run or call out)."""

from __future__ import annotations

from typing import Any

from transforms.format.manifest_format import Counts, Manifest, ShardEntry
from transforms.report.charts import bar_chart_svg
from transforms.report.collect import EXAMPLES_PER_REASON, ReportData
from transforms.report.markup import MISSING, as_dict, esc, fmt_bytes, fmt_number, section, table
from transforms.report.render_drift import drift_section
from transforms.report.render_stats import features_section, image_stats_section, ordered_splits
from transforms.report.thumbnails import Thumbnail

__all__ = ["render_report"]

_SHARDS_LISTED = 200
#: The options shown up front; the others are in a folded list.
_MAIN_OPTIONS = ("input", "format", "spec", "output", "compression", "splits")
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2733;margin:0;
background:#f6f7f9}
header{background:#1f3a5f;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:21px}
header p{margin:0;opacity:.85}nav{padding:8px 28px;background:#e7ebf0}nav a{margin-right:16px;
color:#1f3a5f}main{padding:8px 28px 40px}section{background:#fff;border:1px solid #dde2e8;
border-radius:6px;padding:6px 18px 14px;margin:16px 0}h2{font-size:18px;margin:10px 0}
h3{font-size:15px;margin:14px 0 6px}h3 small{font-weight:normal;color:#5a6675}
table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid #e3e7ec;padding:4px 10px;
text-align:left;vertical-align:top}th{background:#f0f3f6;font-weight:600}
code{font:12px ui-monospace,Menlo,Consolas,monospace;
background:#f0f3f6;padding:0 3px;border-radius:3px;word-break:break-all}
.note{color:#5a6675}.warn{color:#b03a2e;font-weight:600}.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #dde2e8;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}.sheet{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;width:104px;text-align:center}figure img{border:1px solid #dde2e8;background:#fff}
figcaption{font-size:11px;color:#5a6675;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.nopreview{width:96px;height:96px;display:flex;align-items:center;justify-content:center;
font-size:11px;background:#f0f3f6;color:#b03a2e}ul.examples{margin:0;padding-left:18px}
table.features td:first-child code{white-space:nowrap;word-break:normal}
svg.bars text{fill:#1d2733}svg.spark{vertical-align:middle}details{margin:6px 0}table.features{width:100%}
"""


def _inputs(manifest: Manifest) -> str:
    options = as_dict(manifest.metadata.get("options"))
    main = [[esc(name), f"<code>{esc(options[name])}</code>"] for name in _MAIN_OPTIONS
            if options.get(name) not in (None, "", [], {})]
    main += [[esc(name), esc(manifest.metadata.get(name, MISSING))]
             for name in ("run_id", "created_at", "tool_version")]
    others = [[esc(name), f"<code>{esc(value)}</code>"] for name, value in sorted(options.items())
              if name not in _MAIN_OPTIONS and value not in (None, "", [], {}, False)]
    folded = (f"<details><summary>all options ({len(others)} more set)</summary>"
              f"{table(['option', 'value'], others)}</details>") if others else ""
    return "<h3>Inputs</h3>" + table(None, main, "inputs") + folded


def _count_cards(counts: Counts) -> list[tuple[str, str]]:
    """The overview's counts, which add up as the manifest's do: read = written + dead-lettered
    (for sequences, in rows)."""
    if counts.written_rows is None:
        return [("records read", fmt_number(counts.input)), ("written", fmt_number(counts.written)),
                ("dead-lettered", fmt_number(counts.dead_letter))]
    return [("rows read", fmt_number(counts.input)), ("rows written", fmt_number(counts.written_rows)),
            ("dead-lettered rows", fmt_number(counts.dead_letter)),
            ("sequences written", fmt_number(counts.written))]


def _split_rows(manifest: Manifest) -> tuple[list[list[str]], list[tuple[str, float]]]:
    """Per split: its cells (with a rows column for sequences) and its bar."""
    per_split, sequences = manifest.counts.splits, manifest.counts.written_rows is not None
    shards_of: dict[str, list[ShardEntry]] = {}
    for shard in manifest.shards:
        shards_of.setdefault(str(shard.split), []).append(shard)
    rows, bars = [], []
    for split in ordered_splits(sorted(set(per_split) | set(shards_of)), manifest):
        entry = per_split.get(split)
        shards = shards_of.get(split, [])
        sizes = [shard.bytes for shard in shards]
        written = entry.written if entry else sum(shard.records for shard in shards)
        rows_in = [fmt_number(entry and entry.written_rows)] if sequences else []
        rows.append([esc(split), fmt_number(written), *rows_in, fmt_number(entry and entry.dead_letter),
                     fmt_number(len(shards)), fmt_bytes(sum(sizes)),
                     f"{fmt_bytes(min(sizes))} \u2013 {fmt_bytes(max(sizes))}" if sizes else MISSING])
        bars.append((split, written))
    return rows, bars


def _overview(data: ReportData) -> str:
    manifest, shards = data.manifest, data.manifest.shards
    cards = "".join(f'<div class="card">{esc(title)}<b>{value}</b></div>' for title, value in [
        *_count_cards(manifest.counts), ("shards", fmt_number(len(shards))),
        ("bytes", fmt_bytes(sum(shard.bytes for shard in shards)))])
    rows, bars = _split_rows(manifest)
    written = ["records"] if manifest.counts.written_rows is None else ["sequences", "rows"]
    splits = table(["split", *written, "dead-lettered", "shards", "bytes", "shard sizes"], rows)
    listed = [[f"<code>{esc(shard.path)}</code>", esc(shard.split), fmt_number(shard.records),
               fmt_bytes(shard.bytes)] for shard in shards[:_SHARDS_LISTED]]
    hidden = len(shards) - _SHARDS_LISTED
    more = f'<p class="note">and {hidden:,} more</p>' if hidden > 0 else ""
    named = "the shard" if len(shards) == 1 else f"the {len(shards):,} shards"
    shard_list = (f"<details><summary>{named}</summary>"
                  f"{table(['shard', 'split', 'records', 'bytes'], listed)}{more}</details>")
    body = (f'<div class="cards">{cards}</div>{_inputs(manifest)}<h3>Records per split</h3>'
            f"{splits}{bar_chart_svg(bars, title='records per split')}{shard_list}")
    return section("overview", "Overview", body)


def _example_line(example: dict[str, Any]) -> str:
    where = esc(example.get("source") or MISSING)
    if example.get("row") is not None:
        where += f":{fmt_number(example['row'])}"
    column = f" <code>{esc(example['column'])}</code>" if example.get("column") else ""
    return f"<li><code>{where}</code>{column} \u2014 {esc(example.get('message') or '')}</li>"


def _by_reason(data: ReportData, limit: int | None = None) -> list[tuple[str, int, str, int]]:
    """(reason, count, its examples as an HTML list, examples shown) of every dead-letter reason,
    most frequent first."""
    counts: Any = data.manifest.counts.dead_letter_reasons
    if not counts and data.stats:  # older manifests: the statistics count them too
        counts = (data.stats.get("dead_letters") or {}).get("by_reason") or {}
    counts = {str(reason): count for reason, count in counts.items() if isinstance(count, int)}
    found = []
    for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        examples = data.dead_letters.by_reason.get(reason)
        if not examples and data.stats:  # the files could not be read: the statistics kept some
            examples = ((data.stats.get("dead_letters") or {}).get("examples") or {}).get(reason)
        examples = [example for example in examples or () if isinstance(example, dict)][:limit]
        lines = "".join(_example_line(example) for example in examples)
        found.append((reason, count, f'<ul class="examples">{lines}</ul>', len(examples)))
    return found


def _dead_letters(data: ReportData) -> str:
    found = _by_reason(data, EXAMPLES_PER_REASON)
    if not found:
        return section("dead-letters", "Dead letters", "<p>None: every input record was converted.</p>")
    rows = [[f"<code>{esc(reason)}</code>", fmt_number(count), examples if shown else MISSING]
            for reason, count, examples, shown in found]
    note = "" if data.dead_letters.complete else (
        '<p class="note">The dead-letter files are large: examples come from their beginning.</p>')
    body = (bar_chart_svg([(reason, count) for reason, count, *_ in found], title="dead letters by reason",
                          warn=[reason for reason, *_ in found])
            + table(["reason", "records", f"examples (up to {EXAMPLES_PER_REASON})"], rows) + note
            + '<p class="note">Every dead letter is a JSON line in <code>dead_letter/*.jsonl</code>.</p>')
    return section("dead-letters", "Dead letters", body)


def _figure(thumbnail: Thumbnail) -> str:
    caption = esc(thumbnail.caption)
    title = esc(f"{thumbnail.caption} ({thumbnail.split})")
    if thumbnail.data_uri is None:
        picture = f'<div class="nopreview" title="{esc(thumbnail.problem or "")}">no preview</div>'
    else:
        picture = (f'<img src="{esc(thumbnail.data_uri)}" width="{thumbnail.width}" '
                   f'height="{thumbnail.height}" alt="{caption}">')
    return f'<figure title="{title}">{picture}<figcaption>{caption}</figcaption></figure>'


def _image_dead_letters(data: ReportData) -> str:
    parts = []
    for reason, count, examples, shown in _by_reason(data):
        more = f'<p class="note">and {count - shown:,} more</p>' if count > shown else ""
        parts.append(f"<h4><code>{esc(reason)}</code> ({fmt_number(count)})</h4>{examples}{more}")
    return "<h3>Dead-lettered images</h3>" + "".join(parts) if parts else ""


def _contact_sheets(data: ReportData) -> str:
    if not data.is_image_output:
        return ""
    sheets = "".join(f"<h3>{esc(sheet.label)} <small>{len(sheet.thumbnails)} shown</small></h3>"
                     f'<div class="sheet">{"".join(map(_figure, sheet.thumbnails))}</div>'
                     for sheet in data.contact_sheets) or "<p>No image could be sampled from the shards.</p>"
    intro = ('<p class="note">The first images of each label in shard order (at most 8 per label, '
             '50 labels), read from the shards.</p>')
    return section("contact-sheets", "Contact sheets", intro + sheets + _image_dead_letters(data))


def render_report(data: ReportData) -> str:
    """The report page of `data`, as text."""
    sections = {
        "overview": ("Overview", _overview(data)),
        "dead-letters": ("Dead letters", _dead_letters(data)),
        "features": ("Features", features_section(data.stats, data.feature_spec, data.manifest)),
        "images": ("Images", image_stats_section(data.stats, data.manifest)),
        "drift": ("Drift", drift_section(data.drift)),
        "contact-sheets": ("Contact sheets", _contact_sheets(data)),
    }
    links = "".join(f'<a href="#{anchor}">{esc(title)}</a>'
                    for anchor, (title, body) in sections.items() if body)
    notes = "".join(f'<p class="note">{esc(note)}</p>' for note in data.notes)
    title = f"TFRecord output: {data.output_dir}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p>run {esc(data.manifest.metadata.get('run_id', MISSING))}, "
        f"committed {esc(data.manifest.metadata.get('created_at', MISSING))}</p></header>"
        f"<nav>{links}</nav><main>{notes}"
        + "".join(body for _, body in sections.values())
        + "</main></body></html>\n"
    )
