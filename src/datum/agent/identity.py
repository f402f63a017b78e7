"""The host's own key, and the sessions it has from it: ``datum agent enroll``, then ``datum agent`` with no token file.

The key is Ed25519, made on the host beside its state file (``<state>.key``,
0600, PKCS#8 PEM) and never sent: the server gets its public half and
signatures (``datum.identity`` says what is signed). ``<state>.enrolled`` (JSON)
keeps the server the host enrolled with, its name and its key's fingerprint, so
``datum agent`` needs neither ``--server`` nor a token file afterwards.

``Session.bearer()`` is the token every request of the agent carries: it signs
a fresh nonce of the server's for one, keeps it, and signs again once a random
point between 50% and 80% of its life has passed (measured on this host's
monotonic clock, whatever the wall clock does), so a fleet's renewals spread
out. When the server cannot give one, the last token is used while it lives;
after that the request fails as for an unreachable server (the agent keeps its
last manifest and spool), and the next cycle signs again: an agent that was off
for a week comes back with its key, and no person.
"""

from __future__ import annotations

import errno
import json
import os
import random
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from datum.bounded import DEADLINE, Unusable, request
from datum.core.vocab import IdentityState
from datum.host.remote import issues_in
from datum.identity import b64, fingerprint, signed
from datum.trust import Trust

RENEW_FROM, RENEW_TO = 0.5, 0.8  # of a session's life: where its renewal falls, at random
ANSWER_MAX = 64 * 1024


class Refused(Unusable):
    """The server answered, and said no (the join token, the name, the key, the clock): its words."""


def key_path(state_path: str) -> str:
    return f"{state_path}.key"


def record_path(state_path: str) -> str:
    return f"{state_path}.enrolled"


