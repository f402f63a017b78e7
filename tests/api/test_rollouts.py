"""Staged rollouts (issue 24 item 2), on SQLite and PostgreSQL, through the in-process app on a real store: a new
revision goes to the canaries first and wave by wave; a failing canary halts it and nobody else gets it; a host
whose manifest did not change is not held back; abort returns the canaries; pause and resume; two servers on one
store agree (one of them started after the change, serving the previous revision from its snapshot); Cedar."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from datum.api.front.tokens import create as create_token
from datum.config import RolloutSettings
from datum.core.explain import lookup
from datum.fleet.rollouts import machine, serve
from datum.fleet.rollouts.plan import plan
from datum.store import open_store
from datum.store import rollouts as stored

from .story import Story, build_story, git, pass_report, serve_fleet

WEB = ["web1", "web2", "web3", "web4", "web5"]
NEW = "resources:\n  - File[/etc/motd]:\n      content: new\n"


def with_rollout(story: Story, **given: object) -> None:
    state = story.app.state.datum
    fleet = state.settings.fleet.model_copy(update={"rollout": RolloutSettings.model_validate(given)})
    state.settings = state.settings.model_copy(update={"fleet": fleet})


def fleet_story(tmp_path: Path, store_url: str, **given: object) -> Story:
    story = build_story(tmp_path, store_url)
    directory = serve_fleet(story, tmp_path / "fleet")
    (directory / "nodes.yaml").write_text(
        "nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n    group: web\n"
        "  - match: {name: 'db*'}\n    manifests: [db.yaml]\n    group: db\n"
    )
    (directory / "db.yaml").write_text("resources:\n  - File[/etc/db]:\n      content: db\n")
    story.fleet = directory  # type: ignore[attr-defined]
    story.tokens["viewer"] = create_token(story.store, "viewer")
    with_rollout(story, **({"canary": ["web1"], "waves": ["50%", "100%"], "soak": "1ms"} | given))
    return story


@pytest.fixture
def story(tmp_path, store_url):  # type: ignore[no-untyped-def]
    return fleet_story(tmp_path, store_url)


def manifest(story: Story, host: str):  # type: ignore[no-untyped-def]
    answer = story.client.get(f"/v1/hosts/{host}/manifest", headers=story.agent(host))
    assert answer.status_code == 200, answer.text
    return answer


def served(story: Story, host: str) -> tuple[str, str]:
    """(the revision, the motd content) ``host`` is served."""
    answer = manifest(story, host)
    resources = answer.json()["manifest"]["resources"]
    content = next(iter(resources[0].values()))["content"]
    return answer.headers["Datum-Revision"], content


def report(story: Story, host: str, state: str, revision: str, **more: object) -> None:
    """A pass of ``host`` on ``revision``; ``more`` overrides fields (``intervalSeconds`` makes it able to go silent:
    the pass's ``finishedAt`` is a month ago unless given)."""
    body = pass_report(host, state) | more
    if state == "converged":
        body.update(reason=None, exitCode=0, counts={"converged": 1}, resources=body["resources"][:1])  # type: ignore[index]
        body = {k: v for k, v in body.items() if v is not None}
    body["revision"] = revision
    answer = story.client.post(f"/v1/hosts/{host}/passes", json=body, headers=story.agent(host))
    assert answer.status_code == 201, answer.text


def in_git(story: Story) -> tuple[Path, str]:
    """The story's fleet directory made a git work tree, its first commit served: (the directory, its revision)."""
    fleet: Path = story.fleet  # type: ignore[attr-defined]
    git(fleet, "init", "-q")
    git(fleet, "add", ".")
    git(fleet, "commit", "-q", "-m", "first")
    return fleet, served(story, "web1")[0]


def commit(fleet: Path, content: str) -> str:
    """web.yaml's motd made ``content`` and committed: the commit."""
    (fleet / "web.yaml").write_text(f"resources:\n  - File[/etc/motd]:\n      content: {content}\n")
    git(fleet, "commit", "-q", "-am", content)
    return git(fleet, "rev-parse", "HEAD")


def replica_on(story: Story, copy: Path) -> Story:
    """A second server on ``story``'s store (its own home beside ``copy``), serving the fleet directory ``copy``
    with the same rollout settings: a replica whose copy of the directory may lag."""
    replica = build_story(copy.parent, story.settings.store)
    state = replica.app.state.datum
    state.settings = state.settings.model_copy(update={"fleet": state.settings.fleet.model_copy(
        update={"manifests": copy})})
    replica.tokens.update((p, t) for p, t in story.tokens.items() if p.startswith("agent@"))
    with_rollout(replica, canary=["web1"], waves=["50%", "100%"], soak="1ms")
    return replica


def in_force(story: Story) -> dict:  # type: ignore[type-arg]
    answer = story.get("/v1/rollouts")
    assert answer.status_code == 200, answer.text
    return answer.json()["rollouts"][0]  # type: ignore[no-any-return]


def tick(story: Story) -> None:
    time.sleep(0.01)  # past the 1 ms soak
    machine.tick(story.app.state.datum.fleet)


def start(story: Story, hosts: list[str]) -> tuple[str, str]:
    """Every host on the first revision, then web.yaml edited: (first, second revision)."""
    first, content = served(story, "web1")
    assert content == "hello"
    for host in hosts:
        report(story, host, "converged", first)
    assert in_force(story)["state"] == "done" and in_force(story)["revision"] == first  # the first is stable at once
    (story.fleet / "web.yaml").write_text(NEW)  # type: ignore[attr-defined]
    second, content = served(story, "web1")  # the canary: the new revision at once
    assert second != first and content == "new"
    return first, second


def test_wave_membership_is_deterministic_per_group_with_the_canaries_first():
    hosts = [f"web{i}" for i in range(1, 21)] + ["db1", "db2", "db3"]
    group = lambda h: "db" if h.startswith("db") else "web"  # noqa: E731
    one = plan("rev1", hosts, group, ["web1", "group:nothing"], [0.1, 0.5, 1.0])
    assert one == plan("rev1", list(reversed(hosts)), group, ["web1", "group:nothing"], [0.1, 0.5, 1.0])
    assert one["web1"] == (0, "web")
    waves = {k: sorted(h for h, (w, g) in one.items() if w == k and g == "web") for k in range(4)}
    assert [len(waves[k]) for k in range(4)] == [1, 2, 8, 9]  # of 19: ceil(1.9), ceil(9.5) - 2, the rest
    assert sorted(h for h, (w, g) in one.items() if g == "db" and w == 1) != []  # each group has its first slice
    assert plan("rev2", hosts, group, ["web1"], [0.1, 0.5, 1.0]) != one  # another revision, another order
    canary_group = plan("rev1", hosts, group, ["group:db", "web9"], [1.0])
    assert {h for h, (w, _g) in canary_group.items() if w == 0} == {"db1", "db2", "db3", "web9"}


def test_the_plan_groups_hosts_as_intake_recorded_them_facts_included(tmp_path, store_url):  # type: ignore[no-untyped-def]
    """A rollout is planned from the group each host's last pass recorded (nodes.yaml with its agent's facts),
    not from its name alone: a ``group:db`` canary takes the hosts a facts rule puts in ``db``."""
    from datum.store import open_store
    from datum.store.hosts import take_pass

    store = open_store(store_url)
    try:
        for host, group in (("db-a", "db"), ("db-b", "db"), ("web1", "default"), ("web2", "default")):
            doc = {"host": host, "mode": "enforce", "state": "converged", "revision": "rev0", "resources": []}
            take_pass(store, host, doc, group=group)
        seen: dict[str, str] = {}

        def planner(revision, known):  # type: ignore[no-untyped-def]
            seen.update(known)
            return plan(revision, known, known.__getitem__, ["group:db"], [1.0])

        assert stored.begin(store, "rev0", 1, planner, 3.0) is not None  # the first revision: done at once
        row = stored.begin(store, "rev1", 1, planner, 3.0)
        assert row is not None and row.state == "rolling"
        assert seen == {"db-a": "db", "db-b": "db", "web1": "default", "web2": "default"}
        assert stored.membership(store, row.id) == {"db-a": 0, "db-b": 0, "web1": 1, "web2": 1}
    finally:
        store.dispose()


def test_a_good_revision_goes_through_every_wave(story: Story):
    first, second = start(story, WEB)
    ro = in_force(story)
    assert (ro["state"], ro["wave"], ro["lastWave"], ro["previous"]) == ("rolling", 0, 2, first)
    assert [(w["wave"], w["hosts"], w["released"]) for w in ro["waves"]] == [(0, 1, True), (1, 2, False), (2, 2, False)]
    for host in WEB[1:]:
        assert served(story, host) == (first, "hello")  # held back: the previous revision, its content
    report(story, "web1", "converged", second)
    tick(story)
    ro = in_force(story)
    assert ro["wave"] == 1 and ro["state"] == "rolling"
    members = stored.membership(story.store, ro["id"])
    wave1 = sorted(h for h, w in members.items() if w == 1)
    rest = sorted(h for h, w in members.items() if w == 2)
    for host in wave1:
        assert served(story, host) == (second, "new")
    for host in rest:
        assert served(story, host) == (first, "hello")
    for host in wave1:
        report(story, host, "converged", second)
    tick(story)
    tick(story)
    assert in_force(story)["wave"] == 2
    for host in rest:
        assert served(story, host) == (second, "new")
        report(story, host, "converged", second)
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "done" and ro["revision"] == second
    assert served(story, "web9") == (second, "new")  # a host never heard of: everyone has it now


def test_a_failing_canary_halts_the_rollout_and_nobody_else_gets_the_revision(story: Story):
    first, second = start(story, WEB)
    report(story, "web1", "failed", second)
    machine.tick(story.app.state.datum.fleet)
    ro = in_force(story)
    assert ro["state"] == "halted"
    assert ro["failed"] == [{"host": "web1", "reason": "File[motd] failed: permission denied"}]
    assert "web1" in ro["reason"] and "1 of 1" in ro["reason"]
    for _ in range(3):
        tick(story)
    assert in_force(story)["state"] == "halted"
    for host in [*WEB[1:], "web9"]:
        assert served(story, host) == (first, "hello")
    assert served(story, "web1") == (second, "new")  # the canary keeps it until abort
    page = story.get("/ui/overview").text
    assert 'id="rollout"' in page and "halted" in page and "File[motd] failed: permission denied" in page
    metrics = story.get("/metrics").text
    assert 'datum_rollout_state{state="halted"} 1.0' in metrics
    assert 'datum_rollout_state{state="rolling"} 0.0' in metrics
    assert 'datum_rollout_failed_host{host="web1",reason="File[motd] failed: permission denied"} 1.0' in metrics
    assert 'datum_rollout_hosts{status="failed",wave="0"} 1.0' in metrics


def test_the_canary_s_line_and_page_say_it_is_the_canary_which_revision_it_runs_and_which_it_is_served(
    story: Story, datum_cli, tmp_path  # type: ignore[no-untyped-def]
):
    first, second = start(story, WEB)
    ro = in_force(story)
    said = f"the canary of rollout {ro['id']}: runs revision {first}, is served revision {second}"
    assert said in story.get("/ui/hosts/web1").text  # served the new revision, its last pass ran the first
    assert "the canary of rollout" not in story.get("/ui/hosts/web2").text  # held back: no canary
    report(story, "web1", "failed", second)
    machine.tick(story.app.state.datum.fleet)
    assert in_force(story)["state"] == "halted"
    said = f"the canary of rollout {ro['id']}: runs revision {second}, is served revision {second}"
    [line] = [n for n in story.get("/v1/attention").json()["needs"] if n.get("host") == "web1"]
    assert line["text"] == f"host web1 failed (the canary of rollout {ro['id']})", line
    assert line["detail"] == f"{said}; File[motd] failed: permission denied"
    assert "datum rollout resume or datum rollout abort" in line["do"]
    page = story.get("/ui/hosts/web1").text
    assert said in page and f"host web1 failed (the canary of rollout {ro['id']})" in page
    assert 'href="/#rollout"' in page  # the overview's rollout section as a browser opens it (not /ui/overview)
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{story.fleet}"\n'  # type: ignore[attr-defined]
                   '[fleet.rollout]\ncanary = ["web1"]\n')
    code, out, err = datum_cli("hosts", "--config", str(cfg))
    assert code == 0 and said in " ".join(out.split()), out + err
    aborted = story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator"))
    assert aborted.status_code == 200 and in_force(story)["state"] == "aborted", aborted.text
    assert "the canary of rollout" not in story.get("/ui/hosts/web1").text  # no rollout under way: no canary


