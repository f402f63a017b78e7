"""What may never be shown: Datum's tokens, wherever they appear (a message, a path, a command's output).

One pattern for every place that echoes text someone else wrote: the API's
error bodies and access log, and a failed command's output in a pass report.
"""

from __future__ import annotations

import re

PREFIX = "datum_"

# Anything that looks like a token ``datum token create`` mints (or a good part of one).
_LOOKS_LIKE_A_TOKEN = re.compile(re.escape(PREFIX) + r"[A-Za-z0-9_-]{20,}")


def redacted(text: str) -> str:
    """``text`` with whatever looks like a Datum token replaced by ``datum_[redacted]``."""
    return _LOOKS_LIKE_A_TOKEN.sub(PREFIX + "[redacted]", text) if PREFIX in text else text


def looks_like_token(text: str) -> bool:
    """Whether ``text`` holds what looks like a token ``create`` mints: never a host's name (it would be
    listed in ``/v1/hosts`` and be a ``/metrics`` label)."""
    return PREFIX in text and _LOOKS_LIKE_A_TOKEN.search(text) is not None


# Why a name shaped like a token is never a host's (the intake of a pass, a token bound to a host).
NOT_A_HOST_NAME = "is shaped like a bearer token; a host name never is one"
