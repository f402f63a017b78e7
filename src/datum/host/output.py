"""What a person reads: pass lines as the contract spells them, the host state, diffs, a progress line.

No rich here: a pass prints plain lines, and the progress line is written to
stderr only when stderr is a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, Any

from datum.core.vocab import ResourceState

_WITH_WHY = {ResourceState.FAILED, ResourceState.BLOCKED, ResourceState.SKIPPED}


def status_word(resource: dict[str, Any]) -> str:
    """The past-tense action when it changed and converged, else the state (with why, where it has one)."""
    state = resource["state"]
    if (
        state == ResourceState.CONVERGED
        and resource.get("changed")
        and resource["action"] != "none"
    ):
        from datum.core.vocab import Action

        return Action(resource["action"]).past
    if state in _WITH_WHY:
        why = resource.get("reason") or resource.get("error")
        if state == ResourceState.BLOCKED and resource.get("blockedBy"):
            why = resource.get("reason")
        return f"{state}: {why}" if why else state
    return str(state)


def pass_lines(report: dict[str, Any], *, plan: bool = False) -> list[str]:
    """One line per resource, a blank line, ``host state: X`` and, unless converged, ``reason: ...``."""
    resources = report.get("resources", [])
    width = max((len(r["id"]) for r in resources), default=0) + 3
    lines = []
    for r in resources:
        word = status_word(r)
        if plan and r["state"] == ResourceState.DRIFTED:
            # The state first, as in every pass line; then what the plan would do.
            word = f"drifted: would {r['action']}" + (f" {r['reason']}" if r.get("reason") else "")
        lines.append(f"{r['id']:<{width}}{word}".rstrip())
        if plan and r.get("diff"):
            lines.extend("    " + d for d in r["diff"].rstrip("\n").splitlines())
    if resources:
        lines.append("")
    lines.append(f"host state: {report['state']}")
    if report.get("reason") and report["state"] != "converged":
        lines.append(f"reason: {report['reason']}")
    return lines


class ProgressLine:
    """``[12/300] applying File[x]`` redrawn in place on a terminal; nothing elsewhere."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.active = self.stream.isatty()
        self._shown = False

    def __call__(self, position: int, total: int, resource_id: str, state: ResourceState) -> None:
        if not self.active:
            return
        text = f"[{position}/{total}] {state.value} {resource_id}"
        self.stream.write("\r\x1b[2K" + text[:200])
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def echo_lines(lines: Iterable[str], stream: IO[str] | None = None) -> None:
    out = stream or sys.stdout
    out.write("".join(line + "\n" for line in lines))
