"""What a client of a Datum server trusts: the system's CAs, a CA file (``--ca-file``), a pin (``--pin``).

One place builds the TLS context of every request Datum makes to its server (``datum.bounded.request``:
the agent's manifest fetch and long poll, its reports and reboot leases, ``datum apply --report-to``), and
checks a pin on every connection, after the handshake and before a byte of the request (the bearer token
among them) is sent.

A pin is ``sha256:`` and the 64 hex digits of the SHA-256 of a certificate's SubjectPublicKeyInfo (DER), as
Datum writes its other digests, as ``datum serve`` prints it and ``datum tls show`` shows it (``pin_of``).
It names a key, not a certificate: a certificate renewed with the same key keeps its pin. It is matched
against every certificate the server presents, so it may name the CA (Datum's own with ``tls = "auto"``: the
usual) or the server's own certificate:

- ``--ca-file`` alone: that CA only (not the system's); the names checked as usual;
- ``--pin`` alone: a pin of the server's own certificate is enough by itself (the handshake proved the server
  holds that key); a pin of another certificate of the chain (the CA) needs the server's certificate to be
  issued by it, valid now and made out to the host of the URL (``cryptography``'s verifier): a CA's
  certificate is public, and presenting it beside any other proves nothing;
- both: the chain verified to the CA file as usual, and the pinned key one of its certificates;
- neither: the system's CAs.

The standard library only, but for a pin and the words of a refusal (``cryptography`` reads the
certificates then).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime

PIN_PREFIX = "sha256:"
_PIN = re.compile(r"^sha256:([0-9a-fA-F]{64})$")
HINT = "datum tls show on the server prints its CA file and pin: give them to --ca-file or --pin"


class Refused(Exception):
    """The server presented certificates this client does not trust: the message says what was expected
    and what was presented."""


def parse_pin(text: str) -> str:
    """``text`` as a pin (``sha256:`` and 64 hex digits, as printed), lower-cased; ValueError saying what one is."""
    match = _PIN.match(text.strip())
    if match is None:
        raise ValueError(
            f"{text[:80]!r} is not a pin: 'sha256:' and the 64 hex digits of the SHA-256 of the certificate's "
            "public key (SubjectPublicKeyInfo), as datum tls show prints it"
        )
    return PIN_PREFIX + match.group(1).lower()


def spki_pin(spki_der: bytes) -> str:
    """The pin of a SubjectPublicKeyInfo in DER."""
    return PIN_PREFIX + hashlib.sha256(spki_der).hexdigest()


def pin_of(cert: object) -> str:
    """The pin of ``cert``: a ``cryptography`` certificate, or one in DER."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    loaded = x509.load_der_x509_certificate(cert) if isinstance(cert, bytes) else cert
    assert isinstance(loaded, x509.Certificate)
    return spki_pin(loaded.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))


@dataclass(frozen=True)
class Trust:
    """What to trust: ``ca_file`` (a PEM file of CA certificates; else the system's), ``pin`` (parsed)."""

    ca_file: str | None = None
    pin: str | None = None

    def context(self) -> ssl.SSLContext:
        """The client context of one connection (the CA file read again: a CA replaced there is taken at once)."""
        if self.ca_file is not None:
            return ssl.create_default_context(cafile=self.ca_file)
        if self.pin is None:
            return ssl.create_default_context()
        # the chain and names are checked by ``check``, against the pinned key: no CA store is read
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def check(self, sock: ssl.SSLSocket, host: str) -> None:
        """After the handshake on ``sock`` with ``host`` (the URL's): the pin, when there is one; else ``Refused``."""
        if self.pin is None:
            return
        chain = presented(sock)
        pins = [pin_of(der) for der in chain]
        if self.pin not in pins:
            raise Refused(
                f"the server's certificates do not hold the pinned key: expected {self.pin}, presented "
                + (", ".join(f"{p} ({_named(der)})" for p, der in zip(pins, chain, strict=True)) or "none")
            )
        if self.ca_file is not None or pins.index(self.pin) == 0:
            return  # verified to the CA file by the handshake; or the server's own key, proven by it
        _issued(chain, pins.index(self.pin), host)