def test_resuming_a_halted_rollout_accepts_the_failures_it_halted_for(story: Story, datum_cli, tmp_path):  # type: ignore[no-untyped-def]
    """``resume`` after a halt: the canary failing then is accepted (neither failed nor waited for) and the waves
    go on; a host that fails after the resume counts, and halts it again."""
    first, second = start(story, WEB)
    report(story, "web1", "failed", second)
    tick(story)
    assert in_force(story)["state"] == "halted"
    answer = story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator"))
    assert answer.status_code == 200, answer.text
    tick(story)
    tick(story)
    ro = in_force(story)
    assert (ro["state"], ro["wave"]) == ("rolling", 1), ro  # not halted again: wave 0 complete without web1
    assert (ro["waves"][0]["failed"], ro["waves"][0]["accepted"]) == (0, 1)
    assert 'datum_rollout_hosts{status="accepted",wave="0"} 1.0' in story.get("/metrics").text
    assert '<td data-label="accepted"' in story.get("/ui/overview").text
    assert [e.name for e in lookup("accepted")] == ["accepted"]
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{story.fleet}"\n'  # type: ignore[attr-defined]
                   '[fleet.rollout]\ncanary = ["web1"]\n')
    code, out, err = datum_cli("rollout", "status", "--config", str(cfg))
    assert code == 0 and "accepted" in out, out + err
    assert ro.get("failed") is None  # the halt's list is not shown as failing while it rolls
    report(story, "web1", "converged", second)  # its next pass counts again: converged...
    report(story, "web1", "failed", second)  # ...then failed anew, and that failure is not the one accepted
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "halted" and [f["host"] for f in ro["failed"]] == ["web1"], ro


def test_a_rollout_whose_every_host_failed_is_never_done_by_resumes(tmp_path, store_url):  # type: ignore[no-untyped-def]
    """Resumes accept failures; they do not test the revision: with every released host accepted and none
    converged, the last wave does not complete."""
    story = fleet_story(tmp_path, store_url, waves=["100%"])
    _first, second = start(story, WEB)
    for round_ in range(2):  # the canary, then the rest: each fails, halts, and is resumed
        ro = in_force(story)
        for host, wave in stored.membership(story.store, ro["id"]).items():
            if wave == ro["wave"]:
                report(story, host, "failed", second)
        tick(story)
        assert in_force(story)["state"] == "halted", round_
        assert story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator")).status_code == 200
        tick(story)
        tick(story)
    ro = in_force(story)
    assert (ro["state"], ro["wave"], ro.get("waveCompletedAt")) == ("rolling", 1, None), ro
    assert sum(w["accepted"] for w in ro["waves"]) == len(WEB)


def test_a_failure_after_a_resume_halts_again_whatever_the_receiving_replicas_clock(story: Story, monkeypatch):
    """A resume accepts the canary's failing pass, by what the pass is, not by when: a new failing pass received
    by a replica whose clock runs a minute behind the store's halts the rollout again (compared by time, it was
    taken for the pass accepted, and the next wave released the bad revision)."""
    import datum.store.hosts as received

    _first, second = start(story, WEB)
    report(story, "web1", "failed", second)
    tick(story)
    assert in_force(story)["state"] == "halted"
    assert story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator")).status_code == 200
    tick(story)
    assert in_force(story)["state"] == "rolling" and in_force(story)["waves"][0]["accepted"] == 1

    class Behind(datetime):  # the replica that receives web1's next pass: its clock a minute behind
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) - timedelta(seconds=60)

    monkeypatch.setattr(received, "datetime", Behind)
    report(story, "web1", "failed", second)
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "halted" and [f["host"] for f in ro["failed"]] == ["web1"], ro
    assert ro["waves"][0]["accepted"] == 0


