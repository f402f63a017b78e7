"""The CLI commands plugins declare, found without loading the plugins (only their declarations)."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from datum.core.owners import Claim, is_own, refusals
from datum.plugins.spec import GROUP, ReconcilerPlugin


def dist_of(ep: EntryPoint) -> str:
    """The distribution that declares ``ep`` ("an unknown distribution" for one made by hand)."""
    dist = getattr(ep, "dist", None)
    return str(getattr(dist, "name", None) or "an unknown distribution")


def name_claims(eps: list[EntryPoint]) -> list[tuple[EntryPoint, Claim[str], str | None]]:
    """Each entry point with its claim on its name, and why it is refused (``owners``), or None."""
    claims = [Claim(ep.name, ep.value, dist_of(ep), is_own(dist_of(ep), ep.value)) for ep in eps]
    return list(zip(eps, claims, refusals(claims), strict=True))


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
    """CLI commands the plugins declare: ``{name: (target, plugin)}``; only declarations are imported.

    A command two plugins declare is neither's (``owners``), one of Datum's own plugins excepted."""
    found: list[tuple[Claim[str], str, str]] = []
    for ep, claim, why in name_claims(discover()):
        if why is not None:
            continue
        try:
            plugin = declared(ep)
        except Exception:  # noqa: BLE001 - `datum reconcilers` says why
            continue
        found += [(Claim(name, claim.claimant, claim.dist, claim.own), target, plugin.name) for name, target in plugin.commands.items()]
    refused = refusals([claim for claim, _, _ in found])
    return {claim.key: (target, plugin) for (claim, target, plugin), why in zip(found, refused, strict=True) if why is None}
