"""``datum agent``: fetch this host's effective manifest, run a pass, keep the report and send it; repeat."""

from __future__ import annotations

import os
from typing import Any

import click

from datum.cli.host import option
from datum.cli.passes import CA_FILE, PIN


def _unit() -> str:
    """The shipped unit: one file, packaged with Datum (contrib/systemd/ links to it, the .deb copies it)."""
    from importlib.resources import files

    return files("datum.agent").joinpath("datum-agent.service").read_text()


def _duration(_ctx: Any, param: Any, value: str) -> Any:
    from datetime import timedelta

    from datum.config import parse_duration

    if param.name == "splay" and value.strip() in ("0", "0s"):
        return timedelta(0)  # no splay: every host on the interval exactly
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _token(path: str) -> str:
    from datum.core.findings import Problem

    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise Problem.one("INVALID_INPUT", f"cannot read the token file {path}: {exc.strerror}") from exc
    if not token:
        raise Problem.one("INVALID_INPUT", f"the token file {path} is empty")
    if os.stat(path).st_mode & 0o004:
        click.echo(f"warning: the token file {path} is readable by every user; chmod 600 it", err=True)
    return token


@click.command()
@click.option("--server", default=None, help="The Datum server's URL (https://host:port).")
@click.option("--token-file", "token_file", type=click.Path(dir_okay=False), default=None,
              help="A file holding this host's bearer token (datum token create --principal agent --host NAME).")
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
def agent(
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
    """Run this host as a Datum agent: fetch its manifest from SERVER, converge, report; keep reports while the server is away."""
    if print_unit:
        click.echo(_unit(), nl=False)
        return 0
    if not server or not token_file:
        raise click.UsageError("--server and --token-file are required")
    if not server.startswith(("http://", "https://")):
        raise click.UsageError(f"--server {server!r} is not an http:// or https:// URL")
    from datum.agent.loop import Options, cycle, run_forever
    from datum.cli.passes import trusted
    from datum.config import load_settings
    from datum.core.vocab import Mode
    from datum.host.agent import state_file
    from datum.host.compiled import HostConfig

    url, token_path = server, token_file  # not None (checked above), for the closure
    trust = trusted(ca_file, pin)  # read once: a CA file that cannot be read is said at start

    def options() -> Options:
        """The options from the configuration and the token file as they are now (re-read by the loop)."""
        host_config = HostConfig.from_settings(load_settings(config))
        path = state_file(state, host_config)
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)  # its state is root's alone
        return Options(
            server=url,
            token=_token(token_path),
            root=root,
            state_path=path,
            config=host_config,
            mode=Mode(mode) if mode else host_config.mode,
            interval=interval,
            splay=splay,
            trust=trust,
        )

    opts = options()
    if once:
        done = cycle(opts)
        click.echo(done.line, err=True)
        code: int = done.exit_code
        return code
    return run_forever(opts, lambda line: click.echo(line, err=True), reload=options)
