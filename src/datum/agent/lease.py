"""The agent's side of the fleet's reboot budget: ask the server for a lease before a policy reboot, give it back when the reboot command fails.

No lease, no reboot: a full group, a server that cannot be reached, an error
answer or one that does not read as a grant all keep the host up, each with
the host reason saying why (``waiting for the group's reboot budget (2/2
rebooting)``, ``not rebooting: no reboot lease from the server (...)``). Each
request is ``datum.bounded``'s: the whole answer within its deadline and
size, redirects not followed (the token goes to the configured server and
nowhere else).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from datum.bounded import MIB, Unusable, request
from datum.core.budget import BLOCKED, HALTED, TURN, no_lease, waiting
from datum.host.reboot import Slot
from datum.host.remote import issues_in
from datum.trust import Trust


def _url(server: str, host: str) -> str:
    return f"{server.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/reboot-lease"


def _headers(token: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {token}"}


def take(
    server: str, host: str, token: str, boot_id: str, facts: dict[str, Any], timeout: float = 10,
    interval: float | None = None, trust: Trust | None = None,
) -> Slot:
    """Ask for ``host``'s slot in its group's reboot budget, from boot ``boot_id`` (``interval``: the agent's,
    in seconds: the server keeps its place in the group's reboot order for two of them)."""
    url = _url(server, host)
    asked: dict[str, Any] = {"bootId": boot_id, "facts": facts}
    if interval is not None:
        asked["intervalSeconds"] = interval
    try:
        got = request("POST", url, _headers(token), data=json.dumps(asked, default=str).encode(), deadline=timeout,
                      limit=MIB, trust=trust)
        if got.status == 422 and "intervalSeconds" in asked and _refused(got.body, "intervalSeconds"):
            # A server older than the field refuses it (it takes no field it does not know): asked again
            # without it, the host's place in the reboot order lasts that server's own default.
            del asked["intervalSeconds"]
            got = request("POST", url, _headers(token), data=json.dumps(asked, default=str).encode(),
                          deadline=timeout, limit=MIB, trust=trust)
    except Unusable as exc:
        return Slot(False, no_lease(str(exc)))
    if not 200 <= got.status < 300:
        return Slot(False, no_lease(f"{url} answered {got.status} {got.reason}{issues_in(got.body)}"))
    answer: Any = None
    try:
        answer = json.loads(got.body)
    except (ValueError, RecursionError):
        pass  # not a grant: no reboot
    return _slot(answer, url)


def _refused(body: bytes, field: str) -> bool:
    """Whether an error answer in the contract's shape names ``field`` among its findings' fields."""
    try:
        issues = json.loads(body).get("issues")
        return any(f.get("field") == field for issue in issues for f in issue.get("fields") or ())
    except (ValueError, RecursionError, AttributeError, TypeError):
        return False


def _slot(answer: Any, url: str) -> Slot:
    """The server's answer as a slot; anything but a clear grant is no reboot."""
    if not isinstance(answer, dict) or not isinstance(answer.get("granted"), bool):
        return Slot(False, no_lease(f"{url} answered something that is not a reboot lease"))
    group, limit = str(answer.get("group")), answer.get("limit")
    rebooting = answer.get("rebooting") if isinstance(answer.get("rebooting"), list) else []
    if not answer["granted"]:
        said = answer.get("reason")
        # the server names who halts it, who is ahead in the reboot order, or what blocks every group's reboots
        if isinstance(said, str) and said.startswith((HALTED, TURN, BLOCKED)) and len(said) <= 1000:
            return Slot(False, said)
        return Slot(False, waiting(len(rebooting), int(limit) if isinstance(limit, int) else 0))
    return Slot(True, f"holds a reboot lease of group {group} ({len(rebooting)}/{limit} rebooting)")


def give_back(
    server: str, host: str, token: str, boot_id: str, timeout: float = 10, trust: Trust | None = None
) -> str | None:
    """Give the lease taken in ``boot_id`` back (the host is not rebooting); None when done, else why not."""
    url = f"{_url(server, host)}?{urllib.parse.urlencode({'bootId': boot_id})}"
    try:
        got = request("DELETE", url, _headers(token), deadline=timeout, trust=trust)
    except Unusable as exc:
        return str(exc)
    return None if 200 <= got.status < 300 else f"{url} answered {got.status} {got.reason}{issues_in(got.body)}"
