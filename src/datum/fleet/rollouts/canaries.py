"""The rollout in force as *Needs a human* reads it, with its canaries: a canary's line and its host page say it is
the canary, which revision it runs and which it is served (``datum.core.attention.canary_said``).

The canaries are the hosts of wave 0 of a rollout under way (rolling, paused or halted: served its revision
while the others wait on them); once it is done or aborted no host is a canary any more. One read of the rollout
by its primary key and, while one is under way, one of its wave 0 (not the whole plan).
"""

from __future__ import annotations

from typing import Any

from datum.store import Store
from datum.store import rollouts as stored


def attention_of(store: Store, configured: bool) -> dict[str, Any] | None:
    """``datum.store.rollouts.attention_of`` (the rollout in force's fields, None without staged rollouts or a
    rollout) with ``canaries``, the hosts of its wave 0, while it is under way."""
    found = stored.attention_of(store, configured)
    if found is None:
        return None
    row = stored.RolloutRow(**{k: found[k] for k in stored.RolloutRow.__slots__})
    if stored.under_way(row):
        found["canaries"] = sorted(stored.membership(store, row.id, wave=0))
    return found
