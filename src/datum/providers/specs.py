"""The attributes of the built-in resource types: the pydantic models each provider names as its ``spec``.

Providers only read attributes, so a pass over an already validated manifest
never imports this module (nor pydantic).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from datum.providers.facts import NAMES as FACT_NAMES
from datum.providers.group import NAME
from datum.providers.package import VERSION

# --- attribute types every type shares ---------------------------------------------------


def _host_path(value: str) -> str:
    if "\x00" in value:
        raise ValueError("a path cannot contain NUL")
    if not value.startswith("/"):
        raise ValueError("must be an absolute path such as /etc/nginx/nginx.conf")
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("must not contain '..': every path resolves inside --root")
    return "/" + "/".join(parts)


HostPath = Annotated[str, AfterValidator(_host_path)]


def _octal_mode(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("quote the mode as an octal string, e.g. '0644'")
    text = value.strip()
    if not text or len(text) > 5 or any(c not in "01234567" for c in text):
        raise ValueError("an octal mode such as '0644' or '2775'")
    mode = int(text, 8)
    if mode > MAX_MODE:
        raise ValueError("a mode is at most '07777' (permissions, setuid, setgid and sticky bits)")
    return mode


MAX_MODE = 0o7777
FileMode = Annotated[
    int,
    BeforeValidator(_octal_mode),
    WithJsonSchema({"type": "string", "pattern": "^(?:0[0-7]{1,4}|[0-7]{1,4})$"}),
]

# The largest uid or gid: 4294967295 is (uid_t)-1, which chown(2) reads as "leave unchanged".
MAX_ID = 4294967294


def _system_id(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a numeric id, not true or false")
    return value


def _id_range(value: int) -> int:
    if value < 0:
        raise ValueError("an id is not negative")
    if value > MAX_ID:
        raise ValueError(f"an id is at most {MAX_ID} (4294967295 is -1 to the kernel)")
    return value


SystemId = Annotated[
    int,
    BeforeValidator(_system_id),
    AfterValidator(_id_range),
    WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_ID}),
]


def _account(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError("a user or group name, or a numeric id")
    if isinstance(value, int):
        return str(_id_range(value))
    if not isinstance(value, str) or not value or ":" in value or "\n" in value:
        raise ValueError("a user or group name, or a numeric id")
    if value.isdigit():  # a numeric id written as a string is still an id
        if not value.isascii():
            raise ValueError("a numeric id is written with the digits 0-9")
        _id_range(int(value[:12]) if len(value) <= 12 else MAX_ID + 1)
    return value


Account = Annotated[
    str,
    BeforeValidator(_account),
    WithJsonSchema(
        {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0, "maximum": MAX_ID}]}
    ),
]


class Spec(BaseModel):
    """The attributes every resource has; each type extends it with its own."""

    # defer_build: a model's validator is built when it first validates, so a manifest of
    # Files never builds the other eight (pydantic builds them at class creation otherwise).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


    requires: list[str] = Field(default_factory=list, description="Resources this one needs first.")
    subscribes: list[str] = Field(
        default_factory=list,
        description="Resources this one needs first, and is refreshed (restarted) when they change.",
    )


class PathSpec(Spec):
    """A filesystem object at a path, with the mode and ownership conventions of Puppet's ``file``."""


    path: HostPath = Field(description="Absolute path on the host; defaults to the name.")
    ensure: Literal["present", "absent"] = "present"
    mode: FileMode | None = Field(default=None, description="Octal string, e.g. '0644'.")
    owner: Account | None = Field(
        default=None, description="User name or uid, in the root's etc/passwd."
    )
    group: Account | None = Field(
        default=None, description="Group name or gid, in the root's etc/group."
    )


# --- one model per type ----------------------------------------------------------------------


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
    vars: dict[str, Any] = Field(
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


# A crypt(3) hash: $id$[params$]salt$hash, in crypt's alphabet (yescrypt, SHA-512, SHA-256, bcrypt, ...).
CRYPT_HASH = re.compile(r"^\$[0-9a-z]+(\$[A-Za-z0-9./=,+-]+){2,4}$")


class PackageSpec(Spec):

    name: str = Field(
        min_length=1,
        pattern=r"^[a-z0-9][a-z0-9+.-]*$",
        description="The package name; defaults to the resource name.",
    )
    ensure: str = Field(
        default="installed",
        description="installed | present | latest | absent | purged | <version>",
    )
    source: str | None = Field(
        default=None, description="A .deb file next to the manifest to install from."
    )
    reboot: bool | None = Field(
        default=None, description="Whether a change needs a reboot (default: kernel packages do)."
    )

    @field_validator("ensure")
    @classmethod
    def _ensure(cls, value: str) -> str:
        if value in ("installed", "present", "latest", "absent", "purged") or VERSION.match(value):
            return value
        raise ValueError("installed, present, latest, absent, purged or a version such as 1.24.0-1")


class ServiceSpec(Spec):

    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9:_.@\\-]+$",
        description="The unit; .service is added when no suffix.",
    )
    ensure: Literal["running", "stopped"] | None = None
    enable: bool | None = None


class UserSpec(Spec):

    name: str = Field(min_length=1, max_length=32, pattern=NAME)
    ensure: Literal["present", "absent"] = "present"
    uid: SystemId | None = None
    group: Account | None = Field(
        default=None, description="Primary group (default: a private group named like the user)."
    )
    groups: list[str] | None = Field(
        default=None, description="Supplementary groups, exactly, when given."
    )
    home: str | None = Field(
        default=None,
        pattern=r"^/",
        description="Default /home/NAME, or /nonexistent for a system user.",
    )
    shell: str | None = Field(
        default=None,
        pattern=r"^/",
        description="Default /bin/sh, or /usr/sbin/nologin for a system user.",
    )
    comment: str = Field(default="", pattern=r"^[^:\n]*$")
    system: bool = False
    manage_home: bool = Field(
        default=False,
        description="Create the home directory from the root's /etc/skel when it does not exist.",
    )
    password: str | None = Field(
        default=None,
        repr=False,
        description="A crypt(3) hash ($y$..., $6$..., $5$...) or '*'; plain text is refused. "
        "Never shown in plans or reports.",
    )
    locked: bool | None = Field(
        default=None,
        description="Lock (true) or unlock (false) password login, as passwd -l / -u.",
    )

    @model_validator(mode="after")
    def _home_to_manage(self) -> UserSpec:
        if self.manage_home and self.system and self.home is None:
            raise ValueError("a system user's home is /nonexistent: give home to manage one")
        return self

    @field_validator("password")
    @classmethod
    def _password_is_a_hash(cls, value: str | None) -> str | None:
        # The message never repeats the value: it may be a password written in plain text.
        if value is None or value == "*" or CRYPT_HASH.match(value):
            return value
        if value.startswith("!"):
            raise ValueError("give the hash without '!': lock the account with locked: true")
        raise ValueError(
            "not a crypt(3) hash (such as $y$... or $6$... from mkpasswd); "
            "a password in plain text is refused"
        )


class GroupSpec(Spec):

    name: str = Field(min_length=1, max_length=32, pattern=NAME)
    ensure: Literal["present", "absent"] = "present"
    gid: SystemId | None = None
    system: bool = False
    members: list[str] | None = Field(
        default=None, description="Exactly these members, when given."
    )


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
