"""``Symlink``'s attributes: the pydantic model that validates them (``datum.providers.symlink``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from datum.providers.spec import HostPath, Spec


class SymlinkSpec(Spec):

    path: HostPath = Field(description="Where the link is; defaults to the name.")
    target: str | None = Field(
        default=None, min_length=1, description="What the link points to, as written."
    )
    ensure: Literal["present", "absent"] = "present"
    force: bool = Field(
        default=False,
        description="Replace (or, with ensure: absent, remove) a regular file at the path; "
        "without it a file there is refused and kept.",
    )

    @model_validator(mode="after")
    def _target(self) -> SymlinkSpec:
        if self.ensure == "present" and not self.target:
            raise ValueError("a present Symlink needs a target")
        if self.path == "/":
            raise ValueError("/ is the root: a Symlink never removes or replaces it")
        return self
