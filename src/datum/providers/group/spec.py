"""``Group``'s attributes: the pydantic model that validates them (``datum.providers.group``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from datum.providers.spec import Spec, SystemId

# A user or group name, as useradd and groupadd take it.
NAME = r"^[a-z_][a-z0-9_.-]*\$?$"


class GroupSpec(Spec):

    name: str = Field(min_length=1, max_length=32, pattern=NAME)
    ensure: Literal["present", "absent"] = "present"
    gid: SystemId | None = None
    system: bool = False
    members: list[str] | None = Field(
        default=None, description="Exactly these members, when given."
    )
