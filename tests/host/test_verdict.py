"""The one verdict (``datum.host.verdict``) against the contract's rules: the host state rollup
(section 2, first rule that matches), the exit code's bit flags (section 4), the reason naming the
resources behind the state, and the pass report every surface reads, held to ``PassReport``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datum.core.vocab import Action, HostState, ResourceState
from datum.host import verdict
from datum.host.executor import Outcome
from datum.host.model import Resource
from datum.host.report import PassReport
from datum.providers.file.spec import FileSpec

C, F, B, D, S, P = (
    ResourceState.CONVERGED, ResourceState.FAILED, ResourceState.BLOCKED, ResourceState.DRIFTED,
    ResourceState.SKIPPED, ResourceState.PENDING,
)
REBOOT = "Package[linux-image] updated, running kernel differs"


def outcomes(states: list[ResourceState], changed: int = 0) -> list[Outcome]:
    """One File per state; the first ``changed`` of them changed (as the executor leaves them)."""
    return [
        Outcome(
            Resource(i, "File", f"/f{i}", FileSpec(path=f"/f{i}")),
            action=Action.UPDATE if i < changed else Action.NONE,
            state=state,
            changed=i < changed,
            reason=None if state in (C, P) else f"why {i}",
        )
        for i, state in enumerate(states)
    ]


# (resource states, how many changed, the reboot's reason or None, the signal that stopped the pass)
#   -> (host state, exit code)
RULES = [
    # 6. converged; 0 nothing changed, 2 something changed
    ([], 0, None, None, HostState.CONVERGED, 0),
    ([C, C], 0, None, None, HostState.CONVERGED, 0),
    ([C, C], 1, None, None, HostState.CONVERGED, 2),
    # 2. failed: a failed or blocked resource, before every later rule; 4
    ([C, F], 1, None, None, HostState.FAILED, 2 | 4),
    ([C, B], 0, None, None, HostState.FAILED, 4),
    ([F, D, S], 1, REBOOT, None, HostState.FAILED, 2 | 4 | 8 | 16 | 32),
    # 3. drifted (observe): before a reboot and a skip; 8
    ([C, D], 0, None, None, HostState.DRIFTED, 8),
    ([D, S], 0, REBOOT, None, HostState.DRIFTED, 8 | 16 | 32),
    # 4. awaiting-reboot: before a skip; 16
    ([C, C], 1, REBOOT, None, HostState.AWAITING_REBOOT, 2 | 16),
    ([C, S], 0, REBOOT, None, HostState.AWAITING_REBOOT, 16 | 32),
    # 5. degraded: something skipped, the rest converged; 32
    ([C, S], 0, None, None, HostState.DEGRADED, 32),
    # 1. unknown: a pass stopped before every resource was reached; 4 besides what it did
    ([C, P, P], 1, None, "SIGTERM", HostState.UNKNOWN, 2 | 4),
    ([F, P], 0, REBOOT, "SIGTERM", HostState.UNKNOWN, 4 | 16),
    # a signal after the last resource stops nothing: the verdict is the pass's
    ([C, C], 1, None, "SIGTERM", HostState.CONVERGED, 2),
]


@pytest.mark.parametrize(("states", "changed", "reboot", "stopped", "state", "code"), RULES)
def test_the_rollup_and_the_exit_code_follow_the_contract(states, changed, reboot, stopped, state, code):
    decided = verdict.decide(outcomes(states, changed), reboot_reason=reboot, stopped_by=stopped)
    assert (decided.state, decided.exit_code) == (state, code)
    assert decided.incomplete is (state is HostState.UNKNOWN)
    assert (decided.reason is None) is (state is HostState.CONVERGED)


@pytest.mark.parametrize(
    ("states", "reboot", "stopped", "reason"),
    [
        ([C, F, B], None, None, "File[/f1] failed: why 1; blocked: File[/f2]"),
        ([F, F, F, F, F], None, None,
         "File[/f0] failed: why 0; File[/f1] failed: why 1; File[/f2] failed: why 2; and 2 more"),
        ([F] + [B] * 4, None, None, "File[/f0] failed: why 0; blocked: File[/f1], File[/f2], File[/f3] and 1 more"),
        ([C, D], None, None, "File[/f1] drifted: why 1"),
        ([C, C], REBOOT, None, REBOOT),
        ([S, C], None, None, "File[/f0] skipped: why 0"),
        ([C, F, P, P], None, "SIGTERM",
         "the pass was stopped by SIGTERM after 2 of 4 resources; 2 not reached (pending); File[/f1] failed: why 1"),
    ],
)
def test_the_reason_names_the_resources_behind_the_state(states, reboot, stopped, reason):
    assert verdict.decide(outcomes(states), reboot_reason=reboot, stopped_by=stopped).reason == reason


UNHEALTHY = {"ok": False, "detail": "health_check (test) exited 1; post_reboot not run until healthy"}


@pytest.mark.parametrize(
    ("states", "health", "state", "code", "reason"),
    [
        ([C, C], UNHEALTHY, HostState.DEGRADED, 32, f"came back unhealthy: {UNHEALTHY['detail']}"),
        ([C, S], UNHEALTHY, HostState.DEGRADED, 32,
         f"came back unhealthy: {UNHEALTHY['detail']}; File[/f1] skipped: why 1"),
        ([C, F], UNHEALTHY, HostState.FAILED, 4 | 32, "File[/f1] failed: why 1"),
        ([C, C], {"ok": False}, HostState.DEGRADED, 32, "came back unhealthy: its health check did not pass"),
        ([C, C], {"ok": True, "detail": "health_check passed"}, HostState.CONVERGED, 0, None),
    ],
)
def test_a_host_back_from_its_reboot_unhealthy_is_degraded_with_the_check_s_reason(states, health, state, code, reason):
    decided = verdict.decide(outcomes(states), health=health)
    assert (decided.state, decided.exit_code, decided.reason) == (state, code, reason)


def test_no_pass_is_unknown_and_exits_4():
    decided = verdict.no_pass("no manifest has ever been fetched: the server is away")
    assert (decided.state, decided.exit_code, decided.incomplete) == (HostState.UNKNOWN, 4, True)


def test_the_verdict_and_the_outcomes_it_reads_are_frozen():
    out = outcomes([C])[0]
    with pytest.raises(AttributeError):
        out.state = F
    with pytest.raises(AttributeError):
        verdict.decide([out]).state = HostState.FAILED


TIMES = {"started": "2026-11-30T10:00:00Z", "finished": "2026-11-30T10:00:01Z", "duration": 1.25}


def _every_field() -> list[Outcome]:
    resource = Resource(0, "File", "/etc/motd", FileSpec(path="/etc/motd"))
    return [
        Outcome(resource, Action.UPDATE, C, True, diff="--- a\n+++ b\n", sensitive=True,
                reboot_required="a kernel module", duration_seconds=0.0123456789),
        Outcome(resource, Action.NONE, F, False, reason="exited 1", error="exited 1"),
        Outcome(resource, Action.NONE, B, reason="File[/etc/motd] failed", blocked_by=("File[/etc/motd]",)),
        Outcome(resource, state=P),
    ]


@pytest.mark.parametrize(
    "made",
    [
        lambda: verdict.report(verdict.decide(_every_field(), reboot_reason=REBOOT, stopped_by="SIGTERM"),
                               _every_field(), host="web-1", mode="enforce", manifest="/srv/site.yaml",
                               boot_id="b1", reboot={"required": True, "reason": REBOOT, "policy": "manual"},
                               extra={"passId": "p" * 36, "seq": 7, "manifestDigest": "sha256:ab",
                                      "manifestOrigin": "server", "intervalSeconds": 1800.0},
                               **TIMES),
        lambda: verdict.report(verdict.decide(outcomes([C, S])), outcomes([C, S]), host="web-1", mode="observe",
                               manifest="m.yaml", **TIMES),
        lambda: verdict.report(verdict.no_pass("no manifest"), [], host="web-1", mode="enforce",
                               extra={"manifestOrigin": "no manifest"}, **TIMES),
    ],
    ids=["every-field", "degraded", "no-pass"],
)
def test_every_report_made_here_is_a_pass_report(made):
    """What the state file, ``datum status``, ``--report-to``, ``datum agent`` and the API read is
    one form: each report the verdict makes reads as the ``PassReport`` model and dumps back as it was."""
    report = made()
    assert PassReport.model_validate(report).dump() == report
    states = [r["state"] for r in report["resources"]]
    assert report["counts"] == {s: states.count(s) for s in states}


# Host-state precedence is written once (``datum.core.vocab.ROLLUP``, read by ``datum.core.rollup.called_for``):
# the verdict's state and bits, ``datum status``'s exit code and ``datum explain``'s reading of what a pass
# printed must agree on every combination, or one of them has its own copy again.
@settings(max_examples=400, deadline=None)
@given(
    states=st.lists(st.sampled_from(list(ResourceState)), max_size=7),
    changed=st.integers(0, 7),
    reboot=st.booleans(),
    sick=st.booleans(),
)
def test_the_rollup_the_bits_status_and_explain_agree_on_every_combination(states, changed, reboot, sick):
    from datum.cli.host import status_exit
    from datum.core.phrases import HOST_STATE, words
    from datum.core.rollup import host_state
    from datum.host.output import pass_lines

    made = outcomes(states, changed)
    decided = verdict.decide(made, reboot_reason=REBOOT if reboot else None, health=UNHEALTHY if sick else None)
    state = host_state(states, awaiting_reboot=reboot, unhealthy=sick)
    assert decided.state is state
    # its bit is in the pass's code, and no state called for ranks before it
    assert decided.exit_code & state.exit_bit == state.exit_bit
    assert all(s.precedence >= state.precedence for s in HostState if set(states) & s.behind)
    report = verdict.report(decided, made, host="web1", mode="enforce", started="s", finished="f", duration=1)
    assert status_exit(report) == decided.exit_code & ~verdict.EXIT_CHANGED  # datum status says the pass's bits
    # what the pass printed for its resources, pasted as one line, reads the state they roll up to
    printed = "; ".join(line.strip() for line in pass_lines(report) if line.startswith("File["))
    alone = host_state(states)
    said = [name for vocabulary, name in words(printed) if vocabulary == HOST_STATE]
    assert said == ([] if alone is HostState.CONVERGED else [alone.value]), printed
