"""The report renderer on hand-made inputs: hostile text is escaped everywhere, the page is
inert (no script, no URL but `data:` images), missing inputs degrade, drift renders."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

from PIL import Image

from transforms.format.manifest_format import Manifest
from transforms.report.charts import bar_chart_svg, histogram_svg
from transforms.report.collect import ReportData
from transforms.report.dead_letters import DeadLetterSample
from transforms.report.markup import esc, fmt_bytes, fmt_number, fmt_percent
from transforms.report.render import render_report
from transforms.report.thumbnails import ContactSheet, Thumbnail, thumbnail_data_uri

HOSTILE = '<script>alert("x")</script>'
ATTRIBUTE_BREAKER = '"><img src=x onerror=alert(1)>'


class _Tags(HTMLParser):
    """Every start tag of a page with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def _document(name: str = "train") -> dict:
    return {
        "run_id": "r1", "created_at": "2026-05-04T00:00:00+00:00", "tool_version": "0.1.0",
        "compression": "none", "splits": [name],
        "options": {"input": "data/*.csv", "format": "csv", "output": "out"},
        "shards": [{"path": f"{name}-00000-of-00001.tfrecord", "split": name, "records": 3, "bytes": 120,
                    "sha256": "0" * 64}],
        "counts": {"input": 4, "written": 3, "dead_letter": 1, "dead_letter_reasons": {"wrong_type": 1},
                   "splits": {name: {"input": 4, "written": 3, "dead_letter": 1}}},
    }


def _manifest(name: str = "train") -> Manifest:
    return Manifest.from_dict(_document(name))


def _numeric_stats() -> dict:
    return {"count": 3, "min": 0.0, "max": 2.0, "mean": 1.0, "std": 0.8, "zeros": 1, "nan": 0, "inf": 0,
            "quantiles": [[0.0, 0.0], [0.5, 1.0], [1.0, 2.0]],
            "histogram": {"edges": [0.2 * i for i in range(11)], "counts": [1, 0, 0, 0, 0, 1, 0, 0, 0, 1]}}


def _hostile_data() -> ReportData:
    manifest = _document(HOSTILE)
    manifest["run_id"] = HOSTILE
    manifest["options"]["input"] = ATTRIBUTE_BREAKER
    manifest["counts"]["dead_letter_reasons"] = {HOSTILE: 1}
    stats = {"schema_version": 1, "splits": {HOSTILE: {"records": 3, "features": {
        HOSTILE: {"kind": "bytes", "records": 3, "values_per_record": {"min": 1, "max": 1, "mean": 1},
                  "bytes": {"count": 3, "length": {"min": 1, "max": 9, "mean": 4}, "distinct": 2,
                            "top": [{"value": ATTRIBUTE_BREAKER, "count": 2},
                                    {"value": HOSTILE, "count": 1}]}},
        ATTRIBUTE_BREAKER: {"kind": "float", "records": 2, "numeric": _numeric_stats()},
    }, "images": {"formats": {HOSTILE: 3}, "channels": {"3": 3}, "labels": {HOSTILE: 3},
                  "width": _numeric_stats(), "height": _numeric_stats()}}}}
    drift = {"compared_to": HOSTILE,
             "schema": [{"feature": HOSTILE, "change": "added", "before": None, "after": HOSTILE}],
             "presence": [{"feature": HOSTILE, "split": HOSTILE, "before": 1.0, "after": 0.5}],
             "distribution": [{"feature": ATTRIBUTE_BREAKER, "split": HOSTILE, "psi": 0.5, "threshold": 0.2}],
             "labels": {"added": [HOSTILE], "vanished": [ATTRIBUTE_BREAKER]}}
    letters = DeadLetterSample({HOSTILE: [{"source": ATTRIBUTE_BREAKER, "row": 2, "column": HOSTILE,
                                           "message": HOSTILE}]})
    uri, width, height = thumbnail_data_uri(_png((40, 30), "RGB"))
    sheets = [ContactSheet(HOSTILE, [Thumbnail(ATTRIBUTE_BREAKER, HOSTILE, uri, width, height),
                                     Thumbnail(HOSTILE, HOSTILE, problem=ATTRIBUTE_BREAKER)])]
    return ReportData(output_dir=HOSTILE, manifest=Manifest.from_dict(manifest), stats=stats, drift=drift,
                      dead_letters=letters, is_image_output=True, contact_sheets=sheets,
                      labels=[HOSTILE], notes=[HOSTILE])


