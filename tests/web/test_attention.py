"""Every surface tells the same truth: what needs a human is decided once (``datum.core.attention``), and
``GET /v1/attention``, the page, ``/metrics`` and the CLI's JSON fed to the same function name the same
lines with the same severity; a disabled reconciler is a state of its own; an item parked at the backoff
cap stays there pass after pass."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.test_typed_api import Checker
from datum.core.attention import decide, reasons
from datum.reconcile.attention import facts
from datum.reconcile.report import DriftReport
from web.browser import browser_context_at, keep, png_size, sign_in
from web.fleet_story import SECRET, cli, config_toml, live, populate
from web.test_overview import section, text

# (severity, reason, subject, ids): what needs a human in the story, in the order the page lists it.
EXPECTED = [
    ("look", "plugin_broken", "ghost", ()),
    ("look", "reconciler_failing", "flaky", ()),
    ("look", "backoff_cap", "buckets", ("bucket/delta",)),
    ("look", "stranded", "buckets", ("bucket/archiving",)),
    ("look", "host_failed", "web-failed", ()),
    ("look", "host_unknown", "web-silent", ()),
    ("look", "manual_reboot", "web-manual", ()),
    ("look", "reboot_overdue", "web-gone", ()),
    ("look", "host_drifted", "web-drift", ()),
    ("look", "circuit_breaker", "buckets", ("bucket/x1", "bucket/x2", "bucket/x3")),
    ("check", "host_degraded", "web-skip", ()),
]


def lines_of(answer: dict) -> list[tuple]:
    return [
        (n["severity"], n["reason"], n.get("reconciler") or n.get("host"), tuple(n.get("ids", ())))
        for n in answer["needs"]
    ]


def page_lines(page: str) -> list[tuple[str, str, str]]:
    """The page's Needs a human as (severity, reason, subject), from its markup."""
    found = re.findall(
        r'<li class="need sev-(\w+)" data-reason="([\w.]+)"(?: data-host="([^"]+)")?(?: data-reconciler="([^"]+)")?',
        page,
    )
    return [(sev, reason, host or reconciler) for sev, reason, host, reconciler in found]


def needs_human(metrics_text: str) -> dict[tuple[str, str], float]:
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "datum_needs_human":
            return {(s.labels["severity"], s.labels["reason"]): s.value for s in family.samples}
    raise AssertionError("no datum_needs_human in /metrics")


def gauge(metrics_text: str, name: str) -> dict[str, float]:
    for family in text_string_to_metric_families(metrics_text):
        if family.name == name:
            return {s.labels["reconciler"]: s.value for s in family.samples}
    raise AssertionError(f"no {name} in /metrics")


def test_every_surface_names_the_same_lines_with_the_same_severity(tmp_path, store_url):
    story = populate(tmp_path, store_url)
    answer = story.get("/v1/attention").json()
    assert lines_of(answer) == EXPECTED
    assert answer["hosts"] is True and "hostsNotListed" not in answer
    by_reason = {n["reason"]: n for n in answer["needs"]}
    assert by_reason["backoff_cap"]["text"] == "bucket/delta (buckets) is parked at the backoff cap after 2 failures"
    assert "datum reboot on web-manual" in by_reason["manual_reboot"]["do"]
    assert by_reason["circuit_breaker"]["direction"] == "reap"

    # the page prints the same lines, in the same order, with the same words
    page = story.get("/ui/overview").text
    assert page_lines(page) == [(s, r, subject) for s, r, subject, _ids in EXPECTED]
    glance = text(section(page, 'id="summary"', 'id="reconcilers"'))
    for n in answer["needs"]:
        assert n["text"] in glance and n["do"] in glance

    # /metrics counts them by severity and reason: every reason always there, 0 when none
    scraped = story.get("/metrics").text
    counted = needs_human(scraped)
    assert set(counted) == {(sev.value, reason) for reason, sev in reasons().items()}
    assert {k: v for k, v in counted.items() if v} == dict(Counter((s, r) for s, r, _x, _i in EXPECTED))

    # the CLI's JSON, handed to the one decision the CLI calls, names the same hosts and the same buckets lines
    cfg = str(config_toml(tmp_path, story))
    rows = json.loads(cli("hosts", "--json", "--config", cfg))["hosts"]
    hosts_from_cli = [(n.severity.value, n.reason, n.host) for n in decide(hosts=rows)]
    assert hosts_from_cli == [(s, r, x) for s, r, x, _i in EXPECTED if x.startswith("web") and r != "reboot_overdue"]
    drift = DriftReport.model_validate(json.loads(cli("drift", "buckets", "--json", "--config", cfg)))
    buckets = [(n.severity.value, n.reason, n.reconciler, n.ids) for n in decide([facts(story.registry, story.settings, drift)])]
    assert buckets == [e for e in EXPECTED if e[2] == "buckets"]