def read_own(path: str, what: str) -> bytes:
    """The bytes of the file at ``path`` (``what`` names it in a refusal), read from the object checked: opened
    without following a link, a regular file of this process's user that nobody else may read or write (a key,
    or the record of whom to trust, planted or swapped by another user is refused, never used)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unusable(f"{what} {path} is a link: refused (Datum reads its own files, never through a link)") from exc
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Unusable(f"{what} {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise Unusable(f"{what} {path} belongs to uid {st.st_uid}, not to the user Datum runs as: refused")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise Unusable(f"{what} {path} may be read or written by others than its owner: chmod 600 it")
        return f.read()


def load_key(path: str) -> Any:
    """The host's private key at ``path`` (``read_own``); ``Unusable`` saying why when it cannot be read."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(read_own(path, "the host key"), password=None)
    except OSError as exc:
        raise Unusable(f"cannot read the host key {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise Unusable(f"the host key {path} is not a PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise Unusable(f"the host key {path} is not an Ed25519 key")
    return key


def key_here(path: str) -> Any:
    """The key at ``path``, made (0600, never replaced) when there is none yet."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    if os.path.lexists(path):  # a link is there: load_key refuses it, never follows it
        return load_key(path)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    # made, never replaced: O_EXCL fails on whatever took the name meanwhile, a link included
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    return key


def public_of(key: Any) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw: bytes = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return raw


@dataclass(frozen=True)
class Enrolled:
    """What ``datum agent enroll`` left: the server, the host's name, its key's fingerprint, and what it trusted
    the server by (``--ca-file``, ``--pin``)."""

    server: str
    host: str
    fingerprint: str
    ca_file: str | None = None
    pin: str | None = None

    @staticmethod
    def read(state_path: str) -> Enrolled | None:
        """The enrollment beside ``state_path``, or None when the host has not enrolled."""
        try:
            doc = json.loads(read_own(record_path(state_path), "the enrollment record"))
            return Enrolled(str(doc["server"]), str(doc["host"]), str(doc["fingerprint"]), doc.get("caFile"),
                            doc.get("pin"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise Unusable(f"cannot read {record_path(state_path)}: {exc}") from exc

    def write(self, state_path: str) -> None:
        """Kept beside the state file, 0600, replaced whole (``write_atomic``: a temporary file made ``O_EXCL |
        O_NOFOLLOW``, renamed in; a link planted at either name is replaced, never written through)."""
        from datum.providers.fs import write_atomic

        doc = {"server": self.server, "host": self.host, "fingerprint": self.fingerprint, "caFile": self.ca_file,
               "pin": self.pin}
        write_atomic(record_path(state_path), (json.dumps(doc) + "\n").encode(), mode=0o600)


def _call(method: str, url: str, body: dict[str, Any] | None, deadline: float, token: str | None = None,
          trust: Trust | None = None) -> dict[str, Any]:
    """One JSON exchange with the server; ``Unusable`` with the server's own words when it refuses."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    answer = request(method, url, headers, data=data, deadline=deadline, limit=ANSWER_MAX, trust=trust)
    if not 200 <= answer.status < 300:
        raise Refused(f"{url} answered {answer.status} {answer.reason}{issues_in(answer.body)}")
    try:
        doc = json.loads(answer.body)
    except ValueError as exc:
        raise Unusable(f"{url} answered with what is not JSON") from exc
    if not isinstance(doc, dict):
        raise Unusable(f"{url} answered with what is not a JSON object")
    return doc


def _nonce(server: str, deadline: float, trust: Trust | None) -> str:
    return str(_call("GET", f"{server.rstrip('/')}/v1/enroll/nonce", None, deadline, trust=trust).get("nonce") or "")


def enroll(server: str, host: str, join: str, key: Any, facts: dict[str, Any], deadline: float = DEADLINE,
           trust: Trust | None = None) -> dict[str, Any]:
    """Ask ``server`` to enroll ``host`` with ``key`` through the join token ``join``: the identity it answers."""
    from datum.store.tokens import ID_LENGTH, digest

    nonce = _nonce(server, deadline, trust)
    when = int(time.time())
    public = b64(public_of(key))
    message = signed("enroll", nonce, host, when, digest(join)[:ID_LENGTH], public)
    body = {"host": host, "publicKey": public, "nonce": nonce, "time": when, "signature": b64(key.sign(message)),
            "facts": facts}
    return _call("POST", f"{server.rstrip('/')}/v1/enroll", body, deadline, token=join, trust=trust)


def decided(ask: Callable[[], dict[str, Any]], host: str, wait: float, say: Callable[[str], None],
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """The answer of ``ask()`` (an enrollment request) once it is not ``pending``, asked again (each time a fresh
    nonce: a proof is good once) every 1 s growing to 10 s for up to ``wait`` seconds; the last answer after that.
    ``say`` is told what the request waits for, once and whenever that changes."""
    answer = ask()
    ends = clock() + wait
    every, told = 1.0, None
    while answer.get("state") == IdentityState.PENDING and clock() < ends:
        why = str(answer.get("reason") or "waiting for approval")
        if why != told:
            say(f"{host} is pending: {why}; asking again for up to {max(0.0, ends - clock()):.0f} s (--wait)")
            told = why
        sleep(min(every, max(0.0, ends - clock())))
        every = min(every * 1.5, 10.0)
        answer = ask()
    return answer


class Session:
    """The host's session with its server, renewed from its key (``bearer``)."""

    def __init__(
        self,
        server: str,
        host: str,
        key: Any,
        deadline: float = DEADLINE,
        *,
        trust: Trust | None = None,
        clock: Callable[[], float] = time.monotonic,
        share: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.server = server
        self.host = host
        self.key = key
        self.fingerprint = fingerprint(public_of(key))
        self.deadline = deadline
        self.trust = trust or Trust()
        self._clock = clock
        self._share = share
        self._token: str | None = None
        self._renew_at = 0.0
        self._ends_at = 0.0
        self._lock = threading.Lock()  # the loop and the manifest's long poll ask at once
        self.renewals = 0

    def bearer(self) -> str:
        """A token for the next request: the one held until its renewal point, then a new one; the one held
        while it lives when the server cannot give another; else ``Unusable`` saying why."""
        with self._lock:
            now = self._clock()
            if self._token is not None and now < self._renew_at:
                return self._token
            try:
                self._renew(now)
            except Unusable:
                if self._token is not None and self._clock() < self._ends_at:
                    return self._token
                raise
            assert self._token is not None
            return self._token

    def _renew(self, began: float) -> None:
        nonce = _nonce(self.server, self.deadline, self.trust)
        when = int(time.time())
        signature = self.key.sign(signed("session", nonce, self.host, when))
        url = f"{self.server.rstrip('/')}/v1/enroll/session"
        answer = _call("POST", url, {"host": self.host, "nonce": nonce, "time": when, "signature": b64(signature)},
                       self.deadline, trust=self.trust)
        token, ttl = answer.get("token"), answer.get("ttlSeconds")
        if not isinstance(token, str) or not isinstance(ttl, int | float) or ttl <= 0:
            raise Unusable(f"{url} answered without a token and its life")
        self._token = token
        self._ends_at = began + ttl
        self._renew_at = began + ttl * self._share(RENEW_FROM, RENEW_TO)
        self.renewals += 1