def _png(size: tuple[int, int], mode: str, value=None) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, value if value is not None else 0).save(buffer, format="PNG")
    return buffer.getvalue()


def test_hostile_names_and_values_are_escaped_everywhere():
    page = render_report(_hostile_data())
    assert HOSTILE not in page and ATTRIBUTE_BREAKER not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    tags = _tags(page)
    assert not [tag for tag, _ in tags if tag in ("script", "iframe", "object", "embed", "link", "base")]
    assert not [(tag, name) for tag, attrs in tags for name in attrs if name.startswith("on")]
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert len(images) == 1 and images[0]["src"].startswith("data:image/jpeg;base64,")


def test_text_utf8_cannot_encode_is_shown_as_backslash_escapes():
    # A non-UTF-8 byte of a file name (as Python decodes it), a lone surrogate, and text.
    assert esc("f\udce9 <x>") == "f\\xe9 &lt;x&gt;"
    assert esc("\ud800\u00e9") == "\\ud800\u00e9"
    assert bar_chart_svg([("f\udce9", 1)]).encode("utf-8")


def test_the_page_is_inert_and_self_contained():
    page = render_report(_hostile_data())
    assert "http://" not in page and "https://" not in page and "url(" not in page
    meta = [attrs for tag, attrs in _tags(page) if tag == "meta" and attrs.get("http-equiv")]
    assert meta[0]["content"].startswith("default-src 'none'; img-src data:")


def test_without_stats_the_overview_comes_from_the_manifest_and_the_features_from_the_spec():
    spec = {"features": {"age": {"dtype": "int64", "kind": "var_len",
                                 "presence": {"records": 3, "of": 4, "min_values": 1, "max_values": 2}}}}
    data = ReportData(output_dir="out", manifest=_manifest(), feature_spec=spec,
                      notes=["no stats.json: the overview comes from the manifest"])
    page = render_report(data)
    assert 'id="overview"' in page and 'id="dead-letters"' in page
    assert "wrong_type" in page and "75.0%" in page and "1\u20132" in page
    assert 'id="drift"' not in page and 'id="images"' not in page and 'id="contact-sheets"' not in page
    assert "no stats.json" in page
    assert '<a href="#drift">' not in page  # navigation lists only the sections shown


def test_without_stats_or_feature_spec_the_page_still_renders():
    page = render_report(ReportData(output_dir="out", manifest=_manifest()))
    assert "No stats.json and no feature_spec.json" in page


def test_stats_of_unexpected_shape_show_dashes_not_errors():
    stats = {"schema_version": 1, "splits": {"train": {"records": "many", "features": {
        "a": {"kind": "int64", "numeric": {"histogram": {"counts": "x"}, "quantiles": [1, [0.5]]}},
        "b": "not a dict", "c": {"bytes": {"top": ["x", {"value": None}]}}}}}}
    page = render_report(ReportData(output_dir="out", manifest=_manifest(), stats=stats))
    assert "<code>a</code>" in page and "<code>b</code>" in page and "<code>c</code>" in page


