"""Converge never finalises or destroys on one read, and its breaker weighs what exists.

- a record whose substrate shows its end state (a tombstone gone, a
  ``creating`` row present) is settled only after ``confirmation_ticks`` passes
  saw that, and the streak starts over whenever the item is seen otherwise;
- the reap breaker trips on a fraction of the actual set, and on an empty
  desired set facing a non-empty actual one unless ``allow_empty``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datum.core.breaker import Threshold, refusal
from datum.core.converge import Converge, ConvergeConfig, _default_breaker
from datum.core.memory import ItemMemory
from datum.core.vocab import Direction, Reason
from datum.store.memory import load_memory, save_memory

TOMBSTONES = {"deleting"}


class World:
    """A reconciler over records ``{id: status}`` and a substrate ``{id: value}`` that only records calls."""

    def __init__(self, ticks=2, **config):
        self.engine = Converge(
            "thing",
            ConvergeConfig(confirmation_ticks=ticks, **config),
            equal=lambda status, have: have == "ok",
            tombstone=lambda status: status in TOMBSTONES,
            unsettled=lambda status: status != "active",
            settle=self.settle,
        )
        self.memory: dict[str, ItemMemory] = {}
        self.calls: list[tuple[str, str]] = []

    def apply(self, direction, key, want, have):
        self.calls.append((direction.value, key))

    def settle(self, key, want, have):
        self.calls.append(("settle", key))

    def run(self, desired, actual):
        self.calls = []
        result = self.engine.run(desired, actual, self.apply, self.memory)
        self.memory = result.memory
        self.last = result
        return {i.id: i for i in result.items}


def test_a_tombstone_gone_for_one_read_is_not_settled():
    w = World(ticks=2)
    w.run({"logs": "deleting"}, {"logs": "ok"})
    item = w.run({"logs": "deleting"}, {})  # reads empty once
    assert (item["logs"].direction, item["logs"].reason, item["logs"].streak) == (
        Direction.ALIGN,
        Reason.AWAITING_CONFIRMATION,
        1,
    )
    assert w.calls == []
    item = w.run({"logs": "deleting"}, {"logs": "ok"})  # it was there all along
    assert item["logs"].streak == 1 and w.calls == []
    w.run({"logs": "deleting"}, {})
    assert w.calls == []
    w.run({"logs": "deleting"}, {})
    assert w.calls == [("settle", "logs")]


def test_a_creating_record_becomes_final_only_after_confirmation():
    w = World(ticks=3)
    for _ in range(2):
        item = w.run({"new": "creating"}, {"new": "ok"})
        assert item["new"].reason is Reason.AWAITING_CONFIRMATION and w.calls == []
    item = w.run({"new": "creating"}, {"new": "ok"})
    assert item["new"].reason is Reason.ACTING and w.calls == [("settle", "new")]
    assert item["new"].actual is None  # no describer given; the settle is reported as an align


def test_a_settled_record_is_forgotten():
    w = World(ticks=1)
    w.run({"a": "creating"}, {"a": "ok"})
    assert "a" in w.memory
    w.run({"a": "active"}, {"a": "ok"})
    assert w.memory == {}


def test_settles_are_held_by_the_align_breaker_and_by_dry_run():
    from datum.core.vocab import ConvergeMode

    w = World(ticks=1, breaker={Direction.ALIGN: Threshold(count=1)})
    w.run({"a": "deleting", "b": "deleting"}, {})
    assert w.calls == [] and w.last.tripped == {Direction.ALIGN}
    w = World(ticks=1, mode=ConvergeMode.DRY_RUN)
    w.run({"a": "deleting"}, {})
    assert w.calls == [] and w.last.reasons[Reason.DRY_RUN] == 1


def test_unsettled_and_settle_come_together():
    with pytest.raises(ValueError):
        Converge("thing", unsettled=lambda d: True)
    with pytest.raises(ValueError):
        Converge("thing", settle=lambda k, d, a: None)


def test_the_settle_phase_survives_the_store(store):
    """A settling streak reloaded from the store is not mistaken for an act's streak."""
    with store.begin() as conn:
        save_memory(
            conn,
            "r",
            "thing",
            {
                "gone": ItemMemory(Direction.ALIGN, streak=1, settling=True, gone=True),
                "there": ItemMemory(Direction.ALIGN, streak=1, gone=True),
                **{
                    f"{d.value}-{settling}-{gone}": ItemMemory(d, settling=settling, gone=gone)
                    for d in Direction
                    for settling in (False, True)
                    for gone in (False, True)
                    if d is Direction.ALIGN or not (settling or gone)
                },
            },
        )
    with store.connect() as conn:
        memory = load_memory(conn, "r", "thing")
    for key, m in memory.items():
        if "-" in key:
            assert key == f"{m.direction.value}-{m.settling}-{m.gone}"
    assert memory["gone"].settling and not memory["there"].settling
    w = World(ticks=2)
    w.memory = memory
    w.run({"gone": "deleting", "there": "deleting"}, {"there": "ok"})
    assert sorted(w.calls) == [("align", "there"), ("settle", "gone")]
    w.memory = memory
    w.run({"gone": "deleting", "there": "deleting"}, {"gone": "ok"})  # each seen otherwise now
    assert w.calls == []


