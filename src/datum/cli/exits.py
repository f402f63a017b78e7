"""Every command's exit codes, in one table, shown at the end of its ``--help``.

``datum.cli.main`` turns errors into these codes (a finding's code decides: ``USAGE`` and
``NOT_FOUND`` 64, ``INVALID_INPUT`` and ``CONFLICT`` 65, ``UNAVAILABLE`` 69, ``UNAUTHENTICATED`` and
``FORBIDDEN`` 77, anything else 70; through ``--server`` the server's answer carries the code, or its
HTTP status stands for it: ``datum.cli.remote``); the commands
that say more (the bit flags of ``apply``, ``plan`` and ``status``, ``reconcile``'s 4 and 143,
``serve``'s busy port) add their own rows here. ``docs/host.md`` and ``docs/server.md`` show the
same table.
"""

from __future__ import annotations

from typing import Any

from datum.core.vocab import HostState

# The bits of the host states (``HostState.exit_bit``), and "changed", the pass's own.
_BITS = [
    ("2", "something changed"),
    *((str(s.exit_bit), words) for s, words in (
        (HostState.FAILED, "something failed or was blocked"),
        (HostState.DRIFTED, "drift found (observe mode)"),
        (HostState.AWAITING_REBOOT, "awaiting reboot"),
        (HostState.DEGRADED, "degraded: something was skipped"),
    )),
]
_STATE_BITS = [(str(s.exit_bit), words) for s, words in (
    (HostState.CONVERGED, "converged"),
    (HostState.FAILED, "failed, or unknown (no pass has completed, it did not finish, or the report cannot be read)"),
    (HostState.DRIFTED, "drifted"),
    (HostState.AWAITING_REBOOT, "awaiting-reboot"),
    (HostState.DEGRADED, "degraded"),
)]
_USAGE = ("64", "usage error: a bad option or argument, an unknown name")
_INVALID = ("65", "invalid input or configuration: every finding at once, nothing done")
_UNAVAILABLE = ("69", "unavailable: the store is locked past lock_wait, unreachable or full")
_INTERNAL = ("70", "an unexpected error (DATUM_DEBUG=1 shows where)")
_COMMON = [("0", "done"), _USAGE, _INVALID, _UNAVAILABLE, _INTERNAL]
# The fleet commands that take --server: the server's answers map to the same codes, and a refusal is 77.
_REFUSED = ("77", "--server: the server does not know the token (401), or Cedar does not allow the action (403)")
_REMOTE_UNAVAILABLE = ("69", "unavailable: the store is locked past lock_wait, unreachable or full; or --server "
                             "cannot be reached, gave no whole answer in time, or answered past the size bound")
_FLEET = [("0", "done"), ("64", "usage error, an unknown name (a host the fleet never heard of), or --server "
                                "answered a redirect (not followed)"),
          ("65", "invalid input, or the state of the fleet does not allow it"), _REMOTE_UNAVAILABLE, _REFUSED,
          _INTERNAL]