class Untrustworthy(ValueError):
    """``--ca-file`` or ``--pin`` (``option``) is not one a client can trust by."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def trust(ca_file: str | None, pin: str | None) -> Trust:
    """The trust of ``--ca-file`` and ``--pin`` (either may be None or empty), read now: a CA file that
    cannot be read or holds no certificate, a pin that is not one, are ``Untrustworthy``, saying so."""
    if ca_file:
        try:
            ssl.create_default_context(cafile=ca_file)
        except FileNotFoundError as exc:
            raise Untrustworthy("--ca-file", f"the CA file {ca_file} does not exist") from exc
        except ssl.SSLError as exc:  # an OSError too: before it
            raise Untrustworthy("--ca-file", f"the CA file {ca_file} holds no PEM certificate ({exc.reason or exc})") from exc
        except OSError as exc:
            raise Untrustworthy("--ca-file", f"cannot read the CA file {ca_file}: {exc.strerror or exc}") from exc
    try:
        return Trust(ca_file or None, parse_pin(pin) if pin else None)
    except ValueError as exc:
        raise Untrustworthy("--pin", str(exc)) from None


def untrusted_words(exc: ssl.SSLCertVerificationError, trust: Trust, host: str, port: int) -> str:
    """What a failed verification of the server's certificate says: why, what was expected, what the server
    presents (asked again without verifying, nothing sent: ``peek``), and what to do."""
    expected = f"issued by a CA in {trust.ca_file}" if trust.ca_file else "issued by one of the system's CAs"
    chain = peek(host, port)
    shown = ", ".join(f"{pin_of(der)} ({_named(der)})" for der in chain) if chain else "(could not be read again)"
    return (
        f"the server's certificate is not trusted ({exc.verify_message or exc.reason}): expected a certificate "
        f"{expected} for {host}, presented {shown}; {HINT}"
    )


def peek(host: str, port: int, timeout: float = 5.0) -> list[bytes]:
    """The certificates the server at ``host``:``port`` presents, read by a handshake that verifies nothing
    and sends nothing after it; empty when it cannot be had."""
    import socket

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host) as sock:
            return presented(sock)
    except (OSError, ValueError):
        return []


def presented(sock: ssl.SSLSocket) -> list[bytes]:
    """The certificates the server presented, in DER, its own first (whether or not they were verified)."""
    public = getattr(sock, "get_unverified_chain", None)  # Python 3.13
    if public is not None:
        return [bytes(der) for der in public() or ()]
    import _ssl

    obj = sock._sslobj  # type: ignore[attr-defined]  # 3.11 and 3.12: the same method, not yet public
    return [cert.public_bytes(_ssl.ENCODING_DER) for cert in obj.get_unverified_chain() or ()]


def _named(der: bytes) -> str:
    """Who a certificate is for, in a few words (its subject)."""
    from cryptography import x509

    try:
        return x509.load_der_x509_certificate(der).subject.rfc4514_string()[:200] or "no subject"
    except ValueError:
        return "not a certificate"


def _issued(chain: list[bytes], anchor: int, host: str) -> None:
    """The server's certificate (``chain[0]``) issued through ``chain[1:]`` by the pinned ``chain[anchor]``,
    valid now and made out to ``host``; else ``Refused``."""
    from cryptography import x509
    from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

    certs = [x509.load_der_x509_certificate(der) for der in chain]
    subject: x509.verification.Subject
    try:
        subject = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        subject = x509.DNSName(host)
    verifier = PolicyBuilder().store(Store([certs[anchor]])).time(datetime.now(UTC)).build_server_verifier(subject)
    try:
        verifier.verify(certs[0], [c for i, c in enumerate(certs[1:], 1) if i != anchor])
    except VerificationError as exc:
        raise Refused(
            f"the server's certificate ({_named(chain[0])}) is not one the pinned CA ({_named(chain[anchor])}) "
            f"issued for {host} and valid now: {exc}"
        ) from exc
