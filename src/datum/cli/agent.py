"""``datum agent``: fetch this host's effective manifest, run a pass, keep the report and send it; repeat."""

from __future__ import annotations

import os
from typing import Any

import click

from datum.cli.passes import CA_FILE, PIN, option


def _unit() -> str:
    """The shipped unit: one file, packaged with Datum (contrib/systemd/ links to it, the .deb copies it)."""
    from importlib.resources import files

    return files("datum.agent").joinpath("datum-agent.service").read_text()


def _duration(_ctx: Any, param: Any, value: str) -> Any:
    from datetime import timedelta

    from datum.config import parse_duration

    if param.name in ("splay", "wait") and value.strip() in ("0", "0s"):
        return timedelta(0)  # no splay: every host on the interval exactly; no wait: the first answer
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _token(path: str) -> str:
    from datum.cli.remote import read_token

    return read_token(path)


@click.group(invoke_without_command=True)
@click.option("--server", envvar="DATUM_SERVER", default=None,
              help="The Datum server's URL (https://host:port; default: the one this host enrolled with).")
@click.option("--token-file", "token_file", envvar="DATUM_TOKEN_FILE", type=click.Path(dir_okay=False), default=None,
              help="A file holding this host's bearer token (datum token create --principal agent --host NAME); "
              "not needed once the host has enrolled (datum agent enroll): its key gives it sessions.")
@click.option("--root", type=click.Path(file_okay=False), default="/", show_default=True,
              help="Every path resolves inside it.")
@click.option("--interval", default="30m", show_default=True, callback=_duration,
              help="Time between passes at most; a change of the manifest on the server starts one within seconds.")
@click.option("--splay", default="5m", show_default=True, callback=_duration,
              help="Up to this much more, at random, so a fleet does not run in step (after a change, up to "
              "the smaller of this and 10 s).")
@click.option("--once", is_flag=True, help="One cycle, then exit with the pass's exit code.")
@click.option("--state", default=None, help="The agent's local state file, a path; never a store URL "
              "(default: the configuration's [host] state, else $DATUM_HOME/agent.db).")
@click.option("--mode", type=click.Choice(["enforce", "observe"]), default=None,
              help="enforce: change what differs from the manifest; observe: report drift and change nothing "
              "(default: the configuration's [host] mode, else enforce).")
@click.option("--config", type=click.Path(dir_okay=False), default=None, help="TOML configuration.")
@option(CA_FILE)
@option(PIN)
@click.option("--print-systemd-unit", "print_unit", is_flag=True, help="Print the systemd unit and exit.")
@click.pass_context
def agent(
    ctx: click.Context,
    server: str | None,
    token_file: str | None,
    root: str,
    interval: Any,
    splay: Any,
    once: bool,
    state: str | None,
    mode: str | None,
    config: str | None,
    ca_file: str | None,
    pin: str | None,
    print_unit: bool,
) -> int:
    """Run this host as a Datum agent: fetch its manifest from SERVER, converge, report; keep reports while the server is away.

    Authenticates with the host's key once it has enrolled (datum agent enroll), else with --token-file.
    """
    if ctx.invoked_subcommand is not None:
        return 0
    if print_unit:
        click.echo(_unit(), nl=False)
        return 0
    from datum.agent.loop import Options, cycle, run_forever
    from datum.cli.passes import trusted
    from datum.config import load_settings
    from datum.core.vocab import Mode
    from datum.host.agent import state_file
    from datum.host.compiled import HostConfig

    session = None if token_file else _session(server, state, config, ca_file, pin)
    server = server or (session.server if session is not None else None)
    if not server:
        raise click.UsageError("--server is required")
    if not server.startswith(("http://", "https://")):
        raise click.UsageError(f"--server {server!r} is not an http:// or https:// URL")
    url, token_path = server, token_file  # for the closure
    # read once: a CA file that cannot be read is said at start; an enrolled host trusts as it enrolled
    trust = session.trust if session is not None else trusted(ca_file, pin)

    def options() -> Options:
        """The options from the configuration and the token file as they are now (re-read by the loop)."""
        host_config = HostConfig.from_settings(load_settings(config))
        path = state_file(state, host_config)
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)  # its state is root's alone
        return Options(
            server=url,
            token=_token(token_path) if token_path else "",
            session=session,
            root=root,
            state_path=path,
            config=host_config,
            mode=Mode(mode) if mode else host_config.mode,
            interval=interval,
            splay=splay,
            trust=trust,
            deadline=host_config.answer_deadline.total_seconds(),
            limit=host_config.max_answer_bytes,
        )

    opts = options()
    if once:
        done = cycle(opts)
        click.echo(done.line, err=True)
        code: int = done.exit_code
        return code
    return run_forever(opts, lambda line: click.echo(line, err=True), reload=options)


