"""The plugins' part of the server: their Cedar schema fragments and their routes, under their prefixes.

The core API names no reconciler: whatever routes it serves beyond its own
come from here. A plugin whose fragment does not merge with Datum's schema or
whose routes do not import is left out of the server (the reason is logged
and reported by ``datum reconcilers``); the server and the other plugins serve.
"""

from __future__ import annotations

import functools
import logging

from fastapi import APIRouter, FastAPI

from datum.api.front import errors
from datum.api.front.authz import fragment_problem
from datum.core.owners import Claim, refusals
from datum.plugins import Loaded
from datum.plugins.spec import resolve

log = logging.getLogger("datum.plugins")


def _fragment_refusals(plugins: Loaded) -> dict[str, str]:
    """Why each plugin's Cedar fragment is refused: it does not merge with Datum's schema, or its
    entities or actions are also declared by another's fragment (``owners``: Datum's own plugins
    keep theirs; two others that collide are both refused, whatever the order they load in)."""
    declared = tuple((p.name, p.cedar_schema, p.name in plugins.own) for p in plugins.plugins if p.cedar_schema)
    return dict(_refusals(declared))


@functools.lru_cache(maxsize=8)
def _refusals(declared: tuple[tuple[str, str, bool], ...]) -> tuple[tuple[str, str], ...]:
    """``_fragment_refusals`` of the fragments declared, parsed by Cedar once for the schema and the routes."""
    problems: dict[str, str] = {}
    claims: list[Claim[str]] = []
    fragment: dict[str, str] = {}
    for name, schema, own in declared:
        alone = fragment_problem(schema)
        if alone is not None:
            problems[name] = alone
        else:
            fragment[name] = schema
            claims.append(Claim(name, name, name, own))

    def collide(a: str, b: str) -> bool:
        return fragment_problem(fragment[a] + "\n" + fragment[b]) is not None

    for claim, why in zip(claims, refusals(claims, collide, "Cedar schema fragment of"), strict=True):
        if why is not None:
            problems[claim.claimant] = why
    return tuple(problems.items())


def schema_fragments(plugins: Loaded) -> dict[str, str]:
    """The Cedar schema fragment of every plugin that declares one and whose fragment is its own to merge."""
    refused = _fragment_refusals(plugins)
    return {p.name: p.cedar_schema for p in plugins.plugins if p.cedar_schema and p.name not in refused}


def route_problems(plugins: Loaded, fragments: dict[str, str]) -> dict[str, str]:
    """Why each plugin's routes cannot be served: a fragment that is refused."""
    refused = _fragment_refusals(plugins)
    return {p.name: refused[p.name] for p in plugins.plugins if p.cedar_schema and p.name not in fragments and p.name in refused}


def mount_plugins(app: FastAPI, plugins: Loaded, fragments: dict[str, str]) -> dict[str, str]:
    """Include every plugin's router under its prefix; ``{plugin: why}`` for those left out."""
    problems = route_problems(plugins, fragments)
    for p in plugins.plugins:
        if p.routes is None or p.name in problems:
            continue
        try:
            router = resolve(p.routes)
            if not isinstance(router, APIRouter):
                raise TypeError(f"{p.routes} is a {type(router).__name__}, not a fastapi.APIRouter")
            app.include_router(router, prefix=p.prefix or "", responses=errors.error_responses(*errors.EVERYWHERE))
        except Exception as exc:  # noqa: BLE001 - one plugin's routes never take the server down
            problems[p.name] = f"its routes {p.routes} cannot be served: {type(exc).__name__}: {exc}"
    for name, why in problems.items():
        log.warning("plugin %s: %s", name, why)
    return problems
