"""The page's order and grouping, decided once (``datum.core.order``), and the terminal's time form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from datum.core.breaker import Threshold
from datum.core.explain import Act
from datum.core.humanize import ago, when
from datum.core.order import HOST_ORDER, Cause, by_cause, health_rank, host_rank
from datum.core.vocab import Direction

R, A = Direction.REAP, Direction.ALIGN


def test_items_that_share_a_cause_are_one_group_and_what_needs_a_human_comes_first():
    from datum.core.attention import BACKOFF_CAP, RETRYING

    items = [
        ("gamma", Cause("blocked_on_owner", A, "holds 1 object", Act.OWNER)),
        *[(f"x{n}", Cause("circuit_breaker", R, "12 exceed 10", Act.LOOK)) for n in range(12)],
        ("blip", Cause(RETRYING, A, "timeout", Act.WAIT)),
        ("parked", Cause(BACKOFF_CAP, A, "timeout", Act.LOOK)),  # same error, parked: a row of its own
        ("new", Cause("awaiting_confirmation", R, None, Act.WAIT)),
        ("new2", Cause("awaiting_confirmation", R, None, Act.WAIT)),
    ]
    causes = dict(items)
    groups = by_cause([name for name, _c in items], causes.__getitem__)
    assert [(g.group, g.act, g.items[:2]) for g in groups] == [
        ("circuit_breaker", Act.LOOK, ["x0", "x1"]),
        (BACKOFF_CAP, Act.LOOK, ["parked"]),
        ("awaiting_confirmation", Act.WAIT, ["new", "new2"]),
        (RETRYING, Act.WAIT, ["blip"]),
        ("blocked_on_owner", Act.OWNER, ["gamma"]),
    ]
    assert len(groups[0].items) == 12


def test_a_groups_label_names_the_breakers_threshold():
    from datum.core.attention import group_label

    threshold = Threshold(count=10, fraction=0.1)
    assert group_label("circuit_breaker", R, 12, threshold) == "12 reaps held: breaker reap > 10 or > 10% of what exists"
    assert group_label("circuit_breaker", A, 1, None) == "1 align held: breaker align tripped"
    assert group_label("cooldown", Direction.RESTORE, 1) == "1 restore: cooldown"


def test_worst_first():
    assert sorted(["converged", "degraded", "failed", "unknown", "nonsense"], key=host_rank) == [
        "failed", "unknown", "degraded", "converged", "nonsense"
    ]
    assert [s.value for s in HOST_ORDER][:2] == ["failed", "unknown"]
    assert sorted(["ok", "unknown", "failing", "degraded"], key=health_rank) == ["failing", "degraded", "unknown", "ok"]


def test_one_time_form_relative_or_absolute_in_utc():
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert ago(now - timedelta(minutes=5, seconds=3), now) == "5m 3s ago"
    assert ago(now + timedelta(seconds=30), now) == "in 30s"
    assert ago(now, now) == "just now" and ago(None, now) == "never"
    assert ago(datetime(2026, 11, 30, 11, 0), now) == "1h 0m ago"  # a stored time without a zone is UTC
    paris = timezone(timedelta(hours=1))
    assert when(datetime(2026, 11, 30, 13, 0, tzinfo=paris)) == "2026-11-30 12:00:00 UTC"
