"""The resource graph, pure: an order that puts requirements first, and the cycles that prevent one."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence


def topological(count: int, needs: Mapping[int, Sequence[int]]) -> list[int]:
    """Node indexes with every node after what it needs; ties keep manifest order.

    Nodes on a cycle are left out (validation reports the cycle first).
    """
    waiting = {i: len(set(needs.get(i, ()))) for i in range(count)}
    users: dict[int, list[int]] = {}
    for node, deps in needs.items():
        for dep in set(deps):
            users.setdefault(dep, []).append(node)
    ready = [i for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        node = heapq.heappop(ready)
        out.append(node)
        for user in users.get(node, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    return out


def cycles(count: int, needs: Mapping[int, Sequence[int]]) -> list[list[int]]:
    """Each cycle once, as a closed path ``[a, b, ..., a]`` starting at its lowest node."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    components: list[list[int]] = []
    counter = 0

    def strongconnect(v: int) -> None:  # Tarjan, iterative would matter only past ~1000 deep
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in needs.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in needs.get(v, ()):
                components.append(component)

    for v in range(count):
        if v not in index:
            strongconnect(v)
    out = []
    for component in components:
        members = set(component)
        start = min(component)
        path = [start]
        seen = {start}
        node = start
        while True:
            node = min(w for w in needs.get(node, ()) if w in members)
            path.append(node)
            if node in seen:
                break
            seen.add(node)
        out.append(path[path.index(node) :])
    return sorted(out)
