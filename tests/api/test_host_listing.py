"""``GET /v1/hosts``: pages of host summaries by name, a state filter, the fleet's counts, and 422 for bad input."""

from __future__ import annotations

from .story import pass_report


def post(story, host: str, state: str = "failed"):  # type: ignore[no-untyped-def]
    report = pass_report(host, state)
    if state == "converged":
        report |= {"resources": report["resources"][:1], "counts": {"converged": 1}}
        report.pop("reason")
    r = story.client.post(f"/v1/hosts/{host}/passes", json=report, headers=story.agent(host))
    assert r.status_code == 201, r.text


def test_pages_walk_the_fleet_by_name_with_every_states_count(story):
    for n in range(7):
        post(story, f"web{n}", "failed" if n in (2, 5) else "converged")
    seen, url = [], "/v1/hosts?limit=3"
    while True:
        r = story.get(url)
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["counts"] == {"converged": 5, "drifted": 0, "failed": 2, "degraded": 0, "awaiting-reboot": 0,
                                 "unknown": 0}
        assert doc["total"] == 7
        seen += [h["host"] for h in doc["hosts"]]
        if "next" not in doc:
            assert "link" not in r.headers
            break
        assert r.headers["link"] == f'<http://testserver/v1/hosts?limit=3&cursor={doc["next"]}>; rel="next"'
        url = f"/v1/hosts?limit=3&cursor={doc['next']}"
    assert seen == [f"web{n}" for n in range(7)]
    failed = story.get("/v1/hosts?state=failed").json()
    assert [h["host"] for h in failed["hosts"]] == ["web2", "web5"] and failed["counts"]["converged"] == 5
    first = story.get("/v1/hosts?state=failed&limit=1").json()
    assert [h["host"] for h in first["hosts"]] == ["web2"]
    rest = story.get(f"/v1/hosts?state=failed&limit=1&cursor={first['next']}").json()
    assert [h["host"] for h in rest["hosts"]] == ["web5"] and "next" not in rest
    row = failed["hosts"][0]
    assert row["reason"] == "File[motd] failed: permission denied" and "report" not in row
    assert [a["id"] for a in row["attention"]] == ["File[motd]", "Service[nginx]"]


def test_bad_input_is_422_naming_every_parameter_at_fault(story):
    r = story.get("/v1/hosts?state=happy&limit=0&cursor=bogus")
    assert r.status_code == 422, r.text
    (issue,) = r.json()["issues"]
    assert issue["code"] == "INVALID_INPUT"
    fields = {f["field"]: f["message"] for f in issue["fields"]}
    assert set(fields) == {"state", "limit", "cursor"}, fields
    assert "not a cursor of this listing" in fields["cursor"]
    assert story.get("/v1/hosts?limit=1001").status_code == 422
    assert story.get("/v1/hosts?limit=1000").status_code == 200


def test_the_listing_needs_fleet_read_host(story):
    assert story.client.get("/v1/hosts").status_code == 401
    r = story.client.get("/v1/hosts", headers=story.agent("web1"))
    assert r.status_code == 403 and r.json()["issues"][0]["action"] == "fleet:ReadHost"


def test_the_page_lists_one_states_hosts_with_a_next_page(story, monkeypatch):
    from datum.web import view

    monkeypatch.setattr(view, "MAX_HOSTS", 2)
    for n in range(5):
        post(story, f"web{n}", "failed" if n < 3 else "converged")
    page = story.get("/ui/overview").text
    assert 'id="host-web0"' in page and 'id="host-web1"' in page and 'id="host-web3"' not in page
    assert 'href="/?hosts=failed#hosts"' in page  # each state's count is a link to its hosts
    assert "3 more hosts are not listed" in page
    only = story.get("/ui/overview?hosts=failed").text
    assert 'id="host-web0"' in only and 'id="host-web2"' not in only
    nxt = only.split('class="pager"><a href="')[1].split('"')[0].replace("&amp;", "&")
    assert nxt.startswith("/?hosts=failed&cursor=")
    rest = story.get("/ui/overview" + nxt[1:].split("#")[0]).text
    assert 'id="host-web2"' in rest and 'id="host-web0"' not in rest and 'class="pager"' not in rest
    assert story.get("/ui/overview?hosts=happy").status_code == 422
