"""The page fits the screens operators read it on (issue 40, item 4), in Chromium, on a 50-host fleet with a
failing host (``web.fleet50``: real passes posted to a real store, served by uvicorn on loopback).

At 1366x768, a laptop's window with a classic scrollbar (Playwright hides scrollbars by default; here they are
shown, so the page has 1366 px less the scrollbar), no page scrolls sideways: the overview, a state's hosts, the
day's changes, a failing host's page and a converged one's. A failing host's error holds a long path, one word the
hosts table once widened itself for (27 px past the window: the last pass's time was cut).

At 390x844, a phone, the first screen answers "what needs me" (Needs a human ends within it) and the whole page
is at most 6 screens: each section below it is one line (native ``<details>``: a heading and a gist) until
opened, a switched-off reconciler is one line everywhere, and an opened list is compact (a change or a converged
host in at most two lines, where they were five-row cards: Changes alone was 6,300 px, the page 21 screens).

Screenshots: each test's pytest ``tmp_path`` keeps them (``fit-*.png``), and ``web.browser.keep`` copies the
latest of each to ``artifacts/`` at the repository's root.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from web.browser import browser_context_at, keep, next_refresh, png_size, sign_in
from web.fleet50 import FAILING, fleet
from web.fleet_story import live

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 768}
SCREENS = 6

# the page's width as its reader has it, the scrollbar (if any) taken off; and how tall it is
MEASURE = """() => { const s = document.scrollingElement;
  return {scroll: s.scrollWidth, client: s.clientWidth, inner: innerWidth, height: s.scrollHeight}; }"""
BOTTOM = "e => e.getBoundingClientRect().bottom + scrollY"
HEIGHT = "e => e.getBoundingClientRect().height"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """The fleet behind a live server: its base URL and the operator's token."""
    story = fleet(tmp_path_factory.mktemp("fleet50"))
    with live(story) as base:
        yield base, story.tokens["operator"]


def _open(page, url: str) -> None:
    page.goto(url)
    page.locator("#summary, #host").first.wait_for(timeout=10_000)


def _shot(page, tmp_path: Path, name: str, width: int) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / f"fit-{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert png_size(shot)[0] == width
    keep(shot)


def test_no_page_scrolls_sideways_at_1366(served, tmp_path):
    base, token = served
    for context in browser_context_at(tmp_path, viewport=LAPTOP, ignore_default_args=["--hide-scrollbars"]):
        page = context.new_page()
        sign_in(page, base, token)
        pages = {
            "overview": base, "failed": base + "?hosts=failed#hosts", "day": base + "?changes=1d#changes",
            "host-failing": base + f"hosts/{FAILING}", "host-converged": base + "hosts/web-02",
        }
        for name, url in pages.items():
            _open(page, url)
            m = page.evaluate(MEASURE)
            assert m["client"] < m["inner"], "the scrollbar is shown, as in a laptop's browser"
            assert m["scroll"] <= m["client"], (name, m)
            # no time is cut: each ends inside the window
            ends = page.eval_on_selector_all("time.t", "ts => ts.map(t => t.getBoundingClientRect().right)")
            assert ends and max(ends) <= m["client"], (name, max(ends), m)
        # on a laptop every section is open: the failing host's row is there with its error, whole
        _open(page, base)
        row = page.locator(f"table.hosts tr#host-{FAILING}")
        assert row.is_visible() and "checkout.shop.example.com.conf.datum-new: permission denied" in row.inner_text()
        # a switched-off reconciler is one line, its explanation a click away
        for name in ("pg_roles", "hosts"):
            off = page.locator(f"#reconciler-{name}")
            assert off.evaluate(HEIGHT) <= 40, name
            off.locator("summary").click()
            assert "enabled = false" in off.inner_text()
        # the screenshot without the scrollbar's gutter (a full-page capture lays the page out without one)
        page.add_style_tag(content="::-webkit-scrollbar { display: none; }")
        _shot(page, tmp_path, "laptop-overview", LAPTOP["width"])
        _open(page, base + f"hosts/{FAILING}")
        page.add_style_tag(content="::-webkit-scrollbar { display: none; }")
        _shot(page, tmp_path, "laptop-host", LAPTOP["width"])


