"""The web page in a real browser: Playwright drives Debian's Chromium against ``datum serve`` on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from api.story import build_story, config_file, pass_report, play, serving
from datum.reconcilers import buckets as b
from web.browser import keep, next_refresh, png_size, sign_in

pytestmark = pytest.mark.browser

def story_on_disk(tmp_path: Path) -> str:
    """The buckets story in the store ``datum serve`` will open; returns the operator's token."""
    story = build_story(tmp_path)
    play(story)
    for _ in range(2):
        story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    token = story.tokens["operator"]
    with story.store.begin() as conn:  # a row in a status nobody selects, owns or finishes: stranded
        conn.execute(sa.update(b.buckets).where(b.buckets.c.name == "alpha").values(status="archiving"))
    story.client.close()
    story.store.dispose()
    return token


def test_the_page_shows_why_an_item_is_stuck(tmp_path, browser_context):
    token = story_on_disk(tmp_path)
    with serving(config_file(tmp_path, scheduler=False), tmp_path / "serve.log") as base:
        page = browser_context.new_page()
        page.goto(base)
        # a bad token is refused and the form stays
        page.fill("#token", "datum_wrong")
        page.click("#token-form button[type=submit]")
        page.wait_for_selector("text=that token is not known to this server")
        sign_in(page, base, token)

        # at a glance: counts, and what needs a human first, each a link to its detail
        glance = page.locator("#summary")
        assert "degraded 1" in glance.locator(".tile").first.inner_text().replace("\n", " ")
        needs = glance.locator("ul.attention li")
        assert needs.count() == 3
        assert "stranded in archiving" in needs.nth(0).inner_text()
        assert "host web1 failed" in needs.nth(1).inner_text()
        assert "3 reaps held: breaker reap > 2" in needs.nth(2).inner_text()
        assert all("go and look" in needs.nth(i).inner_text() for i in range(3))

        delta = page.locator("table.items tr", has_text="bucket/delta")
        assert delta.locator(".reason").inner_text() == "backoff"
        assert "delta exists and is not a directory" in delta.locator("td.err").inner_text()
        assert "not a directory (8 bytes)" in delta.inner_text()
        assert "next pass" in delta.inner_text()
        assert "diverged since" in delta.inner_text()
        # the reason explained in place, not in a tooltip: what it means and what to do
        group = page.locator("details.group", has=delta)
        assert "What to do: Failed once or twice and retrying soon: wait." in group.inner_text()

        # twelve reaps held by the breaker are one row, expandable
        breaker = page.locator("details.group.reason-circuit_breaker")
        assert breaker.count() == 1
        assert breaker.locator("summary").inner_text().startswith("3 reaps held: breaker reap > 2")
        x1 = page.locator("table.items tr", has_text="bucket/x1")
        assert not x1.is_visible()
        breaker.locator("summary").click()
        assert x1.is_visible() and "circuit_breaker" in x1.inner_text()
        assert page.locator("table.items tr", has_text="circuit_breaker").count() == 3
        next_refresh(page)  # a refresh keeps it open
        assert x1.is_visible()

        # blocked_on_owner apart and muted
        gamma = page.locator(".owners table.items tr", has_text="bucket/gamma")
        assert "blocked_on_owner" in gamma.inner_text() and "bucket still holds 1 object" in gamma.inner_text()
        assert float(page.eval_on_selector(".owners", "e => getComputedStyle(e).opacity")) < 1

        # history strips: per reconciler, per item, per host
        strips = page.locator(".strip")
        assert strips.count() >= 8
        assert "2 circuit_breaker" in x1.locator(".strip").get_attribute("aria-label")
        host = page.locator("table.hosts tr", has_text="web1")
        assert "failed" in host.inner_text() and "File[motd]" in host.inner_text()
        assert host.locator(".strip").get_attribute("aria-label").endswith("2 failed")
        assert "failed since" in host.inner_text()

        assert page.locator("table.coverage tr", has_text="delete_blocked").is_visible()
        stranded = page.locator("table.coverage tr.stranded")
        assert stranded.count() == 1 and "archiving stranded" in stranded.inner_text()
        assert not page.is_visible("#token-form")

        # a line about a host leads to the host's own page (the token stays in the tab), and back
        page.locator("#summary a", has_text="host web1 failed").click()
        page.wait_for_url("**/hosts/web1")
        page.locator("#host").wait_for(timeout=10_000)
        assert "File[motd]" in page.inner_text("#resources") and "permission denied" in page.inner_text("#resources")
        # its kept passes, each expandable to what it did (issue 23)
        kept = page.locator("#passes table.kept-passes")
        assert "failed" in kept.inner_text() and "permission denied" not in kept.inner_text()
        kept.locator("details summary").first.click()
        assert "File[motd]" in kept.inner_text() and "permission denied" in kept.inner_text()
        page.go_back()
        page.locator("#summary").wait_for(timeout=10_000)

        # the favicon
        icon = page.eval_on_selector("link[rel=icon]", "e => e.href")
        answer = page.request.get(icon)
        assert answer.status == 200 and answer.headers["content-type"].startswith("image/svg+xml")

        # it refreshes itself (refresh = 1s): the status line changes without a reload
        next_refresh(page)
        page.evaluate("window.scrollTo(0, 0)")
        shot = tmp_path / "page-desktop.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        assert png_size(shot)[0] == 1400
        keep(shot)


