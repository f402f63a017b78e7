"""``Exec``'s attributes: the pydantic model that validates them (``datum.providers.exec``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

from pydantic import Field

from datum.providers.spec import HostPath, Spec


class ExecSpec(Spec):

    command: str = Field(
        min_length=1, description="A shell command; defaults to the resource name."
    )
    creates: HostPath | None = Field(default=None, description="Not run when this path exists.")
    unless: str | None = Field(default=None, description="Not run when this command succeeds.")
    onlyif: str | None = Field(default=None, description="Run only when this command succeeds.")
    refreshonly: bool = Field(
        default=False, description="Run only when something it subscribes to changed."
    )
    cwd: HostPath | None = Field(default=None, description="Working directory under the root (default: the root).")
    environment: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=300, gt=0, allow_inf_nan=False)
