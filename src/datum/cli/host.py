"""``datum apply``, ``plan``, ``validate``, ``status``, ``schema`` and ``reboot``: thin commands over datum.host.

Imports stay lazy: ``datum apply`` loads neither SQLAlchemy (on a SQLite store
with its schema) nor rich nor the HTTP stack.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from datum.cli import passes
from datum.cli.passes import (
    APPLY_OPTIONS,
    CONFIG,
    JSON,
    OUTSIDE,
    ROOT,
    STATE,
    Option,
    click_path,
    option,
)
from datum.cli.remote import Server, server_options
from datum.core import hostreasons
from datum.core.vocab import HostState
from datum.host import verdict
from datum.host.verdict import unknown

F = TypeVar("F", bound=Callable[..., Any])


_CONFIG, _JSON, _STATE, _OUTSIDE, _ROOT = (option(o) for o in (CONFIG, JSON, STATE, OUTSIDE, ROOT))
_MANIFEST = click.argument("manifest", type=click_path("file"))


def _config(config: str | None) -> Any:
    return passes.host_config(config)


def _state_path(state: str | None, host_config: Any) -> str:
    from datum.host.agent import state_file

    return state_file(state, host_config)


def _apply(**given: Any) -> int:
    return passes.apply(**given)


def _with(options: tuple[Option, ...], fn: Any) -> Any:
    for spec in reversed(options):  # the first declared is the first shown
        fn = option(spec)(fn)
    return fn


# ``datum apply``: its options as ``datum.cli.passes`` declares them, for its plain parser too.
apply = click.command(
    "apply", help="Converge this host (or --root) to MANIFEST in one pass, and persist where it stands."
)(_MANIFEST(_with(APPLY_OPTIONS, _apply)))


@click.command()
@_MANIFEST
@_ROOT
@_JSON
@_CONFIG
@_OUTSIDE
def plan(manifest: str, root: str, as_json: bool, config: str | None, allow_outside: bool) -> int:
    """Show what a pass would change, with unified diffs; change nothing, persist nothing."""
    return passes.plan(manifest, root, as_json, config, allow_outside)


@click.command()
@click.argument("manifest", type=click.Path(dir_okay=False), required=False)
@_JSON
@_OUTSIDE
@click.option(
    "--fleet",
    "fleet",
    type=click.Path(file_okay=False),
    default=None,
    help="Validate a fleet directory instead: nodes.yaml and every rule's manifests, at once.",
)
def validate(manifest: str | None, as_json: bool, allow_outside: bool, fleet: str | None) -> int:
    """Validate MANIFEST whole: every finding at once, at its field path; exit 65 when not valid."""
    from datum.host.manifest import load_manifest

    if fleet is not None:
        from pathlib import Path

        from datum.fleet.effective import check_fleet

        rules, manifests = check_fleet(Path(fleet))
        if as_json:
            click.echo(json.dumps({"valid": True, "rules": rules, "manifests": manifests}))
        else:
            click.echo(f"{fleet}: valid, {rules} rules, {manifests} manifests")
        return 0
    if manifest is None:
        raise click.UsageError("give a MANIFEST, or --fleet DIR")

    loaded = load_manifest(manifest, allow_source_outside=allow_outside)
    if as_json:
        click.echo(json.dumps({"valid": True, "resources": len(loaded.resources)}))
    else:
        click.echo(f"{manifest}: valid, {len(loaded.resources)} resources")
    return 0


@click.command()
@click.option("--nodes", "nodes", is_flag=True, help="The schema of a fleet directory's nodes.yaml instead.")
def schema(nodes: bool) -> int:
    """Print the manifest's JSON Schema, or nodes.yaml's (for editors)."""
    if nodes:
        from datum.fleet.nodes_model import nodes_schema

        click.echo(json.dumps(nodes_schema(), indent=2))
        return 0
    from datum.host.schema import manifest_schema

    broken: dict[str, str] = {}
    click.echo(json.dumps(manifest_schema(broken), indent=2))
    for why in broken.values():  # the others are in the schema all the same
        _warn(why)
    return 0


def _warn(message: str) -> None:
    passes.warn(message)


NO_PASS = hostreasons.NO_PASS

# ``datum status``'s exit code: the contract's bits of ``apply`` for the state the host reads (a pass that
# is not known to have finished, or none at all, is bit 4 as in the verdict), OR-ed with the last pass's own
# bits but the one for "changed" (status changes nothing).
_PASS_BITS = verdict.bits(HostState)


def status_exit(report: dict[str, Any]) -> int:
    """The exit code of ``datum status`` showing ``report``: its state's bit, and its pass's but "changed"."""
    state = report.get("state")
    code = HostState(state).exit_bit if state in HostState._value2member_map_ else verdict.EXIT_FAILED
    bits = report.get("exitCode")
    if isinstance(bits, int) and not isinstance(bits, bool) and 0 <= bits < 64:
        code |= bits & _PASS_BITS
    return code


def _load(
    state: str | None, config: str | None, host: str | None = None, *, named_in_file: bool = False
) -> tuple[Any, str, Any, dict[str, Any] | None]:
    """(the host configuration, the host, its state file or None, its last report or None).

    The host is ``host``, else this machine's name; with ``named_in_file``, the one the file holds when it
    holds another host's reports only (a state file copied from another machine).
    """
    from datum.host.agent import host_name
    from datum.host.statefile import StateStore, Unreadable

    host_config = _config(config)
    path = _state_path(state, host_config)
    host = host or host_name(host_config)
    if not os.path.exists(path):
        return host_config, host, None, None
    store = StateStore(path)
    if named_in_file:
        held = store.hosts()
        if host not in held and len(held) == 1:
            host = held[0]
        elif host not in held and held:
            store.close()
            raise click.UsageError(
                f"{path} holds the reports of {', '.join(held)}, not of {host}: name one with --host"
            )
    try:
        return host_config, host, store, store.get(host)
    except Unreadable as exc:
        return host_config, host, store, unknown(host, str(exc))


@click.command()
@_STATE
@click.option("--host", "host", default=None,
              help="The host whose report to show, when the state file holds several (default: the host it "
              "holds, else this machine's name); with --server, the host of the fleet to show.")
@_JSON
@_CONFIG
@server_options
@click.option("--wide", is_flag=True, help="Every resource of the pass, and absolute times (UTC).")
def status(state: str | None, host: str | None, as_json: bool, config: str | None, remote: Server | None,
           wide: bool) -> int:
    """The persisted host state and last pass report, without running a pass.

    Reads the host named in the state file (one copied from another machine included); exits with the
    bits of the state it reads, as datum apply would have. With --server: the host's state and last pass as
    that server holds them (GET /v1/hosts/HOST, Cedar fleet:ReadHost), printed and exiting the same way.
    """
    from datetime import UTC, datetime

    from datum.providers.facts import read_boot_id

    if remote is not None:
        host_config = _config(config)
        host, boot = host or host_name_of(host_config), None  # the host is elsewhere: no local boot to compare
        report: dict[str, Any] | None = served(remote, host)
    else:
        host_config, host, store, report = _load(state, config, host, named_in_file=True)
        boot = read_boot_id(host_config.boot_id_file)
        if store is not None:
            report = _unfinished(store, host, report)
            store.close()
    if report is None:
        report = unknown(host, NO_PASS)
    code = status_exit(report)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return code
    from datum.cli import render

    times = render.Times(datetime.now(UTC), wide)
    notes = []
    running = report.get("passRunning")
    if running:
        notes.append(f"a pass is running since {times(running['startedAt'])} (pid {running['pid']})")
    if report.get("bootId") and boot and boot != report["bootId"] and report.get("host") == host_name_of(host_config):
        notes.append("the host has rebooted since this pass; the next pass will tell where it stands")
    from datum.core.attention import host_need

    out = render.console(wide)
    line = host_need(report)
    render.status(report, out, times, notes, line)
    render.needs_human([line] if line is not None else [], out, after=True)
    return code


def served(remote: Server, host: str) -> dict[str, Any]:
    """``host``'s last report as ``remote`` holds it (``GET /v1/hosts/{host}``), in the shape of the state file's:
    the report, with the state and reason the server reads (a host whose agent fell silent reads unknown)."""
    import urllib.parse

    from datum.api.models import HostStatus

    found = HostStatus.model_validate(remote.get(f"/v1/hosts/{urllib.parse.quote(host, safe='')}"))
    shown = found.report.model_dump(mode="json", by_alias=True, exclude_none=True) if found.report else {}
    shown.pop("reason", None)
    return {**shown, "host": found.host, "state": found.state.value, **({"reason": found.reason} if found.reason else {})}


def host_name_of(host_config: Any) -> str:
    from datum.host.agent import host_name

    return str(host_name(host_config))


def _unfinished(store: Any, host: str, report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report ``status`` shows, given a pass that started and has not persisted its report.

    A dead one makes the host ``unknown`` (the last report is no longer
    current, kept under ``lastReport``); a live one is noted as running.
    """
    from datum.host.statefile import unfinished, unfinished_reason

    record = store.unfinished()
    if record is None or record.get("node") != os.uname().nodename:
        return report  # none, or another machine's pass on a shared store
    if not (record["running"] or unfinished(record, report)):
        return report
    seen = {k: record[k] for k in ("startedAt", "pid", "node") if k in record}
    if record["running"]:
        return {**(report or unknown(host, NO_PASS)), "passRunning": seen}
    shown = {**unknown(host, unfinished_reason(record)), "unfinished": seen}
    if report is not None:
        shown["lastReport"] = report
    return shown


