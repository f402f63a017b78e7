"""Revisions of the fleet's manifests (issue 24 item 1), on SQLite and PostgreSQL: every change to the fleet
directory is a revision, named by its git commit in a git work tree; the manifest's answer says which
(``Datum-Revision``); hosts' reports carry it, and ``GET /v1/revisions`` and the page count hosts per revision."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datum.fleet.revision import content_digest

from .story import Story, build_story, git, pass_report, serve_fleet


@pytest.fixture
def story(tmp_path, store_url):  # type: ignore[no-untyped-def]
    s = build_story(tmp_path, store_url)
    s.fleet = serve_fleet(s, tmp_path / "fleet")  # type: ignore[attr-defined]
    return s


def manifest(story: Story, host: str = "web1", **headers: str):  # type: ignore[no-untyped-def]
    return story.client.get(f"/v1/hosts/{host}/manifest", headers={**story.agent(host), **headers})


def report(story: Story, host: str, state: str, revision: str | None, **extra: str) -> None:
    body = {**pass_report(host, state), **extra}
    if state == "converged":
        body.update(reason=None, exitCode=0, counts={"converged": 1}, resources=body["resources"][:1])  # type: ignore[index]
        body = {k: v for k, v in body.items() if v is not None}
    if revision is not None:
        body["revision"] = revision
    answer = story.client.post(f"/v1/hosts/{host}/passes", json=body, headers=story.agent(host))
    assert answer.status_code == 201, answer.text


def revisions(story: Story) -> dict:  # type: ignore[type-arg]
    answer = story.get("/v1/revisions")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_a_change_to_a_manifest_is_a_new_revision_and_hosts_are_counted_per_revision(story: Story):
    fleet: Path = story.fleet  # type: ignore[attr-defined]
    first = manifest(story)
    assert first.status_code == 200
    one = first.headers["Datum-Revision"]
    assert one == "sha256:" + content_digest(fleet.resolve())  # not a git work tree: the digest of its files
    not_modified = manifest(story, **{"If-None-Match": first.headers["ETag"]})
    assert not_modified.status_code == 304 and not_modified.headers["Datum-Revision"] == one
    listed = revisions(story)
    assert listed["current"] == one and listed["without"] == 0
    assert [(r["id"], r["current"], r["hosts"]) for r in listed["revisions"]] == [(one, True, 0)]
    assert listed["revisions"][0]["firstSeen"] and "gitCommit" not in listed["revisions"][0]
    os.utime(fleet / "web.yaml", ns=(1, 1))  # touched, not changed: the same revision
    assert manifest(story).headers["Datum-Revision"] == one

    report(story, "web1", "converged", one)
    report(story, "web2", "failed", one)
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: changed\n")
    two = manifest(story).headers["Datum-Revision"]
    assert two != one and two.startswith("sha256:")
    report(story, "web2", "converged", two)  # web2 took the new revision and converged
    report(story, "web3", "failed", two)
    report(story, "web4", "converged", None)  # a report that names no revision
    listed = revisions(story)
    assert listed["current"] == two and listed["without"] == 1
    rows = [(r["id"], r["current"], r["hosts"], r["converged"], r["failed"], r["other"]) for r in listed["revisions"]]
    assert rows == [(two, True, 2, 1, 1, 0), (one, False, 1, 1, 0, 0)]  # newest first
    assert listed["revisions"][0]["states"] == {"converged": 1, "failed": 1}
    assert listed["revisions"][0]["firstSeen"] >= listed["revisions"][1]["firstSeen"]
    hosts = {h["host"]: h.get("revision") for h in story.get("/v1/hosts").json()["hosts"]}
    assert hosts == {"web1": one, "web2": two, "web3": two, "web4": None}  # the listing's summaries carry it
    assert story.get("/v1/hosts/web3").json()["report"]["revision"] == two

    page = story.get("/ui/overview").text
    assert 'id="revisions"' in page and two in page and one in page
    # issue 40: a host that reports with datum apply --report-to is said to, not only "an older agent"
    assert "1 host ran a pass that names no revision: 1 reported with datum apply --report-to" in page
    assert story.get("/v1/revisions", "stranger").status_code == 403


def test_replicas_on_one_store_agree_on_when_a_revision_was_first_seen(story: Story, tmp_path, store_url):
    rev = manifest(story).headers["Datum-Revision"]
    first = revisions(story)["revisions"][0]["firstSeen"]
    (tmp_path / "other").mkdir()
    other = build_story(tmp_path / "other", store_url)  # a second app on the same store, the same files
    serve_fleet(other, tmp_path / "other" / "fleet")
    (tmp_path / "other" / "fleet" / "nodes.yaml").write_bytes((tmp_path / "fleet" / "nodes.yaml").read_bytes())
    assert manifest(other).headers["Datum-Revision"] == rev  # the same files: the same revision
    assert revisions(other)["revisions"][0]["firstSeen"] == first


def test_a_git_work_tree_names_its_commit_and_a_dirty_tree_says_so(story: Story):
    fleet: Path = story.fleet  # type: ignore[attr-defined]
    git(fleet, "init", "-q")
    git(fleet, "add", ".")
    git(fleet, "commit", "-q", "-m", "first")
    head = git(fleet, "rev-parse", "HEAD")
    assert manifest(story).headers["Datum-Revision"] == head
    listed = revisions(story)
    assert listed["current"] == head and listed["revisions"][0]["gitCommit"] == head
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: edited\n")
    dirty = manifest(story).headers["Datum-Revision"]
    assert dirty == f"{head}+dirty.{content_digest(fleet.resolve())[:12]}"
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: edited again\n")
    again = manifest(story).headers["Datum-Revision"]
    assert again.startswith(f"{head}+dirty.") and again != dirty  # another uncommitted edit, another revision
    git(fleet, "commit", "-q", "-am", "second")
    second = git(fleet, "rev-parse", "HEAD")
    assert manifest(story).headers["Datum-Revision"] == second != head
    ids = [r["id"] for r in revisions(story)["revisions"]]
    assert ids == [second]  # the others run on no host and are not current: not listed


def test_the_revision_named_is_the_one_of_the_files_the_manifest_was_composed_from(story: Story, monkeypatch):
    """An edit that lands between the composition and the naming of the revision: both are made again, so the
    ``Datum-Revision`` an agent reports is the one of what it applies."""
    from datum.fleet import serving

    fleet: Path = story.fleet  # type: ignore[attr-defined]
    real, calls = serving.current, []

    async def edited_right_after(resolved, host, facts, labels):  # type: ignore[no-untyped-def]
        found = await real(resolved, host, facts, labels)
        calls.append(found.digest)
        if len(calls) == 1:
            (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: edited\n")
        return found

    monkeypatch.setattr(serving, "current", edited_right_after)
    answer = manifest(story)
    assert answer.status_code == 200, answer.text
    assert answer.json()["manifest"]["resources"][0]["File[/etc/motd]"]["content"] == "edited"
    assert answer.headers["Datum-Revision"] == "sha256:" + content_digest(fleet.resolve())
    assert len(calls) == 2


def test_the_fast_answer_names_the_revision_of_the_files_it_remembered(story: Story, monkeypatch):
    """The manifest's fast answer (no ``wait``) takes the composition remembered for the files, then their
    revision, named in a worker thread when it is not yet recorded (a store that refused the record): an
    edit that lands between the two looks is answered by the route, which composes and names again, never
    the remembered manifest under the newer revision's name."""
    from datum.api.routes import hosts as route
    from datum.fleet import serving

    fleet: Path = story.fleet  # type: ignore[attr-defined]
    first = manifest(story)  # composed by the route, and remembered for the fast answer
    assert first.status_code == 200, first.text
    real, calls = serving.serving, []

    async def edited_first(fleet_server, resolved=None):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:  # the fast answer's look, after ``remembered`` took the files as they were
            (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: edited\n")
            fleet_server.revisions_recorded.clear()  # not recorded: named afresh, in a worker thread
        return await real(fleet_server, resolved)

    for named_by in (route, serving):  # the fast answer's look, and the route's composition
        monkeypatch.setattr(named_by, "serving", edited_first)
    answer = manifest(story)
    assert answer.status_code == 200, answer.text
    assert answer.json()["manifest"]["resources"][0]["File[/etc/motd]"]["content"] == "edited"
    assert answer.headers["Datum-Revision"] == "sha256:" + content_digest(fleet.resolve())
    assert answer.headers["Datum-Revision"] != first.headers["Datum-Revision"]
    assert len(calls) == 2  # the fast answer's look, then the route's


def _release(root: Path, content: str) -> Path:
    root.mkdir(parents=True)
    (root / "nodes.yaml").write_text("nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n")
    (root / "web.yaml").write_text(f"resources:\n  - File[/etc/motd]:\n      content: {content}\n")
    return root


@pytest.mark.parametrize("staged", [False, True], ids=["plain", "rollout"])
def test_a_fleet_directory_that_is_a_link_switched_to_another_release_serves_that_release(
    tmp_path, store_url, staged: bool
):
    """``[fleet] manifests`` a link, renamed over to point at a new release (every file changed at once): the
    next manifest request composes and names the new release, remembered facts or not, with or without a
    staged rollout (it was named from the link as resolved at start, composed from it resolved now: 503)."""
    from datum.config import RolloutSettings

    story = build_story(tmp_path, store_url)
    old, new = _release(tmp_path / "releases" / "a", "old"), _release(tmp_path / "releases" / "b", "new")
    link = tmp_path / "fleet"
    link.symlink_to(old)
    state = story.app.state.datum
    rollout = RolloutSettings.model_validate({"canary": ["web1"]}) if staged else None
    state.settings = state.settings.model_copy(
        update={"fleet": state.settings.fleet.model_copy(update={"manifests": link, "rollout": rollout})}
    )
    before = manifest(story)
    assert before.status_code == 200, before.text
    assert before.headers["Datum-Revision"] == "sha256:" + content_digest(old.resolve())
    (tmp_path / "fleet.new").symlink_to(new)
    os.replace(tmp_path / "fleet.new", link)
    for facts in ('{"x": 1}', None):  # composed by the route; then the facts whose answer was remembered
        after = manifest(story, **({"X-Datum-Facts": facts} if facts else {}))
        assert after.status_code == 200, after.text
        assert after.json()["manifest"]["resources"][0]["File[/etc/motd]"]["content"] == "new"
        assert after.headers["Datum-Revision"] == "sha256:" + content_digest(new.resolve())


def test_hosts_whose_pass_names_no_revision_are_said_to_be_what_they_are(story: Story, datum_cli, tmp_path):
    """Issue 40 item 5: a host that reports with datum apply --report-to is said to, not lumped with "the agent's
    cache, or an older agent": GET /v1/revisions and datum rollout status count them by their report's
    manifestOrigin (none: datum apply; cached: the agent's kept manifest; server: an agent older than revisions)."""
    manifest(story)
    report(story, "web1", "converged", None)  # datum apply --report-to sets no manifestOrigin
    report(story, "web2", "converged", None)
    report(story, "web3", "converged", None, manifestOrigin="cached: http://datum:8080 refused; applied the manifest "
                                                            "fetched at 2026-12-06T10:00:00+00:00")
    report(story, "web4", "converged", None, manifestOrigin="server")
    listed = revisions(story)
    assert listed["without"] == 4 and listed["withoutBy"] == {"apply": 2, "cached": 1, "older": 1}
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'store = "{story.settings.store_url}"\n')
    code, out, err = datum_cli("rollout", "status", "--config", str(cfg))
    assert code == 0, err
    flat = " ".join(out.split())
    assert ("4 hosts' last pass names no revision: 2 reported with datum apply --report-to (a manifest of its own, "
            "which no revision of the fleet names); 1 ran the manifest its agent kept (the server was not reached); "
            "1 reported by an agent older than revisions") in flat
    page = " ".join(story.get("/ui/overview").text.split())  # the page says the same, in the same words
    assert ("4 hosts ran a pass that names no revision: 2 reported with datum apply --report-to (a manifest of its "
            "own, which no revision of the fleet names); 1 ran the manifest its agent kept (the server was not "
            "reached); 1 reported by an agent older than revisions.") in page
