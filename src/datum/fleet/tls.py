"""The server's certificate: files an operator gives (``[server] tls_cert``, ``tls_key``) or Datum's own (``tls = "auto"``).

With ``tls = "auto"``, ``datum serve`` makes on its first start a CA of its own (an ECDSA P-256 key and a
self-signed certificate for ten years) and a server certificate it issues for the configured names
(``[server] tls_names``, else this host's names and loopback), for a year. They are kept in the state
directory (``$DATUM_HOME/tls``, 0700: ``ca.pem``, ``ca.key``, ``server.pem`` with the CA after the server's
certificate, so that an agent trusting by ``--pin`` alone finds the CA among what it is presented;
``server.key``), each file 0600, written as Datum writes its own state (a new temporary file, ``O_EXCL |
O_NOFOLLOW``, renamed in: ``datum.providers.fs.write_atomic``). On every start and SIGHUP the server
certificate is issued again when the names changed or it has less than ``RENEW_WITHIN`` left; the CA stays,
so its pin (``datum.trust.pin_of``: what agents trust) does not change.

``described`` reads what is there without making anything (``datum tls show``, ``/metrics``); ``prepared``
makes or renews first (``datum serve``, its SIGHUP); ``context`` is the server's TLS context, into which a
SIGHUP loads the files again: new handshakes use them, connections already open (held long polls) go on.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from datum.core.findings import ErrorCode, Problem
from datum.trust import pin_of

CA_LIFE = timedelta(days=3650)
CERT_LIFE = timedelta(days=365)
RENEW_WITHIN = timedelta(days=30)  # an auto certificate with less than this left is issued again
DIRECTORY = "tls"
CA_CERT, CA_KEY, CERT, KEY = "ca.pem", "ca.key", "server.pem", "server.key"


@dataclass(frozen=True)
class Link:
    """One certificate of the presented chain, as ``datum tls show`` lists it."""

    subject: str
    pin: str
    not_after: datetime


@dataclass(frozen=True)
class Served:
    """What ``datum serve`` presents: its files, and what ``datum tls show`` and ``/metrics`` say of them.

    ``pin`` is the CA's (Datum's own with ``auto``; with files, the last certificate of ``tls_cert``, the
    closest to its root the server presents); ``names`` and ``not_after`` are the server certificate's.
    """

    mode: str  # "auto" or "files"
    cert_file: Path
    key_file: Path
    ca_file: Path | None
    pin: str
    names: tuple[str, ...]
    not_after: datetime
    chain: tuple[Link, ...]
    made: tuple[str, ...] = field(default=(), compare=False)  # what this start made: "ca", "certificate"

    def dump(self) -> dict[str, Any]:
        """``datum tls show --json``."""
        return {
            "tls": self.mode,
            "caFile": str(self.ca_file) if self.ca_file else None,
            "pin": self.pin,
            "names": list(self.names),
            "notAfter": _iso(self.not_after),
            "certFile": str(self.cert_file),
            "keyFile": str(self.key_file),
            "chain": [{"subject": c.subject, "pin": c.pin, "notAfter": _iso(c.not_after)} for c in self.chain],
        }


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def default_names(host: str | None = None) -> list[str]:
    """The names of an auto certificate when ``[server] tls_names`` gives none: this host's name and fully
    qualified name, ``localhost``, the loopback addresses, and the listening address when it is one."""
    names = [socket.gethostname(), socket.getfqdn(), "localhost", "127.0.0.1", "::1"]
    if host and host not in ("0.0.0.0", "::", ""):
        names.append(host)
    return list(dict.fromkeys(n for n in names if n))


def directory(home: Path) -> Path:
    return home / DIRECTORY


def described(settings: Any) -> Served | None:
    """What the configuration serves, read and made nothing of; None when TLS is off. A Problem when the
    files are missing or unreadable (with ``auto``: ``datum serve`` makes them on its first start)."""
    server = settings.server
    if server.tls == "auto":
        where = directory(settings.home)
        if not (where / CERT).exists():
            raise Problem.one(
                ErrorCode.UNAVAILABLE,
                f"no certificate in {where} yet: datum serve makes its CA and certificate there on its first start",
            )
        return _read("auto", where / CERT, where / KEY, where / CA_CERT)
    if server.tls_cert is not None:
        return _read("files", server.tls_cert, server.tls_key, None)
    return None


def prepared(settings: Any, now: datetime | None = None) -> Served | None:
    """``described``, with ``auto``'s CA made when missing and its server certificate issued when missing,
    not for the configured names, not the CA's, or with less than ``RENEW_WITHIN`` left."""
    server = settings.server
    if server.tls != "auto":
        return described(settings)
    now = now or datetime.now(UTC)
    where = directory(settings.home)
    _own_directory(where)
    made: list[str] = []
    ca = _ca(where, now, made)
    names = list(server.tls_names) or default_names(server.host)
    if not _current(where, ca, names, now):
        _issue(where, ca, names, now)
        made.append("certificate")
    return replace(_read("auto", where / CERT, where / KEY, where / CA_CERT), made=tuple(made))