def test_a_phone_shows_what_needs_a_human_first_and_the_page_in_six_screens(served, tmp_path):
    base, token = served
    for context in browser_context_at(tmp_path, viewport=PHONE):
        page = context.new_page()
        sign_in(page, base, token)
        m = page.evaluate(MEASURE)
        assert m["scroll"] <= m["inner"], m
        # the first screen: the counts, and Needs a human whole, the failing host first
        needs = page.locator("#summary ul.attention li")
        assert needs.first.inner_text().find(f"host {FAILING} failed") >= 0
        assert page.eval_on_selector("#summary", BOTTOM) <= PHONE["height"]
        assert m["height"] <= SCREENS * PHONE["height"], m
        _shot(page, tmp_path, "phone-overview", PHONE["width"])

        # every section is a heading a tap (or Enter) away, its gist said while it is closed
        folds = page.locator("details.fold")
        assert folds.count() >= 9
        for fold in folds.all():
            assert not fold.evaluate("d => d.open")
            assert fold.locator("summary h2").is_visible()
        for heading in ("Reconcilers", "Hosts", "Changes", "Revisions", "Rebooting", "Reading the strips"):
            assert folds.get_by_role("heading", name=heading, exact=True).count() == 1, heading
        assert "failed 1, converged 49" in page.inner_text("#hosts summary")
        assert "more than 50 in the last hour" in page.inner_text("#changes summary")
        for name in ("pg_roles", "hosts"):  # switched off: one line
            assert page.eval_on_selector(f"#reconciler-{name}", HEIGHT) <= 40, name

        # Changes opened from the keyboard: a change is at most two lines, where it was a five-row card
        page.focus("#changes summary")
        page.keyboard.press("Enter")
        rows = page.locator("table.changes tbody tr")
        assert rows.count() == 50 and rows.first.is_visible()
        tallest = max(rows.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)"))
        assert tallest <= 60, tallest
        assert page.evaluate(MEASURE)["scroll"] <= PHONE["width"]
        next_refresh(page)  # a refresh keeps what the viewer opened
        assert page.eval_on_selector("#fold-changes", "d => d.open")
        page.locator("#changes summary").click()  # and closed again, it stays closed
        next_refresh(page)
        assert not page.eval_on_selector("#fold-changes", "d => d.open")

        # Hosts opened: a converged host in two lines, the failing one with its error whole
        page.locator("#hosts summary").click()
        converged = page.locator("table.hosts tr.host-converged")
        assert converged.count() == 49
        assert max(converged.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)")) <= 60
        failing = page.locator(f"table.hosts tr#host-{FAILING}")
        assert "checkout.shop.example.com.conf.datum-new: permission denied" in failing.inner_text()
        assert page.evaluate(MEASURE)["scroll"] <= PHONE["width"]
        page.locator("#hosts summary").click()

        # a line of Needs a human leads into a closed section: it opens, down to the item's group
        page.locator("#summary a", has_text="reaps held").click()
        group = page.locator("details.group.reason-circuit_breaker")
        assert group.evaluate("d => d.open") and page.eval_on_selector("#fold-reconciler-buckets", "d => d.open")
        assert group.locator("table.items tr", has_text="bucket/x1").is_visible()

        # everything open, nothing scrolls sideways (the long path included)
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert page.evaluate(MEASURE)["scroll"] <= PHONE["width"]

        # a link to a section from elsewhere opens it where it lands
        _open(page, base + "?hosts=failed#hosts")
        page.locator(f"tr#host-{FAILING}").wait_for(timeout=10_000)
        assert page.eval_on_selector("#fold-hosts", "d => d.open")

        # the failing host's page: no sideways scrolling, what is wrong on its first screen
        _open(page, base + f"hosts/{FAILING}")
        m = page.evaluate(MEASURE)
        assert m["scroll"] <= m["inner"], m
        assert page.eval_on_selector("#resources table", "e => e.getBoundingClientRect().top") < PHONE["height"]
        assert re.search(r"permission denied", page.inner_text("#resources"))
        _shot(page, tmp_path, "phone-host", PHONE["width"])
