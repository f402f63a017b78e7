"""Authentication comes before the body: no token and a broken body is 401, not 422."""

from __future__ import annotations


def test_no_token_with_a_malformed_body_is_401(story):
    r = story.client.post(
        "/v1/hosts/h1/passes", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 401
    assert r.json()["issues"][0]["code"] == "UNAUTHENTICATED"


def test_a_malformed_body_with_a_token_is_422_for_the_whole_body(story):
    r = story.client.post(
        "/v1/hosts/h1/passes",
        content=b"{not json",
        headers={"Content-Type": "application/json", **story.agent("h1")},
    )
    assert r.status_code == 422
    (finding,) = r.json()["issues"]
    assert finding["code"] == "INVALID_INPUT"
    assert [f["field"] for f in finding["fields"]] == [""]
    assert "not valid JSON" in finding["fields"][0]["message"]