def test_drift_of_the_shape_the_issue_fixed_lists_every_change():
    drift = {"compared_to": "out/2026-05-03",
             "schema": [{"feature": "fax", "change": "missing", "before": "bytes", "after": None}],
             "presence": [{"feature": "tags", "split": "train", "before": 0.98, "after": 0.75}],
             "distribution": [{"feature": "income", "split": "train", "psi": 0.41, "threshold": 0.2},
                              {"feature": "score", "split": "train", "psi": 0.03, "threshold": 0.2}],
             "labels": {"added": ["coffee"], "vanished": ["dog"]}}
    page = render_report(ReportData(output_dir="out", manifest=_manifest(), drift=drift))
    section = page[page.index('id="drift"'):]
    assert "out/2026-05-03" in section and "<code>fax</code>" in section and "missing" in section
    assert "98.0%" in section and "75.0%" in section
    assert section.count(">drifted<") == 1 and "within threshold" in section
    assert "<code>coffee</code>" in section and "<code>dog</code>" in section
    quiet = render_report(ReportData(output_dir="out", manifest=_manifest(), drift={"compared_to": "x"}))
    assert "No change found" in quiet


def test_drift_as_transforms_stats_writes_it_lists_every_change():
    drift = {"schema_version": 1, "compared_to": "prev", "thresholds": {"presence_drop": 0.1, "psi": 0.2},
             "schema_drift": True, "distribution_drift": True,
             "schema": [{"split": "train", "feature": "age", "change": "kind_changed",
                         "previous": "int64", "current": "float"},
                        {"split": "test", "feature": None, "change": "split_missing",
                         "previous": None, "current": None}],
             "presence": [{"split": "train", "feature": "tags", "previous": 0.9, "current": 0.5}],
             "distribution": [{"split": "train", "feature": "income", "psi": 1.5,
                               "previous_mean": 10.0, "current_mean": 99.5}],
             "labels": [{"split": "train", "added": ["coffee"], "vanished": []}]}
    page = render_report(ReportData(output_dir="out", manifest=_manifest(), drift=drift))
    section = page[page.index('id="drift"'):]
    assert "kind_changed" in section and "float" in section and "(the whole split)" in section
    assert "90.0%" in section and "50.0%" in section and "99.5" in section
    assert section.count(">drifted<") == 1 and "<code>coffee</code>" in section
    assert "schema drift: <span" in section


def test_charts_are_small_inline_svg_with_escaped_text():
    spark = histogram_svg([1, 0, 5], [0, 1, 2, 3], title=HOSTILE)
    assert spark.startswith("<svg") and spark.count("<rect") == 3 and HOSTILE not in spark
    assert "[0, 1): 1" in spark
    assert histogram_svg([]) == ""
    bars = bar_chart_svg([(HOSTILE, 3), ("b", 0)], warn=[HOSTILE])
    assert HOSTILE not in bars and bars.count("<rect") == 2


def test_number_formats():
    assert fmt_number(1234567) == "1,234,567" and fmt_number(0.000123456) == "0.0001235"
    assert fmt_number(float("nan")) == "NaN" and fmt_number(None) == "\u2014"
    assert fmt_number(HOSTILE) == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(12) == "12 B"
    assert fmt_percent(1, 3) == "33.3%" and fmt_percent(1, 0) == "\u2014"


def _decoded(uri: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


def test_thumbnails_of_unusual_modes_are_small_rgb_jpegs():
    for size, mode, value in (((300, 200), "RGBA", (10, 20, 30, 0)), ((50, 400), "I;16", 40000),
                              ((120, 120), "L", 7), ((64, 64), "P", 3), ((10, 10), "1", 1)):
        uri, width, height = thumbnail_data_uri(_png(size, mode, value))
        image = _decoded(uri)
        assert image.format == "JPEG" and image.mode == "RGB" and image.size == (width, height)
        assert max(width, height) == min(96, max(size))
    transparent = _decoded(thumbnail_data_uri(_png((20, 20), "RGBA", (0, 0, 0, 0)))[0])
    assert min(transparent.getpixel((10, 10))) > 240  # transparency over white, not black
