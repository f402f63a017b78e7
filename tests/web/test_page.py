"""The web page in a real browser: Playwright drives Debian's Chromium against ``datum serve`` on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from api.story import build_story, config_file, pass_report, play, serving
from datum.reconcilers import buckets as b

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """Debian's Chromium, installed by scripts/setup-browser when missing; skip only if that cannot be done."""
    if not os.access(CHROMIUM, os.X_OK):
        setup = subprocess.run([str(ROOT / "scripts" / "setup-browser")], capture_output=True, text=True)
        if not os.access(CHROMIUM, os.X_OK):
            pytest.skip(f"Chromium cannot be installed here (scripts/setup-browser: {setup.stderr.strip()[-300:]})")
    return CHROMIUM


@pytest.fixture
def browser_context(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium()
    profile = tmp_path / "chromium-profile"
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=FLAGS, viewport={"width": 1400, "height": 1000}
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def test_the_page_shows_why_an_item_is_stuck(tmp_path, browser_context):
    story = build_story(tmp_path)
    play(story)
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.auth("agent"))
    token = story.tokens["operator"]
    with story.store.begin() as conn:  # a row in a status nobody selects, owns or finishes: stranded
        conn.execute(sa.update(b.buckets).where(b.buckets.c.name == "alpha").values(status="archiving"))
    story.client.close()
    story.store.dispose()

    with serving(config_file(tmp_path, scheduler=False), tmp_path / "serve.log") as base:
        page = browser_context.new_page()
        page.goto(base)
        # a bad token is refused and the form stays
        page.fill("#token", "datum_wrong")
        page.click("#token-form button[type=submit]")
        page.wait_for_selector("text=that token is not known to this server")
        page.fill("#token", token)
        page.click("#token-form button[type=submit]")

        delta = page.locator("table.items tr", has_text="bucket/delta")
        delta.wait_for(timeout=10_000)
        assert delta.locator(".reason").inner_text() == "backoff"
        assert "delta exists and is not a directory" in delta.locator("td.err").inner_text()
        assert "not a directory (8 bytes)" in delta.inner_text()
        gamma = page.locator("table.items tr", has_text="bucket/gamma")
        assert "blocked_on_owner" in gamma.inner_text()
        assert "bucket still holds 1 object" in gamma.inner_text()
        assert page.locator("table.items tr", has_text="circuit_breaker").count() == 3
        assert page.locator("table.coverage tr", has_text="delete_blocked").is_visible()
        stranded = page.locator("table.coverage tr.stranded")
        assert stranded.count() == 1 and "archiving stranded" in stranded.inner_text()
        assert "next pass" in delta.inner_text()
        host = page.locator("table.hosts tr", has_text="web1")
        assert "failed" in host.inner_text() and "File[motd]" in host.inner_text()
        assert not page.is_visible("#token-form")

        # it refreshes itself (refresh = 1s): the status line changes without a reload
        first = page.inner_text("#status")
        page.wait_for_function("s => document.getElementById('status').textContent !== s", arg=first, timeout=5000)

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
