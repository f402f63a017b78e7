"""What the reconciler commands share: the ``--config`` option and opening what it names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from datum.config import Settings, load_settings
from datum.reconcile.registry import Registry
from datum.store import Store, open_store

F = TypeVar("F", bound=Callable[..., Any])


def config_option(fn: F) -> F:
    return click.option(
        "--config",
        "config",
        type=click.Path(dir_okay=False),
        default=None,
        help="TOML configuration file (default: $DATUM_CONFIG, else built-in defaults).",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")(fn)


def wide_option(fn: F) -> F:
    return click.option(
        "--wide", is_flag=True,
        help="Absolute times (UTC) instead of relative ones, every item of a group, every resource; wider than the terminal.",
    )(fn)


@dataclass
class Wired:
    """The configuration, the registry and the store, opened once for a command."""

    settings: Settings
    registry: Registry
    store: Store

    def __enter__(self) -> Wired:
        return self

    def __exit__(self, *_exc: object) -> None:
        """The store's connections closed when the command is done with it (``with wire(config) as w:``)."""
        self.store.dispose()


def wire(config: str | None) -> Wired:
    """Load and validate the configuration and the plugins, then open the store with their tables.

    Waits ``[host] lock_wait`` when the store is locked. A plugin that does not
    load is left out (``registry.broken`` says why); the others are wired.
    """
    from datum.plugins import load

    settings = load_settings(config)
    plugins = load()
    registry = plugins.registry()
    registry.validate(settings)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait, branches=plugins.branches())
    return Wired(settings, registry, store)