def test_disabled_is_a_state_of_its_own(tmp_path):
    story = populate(tmp_path)
    listed = {r["name"]: r for r in story.get("/v1/observability/admin/reconcilers").json()}
    assert listed["pg_roles"]["enabled"] is False and listed["pg_roles"]["health"] == "unknown"  # the seed's value
    assert listed["idle"]["enabled"] is True and listed["idle"]["health"] == "unknown"
    assert all(listed[n]["enabled"] for n in ("buckets", "steady", "flaky", "ghost"))
    scraped = story.get("/metrics").text
    assert gauge(scraped, "datum_reconciler_enabled") == {
        "buckets": 1.0, "flaky": 1.0, "hosts": 0.0, "idle": 1.0, "pg_roles": 0.0, "steady": 1.0
    }
    page = story.get("/ui/overview").text
    tile = text(section(page, 'id="summary"', 'id="reconcilers"'))
    # idle and the plugin that did not load are unknown; pg_roles and hosts (no fleet) are counted apart
    assert "failing 1 degraded 1 unknown 2 ok 1 disabled 2" in tile
    pg = text(section(page, 'id="reconciler-pg_roles"', "</section>"))
    assert "disabled" in pg and "enabled = false" in pg
    for never in ("Wait for the first tick", "found nothing diverged", "wait"):
        assert never not in pg
    idle = text(section(page, 'id="reconciler-idle"', "</section>"))
    assert "Wait for the first tick" in idle and "No pass has executed yet" in idle
    assert "found nothing diverged" not in idle


def test_a_host_awaiting_a_reboot_by_hand_is_a_humans_and_its_rows_say_so(tmp_path):
    story = populate(tmp_path)
    rows = {h["host"]: h for h in story.get("/v1/hosts").json()["hosts"]}
    assert rows["web-manual"]["reboot"]["policy"] == "manual" and rows["web-manual"]["reboot"]["required"] is True
    assert "markers" not in rows["web-manual"]["reboot"]
    assert rows["web-maint"]["reboot"]["policy"] == "maintenance"
    assert "reboot" not in rows["web-ok"]
    one = story.get("/v1/hosts/web-manual").json()
    assert one["reboot"]["policy"] == "manual"
    # the new fields are in the OpenAPI document, made strict: nothing a response carries is undeclared
    checker = Checker(story.app.openapi())
    for path, template in (("/v1/hosts", "/v1/hosts"), ("/v1/hosts/web-manual", "/v1/hosts/{host}"),
                           ("/v1/attention", "/v1/attention"),
                           ("/v1/observability/admin/reconcilers", "/v1/observability/admin/reconcilers")):
        checker.check(story.get(path), template)
    # the host's page: the reboot, its policy and what to do; the drifted host's diffs, redacted as in the API
    page = text(story.get("/ui/hosts/web-manual").text)
    assert "reboot_policy manual" in page and "Reboot it: run datum reboot on web-manual" in page
    assert "host web-manual awaits a reboot by hand (reboot_policy manual)" in page
    maint = text(story.get("/ui/hosts/web-maint").text)
    assert "it reboots in its next maintenance window" in maint and "go and look" not in maint
    drift = story.get("/ui/hosts/web-drift").text
    assert "+hello from datum" in drift and "(diff redacted: the resource is sensitive)" in drift
    assert SECRET not in drift and SECRET not in story.get("/v1/hosts/web-drift").text
    assert story.get("/ui/hosts/nobody").status_code == 404
    assert story.get("/ui/hosts/web-manual", "stranger").status_code == 403


def test_an_item_at_the_backoff_cap_stays_there_pass_after_pass(tmp_path):
    story = populate(tmp_path)
    said, texts, groups, gauges = set(), set(), set(), set()
    for _ in range(8):  # retries every other pass: apply_failed, then backoff, ...
        story.tick()
        [delta] = [i for i in story.get("/v1/observability/admin/reconcilers/buckets/drift").json()["items"]
                   if i["id"] == "delta"]
        said.add(delta["reason"])
        [line] = [n for n in story.get("/v1/attention").json()["needs"] if n.get("ids") == ["bucket/delta"]]
        texts.add((line["severity"], line["reason"], line["text"].split(" after ")[0]))
        page = story.get("/ui/overview").text
        group = section(page, 'id="group-buckets-backoff_cap-align"', "</summary>")
        groups.add(re.search(r'<span class="label">([^<]*)</span>', group).group(1))
        assert "1 align: apply_failed" not in text(page) and "A first failure may be transient" not in page
        gauges.add(needs_human(story.get("/metrics").text)[("look", "backoff_cap")])
    assert said == {"apply_failed", "backoff"}  # the contract's reason changes with the pass ...
    # ... and nothing a human reads does
    assert texts == {("look", "backoff_cap", "bucket/delta (buckets) is parked at the backoff cap")}
    assert groups == {"1 align parked at the backoff cap"}
    assert gauges == {1.0}


