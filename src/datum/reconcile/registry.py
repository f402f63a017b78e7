"""The registry of named reconcilers and the protocol a reconciler implements."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from datum.config import ReconcilerSettings, Settings
from datum.core.findings import ErrorCode, FieldError, Finding, Problem

if TYPE_CHECKING:
    from datum.reconcile.context import PassContext
    from datum.reconcile.coverage import CoverageSpec
    from datum.reconcile.result import Result
    from datum.store import Store


class Reconciler(Protocol):
    """What the runner needs of a reconciler.

    ``items_reported`` (optional): True when it always reports per-item drift
    (it calls ``ctx.converge``); left out, the last completed pass tells
    (``ctx.report_items`` or ``converge`` called). ``coverage`` (optional):
    its work-query coverage declarations over store tables, or None; a
    bespoke reconciler may instead ``ctx.report_coverage`` on each pass.
    """

    name: str

    def run(self, ctx: PassContext) -> Result | None:
        """One pass: read desired and actual state and converge them; optionally say how it went."""


def declared_items_reported(reconciler: Reconciler) -> bool | None:
    value = getattr(reconciler, "items_reported", None)
    return None if value is None else bool(value)


def declared_coverage(reconciler: Reconciler) -> Sequence[CoverageSpec] | None:
    value: Sequence[CoverageSpec] | None = getattr(reconciler, "coverage", None)
    return value


Factory = Callable[[ReconcilerSettings, "Store"], Reconciler]


@dataclass(frozen=True)
class Entry:
    name: str
    settings_model: type[ReconcilerSettings]
    factory: Factory


class Registry:
    """Named reconcilers; the CLI and the server each wire one."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        # Filled by datum.plugins: each reconciler's plugin declaration, and the plugins that did not load.
        self.plugins: dict[str, Any] = {}
        self.broken: list[Any] = []  # the plugins that did not load, one per name (``Loaded.unloaded``)
        self.refused: list[Any] = []  # every refused entry point, impostors of loaded names included

    def register(
        self, name: str, factory: Factory, settings_model: type[ReconcilerSettings] = ReconcilerSettings
    ) -> None:
        if name in self._entries:
            raise ValueError(f"reconciler {name!r} is registered twice")
        self._entries[name] = Entry(name, settings_model, factory)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def entry(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise Problem.one(
                ErrorCode.NOT_FOUND, f"no reconciler named {name!r} (registered: {known})"
            ) from None

    def settings(self, settings: Settings, name: str) -> ReconcilerSettings:
        """One reconciler's validated settings."""
        return settings.reconciler(name, self.entry(name).settings_model)

    def build(self, settings: Settings, name: str, store: Store) -> tuple[Reconciler, ReconcilerSettings]:
        own = self.settings(settings, name)
        return self._entries[name].factory(own, store), own

    def validate(self, settings: Settings) -> None:
        """Check every reconciler section of the configuration; report every finding at once."""
        findings: list[Finding] = []
        # A plugin that did not load is reported as broken; its section must not stop the others.
        broken = {getattr(b, "name", None) for b in self.broken}
        for name in settings.reconcilers:
            if name in broken:
                continue
            if name not in self._entries:
                findings.append(
                    Finding(
                        ErrorCode.INVALID_INPUT,
                        f"configuration names reconciler {name!r}, which is not registered",
                        fields=(FieldError(f"reconcilers.{name}", "no such reconciler"),),
                    )
                )
                continue
            try:
                self.settings(settings, name)
            except Problem as problem:
                findings.extend(problem.findings)
        if findings:
            raise Problem(findings)
