"""The headless-Chromium checker of tests_unit/browser.py must see what a reader would: it fails broken pages.

Each page is written here, next to the test; a clean page passes, and a page
with a console error, an uncaught exception, a missing image, an image that
does not decode or an undrawn figure is reported with the cause.
"""

from __future__ import annotations

import pytest

from tests_unit import browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(browser.find_chromium() is None,
                       reason="chromium is not installed: apt-get install -y chromium (.ci/run installs it)"),
]

# A 1x1 PNG.
PIXEL = ("data:image/png;base64,"
         "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def write(tmp_path, body: str):
    page = tmp_path / "page.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head><body>{body}</body></html>')
    return page


def test_a_clean_page_has_no_problems_and_its_figures_are_drawn(tmp_path):
    page = write(tmp_path, f'<section id="a"><figure id="f1"><img src="{PIXEL}" width="40" height="40"></figure>'
                           '<figure id="f2"><svg width="40" height="20"><rect width="40" height="20"/></svg></figure>'
                           "</section>")

    result = browser.load(page)

    assert result.problems == []
    assert result.loaded and result.figures == {"f1": True, "f2": True} and result.sections == ("a",)
    assert result.screenshot.startswith(b"\x89PNG")


def test_console_errors_exceptions_and_broken_images_are_reported(tmp_path):
    page = write(tmp_path, '<script>console.error("deliberate console error"); undefinedFunction();</script>'
                           '<figure id="missing"><img src="missing.png" alt="gone"></figure>'
                           '<figure id="corrupt"><img src="data:image/png;base64,AAAA" alt="bad"></figure>'
                           '<figure id="empty"><svg width="0" height="0"></svg></figure>')

    problems = browser.load(page).problems

    assert "console: deliberate console error" in problems
    assert any(p.startswith("console: ReferenceError: undefinedFunction is not defined") for p in problems)
    assert any(p.startswith("log: network: ") and "missing.png" in p for p in problems)
    assert "broken image: missing.png" in problems
    assert "broken image: data:image/png;base64,AAAA" in problems
    assert "figure not drawn: empty" in problems
