"""The manifest fast path: a composed manifest is served (or 304) without FastAPI's routing while the fleet
directory's files are as they were; an edit, a first request, facts that do not parse or a refusal go to
the route, which composes in a worker thread and keeps its one error path."""

from __future__ import annotations

import json

import pytest

import datum.fleet.effective as eff

from .story import build_story, serve_fleet


@pytest.fixture
def fleet_story(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    story = build_story(tmp_path)
    fleet = serve_fleet(story, tmp_path / "fleet")
    composed: list[str] = []  # the route's compositions (the fast path never composes)
    real = eff.effective

    def spy(directory, host, facts, labels=None):  # type: ignore[no-untyped-def]
        composed.append(host)
        return real(directory, host, facts, labels)

    monkeypatch.setattr(eff, "effective", spy)
    story.composed = composed  # type: ignore[attr-defined]
    story.fleet = fleet  # type: ignore[attr-defined]
    return story


def get(story, host="web1", **headers):  # type: ignore[no-untyped-def]
    return story.client.get(f"/v1/hosts/{host}/manifest", headers={**story.agent(host), **headers})


def test_a_composed_manifest_is_served_from_memory_until_the_directory_changes(fleet_story):
    s = fleet_story
    first = get(s)
    assert first.status_code == 200 and s.composed == ["web1"]
    second = get(s)
    assert s.composed == ["web1"]  # not through the route
    assert second.content == first.content and second.headers["etag"] == first.headers["etag"]
    assert second.headers["content-type"] == "application/json"
    etag = first.headers["etag"]
    cached = get(s, **{"If-None-Match": f'"x", W/{etag}'})
    assert cached.status_code == 304 and cached.content == b"" and cached.headers["etag"] == etag
    exact = get(s, **{"If-None-Match": etag})  # what an agent sends back: its ETag as given
    assert exact.status_code == 304 and exact.content == b"" and exact.headers["etag"] == etag
    other = get(s, **{"If-None-Match": '"sha256:other"'})
    assert other.status_code == 200 and other.content == first.content
    assert other.headers["content-length"] == str(len(first.content)) and other.headers["etag"] == etag
    assert s.composed == ["web1"]
    (s.fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: changed\n")
    changed = get(s, **{"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag and s.composed == ["web1", "web1"]
    facts = json.dumps({"cpu_count": 4})
    assert get(s, **{"X-Datum-Facts": facts}).status_code == 200 and len(s.composed) == 3  # other facts: composed
    assert get(s, **{"X-Datum-Facts": facts}).status_code == 200 and len(s.composed) == 3


def test_what_is_in_doubt_goes_to_the_route(fleet_story):
    s = fleet_story
    assert get(s).status_code == 200
    bad = get(s, **{"X-Datum-Facts": "{nope"})
    assert bad.status_code == 422 and bad.json()["issues"][0]["fields"][0]["field"] == "X-Datum-Facts"
    assert get(s, host="db1").status_code == 404  # no rule matches it
    refused = s.client.get("/v1/hosts/web1/manifest", headers=s.auth("stranger"))
    assert refused.status_code == 403 and refused.json()["issues"][0]["action"] == "fleet:ReadManifest"
    assert s.client.get("/v1/hosts/web1/manifest").status_code == 401
    assert s.client.get("/v1/hosts/web1/manifest?x=1", headers=s.agent("web1")).status_code == 200
    # the route composed db1; bad facts and refusals never got there; the route, too, serves what is remembered
    assert s.composed == ["web1", "db1"]


def test_a_fast_answer_sees_only_the_query_parameters_it_reads():
    from datum.api.front.guard import offered

    reads = frozenset({"wait"})
    assert offered(b"", reads) == {} and offered(b"", frozenset()) == {}
    assert offered(b"wait=5", reads) == {"wait": "5"}
    assert offered(b"wait=5", frozenset()) is None  # a fast answer that reads no query sees none
    assert offered(b"x=1", reads) is None and offered(b"wait=5&x=1", reads) is None
    assert offered(b"wait=5&wait=6", reads) is None  # twice: the route's parsing says what it means
    assert offered(b"wait", reads) is None  # not a pair


def test_with_staged_rollouts_the_fast_path_answers_only_when_nothing_rolls(fleet_story, monkeypatch):
    """With ``[fleet.rollout]`` the route decides which revision a host is served; the fast path answers what it
    would only while the rollout in force is ``done`` on the directory's revision (as last read, never read on
    the event loop), and never a long poll."""
    from datum.config import RolloutSettings
    from datum.fleet.rollouts import serve as rollouts

    s = fleet_story
    s.composed = []  # here: the route's decisions (which revision), each a composition
    real = rollouts.revision_for

    def spy(state, host, facts, current, directory=None, **kw):  # type: ignore[no-untyped-def]
        s.composed.append(host)
        return real(state, host, facts, current, directory, **kw)

    monkeypatch.setattr(rollouts, "revision_for", spy)
    state = s.app.state.datum
    rollout = RolloutSettings(canary=["web1"])
    state.settings = state.settings.model_copy(
        update={"fleet": state.settings.fleet.model_copy(update={"rollout": rollout})}
    )
    first = get(s, "web2")  # the route: the first revision, done at once
    assert first.status_code == 200 and s.composed == ["web2"]
    again = get(s, "web2")
    assert again.content == first.content and again.headers["datum-revision"] == first.headers["datum-revision"]
    assert s.composed == ["web2"]  # nothing rolls: the fast path
    (s.fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: changed\n")
    held = get(s, "web2")  # a new revision: its rollout starts, web2 is held back on the previous
    assert held.status_code == 200 and held.headers["datum-revision"] == first.headers["datum-revision"]
    assert held.content == first.content
    count = len(s.composed)
    assert get(s, "web2").content == first.content and len(s.composed) > count  # rolling: the route, every time
    waited = s.client.get("/v1/hosts/web2/manifest?wait=0", headers=s.agent("web2"))
    assert waited.status_code == 200 and waited.content == first.content