@pytest.mark.postgres
def test_two_replicas_beginning_two_revisions_at_once_both_get_begun(pg_database):
    """Replica B begins r2 while replica A begins r3 (PostgreSQL, read committed): both read rollout 1 as the
    latest and insert id 2. A loses the insert; it reads again and begins r3 after r2, superseding it (it took
    B's r2 for its own, and r3 was never begun by A)."""
    store = open_store(pg_database)
    try:
        assert stored.begin(store, "r1", 1, lambda revision, known: {}, 3.0).state == "done"
        inside, go = threading.Event(), threading.Event()

        def slow(revision, known):  # type: ignore[no-untyped-def]  # B inserted rollout 2, not committed yet
            inside.set()
            go.wait(10)
            return {}

        out: dict[str, object] = {}
        b = threading.Thread(target=lambda: out.setdefault("b", stored.begin(store, "r2", 1, slow, 3.0)))
        b.start()
        assert inside.wait(10)
        a = threading.Thread(target=lambda: out.setdefault("a", stored.begin(store, "r3", 1, lambda r, k: {}, 3.0)))
        a.start()
        time.sleep(0.5)  # A read rollout 1 as the latest, and waits on B's id 2
        go.set()
        a.join(10)
        b.join(10)
        latest = stored.latest(store)
        assert latest is not None and (latest.id, latest.revision, latest.state) == (3, "r3", "rolling"), latest
        assert sorted(row.revision for row in out.values()) == ["r2", "r3"]  # type: ignore[attr-defined]
    finally:
        store.dispose()


def test_a_previous_revision_without_a_snapshot_is_never_replaced_by_the_new_one(story: Story, monkeypatch):
    """The previous revision was not kept (too large): a host held back on
    it, and after an abort every host, is answered 503 and keeps what it has, never the new revision in its
    place (the hold-back and the abort did nothing, while the status said held back and aborted)."""
    import datum.fleet.rollouts.snapshot as snapshot

    monkeypatch.setattr(snapshot, "MAX_BYTES", 10)  # stands for a directory of more than 256 MiB
    first, content = served(story, "web1")
    assert content == "hello"
    (story.fleet / "web.yaml").write_text(NEW)  # type: ignore[attr-defined]
    second, content = served(story, "web1")  # the canary: the new revision
    assert second != first and content == "new" and in_force(story)["state"] == "rolling"
    held = story.client.get("/v1/hosts/web2/manifest", headers=story.agent("web2"))
    assert held.status_code == 503 and f"revision {first} has no snapshot" in held.text, held.text
    assert story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator")).status_code == 200
    for host in ("web1", "web2"):
        answer = story.client.get(f"/v1/hosts/{host}/manifest", headers=story.agent(host))
        assert answer.status_code == 503 and "keeps the manifest it has" in answer.text, (host, answer.text)


def test_a_snapshot_the_store_holds_corrupt_is_refused_and_the_host_keeps_what_it_has(story: Story, monkeypatch):
    """A previous revision's blob edited in the store (a bomb past the bound, here a small one) is answered 503
    naming the refusal, never a 500 and never the new revision in its place."""
    import zlib

    import sqlalchemy as sa

    import datum.fleet.rollouts.snapshot as snapshot
    from datum.store.schema import revision_files

    first, _second = start(story, WEB)
    monkeypatch.setattr(snapshot, "MAX_BLOB_TEXT", 1024)
    with story.store.begin() as conn:  # type: ignore[union-attr]
        conn.execute(sa.update(revision_files).where(revision_files.c.revision == first)
                     .values(content=zlib.compress(b"[" + b" " * 4096 + b"]")))
    held = story.client.get("/v1/hosts/web2/manifest", headers=story.agent("web2"))
    assert held.status_code == 503, held.text
    assert f"revision {first}'s snapshot in the store is refused" in held.text and "inflates past 1024" in held.text


def _without_revision(story: Story, host: str) -> None:
    """A pass of ``host``'s agent on the manifest it cached: no revision (it could not get the one it is told)."""
    body = pass_report(host, "converged")
    body.update(reason=None, exitCode=0, counts={"converged": 1}, resources=body["resources"][:1])  # type: ignore[index]
    body = {k: v for k, v in body.items() if v is not None and k != "revision"}
    answer = story.client.post(f"/v1/hosts/{host}/passes", json=body, headers=story.agent(host))
    assert answer.status_code == 201, answer.text


def test_a_released_host_the_revision_does_not_validate_for_fails_and_halts_it(tmp_path, store_url):
    """The new revision's manifest for the canary does not validate (422): its agent keeps what it has, and
    reports passes on no revision. It counts failed on the revision, named with why, and halts the rollout
    (it waited at wave 0 for ever, never halted); a resume accepts it, and the waves go on."""
    story = fleet_story(tmp_path, store_url)
    fleet: Path = story.fleet  # type: ignore[attr-defined]
    first, _ = served(story, "web1")
    for host in WEB:
        report(story, host, "converged", first)
    (fleet / "broken.yaml").write_text("resources:\n  - File[/etc/motd]:\n      mode: 'not a mode'\n")
    (fleet / "nodes.yaml").write_text(
        "nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n    group: web\n"
        "  - match: {name: 'web1'}\n    manifests: [broken.yaml]\n"
    )
    asked = story.client.get("/v1/hosts/web1/manifest", headers=story.auth("operator"))  # not its agent
    assert asked.status_code == 422, asked.text
    tick(story)
    assert in_force(story)["state"] == "rolling"  # an operator's look counts nothing
    refused = story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))
    assert refused.status_code == 422, refused.text
    assert in_force(story)["state"] == "rolling"
    _without_revision(story, "web1")
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "halted", ro
    assert [f["host"] for f in ro["failed"]] == ["web1"] and ro["failed"][0]["reason"].startswith("not served: ")
    assert story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator")).status_code == 200
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "rolling" and ro["waves"][0]["accepted"] == 1, ro


def test_a_pass_on_the_revision_outweighs_a_record_that_it_could_not_be_served(story: Story):
    """Recorded as not served (its facts then matched a rule whose manifest does not validate), the host later
    takes the revision and converges on it: it counts converged, not failed as well."""
    _first, second = start(story, WEB)
    assert stored.unserved(story.store, in_force(story)["id"], "web1", stored.UNSERVED_FAILED, "does not validate")
    assert in_force(story)["waves"][0]["failed"] == 1
    report(story, "web1", "converged", second)
    wave = in_force(story)["waves"][0]
    assert (wave["converged"], wave["failed"]) == (1, 0), wave


def test_a_host_accepted_as_not_served_that_then_converges_is_counted_once(tmp_path, store_url):
    """Canaries web1 and web2: web1 recorded as not served halts the rollout, a resume accepts it, then web1
    converges on the revision after all. It counts converged, not accepted as well: web2, which never reported
    on the revision, still holds the wave (counted twice, it completed the wave without web2)."""
    story = fleet_story(tmp_path, store_url, canary=["web1", "web2"])
    _first, second = start(story, WEB)
    assert stored.unserved(story.store, in_force(story)["id"], "web1", stored.UNSERVED_FAILED, "does not validate")
    tick(story)
    assert in_force(story)["state"] == "halted"
    assert story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator")).status_code == 200
    report(story, "web1", "converged", second)
    for _ in range(3):
        tick(story)
    ro = in_force(story)
    wave = ro["waves"][0]
    assert (wave["converged"], wave["accepted"], ro["wave"]) == (1, 0, 0), ro


def test_a_released_host_the_revision_has_no_manifest_for_is_not_waited_for(tmp_path, store_url):
    """The new revision's nodes.yaml no longer matches one of two canaries (404): it is not waited for, as a
    silent host; the other converging completes the wave."""
    story = fleet_story(tmp_path, store_url, canary=["web1", "web2"])
    fleet: Path = story.fleet  # type: ignore[attr-defined]
    first, _ = served(story, "web1")
    for host in WEB:
        report(story, host, "converged", first)
    (fleet / "nodes.yaml").write_text(
        "nodes:\n  - match: {name: 'web[2-9]'}\n    manifests: [web.yaml]\n    group: web\n"
    )
    (fleet / "web.yaml").write_text(NEW)
    assert story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1")).status_code == 404
    second, content = served(story, "web2")
    assert content == "new"
    _without_revision(story, "web1")
    report(story, "web2", "converged", second)
    tick(story)
    tick(story)
    ro = in_force(story)
    assert ro["state"] == "rolling" and ro["wave"] == 1, ro
    assert ro["waves"][0]["silent"] == 1 and ro["waves"][0]["converged"] == 1, ro


