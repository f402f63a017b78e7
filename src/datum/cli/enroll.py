"""``datum enroll create|list|approve|deny`` and ``datum host revoke|forget``: hosts joining with their own key.

The work is ``datum.fleet.enroll``'s, on the server's store; these commands are
run where ``datum token create`` is (the server's configuration).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from datum.cli.common import config_option, json_option, wide_option
from datum.core.vocab import IdentityState


@contextmanager
def _store(config: str | None) -> Iterator[tuple[Any, Any]]:
    """(the settings, the store) of ``config``; the store closed after."""
    from datum.config import load_settings
    from datum.store import open_store

    settings = load_settings(config)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait)
    try:
        yield settings, store
    finally:
        store.dispose()


def _duration(_ctx: Any, _param: Any, value: str) -> Any:
    from datum.config import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _server_url(settings: Any, given: str | None) -> str:
    """The URL a host reaches the server at: ``--server``, else ``[enroll] url``, else where it listens."""
    if given:
        return given
    if settings.enroll.url:
        return str(settings.enroll.url)
    host = settings.server.host
    scheme = "https" if settings.server.https else "http"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{settings.server.port}"


def _pin(settings: Any, url: str) -> str | None:
    """The pin a host trusts the server by (``datum tls show``'s), for an https URL when this server speaks TLS."""
    from datum.fleet.tls import described

    if not url.startswith("https://"):
        return None
    served = described(settings)
    return None if served is None else str(served.pin)


def _labels(_ctx: Any, _param: Any, given: tuple[str, ...]) -> dict[str, str]:
    """``--label KEY=VALUE`` (again for more) as a mapping; a repeated key is refused."""
    labels: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        if key in labels:
            raise click.BadParameter(f"label {key!r} is given twice")
        labels[key] = value
    return labels


@click.group()
def enroll() -> None:
    """Join tokens for hosts to enroll with their own key, and the requests waiting for a decision."""


@enroll.command()
@click.option("--host", default=None, help="The one host this token enrolls: single use, and its approval.")
@click.option("--pattern", default=None, help="Names it enrolls ('web-*'): each request waits for the approval "
              "hook ([enroll] approve) or datum enroll approve.")
@click.option("--uses", type=int, default=1, show_default=True, help="How many hosts may enroll with it (--pattern).")
@click.option("--ttl", default="24h", show_default=True, callback=_duration, help="How long it can be used.")
@click.option("--group", default=None, help="The group the hosts enrolled with it are recorded in.")
@click.option("--replace", is_flag=True, help="A host enrolling with it takes over its name from another key "
              "(a rebuilt host).")
@click.option("--label", "labels", multiple=True, callback=_labels, metavar="KEY=VALUE",
              help="A label given to each host enrolled with it (again for more): nodes.yaml matches on it as on its "
              "own labels:, which win; never the host's to say.")
@click.option("--server", default=None, help="The server's URL as hosts reach it (default: [enroll] url, else "
              "where this server listens).")
@config_option
@json_option
def create(host: str | None, pattern: str | None, uses: int, ttl: Any, group: str | None, replace: bool,
           labels: dict[str, str], server: str | None, config: str | None, as_json: bool) -> None:
    """Make a join token, shown once: the last line is the command to run on the host."""
    from datum.fleet.enroll import create_join

    with _store(config) as (settings, store):
        url = _server_url(settings, server)
        pin = _pin(settings, url)  # before the token: one made and never shown would be no use
        token, made = create_join(store, datetime.now(UTC), host=host, pattern=pattern, uses=uses, ttl=ttl,
                                  group=group, replace=replace, labels=labels)
    line = f"datum agent enroll --server {url} --join {token}" + (f" --pin {pin}" if pin else "")
    if as_json:
        click.echo(json.dumps({**made.as_json(), "token": token, "command": line}, indent=2))
        return
    names = f"host {host}" if host else f"hosts named {pattern!r}, {uses} at most"
    if labels:
        names += " labelled " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    approval = "" if host else " (each request waits for the approval hook or datum enroll approve)"
    click.echo(f"join token {made.id} for {names}{approval}, until {made.expires_at.isoformat(timespec='seconds')} "
               "(stored as a SHA-256 hash; it is not shown again). On the host, run:", err=True)
    click.echo(line)


@enroll.command(name="list")
@click.option("--state", "states", multiple=True, type=click.Choice([s.value for s in IdentityState]),
              help="Only hosts in this state (again for more; datum explain STATE says what each means).")
@config_option
@json_option
@wide_option
def list_enrolled(states: tuple[str, ...], config: str | None, as_json: bool, wide: bool) -> None:
    """Hosts that enrolled, in the order of --state's choices (pending first), and the join tokens still open."""
    from datum.cli import render
    from datum.fleet.enroll import identities, join_tokens_open

    now = datetime.now(UTC)
    with _store(config) as (_settings, store):
        found = identities(store, states or tuple(IdentityState))
        open_tokens = join_tokens_open(store, now)
    if as_json:
        click.echo(json.dumps({"hosts": [i.as_json() for i in found],
                               "joinTokens": [t.as_json() for t in open_tokens]}, indent=2))
        return
    out, times = render.console(wide), render.Times(now, wide)
    if not found:
        out.print("no host has enrolled: datum enroll create --host NAME makes a join token")
    else:
        t = render.table()
        for column in ("host", "state", "key", "since", "why"):
            t.add_column(column, overflow="fold", no_wrap=column in ("state", "since"))
        for i in found:
            t.add_row(render.text(i.host), render.text(i.state), render.text(i.fingerprint if wide else i.fingerprint[:23]),
                      times(i.changed_at.isoformat()), render.text(i.reason or ""))
        out.print(t)
    for j in open_tokens:
        out.print(f"join token {j.id}: {j.host or repr(j.pattern)}, {j.used} of {j.uses} used, until "
                  f"{j.expires_at.isoformat(timespec='seconds')}" + (", --replace" if j.replace else ""))


def _decision(name: str, act: Callable[..., Any], verb: str, doc: str) -> click.Command:
    @click.command(name=name, help=doc)
    @click.argument("host")
    @config_option
    @json_option
    def command(host: str, config: str | None, as_json: bool) -> None:
        from datum.api.front.tokens import RECHECK
        from datum.store import audit

        action = {"approve": audit.APPROVE_HOST, "deny": audit.DENY_HOST, "revoke": audit.REVOKE_HOST,
                  "forget": audit.FORGET_HOST}[name]
        said = f"datum {'host' if name in ('revoke', 'forget') else 'enroll'} {name} {host}"
        with _store(config) as (_settings, store):
            # recorded in the audit log with the change (a decision that changes nothing: no row)
            with audit.acting(audit.local(action, audit.cedar_uid("Host", host), said)):
                done = act(store, host, datetime.now(UTC))
        found, ended = done if isinstance(done, tuple) else (done, 0)
        if as_json:
            click.echo(json.dumps({**found.as_json(), "sessionsEnded": ended}, indent=2))
            return
        tail = f"; {ended} of its tokens ended: running servers refuse them within {RECHECK:g} s" if ended else ""
        now_is = f" (it was {found.state})" if name == "forget" else ""
        click.echo(f"host {found.host} ({found.fingerprint}) {verb}{now_is}{tail}")

    return command


def _act(name: str) -> Callable[..., Any]:
    def act(store: Any, host: str, now: datetime) -> Any:
        from datum.fleet import enroll as enrollment

        if name == "forget":
            return enrollment.forget(store, host)
        return getattr(enrollment, name)(store, host, now)

    return act


enroll.add_command(_decision("approve", _act("approve"), "approved",
                             "Approve HOST's pending (or denied) request: it may have sessions from its key."))
enroll.add_command(_decision("deny", _act("deny"), "denied",
                             "Deny HOST's request (or end an active host's sessions and deny it)."))


@click.group()
def host() -> None:
    """An enrolled host's identity: revoke its sessions, or forget it so the name may enroll again."""


host.add_command(_decision("revoke", _act("revoke"), "revoked",
                           "End every session of HOST (and every agent token bound to it) on every server within "
                           "2 s; it has no other until forgotten."))
host.add_command(_decision("forget", _act("forget"), "forgotten",
                           "Remove HOST's identity (and end its sessions): the name may enroll again, with any key "
                           "(a rebuilt host)."))
