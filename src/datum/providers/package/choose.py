"""``Package``: one resource type, two package managers; the one a resource gets is chosen here.

``provider: apt`` (dpkg, ``datum.providers.package``) or ``provider: dnf`` (rpm,
``datum.providers.package.dnf``) on the resource, as Puppet names its providers;
otherwise the managed root's own package database decides: dpkg's status file
means apt, an rpm database and no dpkg status means dnf. The root is asked, not
the running system, so a sandbox ``--root`` of either kind is managed as a host of
its kind. A root with neither has no provider: ``Package`` is ``skipped``. A
provider named on a resource that cannot work here fails that resource, saying why.

Every read the choice makes goes through ``datum.providers.reads``; apt's
``dpkg-query`` is a command, which leaves the pass's record standing for nothing,
so the type can say ``reads_recorded`` for dnf's sake.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from datum.core.packagewords import refused
from datum.providers import reads
from datum.providers.base import Attributes, Beside, Change, HostContext, Provider, ProviderError
from datum.providers.package import ADMINDIR, VERSION
from datum.providers.package import PROVIDER as APT
from datum.providers.package.dnf import DBPATHS, dbpath
from datum.providers.package.dnf import PROVIDER as DNF

if TYPE_CHECKING:
    from collections.abc import Sequence

PROVIDERS: dict[str, Provider[Attributes, Any, Any]] = {"apt": APT, "dnf": DNF}
_DEBIAN_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]*$")


@dataclass(frozen=True, slots=True)
class Chosen:
    """A resource's desired state as its provider resolved it, and that provider's name."""

    provider: str
    want: Any

    @property
    def chosen(self) -> Provider[Attributes, Any, Any]:
        return PROVIDERS[self.provider]


def default(ctx: HostContext) -> str | None:
    """The provider the root's package database names: apt for dpkg's status, dnf for an rpm database
    and no dpkg status; None for neither."""
    found = ctx.cache.get("package:default")
    if found is None:
        try:
            dpkg = reads.kind(ctx.real(f"{ADMINDIR}/status")) == stat.S_IFREG
        except ProviderError:
            dpkg = False
        found = ctx.cache["package:default"] = "apt" if dpkg else "dnf" if dbpath(ctx) else ""
    return found or None


class PackageChooser(Provider[Attributes, Chosen, Any]):
    type = "Package"
    spec = "datum.providers.package.spec:PackageSpec"
    namevar = "name"
    reads_recorded = True  # dnf's through datum.providers.reads; apt's dpkg-query is a command (see above)

    def beside(self, spec: Attributes) -> list[Beside]:
        return [Beside("source", spec.source)] if spec.source else []

    def supported(self, ctx: HostContext) -> str | None:
        if default(ctx) is None:
            return f"no package database under the root (dpkg's {ADMINDIR}/status, rpm's {' or '.join(DBPATHS)})"
        return None

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> Chosen:
        named = getattr(spec, "provider", None)
        chosen = named or default(ctx) or "apt"
        provider = PROVIDERS[chosen]
        if named and (why := provider.supported(ctx)):
            raise ProviderError(refused(named, why))
        if chosen == "apt":  # what dpkg and apt take, which validation (for either) did not hold it to
            if not _DEBIAN_NAME.match(spec.name):
                raise ProviderError(f"{spec.name!r} is not a Debian package name (lower case, digits, + . -)")
            if spec.ensure[:1].isdigit() and not VERSION.match(spec.ensure):
                raise ProviderError(f"{spec.ensure!r} is not a Debian version")
        return Chosen(chosen, provider.desired(name, spec, ctx))

    def observe(self, want: Chosen, ctx: HostContext) -> Any:
        return want.chosen.observe(want.want, ctx)

    def plan(self, want: Chosen, have: Any) -> Change:
        return want.chosen.plan(want.want, have)

    def apply(self, want: Chosen, have: Any, change: Change, ctx: HostContext) -> str | None:
        return want.chosen.apply(want.want, have, change, ctx)

    def verify(self, want: Chosen, change: Change, ctx: HostContext) -> str | None:
        return want.chosen.verify(want.want, change, ctx)

    def batch(self, want: Chosen) -> str | None:
        found = want.chosen.batch(want.want)
        return None if found is None else f"{want.provider}:{found}"

    def apply_together(self, changes: Sequence[tuple[Chosen, Any, Change]], ctx: HostContext) -> list[str | Exception | None]:
        chosen = changes[0][0].chosen
        return chosen.apply_together([(w.want, h, c) for w, h, c in changes], ctx)