def test_a_host_whose_manifest_did_not_change_is_not_held_back(story: Story):
    first, second = start(story, [*WEB, "db1", "db2"])
    assert stored.membership(story.store, in_force(story)["id"])["db1"] > 0  # not released
    answer = manifest(story, "db1")
    assert answer.headers["Datum-Revision"] == second  # db.yaml is the same in both: the new revision
    assert served(story, "web2") == (first, "hello")  # a web host is held back


def test_a_held_back_host_says_so_on_every_surface_until_its_wave_is_released(story: Story, datum_cli, tmp_path):  # type: ignore[no-untyped-def]
    first, second = start(story, WEB)
    ro = in_force(story)
    waves = stored.membership(story.store, ro["id"])
    web2 = {h["host"]: h for h in story.get("/v1/hosts").json()["hosts"]}["web2"]
    assert web2["heldBack"] == {"rollout": ro["id"], "revision": second, "previous": first, "wave": waves["web2"],
                                "released": 0}
    assert "heldBack" not in story.get("/v1/hosts/web1").json()  # the canary: released
    said = f"held back on the previous revision until its wave {waves['web2']} is released (rollout {ro['id']} is at wave 0)"
    assert said in story.get("/ui/hosts/web2").text
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{story.fleet}"\n'  # type: ignore[attr-defined]
                   '[fleet.rollout]\ncanary = ["web1"]\n')
    code, out, err = datum_cli("hosts", "--by-name", "--config", str(cfg))
    assert code == 0 and said in " ".join(out.split()), out + err
    code, out, err = datum_cli("hosts", "--by-name", "--json", "--config", str(cfg))
    assert {h["host"]: h.get("heldBack", {}).get("wave") for h in json.loads(out)["hosts"]}["web2"] == waves["web2"]
    report(story, "web1", "converged", second)
    for _ in range(10):  # each released host's next pass runs the new revision; a few checks end each wave
        tick(story)
        for host, wave in waves.items():
            if wave <= in_force(story)["wave"]:
                report(story, host, "converged", second)
        if in_force(story)["state"] == "done":
            break
    assert in_force(story)["state"] == "done"
    assert all("heldBack" not in h for h in story.get("/v1/hosts").json()["hosts"])
    assert [e.name for e in lookup("held_back")] == ["held_back"]


def test_abort_returns_the_canaries_to_the_previous_revision(story: Story):
    first, second = start(story, WEB)
    report(story, "web1", "converged", second)
    answer = story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["rollout"]["state"] == "aborted" and body["rollout"]["by"] == "operator"
    assert body["hostsReturned"] == ["web1"]
    assert served(story, "web1") == (first, "hello")
    assert story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator")).status_code == 409


def test_a_revision_the_directory_moved_on_from_before_its_files_were_kept_gets_no_rollout(story: Story, monkeypatch):
    """The files a rollout keeps are the revision's own: when the directory moves while they are read (an edit
    landing mid-copy), that revision is not started; the next request names what the directory holds now."""
    from datum.fleet.rollouts import snapshot
    from datum.fleet.rollouts.snapshot import files_of
    from datum.store.snapshots import load

    real, calls = snapshot.capture, []

    def edited_while_copied(directory: Path) -> bytes:
        blob = real(directory)
        calls.append(directory)
        if len(calls) == 1:
            (directory / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: third\n")
        return blob

    monkeypatch.setattr(snapshot, "capture", edited_while_copied)
    third, content = served(story, "web1")  # named, kept and composed from the same files: the edited ones
    assert content == "third" and len(calls) > 1
    rows = story.get("/v1/rollouts").json()["rollouts"]
    assert [(ro["revision"], ro["state"]) for ro in rows] == [(third, "done")]  # none of the revision it moved from
    kept = dict(files_of(load(story.store, third)))  # type: ignore[arg-type]
    assert kept["web.yaml"] == b"resources:\n  - File[/etc/motd]:\n      content: third\n"


def test_pause_holds_the_waves_and_resume_lets_them_go(story: Story):
    _first, second = start(story, WEB)
    assert story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator")).status_code == 200
    report(story, "web1", "converged", second)
    for _ in range(3):
        tick(story)
    ro = in_force(story)
    assert (ro["state"], ro["wave"]) == ("paused", 0)
    assert story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator")).status_code == 409
    assert story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator")).status_code == 200
    tick(story)
    tick(story)
    assert in_force(story)["wave"] == 1


def test_the_cli_pauses_and_resumes_on_the_store_and_refuses_what_the_state_forbids(story: Story, datum_cli, tmp_path):  # type: ignore[no-untyped-def]
    """``datum rollout pause|resume --json`` on the store its configuration names: the answer is the route's; pausing
    a paused rollout or resuming a rolling one is a CONFLICT (exit 65, the issue as JSON), and changes nothing."""
    _first, second = start(story, WEB)
    rollout_id = in_force(story)["id"]
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{story.fleet}"\n'  # type: ignore[attr-defined]
                   '[fleet.rollout]\ncanary = ["web1"]\n')
    code, out, err = datum_cli("rollout", "pause", "--json", "--config", str(cfg))
    assert code == 0, out + err
    ro = json.loads(out)["rollout"]
    assert (ro["id"], ro["revision"], ro["state"]) == (rollout_id, second, "paused") and ro["by"].startswith("cli:")
    assert in_force(story)["state"] == "paused"
    report(story, "web1", "converged", second)
    tick(story)
    tick(story)
    assert (in_force(story)["state"], in_force(story)["wave"]) == ("paused", 0)  # held: no further wave
    code, out, err = datum_cli("rollout", "pause", "--json", "--config", str(cfg))
    assert code == 65, out + err
    assert json.loads(out)["issues"] == [{"code": "CONFLICT", "message": f"rollout {rollout_id} of revision {second} "
                                                                     "is paused: it cannot be paused"}]
    assert in_force(story)["state"] == "paused"
    code, out, err = datum_cli("rollout", "resume", "--json", "--config", str(cfg))
    assert code == 0, out + err
    ro = json.loads(out)["rollout"]
    assert (ro["id"], ro["state"]) == (rollout_id, "rolling")
    assert in_force(story)["state"] == "rolling"
    code, out, err = datum_cli("rollout", "resume", "--json", "--config", str(cfg))
    assert code == 65, out + err
    assert json.loads(out)["issues"] == [{"code": "CONFLICT", "message": f"rollout {rollout_id} of revision {second} "
                                                                     "is rolling: it cannot be resumed"}]
    tick(story)
    tick(story)
    assert (in_force(story)["state"], in_force(story)["wave"]) == ("rolling", 1)  # the waves go on


def test_cedar_lets_operators_manage_rollouts_and_a_viewer_only_read(story: Story):
    start(story, WEB)
    for who in ("viewer", "agent@host:web1", "stranger"):
        denied = story.client.post("/v1/rollouts/current/pause", headers=story.auth(who))
        assert denied.status_code == 403, denied.text
        assert denied.json()["issues"][0].get("action") == "fleet:ManageRollout"
    for who in ("viewer", "operator"):  # issue 37: a viewer reads what an operator reads, acts on nothing
        for path in ("/v1/rollouts", "/v1/hosts", "/v1/hosts/web1", "/v1/hosts/web1/passes", "/v1/events",
                     "/v1/revisions", "/v1/attention", "/metrics", "/"):
            assert story.get(path, who).status_code == 200, (who, path)
    for method, path, body in (
        ("POST", "/v1/rollouts/current/abort", None),
        ("POST", "/v1/hosts/web1/passes", pass_report("web1", "converged")),
        ("PUT", "/v1/buckets/x", {}),
        ("POST", "/v1/hosts/web1/reboot-lease", {}),
    ):
        denied = story.client.request(method, path, json=body, headers=story.auth("viewer"))
        assert denied.status_code == 403, (path, denied.text)