def context(served: Served) -> ssl.SSLContext:
    """The server's TLS context (TLS 1.2 at least, no compression: Python's defaults), with ``served``'s
    files loaded, issuing no TLS 1.3 session tickets.

    No agent resumes a session: ``datum.bounded`` opens a connection per request and ``http.client`` never
    offers a saved session, and a long poll holds its connection. The two tickets OpenSSL sends after each
    handshake by default were work for nothing: measured (2026-12-07, OpenSSL 3.0, in process) they are 510
    of the 1,260 bytes the server sends in a handshake and 15-20% of its CPU per handshake, which every agent
    request pays. They cost no memory per held connection (OpenSSL keeps 17.7 KiB for one either way: its
    ``SSL`` 7.6 KiB, the two memory BIOs' buffers 4 KiB, the AES-GCM keys 1.9 KiB, the session 0.9 KiB):
    docs/performance.md, "Held polls over TLS". ``OP_NO_TICKET`` instead would make TLS 1.3 resumption
    stateful, a session kept in the server's cache per connection (1 KiB more each). TLS 1.2 clients keep
    OpenSSL's behaviour."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.num_tickets = 0
    load(ctx, served)
    return ctx


def load(ctx: ssl.SSLContext, served: Served) -> None:
    """Load ``served``'s files into ``ctx``: the handshakes that start after it present them."""
    try:
        ctx.load_cert_chain(served.cert_file, served.key_file)
    except ssl.SSLError as exc:
        raise Problem.one(
            ErrorCode.INVALID_INPUT, f"{served.key_file} is not the key of {served.cert_file}'s certificate ({exc.reason or exc})"
        ) from exc
    except OSError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read {exc.filename or served.key_file}: {exc.strerror or exc}") from exc


def loopback(host: str) -> bool:
    """Whether ``host`` (a listening address) is this machine's loopback alone."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def plain_http_refused(host: str, https: bool, insecure: bool) -> Problem | None:
    """Why ``datum serve`` does not serve plain HTTP on ``host``, or None: HTTPS, loopback, or asked for."""
    from datum.core.findings import ErrorCode, FieldError, Finding

    if https or insecure or loopback(host):
        return None
    message = (
        f"refused to serve plain HTTP on {host}: bearer tokens and hosts' reports would cross the network "
        'readable. Set [server] tls = "auto" (or tls_cert and tls_key) for HTTPS, or serve on 127.0.0.1; '
        "behind a proxy that speaks TLS, say so with --insecure-http or [server] insecure_http = true"
    )
    return Problem([Finding(ErrorCode.INVALID_INPUT, message, fields=(FieldError("server.insecure_http", "false"),))])


def banner(served: Served) -> str:
    """``datum serve``'s line about its certificate: what it made, and what agents trust."""
    made = {"ca": "made its CA", "certificate": "issued its certificate"}
    said = " and ".join(made[m] for m in served.made)
    head = f"datum: TLS {said + ' ' if said else ''}for {', '.join(served.names)}, expires {served.dump()['notAfter']}"
    if served.ca_file is not None:
        return f"{head}; agents trust --ca-file {served.ca_file} or --pin {served.pin}"
    return f"{head}; its chain's last certificate has --pin {served.pin}"


# --- reading -------------------------------------------------------------------------------------


def _read(mode: str, cert_file: Path, key_file: Path, ca_file: Path | None) -> Served:
    from cryptography import x509

    try:
        chain = x509.load_pem_x509_certificates(cert_file.read_bytes())
    except OSError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read the certificate {cert_file}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"{cert_file} holds no PEM certificate: {exc}") from exc
    leaf = chain[0]
    links = tuple(Link(c.subject.rfc4514_string(), pin_of(c), c.not_valid_after_utc) for c in chain)
    pin = links[-1].pin
    if ca_file is not None:
        try:
            pin = pin_of(x509.load_pem_x509_certificate(ca_file.read_bytes()))
        except (OSError, ValueError) as exc:
            raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read the CA certificate {ca_file}: {exc}") from exc
    return Served(mode, cert_file, key_file, ca_file, pin, tuple(_names(leaf)), leaf.not_valid_after_utc, links)


