"""The buckets reconciler never destroys on a bad read: real stores, real directories, the real CLI.

Faults are injected where they happen in life: a bucket root that reads empty
for one pass (a mount point whose filesystem is not mounted), a store file
deleted, a tenant's upload landing between the decision and the removal, a
``datum bucket delete`` issued while a pass runs.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from datum.reconcilers import buckets
from datum.store import open_store


def config(tmp_path: Path, store_url: str, **extra: str) -> tuple[Path, str]:
    root = tmp_path / "buckets"
    cfg = tmp_path / "datum.toml"
    lines = [
        f'store = "{store_url}"',
        "[reconcilers.buckets]",
        f'root = "{root}"',
        "confirmation_ticks = 2",
        *(f"{k} = {v}" for k, v in extra.items()),
    ]
    cfg.write_text("\n".join(lines) + "\n")
    return root, str(cfg)


@pytest.fixture
def sqlite(tmp_path):
    return config(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}")


@pytest.fixture
def both(tmp_path, store_url):
    return config(tmp_path, store_url)


class Datum:
    """The ``datum`` command for one configuration."""

    def __init__(self, datum_cli, cfg: str) -> None:
        self.cli, self.cfg = datum_cli, cfg

    def __call__(self, *args: str) -> tuple[int, str, str]:
        return self.cli(*args, "--config", self.cfg)

    def passes(self, n: int) -> None:
        self("reconcile", "buckets", "--passes", str(n))

    def statuses(self) -> dict[str, str]:
        _, out, _ = self("bucket", "list", "--json")
        return {b["name"]: b["status"] for b in json.loads(out)}

    def items(self) -> dict[str, dict]:
        _, out, _ = self("drift", "buckets", "--json")
        return {i["id"]: i for i in json.loads(out)["items"]}

    def active(self, *names: str) -> None:
        for name in names:
            assert self("bucket", "create", name)[0] == 0
        self.passes(2)
        assert {n: self.statuses()[n] for n in names} == dict.fromkeys(names, "active")


def blocked_delete_then_unmounted(datum: Datum, root: Path) -> Path:
    """``logs`` asked deleted while it holds an object (``delete_blocked``), ``photos`` active;
    then the root reads empty: the mount point is left, nothing mounted on it. Returns where
    the real root went."""
    datum.active("logs", "photos")
    (root / "logs" / "access.log").write_text("GET /")
    (root / "photos" / "cat.jpg").write_text("jpeg")
    datum("bucket", "delete", "logs")
    datum.passes(2)
    assert datum.statuses()["logs"] == "delete_blocked"
    away = root.with_name("buckets.mounted")
    root.rename(away)
    root.mkdir()
    return away


def test_a_root_that_reads_empty_once_settles_nothing_and_reaps_nothing(datum_cli, both):
    """An unmounted mount point for one pass: rows keep their status, objects stay."""
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    away = blocked_delete_then_unmounted(datum, root)
    datum.passes(1)
    item = datum.items()["logs"]
    assert (item["direction"], item["reason"], item["streak"]) == ("align", "awaiting_confirmation", 1)
    root.rmdir()
    away.rename(root)

    datum.passes(3)
    assert datum.statuses() == {"logs": "delete_blocked", "photos": "active"}
    assert (root / "logs" / "access.log").read_text() == "GET /"
    assert (root / "photos" / "cat.jpg").read_text() == "jpeg"
    assert datum.items()["logs"]["reason"] == "blocked_on_owner"


def test_a_failed_pass_breaks_the_streak_so_an_outage_never_completes_a_confirmation(
    datum_cli, both
):
    """Empty read, then a pass that cannot read the root at all, then another empty read.

    Streaks count consecutive passes that saw the item diverged: the failed pass
    saw nothing, so the read after the outage starts over instead of settling.
    """
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    away = blocked_delete_then_unmounted(datum, root)
    datum.passes(1)
    assert datum.items()["logs"]["streak"] == 1
    root.rmdir()
    root.write_text("")  # the root cannot be read: the pass fails
    datum.passes(1)
    root.unlink()
    root.mkdir()  # empty again after the outage
    datum.passes(1)
    assert datum.statuses() == {"logs": "delete_blocked", "photos": "active"}
    assert datum.items()["logs"]["streak"] == 1
    root.rmdir()
    away.rename(root)
    datum.passes(2)
    assert (root / "logs" / "access.log").read_text() == "GET /"
    assert datum.statuses() == {"logs": "delete_blocked", "photos": "active"}


def test_a_directory_removed_by_hand_settles_only_after_confirmation(datum_cli, both):
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    datum.active("logs")
    (root / "logs" / "a.log").write_text("x")
    datum("bucket", "delete", "logs")
    datum.passes(2)
    (root / "logs" / "a.log").unlink()
    (root / "logs").rmdir()  # the tenant cleans up by hand
    datum.passes(1)
    assert datum.statuses()["logs"] == "delete_blocked"
    datum.passes(1)
    assert datum.statuses()["logs"] == "deleted"


def test_a_directory_made_by_hand_becomes_active_only_after_confirmation(datum_cli, both):
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    datum.passes(1)
    datum("bucket", "create", "early")
    (root / "early").mkdir()  # created out of band before any pass saw the row
    datum.passes(1)
    assert datum.statuses()["early"] == "creating"
    datum.passes(1)
    assert datum.statuses()["early"] == "active"


@pytest.mark.parametrize("buckets_held", [1, 5, 40])
def test_a_lost_store_reaps_nothing(datum_cli, sqlite, buckets_held):
    root, cfg = sqlite
    datum = Datum(datum_cli, cfg)
    names = [f"b{n:02d}" for n in range(buckets_held)]
    datum.active(*names)
    for name in names:
        (root / name / "object").write_text(name)
    (Path(cfg).parent / "datum.db").unlink()  # the store is lost
    datum.passes(3)
    assert sorted(p.name for p in root.iterdir()) == names
    assert all((root / n / "object").read_text() == n for n in names)
    found = datum.items()
    assert {i["reason"] for i in found.values()} == {"circuit_breaker"}
    assert all("allow_empty" in i["lastErr"] for i in found.values())


def test_the_reap_breaker_counts_a_fraction_of_what_exists(datum_cli, sqlite):
    """Two strays among a dozen buckets: under the count of 10, over a tenth of what exists."""
    root, cfg = sqlite
    datum = Datum(datum_cli, cfg)
    datum.active(*(f"b{n:02d}" for n in range(12)))
    for stray in ("tmp-1", "tmp-2"):
        (root / stray).mkdir()
    datum.passes(2)
    assert (root / "tmp-1").is_dir() and (root / "tmp-2").is_dir()
    item = datum.items()["tmp-1"]
    assert item["reason"] == "circuit_breaker" and "0.1 of the 14 items that exist" in item["lastErr"]
    (root / "tmp-2").rmdir()  # one stray is 1 of 13: within a tenth
    datum.passes(1)
    assert not (root / "tmp-1").exists()


def test_allow_empty_lets_an_empty_desired_set_reap(datum_cli, tmp_path):
    root, cfg = config(
        tmp_path,
        f"sqlite:///{tmp_path / 'datum.db'}",
        allow_empty="true",
        breaker="{ reap = { count = 10, fraction = 1 } }",
    )
    datum = Datum(datum_cli, cfg)
    datum.passes(1)
    (root / "stray").mkdir()
    datum.passes(2)
    assert not (root / "stray").exists()


def permissive(tmp_path: Path, store_url: str) -> tuple[Path, str]:
    """A world whose breaker lets a single stray be reaped, on the old code as on the new."""
    return config(tmp_path, store_url, breaker="{ reap = { count = 10, fraction = 1 } }")


def test_an_upload_landing_after_the_reap_was_decided_is_kept(datum_cli, tmp_path, monkeypatch):
    root, cfg = permissive(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}")
    datum = Datum(datum_cli, cfg)
    datum.active("keep")
    (root / "stray").mkdir()
    real = buckets.BucketsReconciler.apply

    def upload_first(self, direction, name, row, entry):
        if name == "stray":
            (root / "stray" / "upload.bin").write_text("tenant data")
        return real(self, direction, name, row, entry)

    monkeypatch.setattr(buckets.BucketsReconciler, "apply", upload_first)
    datum.passes(2)
    assert (root / "stray" / "upload.bin").read_text() == "tenant data"
    item = datum.items()["stray"]
    assert item["reason"] == "blocked_on_owner" and "1 object" in item["lastErr"]


def test_a_stray_holding_objects_is_never_deleted(datum_cli, tmp_path):
    root, cfg = permissive(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}")
    datum = Datum(datum_cli, cfg)
    datum.active("keep")
    (root / "stray" / "deep").mkdir(parents=True)
    (root / "stray" / "deep" / "x").write_text("x")
    datum.passes(3)
    assert (root / "stray" / "deep" / "x").read_text() == "x"
    assert datum.items()["stray"]["reason"] == "blocked_on_owner"


@pytest.mark.parametrize("lands_in", [".", "sub", "sub/deeper"])
def test_an_upload_landing_between_the_count_and_the_rmdir_is_kept(
    datum_cli, tmp_path, monkeypatch, lands_in
):
    root, cfg = config(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}")
    datum = Datum(datum_cli, cfg)
    datum.active("logs")
    (root / "logs" / "sub" / "deeper").mkdir(parents=True)
    datum("bucket", "delete", "logs")
    target = root / "logs" / lands_in
    real_rmdir = os.rmdir
    landed = []

    def rmdir_after_an_upload(path, *args, **kwargs):
        if not landed:
            landed.append(True)
            (target / "late.bin").write_text("arrived just now")
        return real_rmdir(path, *args, **kwargs)

    datum.passes(1)
    monkeypatch.setattr(os, "rmdir", rmdir_after_an_upload)
    datum.passes(1)
    monkeypatch.undo()
    assert landed
    assert (target / "late.bin").read_text() == "arrived just now"
    item = datum.items()["logs"]
    assert item["reason"] == "blocked_on_owner" and "1 object" in item["lastErr"]
    assert datum.statuses()["logs"] == "delete_blocked"


def test_a_bucket_holding_only_empty_subdirectories_is_deleted(datum_cli, both):
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    datum.active("logs")
    for sub in ("2026/11/29", "2026/11/30", "tmp"):
        (root / "logs" / sub).mkdir(parents=True)
    datum("bucket", "delete", "logs")
    datum.passes(2)
    assert not (root / "logs").exists()
    assert datum.statuses()["logs"] == "deleted"


def test_a_symlink_in_a_bucket_is_an_object_and_never_followed(datum_cli, both, tmp_path):
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "precious").write_text("not the bucket's")
    datum.active("logs")
    (root / "logs" / "link").symlink_to(outside / "dir")
    datum("bucket", "delete", "logs")
    datum.passes(3)
    assert (outside / "dir" / "precious").read_text() == "not the bucket's"
    assert (root / "logs" / "link").is_symlink()
    item = datum.items()["logs"]
    assert item["reason"] == "blocked_on_owner" and "1 object" in item["lastErr"]


def test_a_bucket_swapped_for_a_symlink_is_not_followed(tmp_path):
    root = tmp_path / "root"
    (tmp_path / "elsewhere" / "sub").mkdir(parents=True)
    root.mkdir()
    (root / "logs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NotADirectoryError):
        buckets.remove_empty(root, "logs")
    assert (tmp_path / "elsewhere" / "sub").is_dir() and (root / "logs").is_symlink()
    with pytest.raises(OSError) as raised:
        buckets.count_objects(root / "logs")
    assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)


def test_a_delete_issued_during_a_pass_is_not_overwritten(datum_cli, both, monkeypatch):
    """The pass read `creating`; the tenant deletes while the restore runs; the row stays `deleting`."""
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    datum("bucket", "create", "photos")
    datum.passes(1)
    real = buckets.BucketsReconciler.apply

    def tenant_deletes_meanwhile(self, direction, name, row, entry):
        buckets.delete(self.store, name)
        return real(self, direction, name, row, entry)

    monkeypatch.setattr(buckets.BucketsReconciler, "apply", tenant_deletes_meanwhile)
    datum.passes(1)
    monkeypatch.undo()
    assert (root / "photos").is_dir()
    assert datum.statuses()["photos"] == "deleting"
    datum.passes(2)
    assert datum.statuses()["photos"] == "deleted" and not (root / "photos").exists()


def test_a_settle_is_compare_and_set_too(datum_cli, both, monkeypatch):
    root, cfg = both
    datum = Datum(datum_cli, cfg)
    datum.passes(1)
    datum("bucket", "create", "early")
    (root / "early").mkdir()
    datum.passes(1)
    real = buckets.BucketsReconciler.settle

    def tenant_deletes_meanwhile(self, name, row, entry):
        buckets.delete(self.store, name)
        return real(self, name, row, entry)

    monkeypatch.setattr(buckets.BucketsReconciler, "settle", tenant_deletes_meanwhile)
    datum.passes(1)
    assert datum.statuses()["early"] == "deleting"


def test_create_and_delete_are_compare_and_set(store_url):
    store = open_store(store_url)
    try:
        assert buckets.create(store, "logs") == "creating"
        assert buckets.delete(store, "logs") == "deleting"
        assert buckets.delete(store, "logs") == "deleting"  # asked twice: unchanged
        with pytest.raises(Exception, match="already exists"):
            buckets.create(store, "logs")
    finally:
        store.dispose()


def test_a_reap_table_keeps_the_count_it_leaves_out(datum_cli, tmp_path):
    """``reap = { fraction = 0.95 }`` still trips past 10: a key left out keeps its default."""
    root, cfg = config(
        tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", breaker="{ reap = { fraction = 0.95 } }"
    )
    datum = Datum(datum_cli, cfg)
    names = [f"b{n:02d}" for n in range(30)]
    datum.active(*names)
    from sqlalchemy import text

    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
    with store.begin() as conn:  # the store lost 27 rows (a restore from an old backup)
        conn.execute(text("DELETE FROM buckets WHERE name NOT IN ('b00', 'b01', 'b02')"))
    store.dispose()
    datum.passes(3)
    assert sorted(p.name for p in root.iterdir()) == names
    assert {i["reason"] for i in datum.items().values()} == {"circuit_breaker"}
