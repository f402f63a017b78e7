"""Which wave of a staged rollout each host belongs to: decided once, when the rollout starts, the same on every replica.

Wave 0 is the canaries (``[fleet.rollout] canary``: host names, or
``group:NAME`` for every host of a ``nodes.yaml`` group). Waves 1..N release
``waves[k-1]`` of each group's other hosts: per group, hosts ordered by a
hash of (revision, host) so each revision picks another first slice, and
wave k holds the first ``ceil(p_k * n)`` of them that earlier waves did not.

A host's group here is the one intake recorded with its last pass
(``hosts.group_name``: ``nodes.yaml``'s rules by its name and labels, never
its facts: ``datum.fleet.nodes.group_of``); a canary named by hand that never
reported takes the one the same rule gives it, else ``default``. The plan is made from the hosts the store knows when the
rollout starts (those that ran a fleet revision and do not read ``unknown``,
``datum.store.rollouts.begin``) and kept in the store (``rollout_hosts``): a
host not planned waits for the last wave (the conservative choice: a new
host is not a canary by accident) and no wave waits for it.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Iterable

GROUP_PREFIX = "group:"


def order_key(revision: str, host: str) -> str:
    return hashlib.sha256(f"{revision}\0{host}".encode()).hexdigest()


def plan(
    revision: str, hosts: Iterable[str], group: Callable[[str], str], canary: list[str], waves: list[float]
) -> dict[str, tuple[int, str]]:
    """Each host's (wave, group): the known ``hosts`` and the canaries named by name."""
    names = {c for c in canary if not c.startswith(GROUP_PREFIX)}
    groups = {c.removeprefix(GROUP_PREFIX) for c in canary if c.startswith(GROUP_PREFIX)}
    out: dict[str, tuple[int, str]] = {}
    per: dict[str, list[str]] = defaultdict(list)
    for host in sorted(set(hosts) | names):
        g = group(host)
        if host in names or g in groups:
            out[host] = (0, g)
        else:
            per[g].append(host)
    for g, members in per.items():
        members.sort(key=lambda h: order_key(revision, h))
        taken = 0
        for k, share in enumerate(waves, start=1):
            upto = min(len(members), math.ceil(share * len(members) - 1e-9))
            for host in members[taken:upto]:
                out[host] = (k, g)
            taken = max(taken, upto)
    return out
