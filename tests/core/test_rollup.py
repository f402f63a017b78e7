"""The host state and reconciler health rollups: the contract's rule tables."""

import pytest

from datum.core.rollup import host_state, reconciler_health
from datum.core.vocab import Health, HostState
from datum.core.vocab import ResourceState as R

C, D, F, B, S = R.CONVERGED, R.DRIFTED, R.FAILED, R.BLOCKED, R.SKIPPED


@pytest.mark.parametrize(
    "states,reboot,expected",
    [
        (None, False, HostState.UNKNOWN),
        (None, True, HostState.UNKNOWN),
        ([C, F, D, S], True, HostState.FAILED),
        ([C, B], False, HostState.FAILED),
        ([C, D, S], True, HostState.DRIFTED),
        ([C, S], True, HostState.AWAITING_REBOOT),
        ([C], True, HostState.AWAITING_REBOOT),
        ([C, S], False, HostState.DEGRADED),
        ([S], False, HostState.DEGRADED),
        ([C, C], False, HostState.CONVERGED),
        ([], False, HostState.CONVERGED),
        ([C, R.PENDING], False, HostState.UNKNOWN),
    ],
)
def test_host_state_first_rule_that_matches(states, reboot, expected):
    assert host_state(states, awaiting_reboot=reboot) is expected


@pytest.mark.parametrize(
    "executed,completed,degrading,expected",
    [
        (False, False, False, Health.UNKNOWN),
        (True, False, False, Health.FAILING),
        (True, False, True, Health.FAILING),
        (True, True, True, Health.DEGRADED),
        (True, True, False, Health.OK),
    ],
)
def test_reconciler_health(executed, completed, degrading, expected):
    assert reconciler_health(executed=executed, completed=completed, degrading=degrading) is expected