# -- the streak, model-checked -------------------------------------------------------

STATUSES = ["creating", "active", "deleting"]
SUBSTRATE = ["absent", "ok", "wrong"]


def expected_call(status, seen):
    """What one pass should do for one record, were it confirmed, and whether it diverged at all.

    The model, written from the contract: a record in a transitional status
    whose item already shows its end state is settled; a tombstone whose item
    is there is an align that removes it; the rest is the plain set-diff.
    """
    if status in TOMBSTONES:
        return ("settle" if seen == "absent" else "align"), True
    if seen == "absent":
        return "restore", True
    if seen == "wrong":
        return "align", True
    return "settle", status != "active"


def test_a_record_deleted_while_its_item_vanished_is_not_settled_on_one_read():
    """creating+present, then deleting+absent: both settles, but not the same one."""
    w = World(ticks=2)
    w.run({"x": "creating"}, {"x": "ok"})
    w.run({"x": "deleting"}, {})
    assert w.calls == [] and w.memory["x"].streak == 1
    w.run({"x": "deleting"}, {})
    assert w.calls == [("settle", "x")]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(STATUSES), st.sampled_from(SUBSTRATE)), max_size=30),
    st.integers(1, 4),
)
def test_nothing_is_done_before_the_same_divergence_was_seen_confirmation_ticks_times(script, ticks):
    w = World(ticks=ticks, breaker={})
    run = 0
    last = None
    for status, seen in script:
        actual = {} if seen == "absent" else {"x": seen}
        w.run({"x": status}, actual)
        call, diverged = expected_call(status, seen)
        if not diverged:
            run, last = 0, None
            assert w.calls == [] and "x" not in w.memory
            continue
        same = (call, status in TOMBSTONES)
        run = run + 1 if same == last else 1
        last = same
        assert w.memory["x"].streak == run
        assert w.calls == ([(call, "x")] if run >= ticks else [])


# -- the breaker ---------------------------------------------------------------------


def test_the_default_reap_breaker_weighs_a_tenth_of_what_exists():
    reap = _default_breaker()[Direction.REAP]
    assert (reap.count, reap.fraction) == (10, 0.1)
    # 3 strays among 20 existing items, with a thousand desired: over a tenth of what exists
    assert refusal(Direction.REAP, reap, 3, desired=1000, actual=20, allow_empty=False)
    assert refusal(Direction.REAP, reap, 2, desired=1000, actual=20, allow_empty=False) is None
    # restores and aligns keep weighing what is desired
    half = Threshold(fraction=0.5)
    assert refusal(Direction.RESTORE, half, 3, desired=4, actual=1000, allow_empty=False)
    assert refusal(Direction.RESTORE, half, 2, desired=4, actual=0, allow_empty=False) is None


def test_an_empty_desired_set_trips_the_reap_breaker_unless_allowed():
    loose = Threshold(count=1000, fraction=1.0)
    why = refusal(Direction.REAP, loose, 5, desired=0, actual=5, allow_empty=False)
    assert why is not None and "allow_empty" in why
    assert refusal(Direction.REAP, loose, 5, desired=0, actual=5, allow_empty=True) is None
    assert refusal(Direction.REAP, None, 5, desired=0, actual=5, allow_empty=False)


def reaper(**config):
    applied = []
    engine = Converge("thing", ConvergeConfig(confirmation_ticks=1, **config))
    return engine, applied, lambda d, k, want, have: applied.append(k)


def test_a_lost_store_reaps_nothing_at_any_size():
    for size in (1, 5, 9, 10, 11, 10_000):
        engine, applied, apply = reaper()
        result = engine.run({}, {f"i{n}": 1 for n in range(size)}, apply, {})
        assert applied == [] and result.tripped == {Direction.REAP}
        item = result.items[0]
        assert item.reason is Reason.CIRCUIT_BREAKER and "desired set is empty" in (item.last_err or "")


def test_allow_empty_lets_an_empty_desired_set_reap():
    engine, applied, apply = reaper(
        allow_empty=True, breaker={Direction.REAP: Threshold(count=10, fraction=1.0)}
    )
    engine.run({}, {"a": 1, "b": 1}, apply, {})
    assert sorted(applied) == ["a", "b"]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 40),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 20)),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_reaps_stay_within_the_breaker(kept, strays, desired_only, allow_empty, count, fraction):
    desired = {f"k{n}": 1 for n in range(kept)} | {f"d{n}": 1 for n in range(desired_only)}
    actual = {f"k{n}": 1 for n in range(kept)} | {f"s{n}": 1 for n in range(strays)}
    engine, applied, apply = reaper(
        allow_empty=allow_empty, breaker={Direction.REAP: Threshold(count=count, fraction=fraction)}
    )
    engine.run(desired, actual, apply, {})
    reaped = [k for k in applied if k.startswith("s")]
    assert len(reaped) in (0, strays)  # a direction acts on all its candidates or on none
    if reaped:
        assert desired or allow_empty
        assert count is None or len(reaped) <= count
        assert fraction is None or len(reaped) <= fraction * len(actual)
