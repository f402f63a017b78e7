"""A fleet command through a Datum server's API: ``--server URL --token-file F`` (``DATUM_SERVER``, ``DATUM_TOKEN_FILE``).

An operator away from the server's store runs the same commands against its API: ``server_options`` adds
the two options to a command and hands it a ``Server`` (None without them: the command reads the store);
``Server.call`` is the one request they make. Each answer is read whole within ``datum.bounded``'s bounds
(a deadline, a size), redirects are not followed (the token goes to the URL given and nowhere else), and an
error answer in the contract's shape becomes the same ``Problem`` the store path raises, so the command
prints the same message and exits with the same status (``datum.cli.main``; ``datum.cli.exits`` lists them).
The token is sent as a bearer header and never printed.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from datum.core.findings import Finding

F = TypeVar("F", bound=Callable[..., Any])

ANSWER_LIMIT = 64 * 2**20  # the largest answer read: a page of 1,000 hosts, one host's whole report


def read_token(path: str) -> str:
    """The bearer token in ``path``, stripped; an unreadable or empty file is ``INVALID_INPUT`` (the path said,
    never the content). A file every user may read is warned about."""
    from datum.core.findings import ErrorCode, Problem

    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read the token file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"the token file {path} is not text") from None
    if not token:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"the token file {path} is empty")
    if os.stat(path).st_mode & 0o004:
        click.echo(f"warning: the token file {path} is readable by every user; chmod 600 it", err=True)
    return token


@dataclass(frozen=True)
class Server:
    """A Datum server's API and the token to ask it with (never in ``repr``)."""

    url: str
    token: str = field(repr=False)
    trust: Any = None  # ``datum.trust.Trust`` of --ca-file and --pin (None: the system's CAs over https)

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params)

    def call(self, method: str, path: str, params: dict[str, Any] | None = None) -> Any:
        """``method path?params``, the answer's JSON; any failure a ``Problem`` (``answered``)."""
        from datum.bounded import Unusable, request
        from datum.core.findings import ErrorCode, Problem

        query = urllib.parse.urlencode({k: _param(v) for k, v in (params or {}).items() if v is not None})
        url = self.url.rstrip("/") + path + (f"?{query}" if query else "")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        try:
            answer = request(method, url, headers, data=b"" if method == "POST" else None, limit=ANSWER_LIMIT,
                             trust=self.trust)
        except Unusable as exc:
            raise Problem.one(ErrorCode.UNAVAILABLE, str(exc)) from None
        return answered(url, answer.status, answer.reason, answer.headers.get("Location"), answer.body)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def answered(url: str, status: int, reason: str, location: str | None, body: bytes) -> Any:
    """A 2xx answer's JSON; else the ``Problem`` it says: its issues as they are (the server's codes, so the
    store path's exit statuses), or, without them, the code its status means."""
    from datum.core.findings import ErrorCode, Problem

    if 200 <= status < 300:
        try:
            return json.loads(body)
        except ValueError:
            raise Problem.one(ErrorCode.UNAVAILABLE, f"{url} answered {status} {reason} with a body that is not JSON") from None
    if 300 <= status < 400:
        raise Problem.one(
            ErrorCode.USAGE,
            f"{url} answered {status} {reason}, a redirect to {location or 'nowhere'}: not followed (the token goes "
            "only to the URL given); give --server the URL it redirects to",
        )
    findings = _issues(body)
    if findings:
        raise Problem(findings)
    from datum.core.findings import ErrorCode

    code = next((c for c in ErrorCode if c.http_status == status), ErrorCode.UNAVAILABLE if status >= 500 else ErrorCode.INVALID_INPUT)
    raise Problem.one(code, f"{url} answered {status} {reason}")


def _issues(body: bytes) -> list[Finding]:
    """The findings of an error body in the contract's shape; none when it is not one."""
    from datum.core.findings import FieldError, Finding

    try:
        issues = json.loads(body)["issues"]
        return [
            Finding(
                str(i["code"]),
                str(i["message"]) + (f" (Cedar action {i['action']})" if i.get("action") else ""),
                tuple(FieldError(str(f.get("field")), str(f.get("message"))) for f in i.get("fields") or []),
                action=i.get("action"),
            )
            for i in issues
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def connect(
    server: str | None, token_file: str | None, ca_file: str | None = None, pin: str | None = None,
) -> Server | None:
    """The server to ask, when one is named (option or environment), trusted as ``--ca-file`` and ``--pin``
    say (``datum.cli.passes.trusted``, as the agent's); None: the command reads the store."""
    if server is None and token_file is None:
        return None
    if server is None or token_file is None:
        raise click.UsageError("--server and --token-file go together (or DATUM_SERVER and DATUM_TOKEN_FILE)")
    from datum.cli.passes import trusted

    return Server(server, read_token(token_file), trusted(ca_file, pin) if ca_file or pin else None)


def server_options(fn: F) -> F:
    """``--server`` and ``--token-file`` on a fleet command, and ``--ca-file`` and ``--pin`` (the agent's, what
    to trust of it over https), handed to it as ``remote`` (a ``Server`` or None)."""
    from datum.cli.passes import CA_FILE, PIN, option

    @functools.wraps(fn)
    def run(*args: Any, server: str | None = None, token_file: str | None = None, ca_file: str | None = None,
            pin: str | None = None, **kwargs: Any) -> Any:
        return fn(*args, remote=connect(server, token_file, ca_file, pin), **kwargs)

    run = option(PIN)(run)
    run = option(CA_FILE)(run)

    run = click.option(
        "--token-file", "token_file", envvar="DATUM_TOKEN_FILE", type=click.Path(dir_okay=False), default=None,
        help="The file holding the bearer token for --server (or $DATUM_TOKEN_FILE).",
    )(run)
    run = click.option(
        "--server", envvar="DATUM_SERVER", default=None,
        help="A Datum server's URL (or $DATUM_SERVER): the command asks its API, as the token's principal may "
        "(Cedar), instead of reading the store of --config.",
    )(run)
    return run  # type: ignore[return-value]
