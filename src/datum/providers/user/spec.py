"""``User``'s attributes: the pydantic model that validates them (``datum.providers.user``).

Imported to validate a manifest only: a pass reads the validated attributes
(``datum.providers.base.Attributes``) and never imports pydantic.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from datum.providers.group.spec import NAME
from datum.providers.spec import Account, Spec, SystemId

# A crypt(3) hash: $id$[params$]salt$hash, in crypt's alphabet (yescrypt, SHA-512, SHA-256, bcrypt, ...).
CRYPT_HASH = re.compile(r"^\$[0-9a-z]+(\$[A-Za-z0-9./=,+-]+){2,4}$")


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