def _session(server: str | None, state: str | None, config: str | None, ca_file: str | None, pin: str | None) -> Any:
    """The session this host has from its key (datum agent enroll), or a usage error saying how to have one. It
    trusts the server as --ca-file and --pin say, else as the host did when it enrolled."""
    from datum.agent.identity import Enrolled, Session, key_path, load_key
    from datum.bounded import Unusable
    from datum.cli.passes import trusted
    from datum.config import load_settings
    from datum.core.findings import ErrorCode, Problem
    from datum.host.agent import host_name, state_file
    from datum.host.compiled import HostConfig

    host_config = HostConfig.from_settings(load_settings(config))
    path = state_file(state, host_config)
    try:
        enrolled = Enrolled.read(path)
        if enrolled is None:
            raise click.UsageError(
                "--token-file is required until this host enrolls (datum agent enroll --server URL --join TOKEN)"
            )
        key = load_key(key_path(path))
    except Unusable as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, str(exc)) from exc
    if host_name(host_config) != enrolled.host:
        raise Problem.one(
            ErrorCode.INVALID_INPUT,
            f"this host enrolled as {enrolled.host}, but its configuration names it {host_name(host_config)}: "
            "enroll it again under that name (datum agent enroll)",
        )
    trust = trusted(ca_file, pin) if ca_file or pin else trusted(enrolled.ca_file, enrolled.pin)
    return Session(server or enrolled.server, enrolled.host, key, trust=trust)


@agent.command()
@click.option("--server", envvar="DATUM_SERVER", required=True, help="The Datum server's URL (https://host:port).")
@click.option("--join", "join", envvar="DATUM_JOIN", required=True,
              help="The join token datum enroll create printed (datum_j_...).")
@click.option("--root", type=click.Path(file_okay=False), default="/", show_default=True,
              help="Where the facts sent with the request are read.")
@click.option("--state", default=None, help="The agent's local state file; the key is made beside it (<state>.key).")
@click.option("--config", type=click.Path(dir_okay=False), default=None, help="TOML configuration ([host] name).")
@option(CA_FILE)
@option(PIN)
@click.option("--wait", default="2m", show_default=True, callback=_duration,
              help="How long to wait for a pending request's decision (the approval hook, datum enroll approve), "
              "asking again now and then; 0: answer with the first state.")
def enroll(server: str, join: str, root: str, state: str | None, config: str | None, ca_file: str | None,
           pin: str | None, wait: Any) -> int:
    """Make this host's key (once; it never leaves the host) and enroll with it through a join token.

    A request the join token does not approve by itself (one made for a --pattern) is pending until the approval
    hook or a person decides: this waits up to --wait for that, saying what it waits for. Afterwards datum agent
    needs neither --server nor --token-file: it has sessions from the key, and trusts the server as --ca-file and
    --pin say here (kept with the enrollment).
    """
    if not server.startswith(("http://", "https://")):
        raise click.UsageError(f"--server {server!r} is not an http:// or https:// URL")
    from datum.agent.identity import Enrolled, Refused, decided, key_here, key_path, public_of
    from datum.agent.identity import enroll as ask
    from datum.agent.loop import facts
    from datum.bounded import Unusable
    from datum.cli.passes import trusted
    from datum.config import load_settings
    from datum.core.findings import ErrorCode, Problem
    from datum.core.vocab import IdentityState
    from datum.host.agent import host_name, state_file
    from datum.host.compiled import HostConfig
    from datum.identity import fingerprint

    host_config = HostConfig.from_settings(load_settings(config))
    path = state_file(state, host_config)
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    host = host_name(host_config)
    trust = trusted(ca_file, pin)
    try:
        key = key_here(key_path(path))
        claimed = facts(root, host_config)
        answer = decided(lambda: ask(server, host, join, key, claimed, trust=trust), host, wait.total_seconds(),
                         lambda said: click.echo(said, err=True))
    except Refused as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"enrolling {host} was refused: {exc}") from exc
    except Unusable as exc:
        raise Problem.one(ErrorCode.UNAVAILABLE, f"enrolling {host} failed: {exc}") from exc
    state_now, why = str(answer.get("state")), answer.get("reason")
    if state_now == IdentityState.DENIED:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"enrolling {host} was denied: {why}")
    print_fp = fingerprint(public_of(key))
    Enrolled(server, host, print_fp, trust.ca_file and os.path.abspath(trust.ca_file), trust.pin).write(path)
    if state_now == IdentityState.ACTIVE:
        click.echo(f"enrolled {host} with key {print_fp} ({why}); start the agent: datum agent "
                   "(systemctl enable --now datum-agent)")
    else:
        click.echo(f"{host} asked to enroll with key {print_fp}: {state_now} ({why}); not decided within --wait "
                   f"{wait.total_seconds():g} s: the agent may start now (datum agent), it has sessions once the "
                   "request is approved")
    return 0
