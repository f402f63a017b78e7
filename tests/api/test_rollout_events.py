"""The rollout as one state machine (issue 36 item 3, issue 39 item 2): every transition stored with its time,
author and reason, listed in ``GET /v1/events`` (type ``rollout``), ``datum events`` and the page; ``/v1/rollouts``
says when it halted, paused or was aborted and which hosts each wave holds; a halted rollout names every host
failing on it, not only those failing when it halted, and a resume accepts only what it named. On SQLite and
PostgreSQL, through the in-process app on a real store."""

from __future__ import annotations

from datum.core.vocab import COMMANDS, TRANSITIONS, RolloutAct, RolloutState
from datum.fleet.rollouts import machine
from datum.store import rollouts as stored

from .story import Story
from .test_rollouts import WEB, in_force, report, start, story, tick  # noqa: F401 - the fixture

__all__ = ["story"]


def ask(story: Story, path: str, params: dict[str, str]):  # type: ignore[no-untyped-def]
    return story.client.get(path, params=params, headers=story.auth("operator"))


def acts(story: Story, **filters: str) -> list[tuple[str, str, str]]:
    """(act, state, by) of every rollout event ``GET /v1/events`` lists with ``filters``, oldest first."""
    answer = ask(story, "/v1/events", {"type": "rollout", "limit": "1000", **filters})
    assert answer.status_code == 200, answer.text
    return [(e["action"], e["state"], e["by"]) for e in reversed(answer.json()["events"])]


def test_the_vocabulary_carries_each_state_s_consequences():
    assert {s for s in RolloutState if s.under_way} == {"rolling", "paused", "halted"}
    assert {s for s in RolloutState if s.waits_for_human} == {"paused", "halted"}
    assert {s.severity for s in RolloutState} == {"look", "wait", "none"}
    assert stored.OPEN == tuple(s for s in RolloutState if s.under_way)
    assert set(TRANSITIONS) == set(RolloutAct) and set(COMMANDS) == {"pause", "resume", "abort"}
    from datum.core.explain import lookup

    for s in RolloutState:  # datum explain says the same severity the enum carries
        assert [e.act.value for e in lookup(s.value) if e.vocabulary.value == "rollout state"] == [s.severity]


def test_every_transition_is_stored_with_its_time_author_and_reason(story: Story):
    first, second = start(story, WEB)
    assert acts(story) == [("started", "done", "server"), ("started", "rolling", "server")]
    report(story, "web1", "failed", second)
    tick(story)
    answer = story.client.post("/v1/rollouts/current/resume", params={"reason": "web1's disk, not the change"},
                               headers=story.auth("operator"))
    assert answer.status_code == 200, answer.text
    story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator"))
    story.client.post("/v1/rollouts/current/abort", params={"reason": "bad"}, headers=story.auth("operator"))
    assert acts(story) == [
        ("started", "done", "server"), ("started", "rolling", "server"), ("halted", "halted", "server"),
        ("resumed", "rolling", "operator"), ("paused", "paused", "operator"), ("aborted", "aborted", "operator"),
    ]
    events = ask(story, "/v1/events", {"type": "rollout"}).json()["events"]
    aborted, paused, resumed, halted = events[:4]
    assert halted["hosts"] == ["web1"] and "1 of 1" in halted["reason"] and halted["resource"] == "Rollout[2]"
    assert resumed["reason"] == "web1's disk, not the change" and resumed["hosts"] == ["web1"]  # what it accepted
    assert aborted["reason"] == "bad" and aborted["hosts"] == ["web1"]  # the hosts sent back
    assert aborted["revision"] == second and aborted["at"] >= paused["at"] >= resumed["at"] >= halted["at"]
    ro = in_force(story)
    assert ro["haltedAt"] == halted["at"] and ro["pausedAt"] == paused["at"] and ro["abortedAt"] == aborted["at"]
    assert [t["action"] for t in ro["transitions"]] == ["started", "halted", "resumed", "paused", "aborted"]
    assert ask(story, "/v1/events", {"action": "halted"}).json()["events"] == [halted]
    assert ask(story, "/v1/events", {"state": "aborted"}).json()["events"] == [aborted]
    assert ask(story, "/v1/events", {"resource": "Rollout[1]"}).json()["events"][0]["action"] == "started"
    assert all(e["type"] != "rollout" for e in ask(story, "/v1/events", {"host": "web1"}).json()["events"])
    page = story.get("/ui/overview").text
    assert "rollout-event" in page and "web1&#39;s disk, not the change" in page


