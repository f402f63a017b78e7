"""``nodes.yaml``'s shape: the pydantic model it is validated with and its JSON Schema is made from.

Each field's description is what a finding about it says (``datum.validation.model_errors``), so the
validator, the schema (``datum schema --nodes``) and the operator reading an error read one text.
What relates fields to each other or to the fleet directory (a rule on facts gives manifests only,
a manifest is there, ``reboot_order`` names a group some rule gives) is ``datum.fleet.nodes``'s.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StringConstraints,
    Tag,
    WithJsonSchema,
    model_validator,
)

GLOB = "*?["  # what makes a name a glob (fnmatch): a declared host or a reboot_order entry has none


def as_text(value: Any) -> str | None:
    """A fact's or label's value as a match compares it (the host's and the rule's alike): YAML's and JSON's
    ``true`` is ``"true"``, ``4`` is ``"4"``; None for a structure or nothing, which no glob fits."""
    if value is None or isinstance(value, dict | list):
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)

NOT_A_GLOB = f"^[^{re.escape(GLOB)}]+$"


def _text(value: Any) -> Any:
    """A fact's or label's value as a match compares it (``as_text``); a structure or nothing
    is left as it is, for the string check to refuse."""
    text = as_text(value)
    return value if text is None else text


# A scalar YAML may spell as a string, a number or a boolean, compared as text.
Value = Annotated[str, BeforeValidator(_text), WithJsonSchema({"type": ["string", "number", "boolean"]})]
Glob = Annotated[str, StringConstraints(min_length=1)]
HostName = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=NOT_A_GLOB),
    Field(description="a host name, as its agent reports it (no glob)"),
]
GroupName = Annotated[str, StringConstraints(max_length=253, pattern=r"\S")]

Order = Annotated[
    Union[  # noqa: UP007 - members carry Tags
        Annotated[Literal["name"], Tag("name")],
        Annotated[list[HostName], Tag("hosts"), Field(min_length=1)],
    ],
    Discriminator(lambda v: "hosts" if isinstance(v, list) else "name"),
    Field(description="`name` (by host name) or a list of host names, first to reboot first"),
]


class Match(BaseModel):
    """Which hosts a rule is for: every key given must fit."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    name: Glob | None = Field(
        None, description="a glob on the host name (the name the host's token is bound to: the server's to say)"
    )
    labels: dict[Glob, Value] | None = Field(
        None,
        description="a mapping of label names to values (globs): the labels nodes.yaml's `labels:` gives the "
        "host (the server's to say)",
    )
    facts: dict[Glob, Value] | None = Field(
        None,
        description="a mapping of fact paths to values (globs): what the host's agent claims of itself "
        "(a rule on facts gives manifests only)",
    )

    @model_validator(mode="after")
    def _something(self) -> Match:
        if self.name is None and self.labels is None and self.facts is None:
            raise ValueError("empty")  # said in the field's description
        return self


class NodeRule(BaseModel):
    """A rule: what the hosts its ``match`` fits get. Manifests from any rule; ``vars``, ``group`` and
    ``expected`` only from a rule on the host's name or labels, never on its facts."""

    model_config = ConfigDict(extra="forbid")

    match: Match = Field(
        description="{name: GLOB}, {labels: {LABEL: VALUE}} and/or {facts: {PATH: VALUE}}: a host must fit all given"
    )
    manifests: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        None, description="a list of manifest paths in the fleet directory"
    )
    vars: dict[str, Any] | None = Field(None, description="a mapping of template variables")
    group: GroupName | None = Field(None, description="a group name (reboot budget, rollout waves), 1 to 253 characters")
    expected: StrictBool = Field(False, description="true or false: whether the host this rule names is declared")


class NodesFile(BaseModel):
    """``nodes.yaml``: the fleet directory's classification of hosts (``[fleet] manifests``)."""

    model_config = ConfigDict(extra="forbid")

    labels: dict[Glob, dict[Glob, Value]] | None = Field(
        None,
        description="per host name or name pattern (a glob), the labels the server gives the hosts it fits "
        "(LABEL: VALUE; every pattern that fits adds its labels, a later one's value wins)",
    )
    nodes: list[Annotated[NodeRule, Field(description="a rule is a mapping: {match, manifests, vars, group}")]] = Field(
        description="a list of rules: {match, manifests, vars, group}"
    )
    reboot_order: dict[str, Order] | None = Field(
        None,
        description="a mapping of group to `name` or a list of host names, e.g. {web: [web3, web1], db: name}",
    )


def nodes_schema() -> dict[str, Any]:
    """``nodes.yaml``'s JSON Schema (draft 2020-12), from the model that validates it."""
    schema = NodesFile.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://datum.dev/schemas/nodes.json",
        "title": "Datum fleet nodes.yaml",
        **{k: v for k, v in schema.items() if k != "title"},
    }
