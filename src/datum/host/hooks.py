"""Around a policy reboot under a fleet's lease (``datum agent``): the ``pre_reboot`` hook (drain), and, back
from the new boot, the health check and the ``post_reboot`` hook (undrain), whose result is the report's
``health`` that frees the lease on the server (``datum.core.budget.back_unhealthy``).

Why here and not on the server: only the host can run its commands and reach its own service. The commands
are split as a shell would (``shlex``) and run without one unless ``[host] hooks_shell`` says so, each in a
process group of its own killed at its timeout (``datum.providers.base.run``). What is said of a failure
names the hook and its program, never its arguments (a command line may carry a secret), then the tail of
its output with anything shaped like a token redacted.

After a reboot the check runs at every pass until it passes: the state file keeps the boot the reboot was
made from (``reboot.checkFrom``); a pass from another boot runs the health check (a command exiting 0, and/or
a URL answering 2xx within ``health_timeout``) and, once healthy, ``post_reboot``. Both passed: ``health:
{ok: true}`` and the mark is dropped; else ``{ok: false, detail}`` and the next pass tries again (so
``post_reboot`` must be safe to run twice). An unhealthy host is not undrained.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datum.host.compiled import HostConfig
    from datum.host.statefile import StateStore

CHECK_FROM = "reboot.checkFrom"  # agent_meta: the boot a reboot under a lease was made from

# Given the pass's state file, boot id and whether it was stopped part-way: the report's ``health``, or None.
AfterReboot = Callable[["StateStore", str, bool], "dict[str, Any] | None"]


def run_hook(what: str, command: str, timeout: float, shell: bool) -> str | None:
    """Run ``command`` (the hook ``what``); None when it exited 0, else why, without its arguments."""
    from datum.providers.base import run

    try:
        argv = [command] if shell else shlex.split(command)
    except ValueError as exc:
        return f"{what} cannot be split into a command: {exc}"
    if not argv:
        return f"{what} is empty"
    done = run(argv, timeout=timeout, shell=shell)
    if done.returncode == 0:
        return None
    program = "sh -c" if shell else argv[0].rsplit("/", 1)[-1]
    if done.timed_out:
        return f"{what} ({program}) timed out after {timeout:g}s; its processes were killed"
    tail = done.tail()
    return f"{what} ({program}) exited {done.returncode}" + (f": {tail}" if tail else "")


def fetch_health(url: str, timeout: float) -> str | None:
    """None when ``url`` answers 2xx within ``timeout`` seconds (redirects are not followed), else why."""
    from datum.bounded import Unusable, request

    try:
        got = request("GET", url, {"Accept": "*/*"}, deadline=timeout)
    except Unusable as exc:  # its words name the URL: said without user info or query
        return f"health_url {_plain(url)}: {str(exc).replace(url, _plain(url))}"
    if 200 <= got.status < 300:
        return None
    return f"health_url {_plain(url)} answered {got.status} {got.reason}"


def _plain(url: str) -> str:
    """``url`` without user info or query (either may carry a secret)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def health(config: HostConfig) -> dict[str, Any]:
    """The health check, then (healthy) ``post_reboot``: the report's ``health``."""
    timeout = config.health_timeout.total_seconds()
    failed = [
        why for why in (
            run_hook("health_check", config.health_check, timeout, config.hooks_shell) if config.health_check else None,
            fetch_health(config.health_url, timeout) if config.health_url else None,
        ) if why
    ]
    if failed:
        detail = "; ".join(failed) + ("; post_reboot not run until healthy" if config.post_reboot else "")
        return {"ok": False, "detail": detail[:1000]}
    if config.post_reboot:
        why = run_hook("post_reboot", config.post_reboot, config.hook_timeout.total_seconds(), config.hooks_shell)
        if why:
            return {"ok": False, "detail": why[:1000]}
    said = [w for w, on in (("health_check passed", config.health_check), ("health_url answered 2xx", config.health_url),
                            ("post_reboot ran", config.post_reboot)) if on]
    return {"ok": True, "detail": ", ".join(said)}


def checks(config: HostConfig) -> bool:
    """Whether the host has anything to check after a reboot (else a report from the new boot frees the lease)."""
    return bool(config.health_check or config.health_url or config.post_reboot)


def after_reboot(config: HostConfig) -> AfterReboot | None:
    """What ``datum.host.agent.host_pass`` asks after its resources ran; None when nothing is configured."""
    if not checks(config):
        return None

    def check(store: StateStore, boot_id: str, stopped: bool) -> dict[str, Any] | None:
        since = store.meta(CHECK_FROM)
        if since is None or since == boot_id:
            return None  # no reboot made under a lease, or not back from it yet
        if stopped:
            return {"ok": False, "detail": "not checked yet: the pass was stopped part-way; the next pass checks"}
        found = health(config)
        if found["ok"]:
            store.set_meta(CHECK_FROM, None)
        return found

    return check


def mark_reboot(config: HostConfig, state_path: str, boot_id: str) -> None:
    """Before the reboot command: the passes from the next boot check the host (when anything is configured)."""
    if not checks(config):
        return
    from datum.host.statefile import StateStore

    store = StateStore(state_path)
    try:
        store.set_meta(CHECK_FROM, boot_id)
    finally:
        store.close()
