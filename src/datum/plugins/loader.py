"""Finding and loading the installed reconciler plugins (``importlib.metadata`` entry points).

``load()`` imports every ``datum.reconcilers`` entry point, checks its
declaration, imports its reconciler and settings, registers its reasons and
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
from datum.core.vocab import register_reason, unregister_namespace
from datum.plugins.commands import declared as _declared
from datum.plugins.commands import discover
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

    def registry(self) -> Registry:
        """A fresh registry of every loaded plugin's reconciler."""
        registry = Registry()
        for p in self.plugins:
            registry.register(p.name, resolve(p.reconciler), resolve(p.settings))
        registry.plugins = {p.name: p for p in self.plugins}
        registry.broken = list(self.broken)
        return registry

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
    for short, description in plugin.reasons.items():
        register_reason(plugin.name, short, description)
    spec = importlib.util.find_spec(ep.module)
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        bad = unregistered(sources(Path(spec.origin)), plugin.name)
        if bad:
            raise ValueError(f"emits reasons it did not register: {', '.join(bad[:3])}")


def _load(eps: Iterable[EntryPoint]) -> Loaded:
    plugins: dict[str, ReconcilerPlugin] = {}
    broken: list[Broken] = []
    prefixes: dict[str, str] = {}
    for ep in eps:
        if ep.name in plugins:
            broken.append(Broken(ep.name, ep.value, f"another plugin named {ep.name!r} is already loaded"))
            continue
        try:
            plugin = _declared(ep)
            if plugin.prefix is not None and plugin.prefix in prefixes:
                raise ValueError(f"prefix {plugin.prefix} is already plugin {prefixes[plugin.prefix]!r}'s")
            _check(ep, plugin)
        except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, never fatal
            unregister_namespace(ep.name)
            broken.append(Broken(ep.name, ep.value, _error(exc)))
            log.warning("plugin %s (%s) not loaded: %s", ep.name, ep.value, _error(exc))
            continue
        plugins[plugin.name] = plugin
        if plugin.prefix is not None:
            prefixes[plugin.prefix] = plugin.name
    return Loaded(tuple(plugins.values()), tuple(broken))


_lock = threading.Lock()
_loaded: Loaded | None = None


def load(*, refresh: bool = False) -> Loaded:
    """Every installed plugin, loaded once per process (``refresh``: look again)."""
    global _loaded
    with _lock:
        if _loaded is None or refresh:
            _loaded = _load(discover())
        return _loaded
