"""Resource type -> provider: the entry points of group ``datum.resources``, the nine built-ins included.

A type is its provider class (``Provider``): its name (``type``), its spec
model (``spec``), its name attribute (``namevar``) and the paths it claims
(``paths``); the class is imported on first use, so a pass loads only the
types its manifest has. A plugin that cannot be loaded (it raises on import,
names nothing, or is not a provider) is reported with why, and only its own
resources are refused; the other types work as before.
"""

from __future__ import annotations

import importlib
from typing import Any

from datum.discovery import Found, entry_points
from datum.providers.base import Provider

GROUP = "datum.resources"

_LOADED: dict[str, Provider[Any, Any, Any]] = {}


class Unloadable(Exception):
    """A resource type whose plugin cannot be loaded; the message names it and says why."""


def types() -> dict[str, Found]:
    """Every declared resource type: name -> its entry point (the first one declared wins)."""
    found: dict[str, Found] = {}
    for ep in entry_points(GROUP):
        found.setdefault(ep.name, ep)
    return found


def provider(type_name: str) -> Provider[Any, Any, Any]:
    """The provider of ``type_name``; KeyError when none is declared, ``Unloadable`` when its plugin fails."""
    loaded = _LOADED.get(type_name)
    if loaded is None:
        loaded = _LOADED[type_name] = _load(types()[type_name])
    return loaded


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
    out: dict[str, str] = {}
    for name in types():
        try:
            provider(name).spec_model()
        except Unloadable as exc:
            out[name] = str(exc)
    return out