# ---- the page in a real browser (Playwright + Debian's Chromium), at 1400 and 390 px, and without JavaScript

SHOTS = ("attention-desktop.png", "attention-host-desktop.png", "attention-phone.png", "attention-host-phone.png",
         "attention-nojs.png")


def _shot(page, tmp_path, name: str, width: int) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    assert png_size(shot)[0] == width
    keep(shot)


def _one_line(page, selector: str) -> list[str]:
    """The texts of ``selector``'s elements that the browser wrapped over more than one line."""
    return page.eval_on_selector_all(
        selector,
        """els => els.filter(e => {
             const r = document.createRange(); r.selectNodeContents(e);
             return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1;
           }).map(e => e.textContent)""",
    )


@pytest.mark.browser
def test_the_page_in_a_browser_names_what_the_api_names(tmp_path, browser_context):
    story = populate(tmp_path)
    answer = story.get("/v1/attention").json()
    with live(story) as base:
        page = browser_context.new_page()
        sign_in(page, base, story.tokens["operator"])
        needs = page.locator("#summary ul.attention li")
        shown = [
            (li.get_attribute("class").split("sev-")[1], li.get_attribute("data-reason"),
             li.get_attribute("data-host") or li.get_attribute("data-reconciler"))
            for li in needs.all()
        ]
        assert shown == [(s, r, x) for s, r, x, _i in EXPECTED]
        for li, n in zip(needs.all(), answer["needs"], strict=True):
            said = li.inner_text()
            assert n["text"] in said and n["do"] in said
            assert ("go and look" if n["severity"] == "look" else "check it is intended") in said

        # a badge is red only on what Needs a human lists (finding 5), on hosts and on reconcilers alike
        listed = {x for s, _r, x, _i in EXPECTED if s == "look"}
        for row in page.locator("table.hosts tbody tr").all():
            host = row.locator("td[data-label=host]").inner_text()
            assert (row.locator(".act-look").count() > 0) == (host in listed), host
        assert page.locator("table.hosts tr#host-web-skip .act-check").count() == 1
        assert page.locator("table.hosts tr#host-web-maint .act-wait").count() == 1
        for name in ("steady", "idle", "pg_roles"):
            assert page.locator(f"#reconciler-{name} .act-look").count() == 0
        assert page.locator("#reconciler-buckets > details > .explain .act-look").count() == 1

        # disabled: its own word, counted apart, no advice to wait
        assert page.locator("#reconcilers tr", has_text="pg_roles").locator(".health.disabled").count() == 1
        pg = page.inner_text("#reconciler-pg_roles")
        assert "Wait for the first tick" not in pg and "found nothing diverged" not in pg

        # at 1400 px no item id is broken mid-word and no time wraps
        assert _one_line(page, "table.items td.id") == []
        assert _one_line(page, "time.t") == []
        _shot(page, tmp_path, "attention-desktop.png", 1400)

        # every host name links to its page: the manual reboot and what to do, the diffs (redacted)
        page.locator("table.hosts a", has_text="web-manual").click()
        page.wait_for_url("**/hosts/web-manual")
        page.locator("#host").wait_for(timeout=10_000)
        assert "Reboot it: run datum reboot on web-manual" in page.inner_text("#reboot")
        assert "go and look" in page.inner_text("#host")
        page.goto(base + "hosts/web-drift")
        page.locator("#resources").wait_for(timeout=10_000)
        resources = page.inner_text("#resources")
        assert "+hello from datum" in resources and "(diff redacted: the resource is sensitive)" in resources
        assert SECRET not in page.content()
        assert _one_line(page, "time.t") == []
        _shot(page, tmp_path, "attention-host-desktop.png", 1400)

        # on a phone: no sideways scrolling, and a converged host shows no empty "not converged" label
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(base)
        page.locator("#summary").wait_for(timeout=10_000)
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
        for cell in page.locator("tr.host-converged td").all():
            label = cell.get_attribute("data-label")
            assert cell.is_visible() == (label not in ("not converged", "reason")), label
        _shot(page, tmp_path, "attention-phone.png", 390)
        page.goto(base + "hosts/web-drift")
        page.locator("#resources").wait_for(timeout=10_000)
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
        _shot(page, tmp_path, "attention-host-phone.png", 390)


@pytest.mark.browser
def test_without_javascript_the_page_says_where_the_data_is(tmp_path):
    story = populate(tmp_path)
    with live(story) as base:
        for context in browser_context_at(tmp_path, java_script_enabled=False):
            page = context.new_page()
            page.goto(base)
            said = page.inner_text("body")
            assert "This page needs JavaScript" in said and "/v1/attention" in said
            assert page.is_hidden("#token-form")  # a form that cannot work without it is not offered
            _shot(page, tmp_path, "attention-nojs.png", 1400)
            page.goto(base + "hosts/web-manual")
            assert "/v1/hosts/web-manual" in page.inner_text("body")
