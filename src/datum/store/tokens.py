"""The stored form of Datum's secrets, and the names a host may have: one rule for every token kind.

A bearer token (``datum token create``, a host's session) and a join token
(``datum enroll create``) are 32 random bytes in URL-safe base64 after a
``datum_`` prefix (``datum_j_`` for a join token): a plain SHA-256 is a sound hash
for them, there is nothing to brute-force, and only the hash is stored.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from datum.core.findings import FieldError, invalid
from datum.core.redact import NOT_A_HOST_NAME, PREFIX, looks_like_token

AGENT = "agent"  # the principal an agent's tokens speak for (bound to its host), a session's too
ID_LENGTH = 12  # of the hash's hex digits: names a token in lists, revokes and enrollments
HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$"  # a name a token may be bound to, a host may enroll as
_HOST = re.compile(HOST_NAME)


def digest(token: str) -> str:
    """The stored form of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def mint(kind: str = "") -> str:
    """A new token: ``datum_``, ``kind`` (``j_`` for a join token) and 32 random bytes."""
    return PREFIX + kind + secrets.token_urlsafe(32)


def check_host(host: str, field: str = "host") -> str:
    """A name a token may be bound to and a host may enroll as: 1-253 of letters, digits and ``_.-``,
    starting with a letter or digit, and never shaped like a token."""
    if not _HOST.match(host):
        raise invalid(
            [FieldError(field, "1-253 of letters, digits and '_.-', starting with a letter or digit")],
            f"host {host!r} is not a valid host name",
        )
    if looks_like_token(host):  # intake refuses such a host: its token would bind nothing
        raise invalid(
            [FieldError(field, NOT_A_HOST_NAME)],
            "a host is never named like a token (was a token pasted for the host's name?)",
        )
    return host
