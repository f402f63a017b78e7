"""``datum apply`` and ``datum plan`` without click: the pass, its lines, the report's delivery, the reboot.

``datum apply`` is thin: the idle pass (``datum.host.idle``) or else the engine's
(``datum.host.agent.apply``: lock, pass, verdict, persist), then what a person or a
server is given, in the contract's order (``deliver``): lines or JSON, the report
posted, the reboot.

``apply``'s options are declared once, in ``APPLY_OPTIONS``: ``parse_apply`` reads a
plain command line with them here, so an idle pass never imports click (about a fifth
of its time); the click command (``datum.cli.host``) is built from the same
declarations, and answers everything else (``--help``, an unknown or malformed option).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # an idle pass imports no typing (datum.host.idle)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class Option:
    """One command-line option: its flag, the keyword it fills, whether it takes a value, the
    values it allows, the kind of path it names (``file``: not a directory; ``dir``: not a
    file), the environment variable it falls back on, its default and its help."""

    __slots__ = ("flag", "keyword", "takes_value", "choices", "path", "envvar", "default", "help")
    default: Any

    def __init__(self, flag: str, keyword: str, help: str, *, takes_value: bool = True,  # noqa: A002
                 choices: tuple[str, ...] | None = None, path: str | None = None,
                 envvar: str | None = None, default: Any = None) -> None:
        self.flag, self.keyword, self.help, self.takes_value = flag, keyword, help, takes_value
        self.choices, self.path, self.envvar = choices, path, envvar
        self.default = default if takes_value else False


ROOT = Option("--root", "root", "Every path resolves inside it.", path="dir", default="/")
STATE = Option(
    "--state", "state",
    "The host's local state file, a path; never a store URL (default: the configuration's "
    "[host] state, else $DATUM_HOME/agent.db).",
)
JSON = Option("--json", "as_json", "Print JSON for machines.", takes_value=False)
CONFIG = Option("--config", "config", "TOML configuration (default: $DATUM_CONFIG).", path="file")
OUTSIDE = Option(
    "--allow-source-outside", "allow_outside", "Let a source: name a file outside the manifest's directory.",
    takes_value=False,
)
# What a client trusts of its Datum server over https (``datum.trust``): datum apply --report-to, datum agent.
CA_FILE = Option(
    "--ca-file", "ca_file",
    "Trust the server's certificate when this CA (a PEM file) issued it, instead of the system's CAs "
    "(or $DATUM_CA_FILE).",
    path="file", envvar="DATUM_CA_FILE",
)
PIN = Option(
    "--pin", "pin",
    "Trust only a server presenting this key, checked on every connection: sha256:<hex> of a certificate's "
    "public key, as datum tls show prints it (or $DATUM_PIN).",
    envvar="DATUM_PIN",
)
def click_path(kind: str | None) -> Any:
    """click's type for a path of ``kind`` (``refused_path`` says the same of a path parsed by hand)."""
    import click

    return click.Path(dir_okay=False) if kind == "file" else click.Path(file_okay=False) if kind == "dir" else None


def option(spec: Option) -> Callable[[Any], Any]:
    """The click option ``spec`` declares, for the commands that build their options with click (``datum
    apply``'s own, ``datum agent``'s, every ``--server`` command's trust): click is imported here, never on
    an idle pass, which parses ``APPLY_OPTIONS`` by hand."""
    import click

    if not spec.takes_value:
        return click.option(spec.flag, spec.keyword, is_flag=True, help=spec.help)
    return click.option(
        spec.flag,
        spec.keyword,
        type=click.Choice(list(spec.choices)) if spec.choices else click_path(spec.path),
        default=spec.default,
        show_default=spec.default is not None,
        envvar=spec.envvar,
        help=spec.help,
    )


APPLY_OPTIONS = (
    ROOT,
    Option("--mode", "mode", "Default: the host configuration's mode.", choices=("enforce", "observe")),
    STATE,
    JSON,
    CONFIG,
    Option("--report-to", "report_to", "A Datum server URL to post the pass report to."),
    Option("--token", "token", "Bearer token for --report-to (or $DATUM_TOKEN).", envvar="DATUM_TOKEN"),
    CA_FILE,
    PIN,
    OUTSIDE,
)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def trusted(ca_file: str | None, pin: str | None) -> Any:
    """The ``datum.trust.Trust`` of ``--ca-file`` and ``--pin``; a usage error saying what is wrong with them."""
    from datum.trust import Untrustworthy, trust

    try:
        return trust(ca_file, pin)
    except Untrustworthy as exc:
        from datum.core.findings import ErrorCode, FieldError, Finding, Problem

        raise Problem([Finding(ErrorCode.USAGE, str(exc), fields=(FieldError(exc.option, str(exc)),))]) from None


def host_config(config: str | None) -> Any:
    """The agent's configuration, validated in full (``datum.config``, pydantic)."""
    from datum.config import load_settings
    from datum.host.compiled import HostConfig

    return HostConfig.from_settings(load_settings(config))