def test_on_a_phone_and_when_the_server_goes_away(tmp_path, browser_context):
    token = story_on_disk(tmp_path)
    page = browser_context.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    with serving(config_file(tmp_path, scheduler=False), tmp_path / "serve.log") as base:
        sign_in(page, base, token)
        # every group opened and read in one task: a refresh (every second) in between may close them again,
        # and what a closed group holds has no computed style to read
        seen = page.evaluate(
            "() => { document.querySelectorAll('details').forEach(d => d.open = true);"
            " return {width: document.scrollingElement.scrollWidth,"
            " head: getComputedStyle(document.querySelector('table.items thead')).display,"
            " row: getComputedStyle(document.querySelector('table.items tr')).display} }"
        )
        # no sideways scrolling at 390 px, with every group open
        assert seen["width"] <= 390, seen
        # tables become cards: no header row, each cell labelled
        assert (seen["head"], seen["row"]) == ("none", "block"), seen
        # read in the task that opens the groups: a refresh (every second) in between closes them again, and a
        # cell in a closed group has no rendered ::before to read
        label = page.evaluate(
            "() => { document.querySelectorAll('details').forEach(d => d.open = true);"
            " return getComputedStyle(document.querySelector('table.items td[data-label=item]'), '::before').content }"
        )
        assert label == '"item"'
        # the coverage histogram stays readable: its bars use the card's width
        width = page.evaluate(
            "() => { document.querySelectorAll('details').forEach(d => d.open = true);"
            " return document.querySelector('table.coverage tr.stranded td.bar span').getBoundingClientRect().width }"
        )
        assert width > 250
        assert page.locator("table.coverage tr.stranded").inner_text().count("archiving") == 1
        shot = tmp_path / "page-phone.png"
        page.screenshot(path=str(shot), full_page=True)
        assert png_size(shot)[0] == 390
        keep(shot)
        assert page.is_hidden("#stale")
    # the server is gone: the page greys out and says since when
    banner = page.locator("#stale")
    banner.wait_for(state="visible", timeout=10_000)
    # one time format on the page: UTC with its zone, never the browser's local time without one
    said = banner.inner_text()
    assert re.search(r"The server is unreachable since \d\d:\d\d:\d\d UTC: this is what it said at \d\d:\d\d:\d\d UTC", said)
    assert page.evaluate("document.body.classList.contains('stale')")
    assert float(page.eval_on_selector("#app", "e => getComputedStyle(e).opacity")) < 1
    assert page.inner_text("#status") == "stale"
    assert page.locator("table.items tr", has_text="bucket/delta").count() == 1  # what it last said stays
    shot = tmp_path / "page-stale.png"
    page.screenshot(path=str(shot))
    keep(shot)


def test_a_host_page_links_the_waves_where_a_browser_opens_them(tmp_path, browser_context):
    """The held-back host's and the canary's 'the waves' open the overview's rollout section in the browser; they
    linked /ui/overview#rollout, the page's data, which a browser asks for without the token: a 401."""
    from api.test_rollouts import WEB, fleet_story, start

    story = fleet_story(tmp_path, None)  # the store config_file names
    start(story, WEB)  # web1 the canary on the second revision, the others held back on the first
    token, directory = story.tokens["operator"], story.fleet  # type: ignore[attr-defined]
    story.client.close()
    story.store.dispose()
    cfg = config_file(tmp_path, scheduler=False)
    with cfg.open("a") as config:
        config.write(f'[fleet]\nmanifests = "{directory}"\n[fleet.rollout]\ncanary = ["web1"]\n'
                     'waves = ["50%", "100%"]\nsoak = "1h"\n')
    with serving(cfg, tmp_path / "serve.log") as base:
        page = browser_context.new_page()
        sign_in(page, base, token)
        for host, where in (("web2", "#host .held-back a"), ("web1", "#host .canary a")):
            page.goto(base + f"hosts/{host}")
            link = page.locator(where)
            link.wait_for(timeout=10_000)
            link.click()
            page.wait_for_url(base + "#rollout", timeout=10_000)
            rollout = page.locator("#rollout")
            rollout.wait_for(timeout=10_000)
            assert "rolling" in rollout.inner_text(), rollout.inner_text()
