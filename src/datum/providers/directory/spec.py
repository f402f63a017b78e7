"""``Directory``'s attributes: the pydantic model that validates them (``datum.providers.directory``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from datum.providers.spec import PathSpec


class DirectorySpec(PathSpec):
    purge: bool = Field(
        default=False, description="Remove entries no resource of the manifest manages."
    )
    force: bool = Field(
        default=False, description="With ensure: absent, remove a directory that is not empty."
    )
    recurse: bool = Field(
        default=False,
        description="Apply owner, group and mode to everything below too (as chown -R, links "
        "never followed, mount points never crossed); directories get x where the mode gives r.",
    )

    @model_validator(mode="after")
    def _not_the_root(self) -> DirectorySpec:
        if self.ensure == "absent" and self.path == "/":
            raise ValueError("/ is the root: it is never removed")
        if self.recurse:
            if self.ensure == "absent":
                raise ValueError("recurse applies to a present directory, not with ensure: absent")
            if (self.mode, self.owner, self.group) == (None, None, None):
                raise ValueError("recurse applies mode, owner or group below: give at least one")
            if self.path == "/":
                raise ValueError("recurse on / would change every file of the root")
        return self
