"""``datum apply`` and ``datum plan`` without click: the pass, its lines, the report's delivery, the reboot.

``datum.cli.main`` runs an ``apply`` whose arguments ``parse_apply`` understands
straight here, so an idle pass never imports click (about a fifth of its
time); anything else (``--help``, an unknown or malformed option) goes through
the click command in ``datum.cli.host``, which calls the same functions.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # an idle pass imports no typing (datum.host.idle)
if TYPE_CHECKING:
    from typing import Any


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def host_config(config: str | None) -> Any:
    """The agent's configuration, validated in full (``datum.config``, pydantic)."""
    from datum.config import load_settings
    from datum.host.compiled import HostConfig

    return HostConfig.from_settings(load_settings(config))


def prepare(manifest: str, config: str | None, allow_outside: bool = False) -> tuple[Any, Any, bytes | None]:
    """The configuration, the validated manifest (from the cache when neither changed) and the
    manifest's bytes they were made from (read once)."""
    from datum.host import compiled

    data = compiled.manifest_bytes(manifest)
    key = compiled.cache_key(manifest, config, data) if data is not None else None
    if key is not None and allow_outside:  # validated under another rule: another entry
        key = f"{key[:48]}-outside"
    hit = compiled.load(key)
    if hit is not None:
        return (*hit, data)
    from datum.host.manifest import load_manifest

    chosen = compiled.load_config(config)
    memory = compiled.spec_memory(manifest)
    loaded = load_manifest(manifest, allow_source_outside=allow_outside, memory=memory, data=data)
    compiled.store(key, chosen, loaded)
    compiled.remember_specs(manifest, memory)
    return chosen, loaded, data


def state_path(state: str | None, config: Any) -> str:
    """The host's local state file: ``--state``, else the configuration's (a URL is a usage error)."""
    from datum.host.statefile import state_path as resolve

    return resolve(state) if state else str(config.state_path)


def run_pass(
    manifest: str,
    root: str,
    mode: str | None,
    state: str | None,
    config: str | None,
    as_json: bool,
    plan: bool,
    allow_outside: bool = False,
    held: Any = None,
) -> tuple[Any, Any, Any, bytes | None]:
    """The configuration, the validated manifest, the pass's ``PassResult`` and the manifest's
    bytes. ``held``: the lock an idle pass handed over (``datum.host.statefile.Held``), released
    here whatever happens; before the engine starts, as if no pass had run."""
    try:
        from datum.core.vocab import Mode
        from datum.host import agent
        from datum.host.output import ProgressLine

        chosen_config, loaded, data = prepare(manifest, config, allow_outside)
        chosen = Mode.OBSERVE if plan else Mode(mode) if mode else chosen_config.mode
        path = None if plan else state_path(state, chosen_config)
    except BaseException:
        if held is not None:
            held.close()  # no pass ran: its record goes, as the engine alone never wrote one
        raise
    progress = None if as_json else ProgressLine()
    try:
        result = agent.run(
            loaded,
            root=root,
            mode=chosen,
            config=chosen_config,
            state_path=path,
            progress=progress,
            persist=not plan,
            holding=held,
        )
    finally:
        if progress is not None:
            progress.close()
    return chosen_config, loaded, result, data


def print_report(report: dict[str, Any], as_json: bool, plan: bool = False) -> None:
    from datum.host.output import echo_lines, pass_lines

    if as_json:
        import json

        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        sys.stdout.flush()
    else:
        echo_lines(pass_lines(report, plan=plan))


