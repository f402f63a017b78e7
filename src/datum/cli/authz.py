"""``datum authz explain``: what the server's Cedar policies decide for a token, and which policy decided.

The answer is the server's own: the same app state ``datum serve`` builds from the configuration (the
policy file or the shipped default, the plugins' schema fragments, the store's tokens) and the same decision
function a request meets (``datum.api.front.security.decision``), the host's recorded group included.
The token is read from a file and never printed; the principal it speaks for is.
"""

from __future__ import annotations

import json
import re

import click

from datum.cli.common import config_option, json_option

_RESOURCE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)::("(?:[^"\\]|\\.)*")$')


def resource_of(text: str) -> tuple[str, str]:
    """``Host::"web1"`` (a Cedar entity as Cedar writes it) as (type, id); ``Server`` alone is ``Server::"datum"``."""
    from datum.api.front.authz import SERVER
    from datum.core.findings import ErrorCode, Problem

    if text == "Server":
        return SERVER
    found = _RESOURCE.match(text.strip())
    if found is None:
        raise Problem.one(
            ErrorCode.USAGE, f"not a Cedar entity: {text!r} (write it as Cedar does: Host::\"web1\", Server::\"datum\", "
            "Reconciler::\"buckets\")",
        )
    return found.group(1), str(json.loads(found.group(2)))


@click.group()
def authz() -> None:
    """Ask the server's Cedar policies who may do what."""


@authz.command()
@click.option("--token-file", "token_file", required=True, type=click.Path(dir_okay=False),
              help="A file holding the token to ask about (never printed).")
@click.argument("action")
@click.argument("resource")
@config_option
@json_option
def explain(token_file: str, action: str, resource: str, config: str | None, as_json: bool) -> None:
    """Whether the token in --token-file may take ACTION (fleet:ReadHost, ...) on RESOURCE (Host::"web1",
    Server::"datum", ...), as the server decides it, and the policy that decided.

    A host's group is the one the store recorded for it (what a token scoped to host groups is checked
    against). With --json: one object, `decision` (allow or deny), `principal`, `action`, `resource`,
    `group` and `policies` (the @id of each policy that decided; empty: none permits it, deny by default).
    """
    from datum.api.app import create_app
    from datum.api.front.authz import shipped_schema
    from datum.api.front.security import cedar_uid, decision, group_of
    from datum.cli.agent import _token
    from datum.config import load_settings
    from datum.core.findings import ErrorCode, Problem
    from datum.plugins import load
    from datum.store import open_store

    token = _token(token_file)
    where = resource_of(resource)
    plugins = load()
    known = set(re.findall(r'action "([^"]+)"', shipped_schema(p.cedar_schema for p in plugins.plugins if p.cedar_schema)))
    if action not in known:
        raise Problem.one(ErrorCode.USAGE, f"no Cedar action {action!r}: one of {', '.join(sorted(known))}")
    settings = load_settings(config)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait)
    try:
        state = create_app(settings, plugins.registry(), store).state.datum
        principal = state.tokens.principal(token)
        if principal is None:
            raise Problem.one(ErrorCode.NOT_FOUND, f"the token in {token_file} is not known to this server (revoked, or "
                                           "made for another store)")
        group = group_of(state, principal, where)
        decided = decision(state, principal, action, where)
    finally:
        store.dispose()
    said = {
        "decision": "allow" if decided.allowed else "deny", "principal": principal, "action": action,
        "resource": cedar_uid(*where), "group": group, "policies": list(decided.policies),
    }
    if as_json:
        click.echo(json.dumps(said, indent=2))
    else:
        may = "may" if decided.allowed else "may not"
        place = f" (in HostGroup::{json.dumps(group)})" if group is not None else ""
        click.echo(f"{said['decision']}: {cedar_uid('Principal', principal)} {may} {cedar_uid('Action', action)} "
                   f"on {said['resource']}{place}")
        if decided.policies:
            kind = "permitted" if decided.allowed else "forbidden"
            click.echo(f"{kind} by policy {', '.join(decided.policies)}")
        else:
            click.echo("no policy permits it (deny by default)")
    raise SystemExit(0 if decided.allowed else 1)