@click.command()
@_STATE
@_CONFIG
@_JSON
@click.option("--force", is_flag=True, help="Reboot even when no pass recorded a need.")
def reboot(state: str | None, config: str | None, as_json: bool, force: bool) -> int:
    """Reboot now if the last pass found a reboot is needed (reboot_policy manual), and record it.

    With --json: `host`, `needed` (the last pass found a need in this boot), `reason`, and `rebooting`
    (the reboot command started).
    """
    from datetime import UTC, datetime

    from datum.providers.facts import read_boot_id

    host_config, host, store, report = _load(state, config)
    need = (report or {}).get("reboot") or {}
    current = read_boot_id(host_config.boot_id_file)
    needed = bool(need.get("required")) and need.get("bootId") == current

    def said(rebooting: bool) -> None:
        if as_json:
            shown = {"host": host, "needed": needed, "reason": need.get("reason"), "rebooting": rebooting}
            click.echo(json.dumps(shown, indent=2))

    if not needed and not force:
        if store is not None:
            store.close()
        said(False)
        if not as_json:
            click.echo(
                "no reboot is needed"
                + (" (the host has rebooted since the need was found)" if need.get("required") else "")
            )
        return 0
    if store is not None and report is not None:
        need = {
            **need,
            "action": "reboot requested by 'datum reboot'",
            "requestedAt": datetime.now(UTC).isoformat(),
        }
        store.record(host, {**report, "reboot": need})
        store.close()
        report = {**report, "reboot": need}
    if not as_json:
        click.echo(f"reboot needed: {need.get('reason', 'forced')}")
    started = passes.reboot(
        host_config, _state_path(state, host_config), report or unknown(host, NO_PASS)
    )
    said(started)
    return 0 if started else 1
