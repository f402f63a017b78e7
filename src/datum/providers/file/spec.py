"""``File``'s attributes: the pydantic model that validates them (``datum.providers.file``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from datum.providers.facts import NAMES as FACT_NAMES
from datum.providers.spec import PathSpec


def _not_a_fact(name: str) -> str:
    if name in FACT_NAMES:
        raise ValueError(f"{name!r} is the name of a fact templates see; give the variable another name")
    return name


class FileSpec(PathSpec):
    """A regular file. Content comes from at most one of ``content``, ``source`` and ``template``."""

    content: str | None = None
    source: str | None = Field(
        default=None, description="A file next to the manifest whose bytes are the content."
    )
    template: str | None = Field(
        default=None,
        description="A Jinja2 template next to the manifest, rendered with host facts.",
    )
    vars: dict[Annotated[str, AfterValidator(_not_a_fact)], Any] = Field(
        default_factory=dict,
        description="Extra template variables; not named like a fact.",
        json_schema_extra={"propertyNames": {"not": {"enum": sorted(FACT_NAMES)}}},
    )
    sensitive: bool = Field(
        default=False,
        description="Never show the content's diff (plans, reports, the store, datum status).",
    )
    validate_cmd: str | None = Field(
        default=None,
        alias="validate",
        description="A command that checks the new content before it replaces the file, "
        "%s standing for a copy of it (e.g. 'visudo -cf %s'); a failure leaves the file as it was.",
    )
    replace: bool = Field(
        default=True, description="false: create the file when missing, never change its content."
    )
    backup: bool = Field(
        default=False,
        description="Keep the content a change replaces as PATH.datum-backup-TIMESTAMP.",
    )
    backups: int = Field(
        default=5, ge=1, le=1000, description="How many backups of this file to keep (oldest go)."
    )
    trim_blocks: bool = Field(
        default=False, description="Jinja2: drop the first newline after a block tag."
    )
    lstrip_blocks: bool = Field(
        default=False, description="Jinja2: strip spaces and tabs before a block tag."
    )

    @model_validator(mode="after")
    def _one_content(self) -> FileSpec:
        given = [k for k in ("content", "source", "template") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of content, source and template, not {' and '.join(given)}")
        if self.validate_cmd is not None and "%s" not in self.validate_cmd:
            raise ValueError("validate needs %s where the candidate file's path goes")
        if self.validate_cmd is not None and not given:
            raise ValueError("validate needs content, source or template to check")
        if (self.trim_blocks or self.lstrip_blocks) and self.template is None:
            raise ValueError("trim_blocks and lstrip_blocks apply to a template")
        if self.path == "/":
            raise ValueError("/ is the root: a File never removes or replaces it")
        return self
