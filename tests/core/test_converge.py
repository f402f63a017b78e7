"""Converge[T]: every framework reason and transition of one pass, and across passes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datum.core.breaker import Threshold
from datum.core.converge import (
    BlockedOnOwner,
    Converge,
    ConvergeConfig,
    ItemReport,
    Waiting,
    retain,
)
from datum.core.memory import BackoffPolicy
from datum.core.vocab import DEGRADING_REASONS, ConvergeMode, Direction, Reason


class Harness:
    """Runs passes of one Converge, carrying item memory the way the runner does."""

    def __init__(self, **config):
        self.prereq = config.pop("prerequisite", None)
        config.setdefault("breaker", {})  # off unless the test is about the breaker
        self.engine = Converge(
            "thing",
            ConvergeConfig(**config),
            describe=lambda d: f"want {d}",
            describe_actual=lambda a: f"have {a}",
            prerequisite=self.prereq,
        )
        self.memory = {}
        self.applied = []
        self.fail = {}
        self.owner = set()

    def apply(self, direction, key, want, have):
        self.applied.append((direction, key))
        if key in self.owner:
            raise BlockedOnOwner(f"{key} still holds objects")
        if key in self.fail:
            raise self.fail[key]

    def run(self, desired, actual):
        result = self.engine.run(desired, actual, self.apply, self.memory)
        self.memory = result.memory
        self.last = result
        return result

    def reasons(self):
        return {i.id: i.reason for i in self.last.items}

    def item(self, key):
        return next(i for i in self.last.items if i.id == key)


def test_waits_for_confirmation_then_acts():
    h = Harness(confirmation_ticks=3)
    for expected_streak in (1, 2):
        h.run({"a": 1}, {})
        item = h.item("a")
        assert (item.reason, item.streak, item.confirmations_needed) == (
            Reason.AWAITING_CONFIRMATION,
            expected_streak,
            3,
        )
        assert h.applied == []
    h.run({"a": 1}, {})
    assert h.item("a").reason is Reason.ACTING
    assert h.applied == [(Direction.RESTORE, "a")]


def test_streak_resets_when_item_converges():
    h = Harness(confirmation_ticks=3)
    h.run({"a": 1}, {})
    h.run({"a": 1}, {})
    h.run({"a": 1}, {"a": 1})  # converged: forgotten
    assert h.memory == {}
    h.run({"a": 1}, {})
    assert h.item("a").streak == 1


def test_streak_resets_when_direction_changes():
    h = Harness(confirmation_ticks=3)
    h.run({"a": 1}, {})
    h.run({"a": 1}, {})
    h.run({"a": 1}, {"a": 2})  # now align
    item = h.item("a")
    assert (item.direction, item.streak, item.reason) == (
        Direction.ALIGN,
        1,
        Reason.AWAITING_CONFIRMATION,
    )
    assert (item.desired, item.actual) == ("want 1", "have 2")


def test_restore_and_reap_show_no_actual_side():
    h = Harness(confirmation_ticks=1)
    h.run({"a": 1}, {"z": 9})
    assert (h.item("a").desired, h.item("a").actual) == ("want 1", None)
    assert (h.item("z").desired, h.item("z").actual) == (None, None)


def test_apply_failure_backoff_in_passes_and_recovery():
    h = Harness(confirmation_ticks=1, backoff=BackoffPolicy(1, 4))
    h.fail["a"] = RuntimeError("disk full")
    timeline = []
    for _ in range(9):
        h.run({"a": 1}, {})
        i = h.item("a")
        timeline.append((i.reason.value, i.failures, i.retry_after_passes))
        assert i.last_err == "disk full"
    assert timeline == [
        ("apply_failed", 1, 1),
        ("backoff", 1, 0),
        ("apply_failed", 2, 2),
        ("backoff", 2, 1),
        ("backoff", 2, 0),
        ("apply_failed", 3, 4),
        ("backoff", 3, 3),
        ("backoff", 3, 2),
        ("backoff", 3, 1),
    ]
    del h.fail["a"]
    h.run({"a": 1}, {})
    h.run({"a": 1}, {})
    i = h.item("a")
    assert (i.reason, i.failures, i.retry_after_passes, i.last_err) == (Reason.ACTING, None, None, None)
    assert h.memory["a"].failures == 0


def test_parked_at_cap_is_told_apart_from_failed_once():
    h = Harness(confirmation_ticks=1, backoff=BackoffPolicy(1, 2))
    h.fail["a"] = RuntimeError("x")
    for _ in range(30):
        h.run({"a": 1}, {})
    assert h.memory["a"].failures > 10
    assert h.memory["a"].retry_after_passes <= 2


def test_exception_without_message_names_its_type():
    h = Harness(confirmation_ticks=1)
    h.fail["a"] = KeyError()
    h.run({"a": 1}, {})
    assert h.item("a").last_err == "KeyError"


def test_blocked_on_owner_counts_in_blocked_not_drift_and_does_not_degrade():
    h = Harness(confirmation_ticks=1)
    h.owner.add("b")
    result = h.run({"a": 1}, {"b": 2})
    assert h.reasons() == {"a": Reason.ACTING, "b": Reason.BLOCKED_ON_OWNER}
    assert (result.drift, result.blocked) == (1, 1)
    assert h.item("b").last_err == "b still holds objects"
    assert h.item("b").failures is None
    assert not result.degrading


def test_registered_specific_reason():
    h = Harness(confirmation_ticks=1)
    h.fail["a"] = Waiting(Reason.COOLDOWN, "group cooldown 300s")
    result = h.run({"a": 1}, {})
    assert (h.item("a").reason, h.item("a").last_err) == (Reason.COOLDOWN, "group cooldown 300s")
    assert result.drift == 1 and not result.degrading


def test_unregistered_or_framework_reason_is_refused():
    with pytest.raises(ValueError):
        Waiting("made_up_reason")
    with pytest.raises(ValueError):
        Waiting(Reason.ACTING)


@pytest.mark.parametrize(
    "threshold,candidates,desired_total,trips",
    [
        (Threshold(count=2), 2, 10, False),
        (Threshold(count=2), 3, 10, True),
        (Threshold(fraction=0.5), 5, 10, False),
        (Threshold(fraction=0.5), 6, 10, True),
        (Threshold(count=100, fraction=0.1), 2, 10, True),
        (Threshold(), 1000, 1, False),
    ],
)
def test_breaker_threshold(threshold, candidates, desired_total, trips):
    assert threshold.tripped(candidates, desired_total) is trips


def test_breaker_refuses_a_whole_direction_and_only_that_direction():
    h = Harness(
        confirmation_ticks=1,
        breaker={Direction.REAP: Threshold(count=2), Direction.RESTORE: Threshold(count=2)},
    )
    result = h.run({"a": 1}, {"x": 1, "y": 1, "z": 1})
    assert h.reasons() == {
        "a": Reason.ACTING,
        "x": Reason.CIRCUIT_BREAKER,
        "y": Reason.CIRCUIT_BREAKER,
        "z": Reason.CIRCUIT_BREAKER,
    }
    assert h.applied == [(Direction.RESTORE, "a")]
    assert result.tripped == {Direction.REAP}
    assert result.degrading


def test_items_in_backoff_are_not_breaker_candidates():
    h = Harness(confirmation_ticks=1, breaker={Direction.RESTORE: Threshold(count=1)})
    h.fail["a"] = RuntimeError("x")
    h.run({"a": 1}, {})
    h.run({"a": 1, "b": 1}, {})
    assert h.reasons() == {"a": Reason.BACKOFF, "b": Reason.ACTING}


def test_dry_run_commits_nothing_and_keeps_the_streak():
    h = Harness(confirmation_ticks=1, mode=ConvergeMode.DRY_RUN)
    result = h.run({"a": 1}, {"z": 1})
    assert h.reasons() == {"a": Reason.DRY_RUN, "z": Reason.DRY_RUN}
    assert h.applied == []
    assert not result.degrading
    h.run({"a": 1}, {"z": 1})
    assert h.item("a").streak == 2


@pytest.mark.parametrize(
    "config,reason",
    [
        ({"mode": ConvergeMode.RESTORE}, Reason.SUPPRESSED_RESTORE_MODE),
        ({"no_reap": True}, Reason.SUPPRESSED_NO_REAP),
        ({"mode": ConvergeMode.RESTORE, "no_reap": True}, Reason.SUPPRESSED_RESTORE_MODE),
    ],
)
def test_reaps_suppressed_by_mode_are_recorded(config, reason):
    h = Harness(confirmation_ticks=1, **config)
    result = h.run({"a": 1, "b": 1}, {"z": 1, "b": 2})
    assert h.reasons() == {"a": Reason.ACTING, "z": reason, "b": Reason.ACTING}
    assert (Direction.REAP, "z") not in h.applied
    assert not result.degrading


def test_suppressed_reaps_do_not_trip_the_breaker():
    h = Harness(confirmation_ticks=1, no_reap=True, breaker={Direction.REAP: Threshold(count=0)})
    result = h.run({}, {"z": 1})
    assert h.reasons() == {"z": Reason.SUPPRESSED_NO_REAP}
    assert not result.tripped


def test_failed_prerequisite_suppresses_confirmed_items_only():
    h = Harness(confirmation_ticks=2, prerequisite=lambda: "no backup target configured")
    h.run({"a": 1}, {})
    assert h.reasons() == {"a": Reason.AWAITING_CONFIRMATION}
    result = h.run({"a": 1, "b": 1}, {})
    assert h.reasons() == {"a": Reason.SUPPRESSED_UNCONFIGURED, "b": Reason.AWAITING_CONFIRMATION}
    assert h.applied == []
    assert result.degrading


def test_satisfied_prerequisite_lets_items_act():
    h = Harness(confirmation_ticks=1, prerequisite=lambda: None)
    h.run({"a": 1}, {})
    assert h.reasons() == {"a": Reason.ACTING}


def test_drift_cap_keeps_what_an_operator_must_see_first():
    h = Harness(confirmation_ticks=2, drift_cap=3)
    h.fail["f"] = RuntimeError("broken")
    desired = {k: 1 for k in "abcdef"}
    h.run(desired, {})
    result = h.run({**desired, "g": 1, "h": 1}, {})
    assert len(result.items) == 3
    assert result.dropped == 5
    assert result.drift == 8
    assert [i.id for i in result.items][0] == "f"
    assert h.item("f").reason is Reason.APPLY_FAILED
    assert all(i.reason is Reason.ACTING for i in result.items[1:])


def test_counts_by_reason_and_direction_cover_the_items_past_drift_cap():
    h = Harness(confirmation_ticks=2, drift_cap=2)
    h.fail["f"] = RuntimeError("broken")
    desired = {k: 1 for k in "abcdef"}
    h.run(desired, {})
    result = h.run({**desired, "g": 1, "h": 1}, {})
    assert len(result.items) == 2 and result.dropped == 6
    assert result.by_direction == {
        (Reason.APPLY_FAILED, Direction.RESTORE): 1,
        (Reason.ACTING, Direction.RESTORE): 5,
        (Reason.AWAITING_CONFIRMATION, Direction.RESTORE): 2,
    }
    assert sum(result.by_direction.values()) == sum(result.reasons.values()) == 8


def test_retain_order_is_deterministic():
    items = [
        ItemReport("k", Direction.RESTORE, f"i{n}", n % 3 + 1, 2, r)
        for n, r in enumerate([Reason.AWAITING_CONFIRMATION, Reason.BACKOFF, Reason.ACTING] * 4)
    ]
    first, dropped = retain(items, 5)
    again, _ = retain(list(reversed(items)), 5)
    assert first == again and dropped == 7
    assert [i.reason for i in first[:4]] == [Reason.BACKOFF] * 4


def test_memory_is_kept_only_for_diverged_items():
    h = Harness(confirmation_ticks=2)
    desired = {str(n): n for n in range(10_000)}
    actual = dict(desired)
    for n in range(0, 10_000, 100):
        del actual[str(n)]
    result = h.run(desired, actual)
    assert len(result.memory) == 100
    assert result.drift == 100


# -- the streak/backoff state machine against a model ------------------------------

events = st.lists(st.sampled_from(["diverged", "converged", "fails", "heals"]), max_size=40)


@settings(max_examples=150, deadline=None)
@given(events, st.integers(1, 3), st.integers(1, 3), st.integers(1, 16))
def test_state_machine_matches_a_model(script, ticks, base, cap):
    cap = max(cap, base)
    h = Harness(confirmation_ticks=ticks, backoff=BackoffPolicy(base, cap))
    streak = failures = wait = 0
    broken = False
    for event in script:
        if event == "fails":
            broken = True
            h.fail["a"] = RuntimeError("no")
            continue
        if event == "heals":
            broken = False
            h.fail.pop("a", None)
            continue
        if event == "converged":
            h.run({"a": 1}, {"a": 1})
            assert h.last.items == ()
            streak = failures = wait = 0
            continue
        h.run({"a": 1}, {})
        streak += 1
        item = h.item("a")
        assert item.streak == streak
        if streak < ticks:
            assert item.reason is Reason.AWAITING_CONFIRMATION
        elif wait > 0:
            wait -= 1
            assert (item.reason, item.retry_after_passes, item.failures) == (Reason.BACKOFF, wait, failures)
        elif broken:
            failures += 1
            wait = min(cap, base * 2 ** (failures - 1))
            assert (item.reason, item.failures, item.retry_after_passes) == (
                Reason.APPLY_FAILED,
                failures,
                wait,
            )
        else:
            failures = 0
            assert item.reason is Reason.ACTING
        assert (item.reason in DEGRADING_REASONS) == h.last.degrading
