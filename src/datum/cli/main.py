"""The ``datum`` entry point: a lazy command group, and one way to report an error.

Subcommands are imported only when they run, so ``datum apply`` never pays
for the HTTP server stack; an ``apply`` with plain arguments does not import
click at all (``datum.cli.passes``).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # an idle ``datum apply`` imports no typing (datum.host.idle)
if TYPE_CHECKING:
    from typing import Any

    import click

    from datum.core.findings import Problem

# command name -> (module, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "reconcile": ("datum.cli.reconcile", "reconcile", "Run N passes of one reconciler now."),
    "drift": ("datum.cli.reconcile", "drift", "Show a reconciler's drift report."),
    "reconcilers": ("datum.cli.reconcile", "reconcilers", "List the reconcilers and their health."),
    "apply": ("datum.cli.host", "apply", "Converge this host to a manifest in one pass."),
    "plan": ("datum.cli.host", "plan", "Show what a pass would change, with diffs."),
    "validate": ("datum.cli.host", "validate", "Validate a manifest: every finding at once."),
    "status": ("datum.cli.host", "status", "The persisted host state, without running a pass."),
    "hosts": ("datum.cli.fleet", "hosts", "The fleet's hosts a page at a time: state, reason, counts."),
    "rollout": ("datum.cli.rollout", "rollout", "The fleet's manifests by revision, and staged rollouts: status, pause, resume, abort."),
    "history": ("datum.cli.history", "history", "A host's kept passes, newest first: when, state, resources."),
    "events": ("datum.cli.history", "events", "What changed, failed, drifted or was blocked across the fleet."),
    "reboots": ("datum.cli.fleet", "reboots", "The fleet's reboot leases; clear one whose host will not come back."),
    "schema": ("datum.cli.host", "schema", "Print the manifest's JSON Schema (--nodes: nodes.yaml's)."),
    "reboot": ("datum.cli.host", "reboot", "Reboot when the last pass found it needed."),
    "serve": ("datum.cli.serve", "serve", "Serve the HTTP API and the web page, ticking the reconcilers."),
    "store": ("datum.cli.store", "store", "The server's store: datum store migrate."),
    "token": ("datum.cli.token", "token", "Mint bearer tokens for the HTTP API."),
    "tls": ("datum.cli.tls", "tls", "The server's TLS certificate: its CA file, pin, names and expiry."),
    "authz": ("datum.cli.authz", "authz", "Ask the server's Cedar policies who may do what: explain."),
    "enroll": ("datum.cli.enroll", "enroll", "Join tokens for hosts to enroll with their own key; approve, deny."),
    "host": ("datum.cli.enroll", "host", "An enrolled host's identity: revoke its sessions, or forget it."),
    "audit": ("datum.cli.audit", "audit", "Who did what: the audit log, and verifying its hash chain."),
    "agent": ("datum.cli.agent", "agent", "Run as this host's agent: fetch its manifest, converge, report."),
    "explain": ("datum.cli.explain", "explain", "What a drift reason or state means, and what to do."),
}

def _plugin_commands() -> dict[str, tuple[str, str]]:
    from datum.plugins import plugin_commands

    return {k: v for k, v in plugin_commands().items() if k not in COMMANDS}


def _group() -> click.Group:
    """The click group of every command (click imported here, not for a plain ``apply``)."""
    import click

    class LazyGroup(click.Group):
        """A group whose subcommands are imported on first use; plugins add theirs (``datum bucket``)."""

        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted({*COMMANDS, *_plugin_commands()})

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            from datum.cli.exits import document

            spec = COMMANDS.get(cmd_name)
            if spec is not None:
                module, attr, _help = spec
                import importlib

                command: click.Command = getattr(importlib.import_module(module), attr)
                return document(command, cmd_name)  # type: ignore[no-any-return]
            declared = _plugin_commands().get(cmd_name)
            if declared is None:
                return None
            from datum.plugins.spec import resolve

            found = resolve(declared[0])
            return document(found, cmd_name) if isinstance(found, click.Command) else None  # type: ignore[no-any-return]

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            plugins = _plugin_commands()
            rows = [
                (name, COMMANDS[name][2] if name in COMMANDS else f"The {plugins[name][1]} reconciler plugin's command.")
                for name in self.list_commands(ctx)
            ]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(package_name="datum")
    def cli() -> None:
        """Datum converges hosts and control-plane resources to their desired state, and says where they stand.

        Each command's --help ends with its exit codes. Shell completion: see docs/host.md
        (eval "$(_DATUM_COMPLETE=bash_source datum)").
        """

    return cli


def _echo(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def report_problem(problem: Problem, as_json: bool) -> int:
    """Print ``problem`` in the contract's error shape (JSON) or readably; return the exit code.

    A pass that ran and could not be stored (``datum apply`` on a full or read-only
    store) carries its report: its lines are printed first, then the store's error.
    """
    report = getattr(problem, "report", None)
    if isinstance(report, dict) and not as_json:
        from datum.host.output import echo_lines, pass_lines

        echo_lines(pass_lines(report))
    if as_json:
        import json

        _echo(json.dumps(problem.to_json(), indent=2))
    else:
        for finding in problem.findings:
            _echo(f"error: {finding.message}", err=True)
            for f in finding.fields:
                where = f.field or "(document)"
                _echo(f"  {where}: {f.message}", err=True)
    from datum.core.findings import ErrorCode  # here: an idle ``datum apply`` never gets this far

    return ErrorCode.exit_of(problem.code)


def _database_error(exc: BaseException) -> bool:
    """A DBAPI or SQLAlchemy error that no store boundary turned into a finding."""
    return any(
        (k.__module__ or "").split(".")[0] in ("sqlite3", "sqlalchemy", "psycopg") and k.__name__.endswith("Error")
        for k in type(exc).__mro__
    )


def unexpected(exc: BaseException) -> Problem:
    """An error no layer turned into a finding: say what it was, not where in the code.

    A database error is the store's fault (69), told by its cause, never by the SQL it ran.
    """
    if _database_error(exc):
        from datum.store.engine import fault

        return fault(None, exc)
    from datum.core.findings import ErrorCode, Problem

    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return Problem.one(ErrorCode.UNAVAILABLE, f"{exc.strerror or exc}{where}")
    return Problem.one(
        ErrorCode.INTERNAL,
        f"unexpected {type(exc).__name__}: {exc} (set DATUM_DEBUG=1 to see where)",
    )


def main(argv: list[str] | None = None) -> Any:
    """Run the CLI and turn every error into the contract's shape and exit code.

    ``datum.core.findings`` is imported once something failed: a pass that raised no
    ``Problem`` never loads it (nor ``dataclasses``).
    """
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    try:
        rc = _plain_apply(args)
        if rc is None:
            rc = _click(args, as_json)
    except KeyboardInterrupt:
        _echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - never a stack trace; DATUM_DEBUG=1 shows it
        from datum.core.findings import Problem

        if isinstance(exc, Problem):
            sys.exit(report_problem(exc, as_json))
        if os.environ.get("DATUM_DEBUG"):
            raise
        sys.exit(report_problem(unexpected(exc), as_json))
    sys.exit(rc if isinstance(rc, int) else 0)


def _plain_apply(args: list[str]) -> int | None:
    """``datum apply`` run without click when its arguments are plain; None otherwise."""
    if not args or args[0] != "apply":
        return None
    from datum.cli.passes import apply, parse_apply

    given = parse_apply(args[1:])
    return None if given is None else apply(**given)


def _click(args: list[str], as_json: bool) -> Any:
    """The click group's answer; click's own errors turned into the contract's shape and codes."""
    import click

    try:
        return _group().main(args=args, prog_name="datum", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        from datum.core.findings import EXIT_USAGE, ErrorCode

        return EXIT_USAGE
    except click.UsageError as exc:
        from datum.core.findings import ErrorCode, Finding, Problem

        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        return report_problem(Problem([Finding(ErrorCode.USAGE, exc.format_message() + hint)]), as_json)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        from datum.core.findings import ErrorCode, Finding, Problem

        return report_problem(Problem([Finding(ErrorCode.INVALID_INPUT, exc.format_message())]), as_json)
