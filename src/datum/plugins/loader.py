"""Finding and loading the installed reconciler plugins (``importlib.metadata`` entry points).

``load()`` first settles who owns each name and route prefix (``owners``:
Datum's own first; a name two others claim is nobody's), then imports every
``datum.reconcilers`` entry point left, checks its declaration, imports its reconciler and settings, registers its reasons and
scans its code for unregistered ones. Anything that goes wrong refuses that
plugin alone, with the reason (``Broken``); the others load. The outcome is
kept for the process: plugins are installed with pip, not while Datum runs.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

from datum.config import ReconcilerSettings
from datum.core.owners import Claim, refusals
from datum.core.vocab import register_item_words, register_reason, unregister_namespace
from datum.plugins.commands import declared as _declared
from datum.plugins.commands import discover, name_claims
from datum.plugins.reasons import sources, unregistered
from datum.plugins.spec import ReconcilerPlugin, resolve
from datum.reconcile.registry import Registry
from datum.store.migrate import Branch

log = logging.getLogger("datum.plugins")


@dataclass(frozen=True)
class Broken:
    """A plugin that could not be loaded: its entry point and why."""

    name: str
    target: str
    error: str


@dataclass(frozen=True)
class Loaded:
    """The plugins that loaded, and the ones that did not."""

    plugins: tuple[ReconcilerPlugin, ...]
    broken: tuple[Broken, ...]
    own: frozenset[str] = frozenset()  # the names of Datum's own (``owners``): they win every claim

    def registry(self) -> Registry:
        """A fresh registry of every loaded plugin's reconciler."""
        registry = Registry()
        for p in self.plugins:
            registry.register(p.name, resolve(p.reconciler), resolve(p.settings))
        registry.plugins = {p.name: p for p in self.plugins}
        registry.broken = self.unloaded()
        registry.refused = list(self.broken)
        return registry

    def unloaded(self) -> list[Broken]:
        """What the surfaces list as not loaded: one row per name, the claims of two distributions
        joined; none for a name a loaded plugin holds (an impostor of Datum's own is refused, logged
        and named by ``datum reconcilers``, and the real one is not shown broken beside it)."""
        loaded = {p.name for p in self.plugins}
        rows: dict[str, Broken] = {}
        for b in self.broken:
            if b.name in loaded:
                continue
            seen = rows.get(b.name)
            rows[b.name] = b if seen is None else Broken(b.name, f"{seen.target}, {b.target}", f"{seen.error}; {b.error}")
        return list(rows.values())

    def branches(self) -> list[Branch]:
        """The plugins' own migration branches."""
        return [Branch.of_plugin(p.name, Path(p.migrations)) for p in self.plugins if p.migrations is not None]


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check(ep: EntryPoint, plugin: ReconcilerPlugin) -> None:
    """Everything that must hold before the plugin's reconciler may tick; raises what does not."""
    problems = plugin.problems()
    if problems:
        raise ValueError("; ".join(problems))
    settings = resolve(plugin.settings)
    if not (isinstance(settings, type) and issubclass(settings, ReconcilerSettings)):
        raise TypeError(f"settings {plugin.settings!r} is not a ReconcilerSettings subclass")
    if not callable(resolve(plugin.reconciler)):
        raise TypeError(f"reconciler {plugin.reconciler!r} is not callable")
    for short, said in plugin.reasons.items():
        description, do = (said, "") if isinstance(said, str) else said
        register_reason(plugin.name, short, description, do)
    for key, (one, many) in plugin.items.items():
        register_item_words(plugin.name, key, one, many)
    spec = importlib.util.find_spec(ep.module)
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        bad = unregistered(sources(Path(spec.origin)), plugin.name)
        if bad:
            raise ValueError(f"emits reasons it did not register: {', '.join(bad[:3])}")


def _nested(a: str, b: str) -> bool:
    """Two route prefixes one of which is, or lies under, the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _load(eps: Iterable[EntryPoint]) -> Loaded:
    eps = list(eps)
    broken: list[Broken] = []
    declared: list[tuple[EntryPoint, ReconcilerPlugin, Claim[str]]] = []

    def refuse(ep: EntryPoint, why: str) -> None:
        broken.append(Broken(ep.name, ep.value, why))
        log.warning("plugin %s (%s) not loaded: %s", ep.name, ep.value, why)

    for ep, claim, why in name_claims(eps):
        if why is not None:
            refuse(ep, why)
            continue
        try:
            declared.append((ep, _declared(ep), claim))
        except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, never fatal
            refuse(ep, _error(exc))
    prefixes = [Claim(p.prefix, c.claimant, c.dist, c.own) for _, p, c in declared if p.prefix is not None]
    taken = {c.claimant: why for c, why in zip(prefixes, refusals(prefixes, _nested, "prefix"), strict=True) if why}
    plugins: dict[str, ReconcilerPlugin] = {}
    own: set[str] = set()
    for ep, plugin, claim in declared:
        if claim.claimant in taken:
            refuse(ep, taken[claim.claimant])
            continue
        try:
            _check(ep, plugin)
        except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, never fatal
            unregister_namespace(ep.name)
            refuse(ep, _error(exc))
            continue
        plugins[plugin.name] = plugin
        if claim.own:
            own.add(plugin.name)
    return Loaded(tuple(plugins.values()), tuple(broken), frozenset(own))


_lock = threading.Lock()
_loaded: Loaded | None = None


def load(*, refresh: bool = False) -> Loaded:
    """Every installed plugin, loaded once per process (``refresh``: look again)."""
    global _loaded
    with _lock:
        if _loaded is None or refresh:
            _loaded = _load(discover())
        return _loaded