# command path -> its rows; a command not named here (a plugin's) has the common ones.
CODES: dict[str, list[tuple[str, str]]] = {
    "apply": [("0", "converged, nothing changed"), *_BITS, ("", "(bit flags, OR-ed)"), _INVALID, _USAGE,
              ("69", "another pass holds the state file (after lock_wait)"), _INTERNAL],
    "plan": [("0", "nothing would change"), *_BITS, ("", "(bit flags, OR-ed)"), _INVALID, _USAGE, _INTERNAL],
    "status": [*_STATE_BITS, ("", "(the state's bit, OR-ed with the last pass's other bits)"), _USAGE, _INVALID,
               ("69", "--server cannot be reached, or gave no whole answer in time"), _REFUSED, _INTERNAL],
    "validate": [("0", "valid"), ("65", "not valid: every finding at once"), _USAGE, _INTERNAL],
    "reconcile": [("0", "the last pass completed"), ("4", "the last pass could not complete, or lost its claim"),
                  ("69", "skipped: another pass of the reconciler is running"),
                  ("143", "stopped by SIGTERM after the item it was applying"), _USAGE, _INVALID, _INTERNAL],
    "drift": [("0", "the report was printed (whatever the drift)"), ("64", "usage error, or no such reconciler"),
              _INVALID, _REMOTE_UNAVAILABLE, _REFUSED, _INTERNAL],
    **{path: _FLEET for path in ("hosts", "events", "history", "rollout status", "rollout pause", "rollout resume",
                                 "rollout abort", "reboots list", "reboots clear")},
    "explain": [("0", "explained"), ("64", "usage error, or not a word Datum prints (the known ones are listed)"),
                _INTERNAL],
    "serve": [("0", "stopped (SIGTERM, SIGINT)"),
              ("69", "cannot listen: the port is busy (another process listens on it) or the address is not "
                     "this host's; or the store is unavailable"),
              ("3", "the server could not start after the check (the port was taken in between)"),
              _USAGE, ("65", "invalid configuration, or plain HTTP on an address other than loopback without "
                             "--insecure-http"), _INTERNAL],
    "agent": [("0", "stopped (SIGTERM, SIGINT)"),
              ("", "--once: the pass's exit code, as datum apply's (4 when no manifest could be had)"),
              _USAGE, ("65", "invalid configuration, or the token file cannot be read"), _INTERNAL],
    "reboot": [("0", "rebooting, or no reboot is needed"), ("1", "the reboot command failed"), _USAGE, _INVALID,
               _INTERNAL],
    "tls show": [("0", "shown"), _USAGE,
                 ("65", "TLS is off in the configuration, or its certificate files cannot be read"),
                 ("69", 'tls = "auto" and datum serve has not made the certificate yet'), _INTERNAL],
    "token revoke": [("0", "revoked"), ("64", "usage error, or no token has that id, or it names several"), _INVALID,
                     _UNAVAILABLE, _INTERNAL],
    "schema": [("0", "printed"), _USAGE, _INTERNAL],
    "authz explain": [("0", "allowed"), ("1", "denied"),
                      ("64", "usage error: not a Cedar action or entity, or the token is not known"),
                      ("65", "invalid configuration or policies, or the token file cannot be read"), _UNAVAILABLE,
                      _INTERNAL],
    "agent enroll": [("0", "enrolled (active), or asked (pending approval)"), _USAGE,
                     ("65", "refused or denied by the server (its words), or the key cannot be read"),
                     ("69", "the server could not be reached"), _INTERNAL],
    "enroll approve": [("0", "approved"), ("64", "usage error, or no host of that name has enrolled"),
                       ("65", "the host cannot be approved (revoked: forget it first)"), _UNAVAILABLE, _INTERNAL],
    "audit verify": [("0", "the chain is whole"), ("1", "the chain is broken: the first row that does not hold is named"),
                     _USAGE, _INVALID, _UNAVAILABLE, _INTERNAL],
}


def epilog(path: str) -> str:
    """The ``Exit codes:`` section of ``path``'s help (click keeps the lines as they are after ``\\b``)."""
    import textwrap

    rows = CODES.get(path, _COMMON)
    width = max(len(code) for code, _ in rows)
    body = "\n".join(
        textwrap.fill(what, 76, initial_indent=f"  {code:<{width}}  ", subsequent_indent=" " * (width + 4))
        for code, what in rows
    )
    return f"\b\nExit codes:\n{body}"


def document(command: Any, path: str) -> Any:
    """``command`` (a click command or group) with its exit codes, and its subcommands', in its help."""
    import click

    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            document(sub, f"{path} {name}")
    if isinstance(command, click.Group) and not command.invoke_without_command:
        return command  # a group that runs nothing of its own (datum agent does) has no codes of its own
    if not command.epilog:
        command.epilog = epilog(path)
    return command
