"""What a person reads: the pass line of each state, the host lines, and the progress line."""

from __future__ import annotations

import io

import pytest

from datum.core.vocab import ResourceState
from datum.host.output import ProgressLine, pass_lines, status_word


@pytest.mark.parametrize(
    ("resource", "word"),
    [
        ({"action": "update", "state": "converged", "changed": True}, "updated"),
        ({"action": "create", "state": "converged", "changed": True}, "created"),
        ({"action": "delete", "state": "converged", "changed": True}, "deleted"),
        ({"action": "restart", "state": "converged", "changed": True}, "restarted"),
        ({"action": "none", "state": "converged", "changed": False}, "converged"),
        ({"action": "update", "state": "drifted", "reason": "content"}, "drifted"),
        ({"action": "update", "state": "failed", "reason": "exit status 3"}, "failed: exit status 3"),
        ({"action": "none", "state": "blocked", "reason": "Exec[x] failed", "blockedBy": ["Exec[x]"]}, "blocked: Exec[x] failed"),
        ({"action": "none", "state": "skipped", "reason": "systemd is not PID 1"}, "skipped: systemd is not PID 1"),
    ],
)
def test_status_word(resource, word):
    assert status_word(resource) == word


def test_the_seeds_example_renders_as_the_seed_prints_it():
    report = {
        "state": "awaiting-reboot",
        "reason": "Package[linux-image] updated, running kernel differs",
        "resources": [
            {"id": "Package[linux-image]", "action": "update", "state": "converged", "changed": True},
            {"id": "Service[nginx]", "action": "none", "state": "converged", "changed": False},
            {"id": "File[sysctl.conf]", "action": "none", "state": "converged", "changed": False},
        ],
    }
    assert pass_lines(report) == [
        "Package[linux-image]   updated",
        "Service[nginx]         converged",
        "File[sysctl.conf]      converged",
        "",
        "host state: awaiting-reboot",
        "reason: Package[linux-image] updated, running kernel differs",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal():
    pipe = io.StringIO()
    ProgressLine(pipe)(1, 2, "File[/a]", ResourceState.APPLYING)
    assert pipe.getvalue() == ""
    tty = _Terminal()
    line = ProgressLine(tty)
    line(1, 2, "File[/a]", ResourceState.APPLYING)
    line.close()
    assert "[1/2] applying File[/a]" in tty.getvalue()
    assert tty.getvalue().endswith("\r\x1b[2K")