def _names(cert: Any) -> list[str]:
    """The DNS names and IP addresses a certificate is made out to (its subjectAltName)."""
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.DNSName), *(str(a) for a in san.get_values_for_type(x509.IPAddress))]


# --- making --------------------------------------------------------------------------------------


def _own_directory(where: Path) -> None:
    """``where`` made 0700 when missing; a link or anything but a directory of its own there is refused."""
    try:
        os.makedirs(where.parent, exist_ok=True)
        try:
            os.mkdir(where, 0o700)
        except FileExistsError:
            pass
        found = os.lstat(where)
        if not stat.S_ISDIR(found.st_mode):
            raise Problem.one(ErrorCode.UNAVAILABLE, f"{where} is not a directory (a link or a file is there): refused")
        if found.st_mode & 0o077:
            os.chmod(where, 0o700, follow_symlinks=False)
    except OSError as exc:
        raise Problem.one(ErrorCode.UNAVAILABLE, f"cannot make {where}: {exc.strerror or exc}") from exc


def _write(path: Path, data: bytes) -> None:
    from datum.providers.fs import write_atomic

    try:
        write_atomic(path, data, mode=0o600)
    except OSError as exc:
        raise Problem.one(ErrorCode.UNAVAILABLE, f"cannot write {path}: {exc.strerror or exc}") from exc


def _private(path: Path) -> Any:
    """The private key at ``path`` (None when there is none), refused when others may read it."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Problem.one(ErrorCode.UNAVAILABLE, f"cannot read {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise Problem.one(ErrorCode.UNAVAILABLE, f"{path} is readable by others than its owner: chmod 600 it")
        data = f.read()
    try:
        return load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise Problem.one(ErrorCode.UNAVAILABLE, f"{path} is not a PEM private key without a password: {exc}") from exc


@dataclass(frozen=True)
class _Ca:
    cert: Any
    key: Any


def _ca(where: Path, now: datetime, made: list[str]) -> _Ca:
    """The CA kept in ``where``; made when its key or certificate is missing."""
    from cryptography import x509

    key = _private(where / CA_KEY)
    if key is not None and (where / CA_CERT).exists():
        cert = x509.load_pem_x509_certificate((where / CA_CERT).read_bytes())
        if _spki(cert.public_key()) != _spki(key.public_key()):
            raise Problem.one(
                ErrorCode.UNAVAILABLE, f"{where / CA_CERT} is not the certificate of {where / CA_KEY}: restore them, or "
                "move both away to make a new CA (every agent must then trust its new pin)",
            )
        return _Ca(cert, key)
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, f"Datum CA {socket.gethostname()}"[:64])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + CA_LIFE)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = serialization.PrivateFormat.PKCS8
    _write(where / CA_KEY, key.private_bytes(serialization.Encoding.PEM, pem, serialization.NoEncryption()))
    _write(where / CA_CERT, cert.public_bytes(serialization.Encoding.PEM))
    made.append("ca")
    return _Ca(cert, key)


def _spki(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return bytes(public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))


def _current(where: Path, ca: _Ca, names: list[str], now: datetime) -> bool:
    """Whether the server certificate in ``where`` is this CA's, for ``names``, with its key, and has long left."""
    from cryptography import x509

    try:
        chain = x509.load_pem_x509_certificates((where / CERT).read_bytes())
    except (OSError, ValueError):
        return False
    key = _private(where / KEY)
    leaf = chain[0]
    return (
        key is not None
        and _spki(key.public_key()) == _spki(leaf.public_key())
        and leaf.issuer == ca.cert.subject
        and _spki(chain[-1].public_key()) == _spki(ca.cert.public_key())
        and sorted(_names(leaf)) == sorted(_canonical(names))
        and leaf.not_valid_after_utc - now > RENEW_WITHIN
    )


def _canonical(names: list[str]) -> list[str]:
    out = []
    for name in names:
        try:
            out.append(str(ipaddress.ip_address(name)))
        except ValueError:
            out.append(name)
    return out


def _issue(where: Path, ca: _Ca, names: list[str], now: datetime) -> None:
    """A new key and server certificate for ``names``, issued by ``ca``, written after the CA's in ``server.pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, names[0][:64])])
    ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(min(now + CERT_LIFE, ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(where / KEY, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    _write(where / CERT, cert.public_bytes(pem) + ca.cert.public_bytes(pem))
