"""The words a Package failure names its package manager by, written once for the providers that say them
and for ``datum explain``, which reads the provider back from them (``datum.core.phrases``).

Each provider runs its programs by these names (``datum.providers.package`` for apt, ``.dnf`` for dnf), and
a program that fails is ``NAME exited N: ...`` (``exited``, which ``datum.providers.base.Completed.why``
says); a provider named on a resource that cannot work on the host is ``provider NAME: why``
(``refused``, ``datum.providers.package.choose``). The core cannot import the providers, so both take
the words from here (the ``datum.core.hostreasons`` pattern). Pure: strings in, strings out.
"""

from __future__ import annotations

APT_GET, APT_CACHE, DPKG, DPKG_QUERY, DPKG_DEB = "apt-get", "apt-cache", "dpkg", "dpkg-query", "dpkg-deb"
DNF, RPM = "dnf", "rpm"
# provider -> every program it runs, whose failure names it (a Package resource's ``provider:``)
PROGRAMS: dict[str, tuple[str, ...]] = {"dnf": (DNF, RPM), "apt": (APT_GET, APT_CACHE, DPKG, DPKG_QUERY, DPKG_DEB)}
EXITED = "exited"
REFUSED = "provider"


def exited(program: str, status: int) -> str:
    """``dnf exited 1``: a program's failure, before the lines that explain it."""
    return f"{program} {EXITED} {status}"


def refused(provider: str, why: str) -> str:
    """``provider dnf: no rpm database at ...``: a provider named on a resource that cannot work here."""
    return f"{REFUSED} {provider}: {why}"
