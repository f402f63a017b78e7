"""``Line``'s attributes: the pydantic model that validates them (``datum.providers.line``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from datum.providers.spec import Account, FileMode, HostPath, Spec


class LineSpec(Spec):
    path: HostPath = Field(description="The file that holds the line.")
    line: str | None = Field(default=None, description="The whole line, without its newline.")
    match: str | None = Field(
        default=None, description="A regular expression that finds the line to replace."
    )
    ensure: Literal["present", "absent"] = "present"
    create: bool = Field(default=False, description="Create the file when it does not exist.")
    after: str | None = Field(
        default=None,
        description="Where a new line goes: after the last line matching this regex, or EOF.",
    )
    before: str | None = Field(
        default=None,
        description="Where a new line goes: before the last line matching this regex, or BOF.",
    )
    first_match: bool = Field(
        default=False,
        description="Use the first line matching match, after or before, not the last.",
    )
    mode: FileMode | None = Field(
        default=None, description="The mode of a file create: true makes (octal string)."
    )
    owner: Account | None = Field(default=None, description="The owner of a file create: true makes.")
    group: Account | None = Field(default=None, description="The group of a file create: true makes.")

    @field_validator("after", "before")
    @classmethod
    def _anchor(cls, value: str | None) -> str | None:
        if value is not None and value not in ("EOF", "BOF"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_anchor(self) -> LineSpec:
        if self.after is not None and self.before is not None:
            raise ValueError("give after or before, not both")
        if self.after == "BOF" or self.before == "EOF":
            raise ValueError("after takes EOF (the default), before takes BOF")
        if not self.create and (self.mode, self.owner, self.group) != (None, None, None):
            raise ValueError("mode, owner and group are for the file create: true makes")
        return self

    @field_validator("line")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is not None and "\n" in value:
            raise ValueError("a single line, without a newline")
        return value

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from exc
            except (RecursionError, OverflowError, MemoryError) as exc:
                raise ValueError("not a regular expression: too complex") from exc
        return value

    @model_validator(mode="after")
    def _needs(self) -> LineSpec:
        if self.ensure == "present" and self.line is None:
            raise ValueError("a present Line needs line")
        if self.ensure == "absent" and self.line is None and self.match is None:
            raise ValueError("an absent Line needs line or match")
        return self
