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
    "states,reboot,expected",
    [
        ([C], False, HostState.DEGRADED),  # back from its reboot, its health check fails: degraded at once
        ([C, S], False, HostState.DEGRADED),
        ([C], True, HostState.AWAITING_REBOOT),  # rule 4 first, as for a skip
        ([C, F], False, HostState.FAILED),
        ([C, D], False, HostState.DRIFTED),
        (None, False, HostState.UNKNOWN),
    ],
)
def test_a_host_back_from_its_reboot_unhealthy_is_degraded_in_rule_5(states, reboot, expected):
    assert host_state(states, awaiting_reboot=reboot, unhealthy=True) is expected


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
