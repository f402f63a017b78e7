"""The CLI commands plugins declare, found without loading the plugins (only their declarations)."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from datum.plugins.spec import GROUP, ReconcilerPlugin


def declared(ep: EntryPoint) -> ReconcilerPlugin:
    """The ``ReconcilerPlugin`` an entry point names; raises when it names anything else."""
    plugin = ep.load()
    if not isinstance(plugin, ReconcilerPlugin):
        raise TypeError(f"{ep.value} is a {type(plugin).__name__}, not a datum.sdk.ReconcilerPlugin")
    if plugin.name != ep.name:
        raise ValueError(f"entry point {ep.name!r} declares a plugin named {plugin.name!r}")
    return plugin


def discover() -> list[EntryPoint]:
    """The ``datum.reconcilers`` entry points of every installed distribution, by name."""
    return sorted(entry_points(group=GROUP), key=lambda ep: (ep.name, ep.value))


def plugin_commands() -> dict[str, tuple[str, str]]:
    """CLI commands the plugins declare: ``{name: (target, plugin)}``; only declarations are imported."""
    found: dict[str, tuple[str, str]] = {}
    for ep in discover():
        try:
            plugin = declared(ep)
        except Exception:  # noqa: BLE001 - `datum reconcilers` says why
            continue
        for name, target in plugin.commands.items():
            found.setdefault(name, (target, plugin.name))
    return found