def test_two_servers_on_one_store_agree_and_a_late_one_serves_the_previous_from_its_snapshot(
    story: Story, tmp_path: Path, store_url: str
):
    first, second = start(story, WEB)
    (tmp_path / "other").mkdir()
    other = build_story(tmp_path / "other", store_url)  # started after the change: it never saw the first
    directory = serve_fleet(other, tmp_path / "other" / "fleet")
    for name in ("nodes.yaml", "web.yaml", "db.yaml"):
        (directory / name).write_bytes((story.fleet / name).read_bytes())  # type: ignore[attr-defined]
    other.tokens.update((p, t) for p, t in story.tokens.items() if p.startswith("agent@"))
    other.tokens["operator"] = story.tokens["operator"]
    with_rollout(other, canary=["web1"], waves=["50%", "100%"], soak="1ms")
    assert served(other, "web1") == (second, "new")
    assert served(other, "web2") == (first, "hello")  # composed from the snapshot under its home
    assert (tmp_path / "other" / "home" / "revisions").is_dir()
    assert [r["id"] for r in other.get("/v1/rollouts").json()["rollouts"]] == [2, 1]  # no rollout started twice
    report(other, "web1", "converged", second)
    tick(other)
    time.sleep(serve.FRESH + 0.05)
    assert in_force(story)["wave"] == 1
    wave1 = [h for h, w in stored.membership(story.store, 2).items() if w == 1]
    for host in wave1:
        assert served(story, host) == served(other, host) == (second, "new")


