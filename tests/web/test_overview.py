"""The page's data (``GET /ui/overview``) without a browser: what needs a human, grouped causes,
reasons explained in place, history strips, and items of a failed pass said to be the last completed pass's."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from api.story import build_story, pass_report, play
from datum.config import ReconcilerSettings
from datum.core.attention import Reconciler, decide
from datum.core.explain import Vocabulary, explain
from datum.core.vocab import Direction, Health, Reason
from datum.reconcile.report import DriftItem, DriftReport
from datum.store.history import PassRow
from datum.web import view as v


def text(page: str) -> str:
    """The page as a person reads it: tags dropped, entities decoded, spaces collapsed."""
    inline = re.sub(r"</?(?:time|wbr)\b[^>]*>", "", page)  # a time, a break opportunity: part of the text
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", inline)))


def section(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]


def test_a_glance_then_grouped_causes_explained_in_place(tmp_path):
    story = build_story(tmp_path)
    play(story)
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    page = story.get("/ui/overview").text
    words = text(page)

    # the summary: reconcilers by health, hosts by state, and what needs a human first, each a link
    glance = section(page, 'id="summary"', 'id="reconcilers"')
    assert re.search(r"degraded</span> <b>1</b>", glance) and re.search(r"failed</span> <b>1</b>", glance)
    assert 'href="/hosts/web1"' in glance and "host web1 failed" in text(glance)
    assert 'href="#group-buckets-circuit_breaker-reap"' in glance
    assert 'id="group-buckets-circuit_breaker-reap"' in page and 'id="host-web1"' in page
    assert '<a href="/hosts/web1">web1</a>' in page  # the host's name links to its page

    # twelve reaps held by the breaker are one row (here three), expandable, closed
    assert "3 reaps held: breaker reap > 2" in words
    group = re.search(r'<details class="group reason-circuit_breaker[^>]*>', page).group(0)
    assert " open" not in group
    assert page.count('class="reason-circuit_breaker') == 3  # its items, inside it
    # blocked_on_owner apart, after everything else, muted
    owners = page.index('class="owners"')
    assert owners > page.index("bucket/delta") and page.index("bucket/gamma") > owners
    assert "Waiting on their owners" in words

    # reasons explained in place, with what to do: wait versus go and look
    backoff = explain(Vocabulary.REASON, "backoff")
    assert backoff.means in words and backoff.do in words
    assert explain(Vocabulary.REASON, "circuit_breaker").do in words
    assert "go and look" in words and "wait" in words
    assert explain(Vocabulary.HOST_STATE, "failed").do in words

    # history: a strip per reconciler, per item and per host, and when the item first diverged
    assert page.count('class="strip"') >= 1 + 5 + 1
    assert "last 3 passes of bucket/x1, oldest first: 1 awaiting_confirmation, 2 circuit_breaker" in page
    assert "last 1 passes of web1, oldest first: 1 failed" in page
    assert re.search(r"diverged since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(3 passes\)", words)


def test_items_of_a_failed_pass_say_they_come_from_the_last_completed_pass(tmp_path):
    story = build_story(tmp_path)
    play(story)
    completed = story.clock.now
    story.root.rename(story.root.with_name("moved"))
    story.root.write_text("not a directory")  # the substrate cannot be read: the pass cannot complete
    story.tick()
    words = text(story.get("/ui/overview").text)
    assert "buckets is failing" in words
    stamp = completed.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"The items below come from the last completed pass, at {stamp}." in words
    assert "failing since" in words
    # the items keep their history: the failed pass is drawn as not observed, the streak counts completed passes
    assert "1 not observed (the pass could not complete)" in story.get("/ui/overview").text
    assert "diverged since" in words and "(3 passes)" in words


def test_hosts_are_listed_worst_first_with_their_history(tmp_path):
    story = build_story(tmp_path)
    for _ in range(3):
        story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    ok = pass_report("web2", "converged")
    ok["resources"] = ok["resources"][:1]
    ok["counts"] = {"converged": 1}
    ok.pop("reason")
    story.client.post("/v1/hosts/web2/passes", json=ok, headers=story.agent("web2"))
    page = story.get("/ui/overview").text
    assert page.index('id="host-web1"') < page.index('id="host-web2"')
    assert "last 3 passes of web1, oldest first: 3 failed" in page
    assert "failed since" in text(page)


def test_favicon(tmp_path):
    story = build_story(tmp_path)
    for path in ("/favicon.ico", "/static/favicon.svg"):
        r = story.client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
        assert r.content.startswith(b"<svg")
    assert 'rel="icon" href="/static/favicon.svg"' in story.client.get("/").text


T0 = datetime(2026, 11, 24, tzinfo=UTC)


def _report(items: list[DriftItem], health: Health = Health.DEGRADED) -> DriftReport:
    return DriftReport(
        reconciler="r", as_of=T0, last_ran_at=T0, health=health, drift=len(items), blocked=0,
        items_reported=True, items=items, dropped=0, drift_cap=500, coverage_reported=False, coverage=[],
    )


def _item(key: str, reason: Reason, failures: int | None = None, err: str | None = None) -> DriftItem:
    return DriftItem(
        kind="k", direction=Direction.ALIGN, id=key, streak=60, confirmations_needed=2, reason=reason,
        failures=failures, last_err=err, retry_after_passes=0 if failures else None,
    )


def test_an_item_parked_at_the_backoff_cap_needs_a_human_and_one_failed_once_waits():
    own = ReconcilerSettings.model_validate({"backoff": {"base_passes": 1, "cap_passes": 8}})
    items = [_item("parked", Reason.BACKOFF, 4, "disk full"), _item("blip", Reason.BACKOFF, 1, "timeout")]
    passes = [
        PassRow(T0 + timedelta(minutes=n), "degraded", True, 2, 0, {}, {"k/parked": "backoff"}) for n in range(50)
    ]
    rv = v.reconciler_view(_report(items), own, passes, lambda streak: None)
    [parked] = [i for g in rv.groups for i in g.items if i.at_cap]
    assert parked.key == "k/parked" and parked.act.value == "look"
    assert [g.act.value for g in rv.groups] == ["look", "wait"]  # different causes: two rows, look first
    assert parked.since_text == "diverged for 60 passes (began before the kept history)"
    assert parked.strip.runs == [v.Run("a-depends r-backoff", 50, parked.strip.runs[0].title)]
    assert rv.health_since.startswith("degraded for all of the last 50 passes (since before")
    lines = decide([Reconciler(_report(items).dump(), backoff=own.converge_config().backoff)])
    glance = v.overview([rv], [], {}, lines)
    assert [a.need.text for a in glance.attention] == ["k/parked (r) is parked at the backoff cap after 4 failures"]
    assert glance.attention[0].href == "#item-r-k/parked"


def test_a_silent_host_reads_unknown_and_needs_a_human(tmp_path):
    story = build_story(tmp_path)
    report = pass_report()
    report["intervalSeconds"] = 60  # an agent's report, finished weeks ago: its agent fell silent
    assert story.client.post("/v1/hosts/web1/passes", json=report, headers=story.agent("web1")).status_code == 201
    page = story.get("/ui/overview").text
    glance = text(section(page, 'id="summary"', 'id="reconcilers"'))
    assert "host web1 fell silent stale: the last report is" in glance
    assert re.search(r'<span class="state unknown">unknown</span> <b>1</b>', page)
    # Its row in the hosts table: unknown, and the reason says how stale and what it said last.
    row = text(section(page, 'class="host-unknown"', "</tr>"))
    assert row.startswith('class="host-unknown"> web1 unknown')
    assert re.search(r"stale: the last report is \S+ old, more than 3 x its 60s interval \(it said failed\)", row)
    assert 'class="host-failed"' not in page
