"""What a host pass said, apart from when it ran: the digest that lets a pass that changed nothing be stored
small, and the events (resources changed, failed, drifted or blocked) a pass holds.

Most passes of a fleet say the same as the one before, differing only in their id, sequence number and
times. The store keeps each distinct report once, under the digest of its content without those
(``PER_PASS``, and each resource's ``durationSeconds``); a pass is a small row naming that digest, and
its whole report is the kept one with the pass's own per-pass fields put back (``restored``). A resource's
duration is then the kept copy's: the one thing of a pass that changed nothing not kept exactly.

Pure: reports in their JSON form in, digests, dicts and lists out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from datum.core.hostsummary import resources_of

# A report's fields that differ from one pass to the next whatever the pass found.
PER_PASS = ("passId", "seq", "startedAt", "finishedAt", "durationSeconds")
# The resource states an event is kept for (a resource the pass changed is one whatever its state).
EVENT_STATES = frozenset({"failed", "drifted", "blocked"})


def content(report: Mapping[str, Any]) -> dict[str, Any]:
    """``report`` without its per-pass fields: what two passes that found the same have in common."""
    out = {k: v for k, v in report.items() if k not in PER_PASS}
    if isinstance(out.get("resources"), list):
        out["resources"] = [
            {k: v for k, v in r.items() if k != "durationSeconds"} if isinstance(r, dict) else r
            for r in out["resources"]
        ]
    return out


def content_digest(report: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of ``content(report)`` as canonical JSON: equal for passes that said the same."""
    text = json.dumps(content(report), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def restored(kept: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The whole report of a pass: the ``kept`` report of its digest with the pass's ``own`` per-pass fields
    (absent ones absent)."""
    out = {k: v for k, v in kept.items() if k not in PER_PASS}
    out.update({k: own[k] for k in PER_PASS if own.get(k) is not None})
    return out


def is_event(resource: Mapping[str, Any]) -> bool:
    """Whether a resource of a pass is an event: the pass changed it, or it is failed, drifted or blocked."""
    return resource.get("changed") is True or resource.get("state") in EVENT_STATES


def with_error(reason: str | None, error: str) -> str:
    """A failed resource's reason with its error, each said once: the engine gives a failure the same words as
    both (``datum.host.executor``), a provider may give a reason that already ends with its error."""
    if not reason or error in reason:
        return reason or error
    return error if reason in error else f"{reason}: {error}"


def events_of(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pass's events: resource, type, action, state, changed and reason (its error when failed)."""
    out = []
    for r in resources_of(report):
        if not is_event(r):
            continue
        reason = r.get("reason") if isinstance(r.get("reason"), str) else None
        if isinstance(r.get("error"), str) and r.get("state") == "failed":
            reason = with_error(reason, r["error"])
        out.append({
            "resource": str(r.get("id"))[:1000],
            "type": str(r.get("type"))[:100],
            "action": str(r.get("action"))[:16],
            "state": str(r.get("state"))[:16],
            "changed": r.get("changed") is True,
            "reason": reason,
        })
    return out