def test_a_replica_on_a_lagging_copy_of_the_directory_does_not_take_the_fleet_back(
    story: Story, tmp_path: Path, store_url: str, caplog
):
    """A replica restarted on a copy that still holds the first revision: the store refuses to roll it out over
    the second (first seen earlier, so behind), the replica says so once and serves as the rollout in force
    says. Only the previous revision of an aborted rollout may come back as it was (the directory put back)."""
    first, second = start(story, WEB)
    (tmp_path / "other").mkdir()
    lagging = build_story(tmp_path / "other", store_url)
    directory = serve_fleet(lagging, tmp_path / "other" / "fleet")
    (directory / "nodes.yaml").write_bytes((story.fleet / "nodes.yaml").read_bytes())  # type: ignore[attr-defined]
    (directory / "db.yaml").write_bytes((story.fleet / "db.yaml").read_bytes())  # type: ignore[attr-defined]
    lagging.tokens.update((p, t) for p, t in story.tokens.items() if p.startswith("agent@"))
    with_rollout(lagging, canary=["web1"], waves=["50%", "100%"], soak="1ms")
    with caplog.at_level("WARNING", logger="datum.api"):
        assert served(lagging, "web1") == (second, "new")  # the canary keeps the second, from its snapshot
        assert served(lagging, "web2") == (first, "hello")
        assert served(lagging, "web3") == (first, "hello")
    behind = [r.getMessage() for r in caplog.records if "not rolled out" in r.getMessage()]
    assert len(behind) == 1 and first in behind[0] and second in behind[0], behind  # said once
    assert "datum_fleet_directory_behind 1.0" in lagging.get("/metrics").text  # DatumFleetDirectoryBehind
    assert "datum_fleet_directory_behind 0.0" in story.get("/metrics").text
    import shutil

    from datum.store.schema import revision_files

    with story.store.begin() as conn:  # the second's files not kept (too large to): never the first instead
        conn.execute(revision_files.delete().where(revision_files.c.revision == second))
    shutil.rmtree(tmp_path / "other" / "home" / "revisions")  # nor written out under this server's home
    answer = lagging.client.get("/v1/hosts/web1/manifest", headers=lagging.agent("web1"))  # the canary: the second
    assert answer.status_code == 503 and "is behind it" in answer.json()["issues"][0]["message"], answer.text
    rows = story.get("/v1/rollouts").json()["rollouts"]
    assert [(r["id"], r["revision"], r["state"]) for r in rows] == [(2, second, "rolling"), (1, first, "done")]

    # put back after an abort: the previous revision, done at once
    assert story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator")).status_code == 200
    (story.fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: hello\n")  # type: ignore[attr-defined]
    assert served(story, "web1") == (first, "hello")
    ro = in_force(story)
    assert (ro["id"], ro["revision"], ro["state"]) == (3, first, "done")


def test_a_git_checkout_that_lags_at_a_commit_the_store_never_saw_is_behind(story: Story, tmp_path: Path):
    """A replica whose pull fetched and did not check out: its commit, never served, is an ancestor of the one
    in force. git proves it, and it is not rolled out over the newer one."""
    fleet, first = in_git(story)
    between = commit(fleet, "between")  # committed, never served: the store never sees it
    (fleet / "web.yaml").write_text(NEW)
    git(fleet, "commit", "-q", "-am", "third")
    third, content = served(story, "web1")
    assert (third, content) == (git(fleet, "rev-parse", "HEAD"), "new") and in_force(story)["revision"] == third
    (tmp_path / "other").mkdir()
    copy = tmp_path / "other" / "fleet"
    git(tmp_path, "clone", "-q", str(fleet), str(copy))
    git(copy, "checkout", "-q", between)
    lagging = replica_on(story, copy)
    assert served(lagging, "web1") == (third, "new")  # the canary keeps the one in force
    rows = story.get("/v1/rollouts").json()["rollouts"]
    assert [r["revision"] for r in rows] == [third, first]  # nothing of the commit in between
    assert "datum_fleet_directory_behind 1.0" in lagging.get("/metrics").text


def test_a_commit_that_descends_from_the_one_in_force_is_never_behind_it(story: Story, tmp_path: Path):
    """Replica A goes from the first commit straight to the third; replica B's copy lags at the second, a commit
    the store never saw and B cannot prove older (it has not fetched the third): taken for new, it supersedes
    the third (the documented limit). When B's copy catches up to the third, git proves the second its
    ancestor: the third is rolled out again, not refused as first seen before the second (the fleet stayed on
    the older commit, every replica calling its newest directory a lagging copy)."""
    fleet, first = in_git(story)
    between = commit(fleet, "between")
    copy = tmp_path / "other" / "fleet"
    (tmp_path / "other").mkdir()
    git(tmp_path, "clone", "-q", str(fleet), str(copy))  # B's copy: up to the second commit, no further
    (fleet / "web.yaml").write_text(NEW)
    git(fleet, "commit", "-q", "-am", "third")
    third, _content = served(story, "web1")
    assert in_force(story)["revision"] == third and in_force(story)["state"] == "rolling"
    lagging = replica_on(story, copy)
    assert served(lagging, "web1") == (between, "between")  # taken for new: git cannot tell, nor the store
    assert in_force(story)["revision"] == between
    git(copy, "pull", "-q", "--ff-only")  # B catches up
    assert served(lagging, "web1") == (third, "new")
    rows = story.get("/v1/rollouts").json()["rollouts"]
    assert [(r["revision"], r["state"]) for r in rows[:3]] == [
        (third, "rolling"), (between, "superseded"), (third, "superseded")
    ], rows
    assert "datum_fleet_directory_behind 0.0" in lagging.get("/metrics").text


def test_an_aborted_commit_stays_aborted_though_it_descends_from_the_one_put_back(story: Story, tmp_path: Path):
    """An abort, and the directory put back to the commit before (a reset): a replica restarted on a copy that
    still holds the aborted commit does not roll it out again, though git proves it descends from the one in
    force (only the order the store saw them in yields to git; an operator's abort does not)."""
    fleet, first = in_git(story)
    (fleet / "web.yaml").write_text(NEW)
    git(fleet, "commit", "-q", "-am", "bad")
    served(story, "web1")
    assert in_force(story)["state"] == "rolling"
    copy = tmp_path / "other" / "fleet"
    (tmp_path / "other").mkdir()
    git(tmp_path, "clone", "-q", str(fleet), str(copy))  # a replica's copy, at the aborted commit
    assert story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator")).status_code == 200
    git(fleet, "reset", "-q", "--hard", "HEAD~1")  # put back
    assert served(story, "web1")[0] == first and in_force(story)["state"] == "done"
    lagging = replica_on(story, copy)
    assert served(lagging, "web1") == (first, "hello")  # the put-back revision, from its snapshot
    ro = in_force(story)
    assert (ro["revision"], ro["state"]) == (first, "done"), ro


def test_a_commit_superseded_by_one_aborted_stays_out_though_it_descends_from_the_one_put_back(
    story: Story, tmp_path: Path
):
    """B done; C rolling; D (on top of C) supersedes it and is aborted; the directory put back to B. A replica on
    a copy still at C does not roll it out: C is half of the change aborted, though git proves it descends from
    B and its own rollout was superseded, not aborted."""
    fleet, first = in_git(story)
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: mid\n")
    git(fleet, "commit", "-q", "-am", "C")
    served(story, "web1")
    copy = tmp_path / "other" / "fleet"
    (tmp_path / "other").mkdir()
    git(tmp_path, "clone", "-q", str(fleet), str(copy))  # a replica's copy, at C
    (fleet / "web.yaml").write_text(NEW)
    git(fleet, "commit", "-q", "-am", "D")
    served(story, "web1")
    assert story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator")).status_code == 200
    git(fleet, "reset", "-q", "--hard", "HEAD~2")  # put back to B
    assert served(story, "web1")[0] == first and in_force(story)["state"] == "done"
    lagging = replica_on(story, copy)
    assert served(lagging, "web1") == (first, "hello")
    ro = in_force(story)
    assert (ro["revision"], ro["state"]) == (first, "done"), ro


def test_a_revision_behind_the_store_s_newest_is_never_rolled_out(tmp_path, store_url):  # type: ignore[no-untyped-def]
    """Before any rollout, a revision first seen before the newest recorded one is behind; after an abort and the
    directory put back, the aborted revision is behind too (rolled out before and left since)."""
    from datum.store.revisions import record

    store = open_store(store_url)
    try:
        def planner(revision, known):  # type: ignore[no-untyped-def]
            return {}

        record(store, "rev-a", None)
        time.sleep(0.01)
        record(store, "rev-b", None)
        with pytest.raises(stored.Behind, match="rev-a.*first seen.*before revision rev-b"):
            stored.begin(store, "rev-a", 1, planner, 3.0)  # the first replica up holds the older copy
        assert stored.begin(store, "rev-b", 1, planner, 3.0).state == "done"  # type: ignore[union-attr]
        time.sleep(0.01)
        record(store, "rev-c", None)
        assert stored.begin(store, "rev-c", 1, planner, 3.0).state == "rolling"  # type: ignore[union-attr]
        assert stored.command(store, "abort", "operator")[1].state == "aborted"  # type: ignore[union-attr]
        assert stored.begin(store, "rev-b", 1, planner, 3.0).state == "done"  # put back after the abort
        with pytest.raises(stored.Behind, match="rev-c.*rolled out before .rollout 2, aborted."):
            stored.begin(store, "rev-c", 1, planner, 3.0)  # a replica still holding the aborted revision
    finally:
        store.dispose()


def test_a_wave_advances_once_when_replicas_check_at_once(story: Story, store_url: str):
    _first, second = start(story, WEB)
    report(story, "web1", "converged", second)  # its intake's check: the wave is complete, its soak starts
    ro = in_force(story)
    assert ro["wave"] == 0 and ro["waveCompletedAt"]
    time.sleep(0.01)
    stores = [open_store(store_url) for _ in range(6)]
    moved: list[object] = []
    barrier = threading.Barrier(len(stores))

    def check(s) -> None:  # type: ignore[no-untyped-def]
        barrier.wait()
        moved.append(stored.check(s, RolloutSettings(soak="1ms").soak, 0.0, 3.0))

    threads = [threading.Thread(target=check, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.dispose()
    assert len([m for m in moved if m is not None]) == 1
    assert in_force(story)["wave"] == 1


def _fresh() -> dict[str, object]:
    """A pass just finished, by an agent with a one-minute interval: it reads silent in three minutes."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"intervalSeconds": 60, "startedAt": now, "finishedAt": now}


SILENT = {"intervalSeconds": 60}  # its last pass a month ago: silent for [fleet] stale_after (3) of its intervals


def test_a_released_host_silent_before_the_new_revision_is_not_waited_for(story: Story):
    first, second = start(story, WEB)
    report(story, "web1", "converged", second, **_fresh())
    tick(story)
    ro = in_force(story)
    assert ro["wave"] == 1
    gone, *alive = sorted(h for h, w in stored.membership(story.store, ro["id"]).items() if w == 1)
    report(story, gone, "converged", first, **SILENT)  # its last word, on the previous revision, long ago
    for host in alive:
        report(story, host, "converged", second, **_fresh())
    tick(story)
    tick(story)
    ro = in_force(story)
    assert (ro["state"], ro["wave"]) == ("rolling", 2), ro  # released, not waited for
    assert [(w["wave"], w["hosts"], w["converged"], w["silent"]) for w in ro["waves"][:2]] == [(0, 1, 1, 0), (1, 2, 1, 1)]
    assert 'datum_rollout_hosts{status="silent",wave="1"} 1.0' in story.get("/metrics").text
    assert served(story, gone) == (second, "new")  # when it comes back, it takes the revision


def test_canaries_that_all_went_silent_hold_the_rollout(story: Story):
    first, _second = start(story, WEB)
    report(story, "web1", "converged", first, **SILENT)
    for _ in range(3):
        tick(story)
    ro = in_force(story)
    assert (ro["state"], ro["wave"], ro.get("waveCompletedAt")) == ("rolling", 0, None), ro  # nothing was tested
    assert (ro["waves"][0]["silent"], ro["waves"][0]["converged"]) == (1, 0)
    assert [e.name for e in lookup("silent")] == ["silent"]  # datum explain knows the word
    page = story.get("/ui/overview").text
    assert '<td data-label="silent"' in page
    for host in WEB[1:]:
        assert served(story, host) == (first, "hello")


def test_a_canary_named_by_hand_that_never_reported_is_silent_not_waited_for(tmp_path, store_url):  # type: ignore[no-untyped-def]
    """A misspelt canary (or one not enrolled yet) has no pass to judge: beside a canary that converged it does not
    hold wave 0; alone, the rollout holds with every canary silent, as when they all went silent."""
    story = fleet_story(tmp_path, store_url, canary=["web1", "web-misspelt"])
    _first, second = start(story, WEB)
    report(story, "web1", "converged", second)
    tick(story)
    tick(story)
    ro = in_force(story)
    assert [(w["wave"], w["hosts"], w["converged"], w["silent"]) for w in ro["waves"][:1]] == [(0, 2, 1, 1)]
    assert (ro["state"], ro["wave"]) == ("rolling", 1)  # wave 0 completed without it, the soak ran


def test_a_lone_canary_that_never_reported_holds_the_rollout(tmp_path, store_url):  # type: ignore[no-untyped-def]
    alone = fleet_story(tmp_path, store_url, canary=["web-misspelt"])
    first, _content = served(alone, "web1")
    for host in WEB:
        report(alone, host, "converged", first)
    (alone.fleet / "web.yaml").write_text(NEW)  # type: ignore[attr-defined]
    assert served(alone, "web1") == (first, "hello")  # no canary it knows: everyone is held back
    for _ in range(3):
        tick(alone)
    ro = in_force(alone)
    assert (ro["state"], ro["wave"], ro.get("waveCompletedAt")) == ("rolling", 0, None)
    assert (ro["waves"][0]["hosts"], ro["waves"][0]["silent"]) == (1, 1)
    assert served(alone, "web2") == (first, "hello")  # nobody else gets it


def test_failures_max_failed_tolerates_do_not_hold_the_waves(tmp_path, store_url):  # type: ignore[no-untyped-def]
    story = fleet_story(tmp_path, store_url, max_failed="50%")
    _first, second = start(story, WEB)
    report(story, "web1", "converged", second)
    tick(story)
    ro = in_force(story)
    assert ro["wave"] == 1
    bad, good = sorted(h for h, w in stored.membership(story.store, ro["id"]).items() if w == 1)
    report(story, bad, "failed", second)  # 1 of 3 released: within 50%
    tick(story)
    assert in_force(story)["wave"] == 1  # the other has no verdict yet: waited for
    report(story, good, "converged", second)
    tick(story)
    tick(story)
    ro = in_force(story)
    assert (ro["state"], ro["wave"]) == ("rolling", 2), ro  # every host has its verdict; the failure is tolerated


def test_a_host_silent_since_a_pass_on_the_new_revision_counts_as_failed(story: Story):
    _first, second = start(story, WEB)
    report(story, "web1", "converged", second, **SILENT)  # took it, and has not been heard from since
    machine.tick(story.app.state.datum.fleet)
    ro = in_force(story)
    assert ro["state"] == "halted", ro
    [lost] = ro["failed"]
    assert lost["host"] == "web1"
    assert lost["reason"] == "silent since 2026-11-01 12:00:02 UTC, after a pass on this revision (converged)"
    assert ro["waves"][0]["failed"] == 1 and "1 of 1 released hosts failed" in ro["reason"]


def test_without_the_section_every_host_gets_the_current_directory(tmp_path, store_url):  # type: ignore[no-untyped-def]
    story = build_story(tmp_path, store_url)
    directory = serve_fleet(story, tmp_path / "fleet")
    first, _ = served(story, "web1")
    (directory / "web.yaml").write_text(NEW)
    for host in ("web1", "web2"):
        assert served(story, host)[1] == "new"
    assert story.get("/v1/rollouts").json() == {"configured": False, "rollouts": []}


@pytest.mark.parametrize(
    ("given", "wrong"),
    [
        ({"waves": ["10%", "50%"]}, 'the last wave is "100%"'),
        ({"waves": ["50%", "10%", "100%"]}, "more than the one before"),
        ({"waves": ["0%", "100%"]}, "more than 0%"),
        ({"waves": ["ten", "100%"]}, "a percentage"),
        ({"max_failed": "105%"}, "from 0% to 100%"),
        ({"canary": ["group:"]}, "a host name or group:NAME"),
        ({"soak": "-1s"}, "a duration such as"),
        ({"canaries": ["web1"]}, "Extra inputs"),
    ],
)
def test_the_section_is_validated(given: dict, wrong: str):  # type: ignore[type-arg]
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=wrong):
        RolloutSettings.model_validate(given)


def test_a_link_out_of_the_fleet_directory_is_refused_from_the_snapshot_as_from_the_directory(story: Story, tmp_path):
    """A source linked to a file of the server's (its token, say) is refused live; the rollout's snapshot of that
    revision keeps the link, not the file, so a host held back on it is refused the same way, never served it."""
    fleet: Path = story.fleet  # type: ignore[attr-defined]
    secret = tmp_path / "server-secrets" / "token"
    secret.parent.mkdir()
    secret.write_text("SERVER-SECRET-TOKEN\n")
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      source: motd.txt\n")
    (fleet / "motd.txt").symlink_to(secret)
    live = story.client.get("/v1/hosts/web2/manifest", headers=story.agent("web2"))
    assert live.status_code == 422 and "outside" in live.text, live.text
    (fleet / "README").write_text("an edit: a new revision, rolled out to web1 first\n")
    held_back = story.client.get("/v1/hosts/web2/manifest", headers=story.agent("web2"))
    assert held_back.status_code == 422 and "outside" in held_back.text, held_back.text
    assert "SERVER-SECRET" not in held_back.text
    row = serve.in_force(story.app.state.datum.fleet)
    assert row is not None and row.state == "rolling"  # the rollout is under way: web2 held back


def without_rollout(story: Story) -> None:
    state = story.app.state.datum
    fleet = state.settings.fleet.model_copy(update={"rollout": None})
    state.settings = state.settings.model_copy(update={"fleet": fleet})


def test_rollouts_off_and_on_never_take_a_host_back_to_the_last_done(story: Story):
    """Issue 36, item 1: with [fleet.rollout] switched off a fix went to every host; switched on again, the
    next revision's rollout began from the last ``done`` (before the fix) and served it to every host it
    held back, which reverted them. The revision a held-back host is served is never older than the one
    its last pass ran (the per-host floor); a host with no kept copy of that one keeps what it runs."""
    first, second = start(story, WEB)
    for host in WEB:
        report(story, host, "converged", second)  # the canary's and everyone's: as if rolled out
    without_rollout(story)  # rollouts off; a fix pushed to everyone at once
    (story.fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: fix\n")  # type: ignore[attr-defined]
    fix, content = served(story, "web3")
    assert content == "fix"
    for host in WEB:
        report(story, host, "converged", fix)
    with_rollout(story, canary=["web1"], waves=["50%", "100%"], soak="1ms")  # on again, then the next edit
    (story.fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: next\n")  # type: ignore[attr-defined]
    nxt, content = served(story, "web1")
    assert content == "next"
    ro = in_force(story)
    assert ro["revision"] == nxt and ro["state"] == "rolling"
    for host in WEB[1:]:
        answer = story.client.get(f"/v1/hosts/{host}/manifest", headers=story.agent(host))
        if answer.status_code == 200:  # served its own last revision, never the rollout's previous
            assert answer.headers["Datum-Revision"] in (fix, nxt), (host, answer.headers["Datum-Revision"], ro)
        else:  # the fix was never kept (rollouts were off): it keeps what it runs
            assert answer.status_code == 503, answer.text
            assert "keeps the manifest it has" in answer.text


def test_a_host_already_on_the_rollouts_revision_is_not_held_back(story: Story):
    """Issue 36, item 1: a host whose last pass ran the revision being rolled out is served it."""
    first, second = start(story, WEB)
    report(story, "web4", "converged", second)  # it ran the new revision already (served before, by hand...)
    assert served(story, "web4") == (second, "new")
    assert served(story, "web5") == (first, "hello")


def test_a_transition_another_caller_read_first_is_still_announced_to_the_waits(story: Story):
    """Issue 36, item 2: ``refresh`` told "moved" to whichever caller read the row first; the tick that
    released a wave read it itself, so the watch's probe saw nothing move and the held polls slept until
    their timeout (250-266 s for each wave). ``announce`` alone tells, against what it told last."""
    fleet = story.app.state.datum.fleet
    first, second = start(story, WEB)
    serve.announce(fleet)  # the waits know the rollout as it is now
    assert not serve.announce(fleet)
    report(story, "web1", "converged", second)
    tick(story)  # releases wave 1 and reads the row after it moved
    assert in_force(story)["wave"] == 1
    wave1 = frozenset(h for h, w in stored.membership(story.store, in_force(story)["id"]).items() if w == 1)
    assert serve.announce(fleet) == wave1, "the wave released by this process's own tick is announced to its hosts"
    assert not serve.announce(fleet)
    answer = story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator"))
    assert answer.status_code == 200, answer.text  # the route reads the row too, for its answer
    assert serve.announce(fleet) is False, "a pause changes what nobody is served: no waiter asks again"
    assert fleet.rollouts.announced.version == (in_force(story)["id"], "paused", 1)  # yet it is announced
    answer = story.client.post("/v1/rollouts/current/abort", headers=story.auth("operator"))
    assert serve.announce(fleet) == frozenset({"web1"}) | wave1, "an abort: the released hosts get the previous back"


def test_a_change_of_the_files_and_each_wave_wake_only_the_hosts_whose_answer_moves(story: Story):
    """docs/performance.md, bench rollout at 1,000 hosts: a change of the files woke all 1,000 held polls and the
    canary's answer waited its turn among them (2.3 s); the last wave and ``done`` woke all 1,000 again. What a
    change wakes is its rollout's canaries (every other host is held on the ``done`` revision it was served);
    the last wave, every host but those of the waves before it (it also releases the hosts no wave planned);
    ``done`` after it, nobody."""
    from datum.fleet.changes import AllBut
    from datum.fleet.serving import served as told

    fleet = story.app.state.datum.fleet
    first, _content = served(story, "web1")
    for host in WEB:
        report(story, host, "converged", first)
    assert serve.announce(fleet) is True  # the first look: everyone
    (story.fleet / "web.yaml").write_text(NEW)  # type: ignore[attr-defined]
    current = told(fleet)  # what the watch does first at a change: the revision named, its rollout begun
    assert current is not None and in_force(story)["revision"] == current.id
    assert serve.moved(fleet, current) == frozenset({"web1"}), "the canary alone asks again"
    assert serve.moved(fleet, None) is True, "a change no rollout explains: everyone"
    second = current.id
    report(story, "web1", "converged", second)
    tick(story)
    wave1 = frozenset(h for h, w in stored.membership(story.store, in_force(story)["id"]).items() if w == 1)
    assert serve.announce(fleet) == wave1 and "web1" not in wave1
    for host in wave1:
        report(story, host, "converged", second)
    tick(story)  # the wave complete: its soak (1 ms) starts
    tick(story)
    assert in_force(story)["wave"] == 2
    last = serve.announce(fleet)
    assert isinstance(last, AllBut) and last == {"web1"} | wave1, "the last wave: all but the waves before it"
    for host in WEB:
        report(story, host, "converged", second)
    tick(story)
    assert in_force(story)["state"] == "done"
    assert serve.announce(fleet) is False, "done after the last wave changes what nobody is served"


def test_a_pass_too_soon_after_a_check_has_the_check_loop_run_when_the_gap_is_over(story: Story):
    """A wave's last pass stored within ``INTAKE_GAP`` of the last check was checked by nobody until the loop's
    next period (up to 2 s per wave of a rollout with no soak): it now has the loop woken for the gap's end."""
    import time as clock

    fleet = story.app.state.datum.fleet
    _first, second = start(story, WEB)
    asked: list[float] = []
    fleet.rollouts.wake_check = lambda within=0.0: asked.append(within)
    fleet.rollouts.checked_at = clock.monotonic()
    machine.after_pass(fleet, second)
    assert asked and 0 < asked[0] <= machine.INTAKE_GAP


def test_all_but_wakes_every_waiter_but_the_waits_of_the_hosts_named():
    import asyncio

    from datum.fleet.changes import AllBut, FleetChanges

    async def run() -> None:
        changes = FleetChanges(Path("/nonexistent"))
        a, b, anyone = changes.waiter("a"), changes.waiter("b"), changes.waiter()
        changes._wake(AllBut({"a"}))
        assert (a.done(), b.done(), anyone.done()) == (False, True, True)
        assert changes.waiting == 1
        changes._wake(True)
        assert a.done() and changes.waiting == 0

    asyncio.run(run())


def test_a_transition_wakes_only_the_waits_of_the_hosts_it_concerns():
    """A wave of 330 released woke all 1,000 waiters, each asking again through the route (docs/performance.md):
    the watch completes only the futures of the hosts a transition names; everyone on a change of the files."""
    import asyncio

    from datum.fleet.changes import FleetChanges

    async def run() -> None:
        changes = FleetChanges(Path("/nonexistent"))
        a, b, anyone = changes.waiter("a"), changes.waiter("b"), changes.waiter()
        changes._wake(frozenset({"a"}))
        assert (a.done(), b.done(), anyone.done()) == (True, False, False)
        changes._wake(False)
        assert not b.done()
        changes.forget(a, "a")
        changes._wake(True)
        assert b.done() and anyone.done() and changes.waiting == 0

    asyncio.run(run())


def test_a_halted_or_paused_rollout_is_a_line_of_needs_a_human_everywhere(story: Story, datum_cli, tmp_path):  # type: ignore[no-untyped-def]
    """Issue 36, item 4: the fleet stopped until someone answers, yet only the canary's host line said
    anything ("fix the cause; the next pass retries"). Now the rollout is its own line, naming the failed
    hosts and both ways out, on /v1/attention, the page and datum_needs_human."""
    first, second = start(story, WEB)
    report(story, "web1", "failed", second)
    tick(story)
    assert in_force(story)["state"] == "halted"
    needs = story.get("/v1/attention").json()["needs"]
    [line] = [n for n in needs if n["reason"] == "rollout_halted"]
    assert "web1" in line["text"] and "halted" in line["text"] and line["ids"] == ["web1"]
    assert "datum rollout resume" in line["do"] and "datum rollout abort" in line["do"]
    assert needs[0]["reason"] == "rollout_halted"  # read first: the whole fleet waits on it
    page = story.get("/ui/overview").text  # the page's Needs a human, as the browser fetches it
    assert "halted: 1 host failed on it (web1)" in page and "datum rollout abort" in page
    scrape = story.get("/metrics").text
    assert 'datum_needs_human{reason="rollout_halted",severity="look"} 1.0' in scrape
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{story.fleet}"\n'  # type: ignore[attr-defined]
                   '[fleet.rollout]\ncanary = ["web1"]\n')
    code, out, err = datum_cli("hosts", "--config", str(cfg))
    assert code == 0, err
    assert "halted: 1 host failed on it (web1)" in " ".join(out.split())
    resumed = story.client.post("/v1/rollouts/current/resume", headers=story.auth("operator"))
    assert resumed.status_code == 200, resumed.text
    assert not [n for n in story.get("/v1/attention").json()["needs"] if n["reason"].startswith("rollout_")]
    paused = story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator"))
    assert paused.status_code == 200, paused.text
    [line] = [n for n in story.get("/v1/attention").json()["needs"] if n["reason"] == "rollout_paused"]
    assert "paused by operator" in line["text"]


def test_a_fleet_directory_removed_and_cloned_again_is_served_anew_never_stale(tmp_path, store_url):  # type: ignore[no-untyped-def]
    """Issue 36, item 5: while the directory is not there the manifest answer says so (503, the agent keeps
    what it has), never a composition from before; cloned again, its new files are served."""
    import shutil

    story = build_story(tmp_path, store_url)
    directory = serve_fleet(story, tmp_path / "fleet")
    assert served(story, "web1")[1] == "hello"
    saved = tmp_path / "saved"
    shutil.copytree(directory, saved)
    shutil.rmtree(directory)
    gone = story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))
    assert gone.status_code == 503 and "is not there" in gone.text, gone.text
    shutil.copytree(saved, directory)
    (directory / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: cloned\n")
    assert served(story, "web1")[1] == "cloned"


def test_a_fleet_directory_not_there_is_a_line_of_needs_a_human_everywhere_and_readyz_stays(
    tmp_path, store_url, datum_cli  # type: ignore[no-untyped-def]
):
    """Issue 36, item 5: while the directory is missing (or not one) the server says so as a line of Needs a human
    (/v1/attention, the page, datum_needs_human, datum hosts), the manifest answer refuses naming it, /readyz is
    unchanged; back, the line goes."""
    import shutil

    story = build_story(tmp_path, store_url)
    directory = serve_fleet(story, tmp_path / "fleet")
    assert served(story, "web1")[1] == "hello"
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{directory}"\n')

    def lines() -> list[dict]:  # type: ignore[type-arg]
        return [n for n in story.get("/v1/attention").json()["needs"] if n["reason"] == "fleet_directory_unavailable"]

    def gauge() -> str:
        return next(line for line in story.get("/metrics").text.splitlines()
                    if line.startswith('datum_needs_human{reason="fleet_directory_unavailable"'))

    assert lines() == [] and gauge().endswith(" 0.0")
    saved = tmp_path / "saved"
    shutil.copytree(directory, saved)
    shutil.rmtree(directory)
    for why in ("is not there", "is not a directory"):
        refused = story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))
        assert refused.status_code == 503 and f"the fleet directory {directory} {why}" in refused.text, refused.text
        assert refused.json()["issues"][0]["code"] == "UNAVAILABLE"
        [line] = lines()
        assert line["severity"] == "look" and line["text"] == f"the fleet directory {directory} {why} ([fleet] manifests)"
        assert "no host is served a manifest" in line["do"]
        assert gauge().endswith(" 1.0"), gauge()
        assert line["text"] in story.get("/ui/overview").text
        code, out, err = datum_cli("hosts", "--config", str(cfg))
        assert code == 0 and f"{why} ([fleet] manifests)" in " ".join(out.split()), out + err  # the path folded
        assert story.client.get("/readyz").status_code == 200  # the rest of the server answers
        directory.write_text("a file where the directory was\n")  # the next turn: not a directory
    directory.unlink()
    shutil.copytree(saved, directory)
    assert served(story, "web1")[1] == "hello" and lines() == [] and gauge().endswith(" 0.0")


def test_the_page_and_the_cli_say_which_act_and_who(story: Story, datum_cli, tmp_path):  # type: ignore[no-untyped-def]
    """Issue 40, item 5: "last paused, resumed or aborted by operator" said neither which nor when. The
    stored transitions say both (``datum.fleet.rollouts.status.acted``), on the page and in ``datum rollout
    status``."""
    start(story, WEB)
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store}"\n[fleet]\nmanifests = "{story.fleet}"\n'  # type: ignore[attr-defined]
                   '[fleet.rollout]\ncanary = ["web1"]\n')
    for action, said in (("pause", "paused by operator"), ("resume", "resumed by operator"),
                         ("abort", "aborted by operator")):
        answer = story.client.post(f"/v1/rollouts/current/{action}", headers=story.auth("operator"))
        assert answer.status_code == 200, answer.text
        at = answer.json()["rollout"]["transitions"][-1]["at"]  # when, to the second, in UTC
        when = f" at {at[:10]} {at[11:19]} UTC"
        page = story.get("/ui/overview").text
        assert said.capitalize() + when + "." in page and "paused, resumed or aborted" not in page
        code, out, err = datum_cli("rollout", "status", "--config", str(cfg))
        assert code == 0 and said + when in " ".join(out.split()), (out, err)
