"""Resource type -> provider: the entry points of group ``datum.resources``, the nine built-ins included.

A type is its provider class (``Provider``): its name (``type``), its spec
model (``spec``), its name attribute (``namevar``) and the paths it claims
(``paths``); the class is imported on first use, so a pass loads only the
types its manifest has. A plugin that cannot be loaded (it raises on import,
names nothing, or is not a provider) is reported with why, and only its own
resources are refused; the other types work as before.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from datum.discovery import Found, entry_points
from datum.providers.base import Provider

GROUP = "datum.resources"

_LOADED: dict[str, Provider[Any, Any, Any]] = {}


class Unloadable(Exception):
    """A resource type whose plugin cannot be loaded; the message names it and says why."""


def _owned() -> tuple[dict[str, Found], dict[str, str]]:
    """Who owns each type name (``datum.core.owners``: Datum's nine first, a name two other
    distributions declare is neither's), and why each refused declaration is refused."""
    return _settle(tuple(entry_points(GROUP)))


@functools.lru_cache(maxsize=4)
def _settle(eps: tuple[Found, ...]) -> tuple[dict[str, Found], dict[str, str]]:
    from datum.core.owners import Claim, is_own, refusals

    claims = [Claim(ep.name, ep.value, ep.dist, is_own(ep.dist, ep.value)) for ep in eps]
    found: dict[str, Found] = {}
    refused: dict[str, str] = {}
    for ep, why in zip(eps, refusals(claims, what="resource type"), strict=True):
        if why is None:
            found.setdefault(ep.name, ep)
        else:
            refused[f"{ep.name} ({ep.dist})"] = why
    return found, refused


def types() -> dict[str, Found]:
    """Every declared resource type that is its declarer's: name -> its entry point."""
    return _owned()[0]


def provider(type_name: str) -> Provider[Any, Any, Any]:
    """The provider of ``type_name``; KeyError when none is declared, ``Unloadable`` when its plugin
    fails or two distributions declare it."""
    loaded = _LOADED.get(type_name)
    if loaded is None:
        owned = types()
        if type_name not in owned and (why := refusal(type_name)) is not None:
            raise Unloadable(why)
        loaded = _LOADED[type_name] = _load(owned[type_name])
    return loaded


def refused() -> dict[str, str]:
    """Every refused declaration of a type, as ``"Name (distribution)"``, with why."""
    return _owned()[1]


def refusal(type_name: str) -> str | None:
    """Why ``type_name`` is nobody's (two distributions declare it), or None."""
    if type_name in types():
        return None
    whys = [f"resource type {k}: {w}" for k, w in refused().items() if k.startswith(type_name + " (")]
    return whys[0] if whys else None


def _load(ep: Found) -> Provider[Any, Any, Any]:
    where = f"resource type {ep.name} ({ep.value}, from {ep.dist})"
    module, _, attr = ep.value.partition(":")
    try:
        target: Any = importlib.import_module(module.strip())
        for part in attr.strip().split(".") if attr.strip() else ():
            target = getattr(target, part)
    except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, never fatal
        raise Unloadable(f"{where} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if isinstance(target, type) and issubclass(target, Provider):
        try:
            target = target()
        except Exception as exc:  # noqa: BLE001
            raise Unloadable(f"{where} cannot be made: {type(exc).__name__}: {exc}") from exc
    if not isinstance(target, Provider):
        raise Unloadable(f"{where} is not a datum provider (a Provider subclass)")
    if getattr(target, "type", None) != ep.name:
        raise Unloadable(f"{where} declares the type {getattr(target, 'type', None)!r}, not {ep.name!r}")
    return target


def spec_model(type_name: str) -> Any:
    """The pydantic model of ``type_name``'s attributes (imports pydantic: validation only)."""
    return provider(type_name).spec_model()


def broken() -> dict[str, str]:
    """Every declared type whose plugin cannot be loaded, with why (``datum schema`` and ``validate`` say so)."""
    owned, out = _owned()
    for name in owned:
        try:
            provider(name).spec_model()
        except Unloadable as exc:
            out[name] = str(exc)
    return out
