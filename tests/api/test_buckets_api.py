"""Bucket desired state over HTTP: PUT, DELETE, GET, and the reconciler acting on it."""

from __future__ import annotations

import pytest


def test_put_creates_then_is_idempotent_and_the_reconciler_acts(story):
    r = story.client.put("/v1/buckets/alpha", headers=story.auth("admin"))
    assert (r.status_code, r.json()) == (201, {"name": "alpha", "status": "creating"})
    r = story.client.put("/v1/buckets/alpha", headers=story.auth("admin"))
    assert (r.status_code, r.json()) == (200, {"name": "alpha", "status": "creating"})
    story.tick(2)
    assert (story.root / "alpha").is_dir()
    (row,) = story.get("/v1/buckets").json()
    assert (row["name"], row["status"]) == ("alpha", "active")
    assert set(row) == {"name", "status", "createdAt", "updatedAt"}


def test_delete_parks_a_bucket_that_holds_objects_and_put_then_conflicts(story):
    story.client.put("/v1/buckets/beta", headers=story.auth("admin"))
    story.tick(2)
    (story.root / "beta" / "obj").write_text("x")
    r = story.client.delete("/v1/buckets/beta", headers=story.auth("admin"))
    assert (r.status_code, r.json()) == (202, {"name": "beta", "status": "deleting"})
    story.tick(2)
    assert {b["name"]: b["status"] for b in story.get("/v1/buckets").json()} == {"beta": "delete_blocked"}
    drift = story.get("/v1/observability/admin/reconcilers/buckets/drift").json()
    assert (drift["blocked"], drift["items"][0]["reason"]) == (1, "blocked_on_owner")
    r = story.client.put("/v1/buckets/beta", headers=story.auth("admin"))
    assert r.status_code == 409 and r.json()["issues"][0]["code"] == "CONFLICT"


def test_deleting_an_unknown_bucket_is_404(story):
    r = story.client.delete("/v1/buckets/nope", headers=story.auth("admin"))
    assert r.status_code == 404 and r.json()["issues"][0]["code"] == "NOT_FOUND"


@pytest.mark.parametrize("name", ["A", "ab", "-abc", "abc-", "a_b_c", "a" * 64, "..", "a.b"])
def test_an_unsafe_bucket_name_is_422_at_its_field(story, name):
    r = story.client.put(f"/v1/buckets/{name}", headers=story.auth("admin"))
    assert r.status_code in (404, 405, 422)  # ".." is resolved away by the client into another path (/v1/)
    if r.status_code == 422:
        (issue,) = r.json()["issues"]
        assert issue["code"] == "INVALID_INPUT" and issue["fields"][0]["field"] == "name"
