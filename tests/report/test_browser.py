"""`report.html` in a real browser: headless Chromium (the system's `chromium`, driven over
the DevTools protocol) loads it from disk with no console error and no request but `file:`
and `data:`, every contact-sheet image decodes, and a screenshot shows a rendered page.

Skipped only on a machine without Chromium outside CI; in CI (`CI` set) a missing browser
fails the test, since `.ci/run` installs it."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from PIL import Image

from tests.report.chromium import Chromium, find_chromium
from tests.report.fixtures import convert_images, write_drift
from tests.report.test_render import _hostile_data
from transforms.report.build import write_report
from transforms.report.render import render_report

CHROMIUM = find_chromium()

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="no chromium binary (apt-get install chromium); CI always runs this test")

_IMAGES = "Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])"


def _browser() -> Chromium:
    assert CHROMIUM is not None, "CI must have chromium: .ci/run installs Debian's package"
    return Chromium(CHROMIUM, width=1200, height=900)


def _assert_clean(load) -> None:
    assert load.console_errors == []
    assert load.failed_requests == []
    assert [url for url in load.requested_urls if not url.startswith(("file:", "data:"))] == []


def _assert_rendered(png: bytes) -> None:
    """The screenshot is a page, not a blank: many colours, and most pixels not background."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (1200, 900)
    colours = image.getcolors(maxcolors=image.width * image.height)
    assert len(colours) > 200  # text antialiasing, charts and photos
    background = max(colours)[0]
    assert background < 0.9 * image.width * image.height


def test_the_report_of_an_image_output_renders_with_every_image(tmp_path):
    out = convert_images(tmp_path)
    write_drift(out)
    page = Path(write_report(str(out)))
    with _browser() as browser:
        load = browser.load(page.as_uri())
        _assert_clean(load)
        images = browser.evaluate(_IMAGES)
        sheets = browser.evaluate("document.querySelectorAll('#contact-sheets .sheet').length")
        chart_width = browser.evaluate("document.querySelector('svg.spark').getBoundingClientRect().width")
        sections = browser.evaluate("Array.from(document.querySelectorAll('section')).map(s => s.id)")
        png = browser.screenshot()
    assert len(images) == 6 and all(done and width > 0 and height > 0 for done, width, height in images)
    assert sheets == 3 and chart_width > 0
    assert sections == ["overview", "dead-letters", "features", "images", "drift", "contact-sheets"]
    _assert_rendered(png)


def test_hostile_values_stay_text_in_the_browser(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_report(_hostile_data()), encoding="utf-8")
    with _browser() as browser:
        load = browser.load(page.as_uri())
        _assert_clean(load)  # an injected script would at least be reported as blocked by the CSP
        scripts = browser.evaluate("document.querySelectorAll('script, iframe, [onerror]').length")
        title = browser.evaluate("document.querySelector('h1').textContent")
        images = browser.evaluate(_IMAGES)
    assert scripts == 0 and title == 'TFRecord output: <script>alert("x")</script>'
    assert len(images) == 1 and images[0][1] > 0
