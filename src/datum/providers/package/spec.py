"""``Package``'s attributes: the pydantic model that validates them (``datum.providers.package``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic. A name and a
version are checked here as either package manager allows them (RPM's also have
capitals, ``_`` and ``^``); the provider chosen for the host refuses what its own
manager would not take (``datum.providers.package.choose``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from datum.providers.package.dnf import VERSION
from datum.providers.spec import Spec


class PackageSpec(Spec):

    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_+.-]*$",
        description="The package name; defaults to the resource name.",
    )
    ensure: str = Field(
        default="installed",
        description="installed | present | latest | absent | purged | <version>",
    )
    source: str | None = Field(
        default=None, description="A .deb (apt) or .rpm (dnf) file next to the manifest to install from."
    )
    reboot: bool | None = Field(
        default=None, description="Whether a change needs a reboot (default: kernel packages do; with dnf, systemd and glibc too)."
    )
    provider: Literal["apt", "dnf"] | None = Field(
        default=None,
        description="apt (dpkg) or dnf (rpm); default: the one whose database the root has.",
    )

    @field_validator("ensure")
    @classmethod
    def _ensure(cls, value: str) -> str:
        if value in ("installed", "present", "latest", "absent", "purged") or VERSION.match(value):
            return value
        raise ValueError("installed, present, latest, absent, purged or a version such as 1.24.0-1")