def apply(
    manifest: str,
    root: str = "/",
    mode: str | None = None,
    state: str | None = None,
    as_json: bool = False,
    config: str | None = None,
    report_to: str | None = None,
    token: str | None = None,
    allow_outside: bool = False,
) -> int:
    """``datum apply``: one pass, its lines (or JSON), the report posted, the reboot; the exit code.

    An idle pass (``datum.host.idle``) is tried first; what it cannot prove, the engine runs.
    """
    from datum.host import idle

    found = idle.run(manifest, root, mode, state, config, allow_outside)
    if isinstance(found, idle.Done):
        return _idle_done(found, as_json, report_to, token)
    taken = idle.before(config)
    chosen_config, loaded, result, data = run_pass(
        manifest, root, mode, state, config, as_json, plan=False, allow_outside=allow_outside, held=found
    )
    report = result.report
    print_report(report, as_json)
    for warning in result.warnings:
        warn(warning)
    idle.remember(manifest, root, mode, state, config, allow_outside, taken, data, chosen_config, loaded, result)
    target = report_to or chosen_config.report_to
    if target:
        from datum.host.remote import post_report

        why = post_report(target, report["host"], report, token or chosen_config.token)
        if why:
            warn(f"the pass report was not delivered: {why}")
    if result.reboot_now:
        reboot(chosen_config, state_path(state, chosen_config), report)
    code: int = result.exit_code
    return code


def _idle_done(done: Any, as_json: bool, report_to: str | None, token: str | None) -> int:
    """An idle pass's lines (or JSON) and warnings, its report posted when ``--report-to`` asks."""
    if as_json or report_to:
        import json

        report = json.loads(done.text)
        if as_json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
    if not as_json:
        sys.stdout.write(done.lines)
    sys.stdout.flush()
    for warning in done.warnings:
        warn(warning)
    if report_to:
        from datum.host.remote import post_report

        why = post_report(report_to, report["host"], report, token)
        if why:
            warn(f"the pass report was not delivered: {why}")
    return 0


def plan(manifest: str, root: str = "/", as_json: bool = False, config: str | None = None,
         allow_outside: bool = False) -> int:
    """``datum plan``: an observe pass that persists nothing, with diffs; the exit code."""
    _config, _loaded, result, _data = run_pass(
        manifest, root, None, None, config, as_json, plan=True, allow_outside=allow_outside
    )
    print_report(result.report, as_json, plan=True)
    code: int = result.exit_code
    return code


def reboot(chosen_config: Any, url: str, report: dict[str, Any]) -> bool:
    """Run the reboot command after the report is persisted; record a failure. True when it started."""
    from datum.host.agent import reboot_and_record

    command = chosen_config.reboot_command
    print(f"rebooting: {command}", file=sys.stderr, flush=True)
    why = reboot_and_record(command, url, report)
    if why is None:
        return True
    warn(f"the reboot command failed: {why}")
    return False


# --- the arguments of ``datum apply``, when they are plain ----------------------------------

# option -> (keyword of ``apply``, takes a value, allowed values or None)
_APPLY_OPTIONS: dict[str, tuple[str, bool, tuple[str, ...] | None]] = {
    "--root": ("root", True, None),
    "--mode": ("mode", True, ("enforce", "observe")),
    "--state": ("state", True, None),
    "--json": ("as_json", False, None),
    "--config": ("config", True, None),
    "--report-to": ("report_to", True, None),
    "--token": ("token", True, None),
    "--allow-source-outside": ("allow_outside", False, None),
}


def parse_apply(args: list[str]) -> dict[str, Any] | None:
    """``apply``'s keywords from ``args`` (after ``apply``), or None for anything the click command
    must answer: help, an unknown, repeated or malformed option, a value it would refuse."""
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
        spec = _APPLY_OPTIONS.get(name)
        if spec is None:
            return None
        keyword, takes_value, allowed = spec
        if keyword in given:
            return None
        if not takes_value:
            if eq:
                return None
            given[keyword] = True
            continue
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        if allowed is not None and value not in allowed:
            return None
        given[keyword] = value
    if len(positional) != 1:
        return None
    manifest = positional[0]
    # What click.Path(dir_okay=False) / (file_okay=False) would refuse: click says so.
    if os.path.isdir(manifest) or os.path.isdir(given.get("config") or "\0"):
        return None
    if "root" in given and os.path.exists(given["root"]) and not os.path.isdir(given["root"]):
        return None
    if "token" not in given:
        given["token"] = os.environ.get("DATUM_TOKEN") or None
    return {"manifest": manifest, **given}