def apply(
    manifest: str,
    root: str = ROOT.default,
    mode: str | None = None,
    state: str | None = None,
    as_json: bool = False,
    config: str | None = None,
    report_to: str | None = None,
    token: str | None = None,
    allow_outside: bool = False,
    ca_file: str | None = None,
    pin: str | None = None,
) -> int:
    """``datum apply``: the idle pass, else the engine's; then its lines (or JSON), the report
    posted, the reboot (``deliver``); the exit code."""
    from datum.host import idle

    trust = trusted(ca_file, pin) if ca_file or pin else None  # refused before the pass, not after
    result: Any = idle.run(manifest, root, mode, state, config, allow_outside)  # Done, or the lock held
    if not isinstance(result, idle.Done):
        from datum.host import agent

        progress = _progress(as_json)
        try:  # the engine, under the lock the idle pass may hand over
            result = agent.apply(
                manifest, root=root, mode=mode, state=state, config=config, allow_outside=allow_outside,
                progress=progress, held=result,
            )
        finally:
            if progress is not None:
                progress.close()
    return deliver(result, as_json, report_to, token, trust=trust)


def plan(manifest: str, root: str = ROOT.default, as_json: bool = False, config: str | None = None,
         allow_outside: bool = False) -> int:
    """``datum plan``: an observe pass that persists nothing, with diffs; the exit code."""
    from datum.host import agent

    progress = _progress(as_json)
    try:
        result = agent.plan(manifest, root=root, config=config, allow_outside=allow_outside, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    return deliver(result, as_json, plan=True)


def deliver(result: Any, as_json: bool, report_to: str | None = None, token: str | None = None,
            plan: bool = False, trust: Any = None) -> int:
    """A pass whose report is persisted (an idle pass's ``Done`` or the engine's ``PassResult``),
    given out in the contract's order: its lines (or its report as JSON) and warnings, the report
    posted to ``report_to`` (else the configuration's), then the reboot; the exit code. A ``plan``
    shows its diffs, and posts nothing."""
    from datum.host.idle import Done

    if as_json:
        import json

        sys.stdout.write(json.dumps(result.report, indent=2) + "\n")
    elif isinstance(result, Done):  # an idle pass's lines: the engine's, kept with its entry
        sys.stdout.write(result.lines)
    else:
        from datum.host.output import echo_lines, pass_lines

        echo_lines(pass_lines(result.report, plan=plan))
    sys.stdout.flush()
    for warning in result.warnings:
        warn(warning)
    chosen = result.config
    target = report_to or (chosen.report_to if chosen is not None else None)
    if target and not plan:  # a plan persists nothing, and posts nothing
        from datum.host.remote import post_report

        report = result.report
        chosen_token = token or (chosen.token if chosen is not None else None)
        deadline = chosen.answer_deadline.total_seconds() if chosen is not None else None  # [agent] answer_deadline
        if why := post_report(target, report["host"], report, chosen_token, trust=trust,
                              **({"deadline": deadline} if deadline else {})):
            warn(f"the pass report was not delivered: {why}")
    if result.reboot_now:
        reboot(chosen, str(result.state_path), result.report)
    code: int = result.exit_code
    return code


def _progress(as_json: bool) -> Any:
    """``[12/300] applying File[x]`` on a terminal while a pass runs (none under ``--json``)."""
    from datum.host.output import ProgressLine

    return None if as_json else ProgressLine()


def reboot(chosen_config: Any, state_path: str, report: dict[str, Any]) -> bool:
    """Run the reboot command after the report is persisted; record a failure. True when it started."""
    from datum.host.reboot import reboot_and_record

    command = chosen_config.reboot_command
    print(f"rebooting: {command}", file=sys.stderr, flush=True)
    why = reboot_and_record(command, state_path, report)
    if why is None:
        return True
    warn(f"the reboot command failed: {why}")
    return False


# --- the arguments of ``datum apply``, when they are plain ----------------------------------


def refused_path(option: Option | None, value: str) -> bool:
    """Whether click's ``Path`` for ``option`` (None: the MANIFEST argument, a file) would refuse
    ``value``: a directory where a file is wanted, a file where a directory is."""
    kind = "file" if option is None else option.path
    if kind == "file":
        return os.path.isdir(value)
    return kind == "dir" and os.path.exists(value) and not os.path.isdir(value)


def parse_apply(args: list[str]) -> dict[str, Any] | None:
    """``apply``'s keywords from ``args`` (after ``apply``), or None for anything the click command
    must answer: help, an unknown, repeated or malformed option, a value it would refuse."""
    options = {o.flag: o for o in APPLY_OPTIONS}
    given: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, eq, value = arg.partition("=")
        option = options.get(name)
        if option is None or option.keyword in given:
            return None
        if not option.takes_value:
            if eq:
                return None
            given[option.keyword] = True
            continue
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        if (option.choices is not None and value not in option.choices) or refused_path(option, value):
            return None
        given[option.keyword] = value
    if len(positional) != 1 or refused_path(None, positional[0]):
        return None
    for option in APPLY_OPTIONS:
        if option.envvar and option.keyword not in given:
            given[option.keyword] = os.environ.get(option.envvar) or None
    return {"manifest": positional[0], **given}
