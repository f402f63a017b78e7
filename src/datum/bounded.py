"""HTTP requests whose whole answer is bounded in time and in size: the agent's to its server, its health URL, the server's Prometheus query.

urllib's ``timeout`` bounds each socket operation, not the answer: a server
sending a byte every 2 s holds the agent for as long as it keeps sending, and
``response.read()`` takes a 300 MB answer into memory. Here a watchdog shuts
the connection when ``deadline`` seconds have passed since the request began,
whatever the server is doing (connecting, trickling headers or body), and a
body is read in chunks up to ``limit`` bytes. Whatever goes wrong is
``Unusable`` with the words to report, never another exception. Redirects are
never followed: the bearer token goes to the configured server and nowhere
else. Over TLS, the server is trusted as ``trust`` says (``datum.trust``: the
system's CAs, a CA file, a pin checked on every connection before the request
is sent). The standard library only (a pin reads certificates with ``cryptography``).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass

from datum.core.bounds import ANSWER_DEADLINE
from datum.trust import Refused, Trust, untrusted_words

DEADLINE = ANSWER_DEADLINE  # seconds for a whole answer ([agent] answer_deadline): request sent, headers and body read
MIB = 2**20
ERROR_BODY = 64 * 1024  # of an error answer, what is read for its message; the rest is left unread
_CHUNK = 64 * 1024


class Unusable(Exception):
    """The server's answer could not be had whole, or is past a bound: the message says which, for the report."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: bytes  # of a 2xx answer, whole (at most ``limit``); of another, its first ERROR_BODY bytes


def request(
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    data: bytes | None = None,
    deadline: float = DEADLINE,
    limit: int = 0,
    trust: Trust | None = None,
) -> Answer:
    """``method url`` with ``headers`` and ``data``; the answer read whole within ``deadline`` seconds;
    over https, the server trusted as ``trust`` says (else the system's CAs).

    A 2xx body larger than ``limit`` bytes is ``Unusable`` (with ``limit`` 0 it is not read at all:
    the status is all the caller needs).
    """
    parts = urllib.parse.urlsplit(url)
    conn: http.client.HTTPConnection
    trust = trust or Trust()
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=deadline, context=trust.context())
    elif parts.scheme == "http":
        if trust.ca_file or trust.pin:  # what was to be checked cannot be: nothing is sent
            raise Unusable(f"{url} is plain HTTP: --ca-file and --pin trust an https:// server only; nothing was sent")
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=deadline)
    else:
        raise Unusable(f"{url} is not an http:// or https:// URL")
    cut = threading.Event()
    held: list[socket.socket] = []  # the connection's socket: http.client drops its own once the answer will close

    def stop() -> None:  # the deadline: any read or write blocked on the socket returns at once
        cut.set()
        for sock in held or ([conn.sock] if conn.sock is not None else []):
            try:  # the plain socket's shutdown, also under TLS: SSLSocket's would race the reader
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(deadline, stop)
    watchdog.daemon = True
    watchdog.start()
    sent = False
    try:
        conn.connect()
        held.append(conn.sock)
        if isinstance(conn.sock, ssl.SSLSocket):
            trust.check(conn.sock, parts.hostname or "")
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=data, headers=headers)
        sent = True
        response = conn.getresponse()
        ok = 200 <= response.status < 300
        body = _read(response, limit, url) if ok else _read(response, ERROR_BODY, url, cap=True)
        if cut.is_set():
            raise OSError("cut at the deadline")
        return Answer(response.status, response.reason, response.headers, body)
    except Unusable:
        raise
    except Refused as exc:
        raise Unusable(f"{url} is not trusted: {exc}") from exc
    except ssl.SSLCertVerificationError as exc:
        raise Unusable(f"cannot reach {url}: {untrusted_words(exc, trust, parts.hostname or '', parts.port or 443)}") from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if cut.is_set():
            raise Unusable(f"{url} gave no whole answer within {deadline:g}s") from exc
        if not sent:
            raise Unusable(f"cannot reach {url}: {_words(exc)}") from exc
        raise Unusable(f"{url}: the answer was cut short ({_words(exc)})") from exc
    finally:
        watchdog.cancel()
        conn.close()


def _read(response: http.client.HTTPResponse, limit: int, url: str, *, cap: bool = False) -> bytes:
    """The body, at most ``limit`` bytes: past it ``Unusable`` (or, with ``cap``, the first ``limit``)."""
    if limit == 0:
        return b""
    text = (response.getheader("Content-Length") or "").strip()
    declared = int(text) if text.isdigit() else None
    if not cap and declared is not None and declared > limit:
        raise Unusable(f"{url} answered {_size(declared)}, more than the {_size(limit)} an answer may be")
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = response.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            if declared is not None and size < declared and not cap:  # http.client returns what came
                raise http.client.IncompleteRead(b"".join(chunks), declared - size)
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    if cap:
        return b"".join(chunks)[:limit]
    raise Unusable(f"{url} answered more than the {_size(limit)} an answer may be")


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n} bytes"


def _words(exc: BaseException) -> str:
    """What went wrong, in a few words (an ``IncompleteRead`` says how much came)."""
    if isinstance(exc, http.client.IncompleteRead):
        return f"{len(exc.partial)} bytes read, {exc.expected} more expected"
    return str(getattr(exc, "reason", None) or exc) or type(exc).__name__
