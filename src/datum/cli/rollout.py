"""``datum rollout status|pause|resume|abort``: the fleet's manifests by revision, and the staged rollout in force."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from datum.cli.common import config_option, json_option, wide_option, wire
from datum.cli.remote import Server, server_options


@click.group()
def rollout() -> None:
    """The fleet's manifests by revision: which hosts run which, and how they fare."""


@rollout.command()
@config_option
@server_options
@json_option
@wide_option
def status(config: str | None, remote: Server | None, as_json: bool, wide: bool) -> None:
    """Per revision of `[fleet] manifests`, newest first: how many hosts run it, converged, failed, other.

    A revision is one state of the directory: its git commit (`<commit>+dirty.<hex>` with uncommitted
    changes), else `sha256:` of its files. The current one (marked `*`) is the directory's revision now,
    as this configuration reads it (with --server: the one that server serves); first seen is when a server
    first served it. Then, with staged rollouts ([fleet.rollout]), the rollout in force: its state, its
    waves, and the hosts that failed on it when it halted. With --json: as GET /v1/revisions answers it,
    and `rollout` as the first of GET /v1/rollouts.
    """
    from datum.api.models import RevisionList, RolloutList
    from datum.cli import render

    now = datetime.now(UTC)
    if remote is not None:
        found = RevisionList.model_validate(remote.get("/v1/revisions"))
        staged = RolloutList.model_validate(remote.get("/v1/rollouts")).rollouts[:1]
    else:
        from datum.api.routes.revisions import revision_list
        from datum.api.routes.rollouts import rollout_list
        from datum.fleet.revision import revision
        from datum.fleet.rollouts.status import status as rollout_status
        from datum.store.rollouts import latest

        with wire(config) as w:
            directory = w.settings.fleet.manifests
            current = revision(directory) if directory is not None else None
            ruling = latest(w.store) if w.settings.fleet.rollout is not None else None
            found = revision_list(rollout_status(w.store, w.settings.fleet.stale_after, now, current, ruling))
            staged = rollout_list(w.store, w.settings.fleet, limit=1).rollouts
    if as_json:
        doc = found.dump()
        if staged:
            doc["rollout"] = staged[0].dump()
        click.echo(json.dumps(doc, indent=2))
        return
    out = render.console(wide)
    render.revisions(found, out, render.Times(now, wide))
    if staged:
        render.rollout(staged[0], out, render.Times(now, wide))


def _command(action: str, config: str | None, remote: Server | None, as_json: bool, reason: str | None = None) -> None:
    """One of pause, resume, abort: through the API (--server, --token-file: Cedar decides) or on the store."""
    from datum.api.models import RolloutCommandAnswer

    if remote is not None:
        done = RolloutCommandAnswer.model_validate(
            remote.call("POST", f"/v1/rollouts/current/{action}", {"reason": reason})
        )
    else:
        from datum.api.front.authz import Action
        from datum.api.routes.rollouts import answered
        from datum.fleet.rollouts.command import act
        from datum.store import audit

        with wire(config) as w:
            # recorded in the audit log with the change (a command the rollout's state refuses changes nothing: no row)
            entry = audit.local(Action.MANAGE_ROLLOUT, 'Server::"datum"', f"datum rollout {action}")
            with audit.acting(entry):
                done = answered(w.store, w.settings.fleet,
                                act(w.store, w.settings.fleet, action, audit.local_principal(), reason))
    answer = done.dump()
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    from datum.core.vocab import COMMANDS, RolloutAct
    from datum.fleet.rollouts.command import DONE_WORDS

    ro = answer["rollout"]
    click.echo(f"rollout {ro['id']} of revision {ro['revision']} {DONE_WORDS[action]}: now {ro['state']}"
               f" (wave {ro['wave']} of {ro['lastWave']})")
    if COMMANDS[action] is RolloutAct.ABORTED:
        returned = answer.get("hostsReturned") or []
        click.echo(f"previous revision {ro.get('previous')} is served to everyone again; "
                   f"{len(returned)} hosts had taken {ro['revision']} and get it back"
                   + (": " + ", ".join(returned) if returned else ""))


_reason = click.option("--reason", default=None, help="Why, in your words: kept with the transition (datum events --type rollout).")


_HELP = {
    "pause": "Release no further wave of the rollout in force (hosts already released keep the new revision).",
    "resume": "Roll a paused or halted rollout again (a halted one: accepting the failures it names, datum rollout status).",
    "abort": "Serve the previous revision to everyone again, and say which hosts had taken the new one.",
}


def _steer(action: str) -> click.Command:
    @config_option
    @server_options
    @_reason
    @json_option
    def run(config: str | None, remote: Server | None, reason: str | None, as_json: bool) -> None:
        _command(action, config, remote, as_json, reason)

    return click.command(action, help=_HELP[action] + " With --server: Cedar fleet:ManageRollout.")(run)


for _action in _HELP:
    rollout.add_command(_steer(_action))
