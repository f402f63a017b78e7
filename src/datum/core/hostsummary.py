"""A host's summary: what the host listing shows of its last pass, computed once when the pass is stored.

The listing of a fleet reads one small row per host, never the reports: the
server writes the summary beside the report at intake (``store.hosts``), from
the report alone. It is a plain JSON object so a new field (a reboot in
progress, say) is one more key here, not a new column and a migration:

- ``counts``: the pass's resources by state (every resource, whatever the cap);
- ``attention``: the resources that are not converged, as the report has them
  but without their diffs, at most ``ATTENTION_CAP`` (``attentionTotal`` says
  how many there are when they are more);
- ``manifestDigest``: the digest of the manifest the pass ran, when it says;
- ``revision``: the fleet directory's revision the pass ran (``datum.fleet.revision``), when it says:
  what ``datum rollout status`` counts hosts by;
- ``reboot``: the report's ``reboot`` (the need, its policy, what the agent did about it) without its
  ``markers``, when it has one: what decides whether a host awaits a human's reboot.

Pure: a report in its JSON form in, a dict out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

ATTENTION_CAP = 20  # resources listed per host in a summary; the full report has them all


def resources_of(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's resources that are objects (a damaged report may hold anything)."""
    return [r for r in report.get("resources") or [] if isinstance(r, dict)]


def count_states(resources: list[dict[str, Any]]) -> dict[str, int]:
    """Resources by their ``state``."""
    counts: dict[str, int] = {}
    for r in resources:
        state = str(r.get("state"))
        counts[state] = counts.get(state, 0) + 1
    return counts


def needs_attention(resource: Mapping[str, Any]) -> bool:
    return resource.get("state") != "converged"


def summarize(report: Mapping[str, Any]) -> dict[str, Any]:
    """The summary of a pass report (``PassReport`` in its JSON form)."""
    resources = resources_of(report)
    attention = [r for r in resources if needs_attention(r)]
    summary: dict[str, Any] = {
        "counts": count_states(resources),
        "attention": [{k: v for k, v in r.items() if k != "diff"} for r in attention[:ATTENTION_CAP]],
    }
    if len(attention) > ATTENTION_CAP:
        summary["attentionTotal"] = len(attention)
    digest = report.get("manifestDigest")
    if isinstance(digest, str):
        summary["manifestDigest"] = digest
    revision = report.get("revision")
    if isinstance(revision, str) and revision:
        summary["revision"] = revision
    reboot = report.get("reboot")
    if isinstance(reboot, dict):
        summary["reboot"] = {k: v for k, v in reboot.items() if k != "markers"}
    return summary


def interval_of(report: Mapping[str, Any]) -> float | None:
    """The agent's interval the report carries (``datum agent``), which makes the host able to go stale."""
    interval = report.get("intervalSeconds")
    if isinstance(interval, int | float) and not isinstance(interval, bool) and interval > 0:
        return float(interval)
    return None


def stored(raw: object) -> dict[str, Any]:
    """A report as a database column hands it back (bytes, text or parsed JSON); {} when it is not a JSON object.
    The migrations that fill summaries in read the rows already there through this."""
    if isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}
