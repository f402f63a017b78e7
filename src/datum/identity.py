"""A host's key: what the agent signs and the server checks when a host enrolls and when it asks for a session.

One definition for both sides (``datum.agent.identity`` signs, ``datum.fleet.enroll``
checks): the bytes a signature covers, a public key's fingerprint, and how far
apart two clocks may be. A host's key is Ed25519 (``cryptography``); its public
half travels as the 32 raw bytes in URL-safe base64, its private half never leaves
the host. A signature covers the purpose (``enroll`` or ``session``), the server's
nonce, the host's name, the host's clock (Unix seconds) and, for an enrollment, the
join token's id and the public key: a signature made for one of them is no use
for another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

SKEW = 300  # seconds two clocks may differ: a host further off is refused, the offset named
KEY_BYTES = 32  # an Ed25519 public key, raw
PREFIX = "sha256:"


def signed(purpose: str, nonce: str, host: str, when: int, *extra: str) -> bytes:
    """The bytes a host signs for ``purpose``: each part on its own line, so none can run into the next."""
    return "\n".join(("datum-" + purpose, nonce, host, str(when), *extra)).encode("utf-8", "surrogateescape")


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def unb64(text: str) -> bytes | None:
    """The bytes of URL-safe base64 (padding optional), or None when it is not that."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def fingerprint(public: bytes) -> str:
    """What names a public key to a person (``datum enroll list``, the approval hook): ``sha256:`` and hex."""
    return PREFIX + hashlib.sha256(public).hexdigest()


def verified(public: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``public``'s Ed25519 signature of ``message``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if len(public) != KEY_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def offset_words(offset: float) -> str:
    """A clock's offset from the server's, for a person: ``7 min 3 s ahead of``, ``40 s behind``."""
    seconds = round(abs(offset))
    minutes, rest = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes else []
    parts += [f"{rest} s"] if rest or not parts else []
    return f"{' '.join(parts)} {'ahead of' if offset > 0 else 'behind'}"


def skew_problem(host_time: float, server_time: float) -> str | None:
    """Why a host's clock is refused (the offset named), or None when it is within ``SKEW`` of the server's."""
    offset = host_time - server_time
    if abs(offset) <= SKEW:
        return None
    return (
        f"this host's clock is {offset_words(offset)} the server's ({offset:+.0f} s; at most {SKEW // 60} min "
        "either way is accepted): set its time (NTP) and try again"
    )
