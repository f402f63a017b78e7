"""Item memory: streaks and backoff counted in passes."""

import pytest

from datum.core.memory import BackoffPolicy, ItemMemory
from datum.core.vocab import Direction


@pytest.mark.parametrize(
    "base,cap,failures,window",
    [
        (1, 64, 0, 0),
        (1, 64, 1, 1),
        (1, 64, 2, 2),
        (1, 64, 3, 4),
        (1, 64, 7, 64),
        (1, 64, 12, 64),
        (2, 5, 1, 2),
        (2, 5, 2, 4),
        (2, 5, 3, 5),
        (1, 64, 10_000, 64),
    ],
)
def test_backoff_window(base, cap, failures, window):
    assert BackoffPolicy(base, cap).window(failures) == window


@pytest.mark.parametrize("base,cap", [(0, 4), (5, 4)])
def test_backoff_bounds_are_checked(base, cap):
    with pytest.raises(ValueError):
        BackoffPolicy(base, cap)


def test_streak_grows_in_one_direction_and_resets_on_another():
    m = ItemMemory.first(Direction.RESTORE)
    m = m.seen_again(Direction.RESTORE).seen_again(Direction.RESTORE)
    assert m.streak == 3
    m = m.failed("boom", BackoffPolicy())
    flipped = m.seen_again(Direction.ALIGN)
    assert (flipped.direction, flipped.streak, flipped.failures, flipped.last_err) == (
        Direction.ALIGN,
        1,
        0,
        None,
    )


def test_failures_accumulate_and_success_clears():
    policy = BackoffPolicy(1, 8)
    m = ItemMemory.first(Direction.REAP).failed("e1", policy).failed("e2", policy)
    assert (m.failures, m.last_err, m.retry_after_passes) == (2, "e2", 2)
    assert m.waited().retry_after_passes == 1
    assert m.waited().waited().waited().retry_after_passes == 0
    cleared = m.succeeded()
    assert (cleared.failures, cleared.last_err, cleared.retry_after_passes) == (0, None, 0)
    assert cleared.streak == m.streak
