"""The resource graph, pure: an order that puts requirements first, and the cycles that prevent one."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence


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
    # Tarjan's algorithm with an explicit stack: a requires chain of any length
    # never meets Python's recursion limit.
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    components: list[list[int]] = []
    counter = 0
    for root in range(count):
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[int, Iterator[int]]] = [(root, iter(needs.get(root, ())))]
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(needs.get(w, ()))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
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
