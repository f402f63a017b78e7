"""``Service``'s attributes: the pydantic model that validates them (``datum.providers.service``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from datum.providers.spec import Spec


class ServiceSpec(Spec):

    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9:_.@\\-]+$",
        description="The unit; .service is added when no suffix.",
    )
    ensure: Literal["running", "stopped"] | None = None
    enable: bool | None = None
