"""What every resource type's spec model starts from: the base ``Spec`` and the attribute types they share.

Each type's own model lives beside its provider (``datum.providers.file.spec``),
as a plugin's does; it is imported to validate a manifest only, so a pass
over an already validated manifest never imports this module (nor pydantic).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema


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
