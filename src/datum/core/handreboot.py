"""Whether a host waits for a human to reboot it: decided here, so ``/metrics`` and its alert say the same.

A host ``awaiting-reboot`` under reboot policy ``manual`` (or ``never``)
stays so until someone runs ``datum reboot`` on it: its agent will not. The
other policies reboot by themselves (in the maintenance window, or at once,
with a slot of the group's reboot budget); a host whose reboot was already
requested in this boot is rebooting; one that came back from its reboot to
the old kernel (``attempted``) needs its boot entry fixed, not another reboot.

Pure: a host state and the ``reboot`` of its last pass report (its JSON form) in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datum.core.vocab import HostState, RebootPolicy

BY_HAND = (RebootPolicy.MANUAL.value, RebootPolicy.NEVER.value)


def awaits_hand(state: str, reboot: Any) -> str | None:
    """The reboot policy (``manual`` or ``never``) that leaves this host's pending reboot to a human, or None."""
    if state != HostState.AWAITING_REBOOT.value or not isinstance(reboot, Mapping):
        return None
    policy = reboot.get("policy")
    if policy not in BY_HAND or reboot.get("requestedAt") or reboot.get("attempted"):
        return None
    return str(policy)