def test_a_wave_released_and_done_are_the_server_s_with_why(story: Story):
    first, second = start(story, WEB)
    for wave in range(3):
        ro = in_force(story)
        for host in (n for w in ro["waves"] if w["wave"] == wave for n in w["names"]):
            report(story, host, "converged", second)
        tick(story)
        tick(story)
    assert in_force(story)["state"] == "done"
    moved = [(a, s) for a, s, by in acts(story) if by == "server"]
    assert moved[-3:] == [("released", "rolling"), ("released", "rolling"), ("done", "done")]
    events = ask(story, "/v1/events", {"action": "released"}).json()["events"]
    assert [e["wave"] for e in events] == [2, 1] and "wave 0 converged" in events[1]["reason"]


def test_each_wave_names_its_hosts(story: Story):
    start(story, WEB)
    waves = in_force(story)["waves"]
    assert waves[0]["names"] == ["web1"]
    named = [n for w in waves for n in w["names"]]
    assert sorted(named) == sorted(WEB) and len(named) == len(set(named))
    assert [len(w["names"]) for w in waves] == [w["hosts"] for w in waves]


def test_a_superseded_rollout_says_by_which_revision(story: Story):
    first, second = start(story, WEB)
    (story.fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: newer\n")  # type: ignore[attr-defined]
    story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))
    events = ask(story, "/v1/events", {"action": "superseded"}).json()["events"]
    assert len(events) == 1 and events[0]["rollout"] == 2 and "superseded by revision" in events[0]["reason"]


def test_the_events_pages_run_through_both_kinds_without_a_row_twice_or_lost(story: Story):
    first, second = start(story, WEB)
    for host in WEB:
        report(story, host, "failed", first)  # pass events, beside the rollouts' transitions
    report(story, "web1", "failed", second)
    tick(story)
    whole = ask(story, "/v1/events", {"limit": "1000"}).json()["events"]
    kinds = {e["type"] == "rollout" for e in whole}
    assert kinds == {True, False}
    seen, cursor = [], None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = ask(story, "/v1/events", params).json()
        seen += page["events"]
        cursor = page.get("next")
        if not cursor:
            break
    assert [(e["type"] == "rollout", e["id"]) for e in seen] == [(e["type"] == "rollout", e["id"]) for e in whole]
    passes = ask(story, "/v1/hosts/web1/passes", {"cursor": "1-r1"})
    assert passes.status_code == 422  # a rollout event's position is not a pass's


def test_a_halted_rollout_names_a_host_failing_after_it_halted_and_a_resume_accepts_only_the_named(story: Story):
    first, second = start(story, WEB)
    report(story, "web1", "failed", second)
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "halted" and [f["host"] for f in ro["failed"]] == ["web1"]
    # web2 is released now (a canary group of two is not possible here: force it into wave 0)
    with story.store.begin() as conn:
        import sqlalchemy as sa

        from datum.store.schema import rollout_hosts
        conn.execute(sa.update(rollout_hosts).where(rollout_hosts.c.host == "web2").values(wave=0))
    report(story, "web2", "failed", second)
    machine.tick(story.app.state.datum.fleet)  # the check of a halted rollout names what fails now
    assert [f["host"] for f in in_force(story)["failed"]] == ["web1", "web2"]
    attention = story.get("/v1/attention").json()
    assert any("web2" in (line.get("ids") or []) for line in attention["needs"] if line["reason"] == "rollout_halted"), attention
    report(story, "web3", "failed", second)  # not released: not named, never accepted
    with story.store.begin() as conn:
        conn.execute(sa.update(rollout_hosts).where(rollout_hosts.c.host == "web3").values(wave=0))
    answer = story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator"))
    assert answer.status_code == 200
    resumed = ask(story, "/v1/events", {"action": "resumed"}).json()["events"][0]
    assert resumed["hosts"] == ["web1", "web2"]
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "halted" and [f["host"] for f in ro["failed"]] == ["web3"], ro  # unseen: not accepted


def test_after_an_abort_current_names_the_revision_served(story: Story):
    first, second = start(story, WEB)
    assert story.get("/v1/revisions").json()["current"] == second
    answer = story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator"))
    assert answer.status_code == 200, answer.text
    revisions = story.get("/v1/revisions").json()
    assert revisions["current"] == first  # what every host is served: never the aborted revision nobody gets
    assert [r["id"] for r in revisions["revisions"] if r["current"]] == [first]
