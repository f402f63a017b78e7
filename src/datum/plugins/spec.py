"""What a reconciler plugin declares: one ``ReconcilerPlugin`` behind a ``datum.reconcilers`` entry point.

Everything heavy is named as ``"module:attribute"`` so that listing plugins
(``datum --help``) imports nothing but the declaration: the reconciler class
and its settings are imported when the plugin is loaded, its HTTP routes only
by the server, its CLI commands only when run.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.vocab import item_words_problem

if TYPE_CHECKING:
    from datum.config import ReconcilerSettings

# The version of datum.sdk. A plugin written against a newer one is refused;
# within a version, names are only ever added.
API_VERSION = 1

GROUP = "datum.reconcilers"

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_PREFIX = re.compile(r"^/v1(/[a-z0-9][a-z0-9_-]*)+$")
# Paths the core serves: a plugin's prefix may not shadow them.
RESERVED_PREFIXES = ("/v1/observability", "/v1/hosts", "/v1/meta", "/v1/plugins")


def resolve(target: Any) -> Any:
    """``"module:attribute"`` imported, anything else as it is."""
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class ReconcilerPlugin:
    """One reconciler and what it brings with it.

    - ``name``: the reconciler's stable name; its reasons live in this
      namespace and its configuration in ``[reconcilers.NAME]``;
    - ``reconciler``: its class or factory ``(settings, store) -> Reconciler``
      (or ``"module:attr"``); ``settings``: its ``ReconcilerSettings`` subclass;
    - ``reasons``: its own reasons, ``{short name: description}`` or
      ``{short name: (description, what to do)}``, registered as
      ``NAME.short``; every reason its code raises must be registered,
      which is checked when it loads;
    - ``items``: how its groups of items read on every surface (*Needs a
      human*, ``datum drift``, the page), ``{key: (one, many)}``: the key a
      direction, a framework reason or one of its own reasons (short name),
      the phrases naming ``{names}`` (and ``{n}``): ``"host {names} is
      declared and has never reported"``. Without one, a group reads
      ``3 restores: NAME.reason``;
    - ``migrations``: the versions directory of its own Alembic branch, for
      its own tables (recorded in ``alembic_version_NAME``);
    - ``cedar_schema``: a Cedar schema fragment (its entities and actions),
      merged with Datum's when the server starts;
    - ``routes`` and ``prefix``: ``"module:attr"`` of a FastAPI ``APIRouter``
      the server mounts under ``prefix`` (``/v1/...``);
    - ``commands``: CLI commands, ``{name: "module:attr"}`` of click commands;
    - ``api_version``: the ``datum.sdk.API_VERSION`` it was written against.
    """

    name: str
    reconciler: Callable[..., Any] | str
    settings: type[ReconcilerSettings] | str = "datum.config:ReconcilerSettings"
    reasons: Mapping[str, str | tuple[str, str]] = field(default_factory=dict)
    items: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    migrations: Path | str | None = None
    cedar_schema: str | None = None
    routes: str | None = None
    prefix: str | None = None
    commands: Mapping[str, str] = field(default_factory=dict)
    api_version: int = API_VERSION

    def problems(self) -> list[str]:
        """What is wrong with the declaration itself, before anything is imported."""
        found = []
        if not _NAME.match(self.name):
            found.append(f"name {self.name!r} is not a lower-case identifier ([a-z][a-z0-9_]*)")
        if self.api_version > API_VERSION:
            found.append(f"written for datum.sdk API_VERSION {self.api_version}; this Datum has {API_VERSION}")
        if (self.routes is None) != (self.prefix is None):
            found.append("routes and prefix are given together")
        if self.prefix is not None:
            if not _PREFIX.match(self.prefix):
                found.append(f"prefix {self.prefix!r} is not a path under /v1")
            elif any(self.prefix == p or self.prefix.startswith(p + "/") for p in RESERVED_PREFIXES):
                found.append(f"prefix {self.prefix!r} is Datum's own")
        for key, (one, many) in self.items.items():
            wrong = item_words_problem(key, one, many, self.reasons)
            if wrong is not None:
                found.append(wrong)
        if self.migrations is not None and not Path(self.migrations).is_dir():
            found.append(f"migrations directory {self.migrations} does not exist")
        return found
