"""The set-diff: restore, reap, align and tombstones."""

from hypothesis import given
from hypothesis import strategies as st

from datum.core.diff import diff
from datum.core.vocab import Direction


def by_id(items):
    return {d.id: d.direction for d in items}


def test_restore_reap_align_and_match():
    desired = {"a": 1, "b": 2, "c": 3}
    actual = {"b": 2, "c": 4, "d": 5}
    assert by_id(diff(desired, actual)) == {
        "a": Direction.RESTORE,
        "c": Direction.ALIGN,
        "d": Direction.REAP,
    }


def test_pluggable_equality():
    desired = {"a": "X"}
    actual = {"a": "x"}
    assert by_id(diff(desired, actual, equal=lambda d, a: d.lower() == a.lower())) == {}


def test_tombstone_absent_is_converged_present_is_align():
    desired = {"gone": "deleting", "still": "deleting", "live": "active"}
    actual = {"still": "dir", "live": "dir"}
    found = by_id(diff(desired, actual, equal=lambda d, a: True, tombstone=lambda d: d == "deleting"))
    assert found == {"still": Direction.ALIGN}


def test_divergence_carries_both_sides():
    (item,) = diff({"a": 1}, {"a": 2})
    assert (item.desired, item.actual) == (1, 2)


keys = st.text(alphabet="abcdef", min_size=1, max_size=3)


@given(st.dictionaries(keys, st.integers(0, 3)), st.dictionaries(keys, st.integers(0, 3)))
def test_every_key_classified_exactly_by_the_rules(desired, actual):
    found = by_id(diff(desired, actual))
    for key in desired.keys() | actual.keys():
        if key in desired and key not in actual:
            assert found[key] is Direction.RESTORE
        elif key in actual and key not in desired:
            assert found[key] is Direction.REAP
        elif desired[key] != actual[key]:
            assert found[key] is Direction.ALIGN
        else:
            assert key not in found
    assert len(list(diff(desired, actual))) == len(found)
