"""The attention decision alone (``datum.core.attention``): what needs a human, with which severity and reason."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from datum.core import budget
from datum.core.attention import (
    BACKOFF_CAP,
    REPEATED_FAILURES,
    Reconciler,
    Severity,
    call_label,
    decide,
    group_key,
    host_call,
    host_need,
    item_reason,
    reasons,
)
from datum.core.breaker import Threshold
from datum.core.explain import Act
from datum.core.memory import BackoffPolicy
from datum.core.vocab import Direction

POLICY = BackoffPolicy(base_passes=1, cap_passes=8)  # the window reaches the cap on the 4th failure


def item(reason: str, failures: int | None = None, ident: str = "a", direction: str = "align") -> dict:
    out = {"kind": "k", "id": ident, "direction": direction, "reason": reason, "streak": 9, "confirmationsNeeded": 2}
    if failures is not None:
        out.update(failures=failures, lastErr="disk full", retryAfterPasses=1)
    return out


def rec(items: list[dict], **kw: object) -> Reconciler:
    report = {"reconciler": "r", "health": "degraded", "items": items, "coverage": []}
    return Reconciler(report, backoff=POLICY, **kw)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=80), st.integers(min_value=1, max_value=16), st.integers(0, 3))
def test_a_failing_item_reads_the_same_on_the_pass_that_retries_it_as_on_those_that_wait(failures, base, more):
    policy = BackoffPolicy(base, base * 2**more)
    for f in (failures, failures + 1):
        assert item_reason(item("backoff", f), policy) == item_reason(item("apply_failed", f), policy)
        assert group_key(item("backoff", f), policy) == group_key(item("apply_failed", f), policy)
    # and its reading only moves forward as failures climb: retrying, then failing again and again, then the cap
    order = [None, REPEATED_FAILURES, BACKOFF_CAP]
    assert order.index(item_reason(item("backoff", failures), policy)) <= order.index(
        item_reason(item("backoff", failures + 1), policy)
    )


def test_failing_items_wait_then_need_a_human():
    assert [item_reason(item("backoff", n), POLICY) for n in (1, 2, 3, 4, 12)] == [
        None, None, REPEATED_FAILURES, BACKOFF_CAP, BACKOFF_CAP
    ]
    [line] = decide([rec([item("apply_failed", 12)])])
    assert (line.severity, line.reason, line.ids) == (Severity.LOOK, BACKOFF_CAP, ("k/a",))
    assert line.text == "k/a (r) is parked at the backoff cap after 12 failures" and line.detail == "disk full"
    [line] = decide([rec([item("backoff", 3)])])
    assert line.text == "k/a (r) has failed 3 times in a row"


def test_items_that_share_a_reason_are_one_line_and_waiting_ones_none():
    held = [item("circuit_breaker", ident=f"x{n}", direction="reap") for n in range(12)]
    held[0]["lastErr"] = "reap breaker: 12 candidates exceed the breaker count of 10"
    quiet = [item("awaiting_confirmation", ident="w"), item("blocked_on_owner", ident="o"), item("dry_run", ident="d"),
             item("suppressed_no_reap", ident="n"), item("acting", ident="c"), item("backoff", 1, ident="b")]
    lines = decide([rec(held + quiet + [item("suppressed_unconfigured", ident="u")],
                        breaker={Direction.REAP: Threshold(count=10)})])
    assert [(n.reason, len(n.ids)) for n in lines] == [("circuit_breaker", 12), ("suppressed_unconfigured", 1)]
    assert lines[0].text == "12 reaps held: breaker reap > 10 (r)" and lines[0].direction is Direction.REAP
    assert lines[0].detail.startswith("reap breaker: 12 candidates")


def test_a_plugins_reason_is_a_look():
    [line] = decide([rec([item("pg_roles.still_owns", ident="role")])])
    assert (line.severity, line.reason) == (Severity.LOOK, "pg_roles.still_owns")


def test_reconcilers_failing_degraded_by_their_own_word_broken_or_switched_off():
    failing = Reconciler({"reconciler": "f", "health": "failing", "error": "substrate 500", "items": [item("backoff", 9)]},
                         backoff=POLICY)
    said = Reconciler({"reconciler": "s", "health": "degraded", "error": "quota nearly used"})
    quiet = Reconciler({"reconciler": "q", "health": "degraded"})  # degraded by items that retry: wait
    broken = Reconciler({"reconciler": "g"}, broken="ModuleNotFoundError: g")
    off = Reconciler({"reconciler": "p", "health": "failing", "error": "x", "items": [item("circuit_breaker")],
                      "coverage": [{"kind": "role", "status": "s", "count": 3, "stranded": True}]}, enabled=False)
    lines = decide([failing, said, quiet, broken, off])
    assert [(n.reason, n.reconciler) for n in lines] == [
        ("plugin_broken", "g"), ("reconciler_failing", "f"), ("reconciler_degraded", "s"), ("backoff_cap", "f"),
    ]


def test_every_host_state_and_every_reboot_policy():
    def host(name: str, state: str, **kw: object) -> dict:
        return {"host": name, "state": state, "reason": f"{name} says why", **kw}

    def reboot(policy: str, **kw: object) -> dict:
        return {"required": True, "policy": policy, **kw}

    hosts = [
        host("ok", "converged"),
        host("failed", "failed"),
        host("unknown", "unknown"),
        host("silent", "unknown", stale=True),
        host("drifted", "drifted"),
        host("degraded", "degraded"),
        host("manual", "awaiting-reboot", reboot=reboot("manual")),
        host("never", "awaiting-reboot", reboot=reboot("never")),
        host("asked", "awaiting-reboot", reboot=reboot("manual", requestedAt="2026-11-30T10:00:00Z")),
        host("window", "awaiting-reboot", reboot=reboot("maintenance")),
        host("auto", "awaiting-reboot", reboot=reboot("automatic")),
        host("budget", "awaiting-reboot", reboot=reboot("automatic"), reason=budget.waiting(2, 2)),
        host("lease", "awaiting-reboot", reboot=reboot("automatic"), reason=budget.no_lease("server unreachable")),
        host("loop", "awaiting-reboot", reboot=reboot("automatic", attempted={"kernel": "6.1"})),
        host("unsaid", "awaiting-reboot"),
    ]
    lines = decide(hosts=hosts, overdue=[{"host": "gone", "group": "web", "since": "2026-11-30T10:00:00+00:00",
                                          "expiresAt": "2026-11-30T10:30:00+00:00"}])
    assert [(n.severity.value, n.reason, n.host) for n in lines] == [
        ("look", "host_failed", "failed"),
        ("look", "host_unknown", "unknown"),
        ("look", "host_unknown", "silent"),
        ("look", "manual_reboot", "manual"),
        ("look", "manual_reboot", "never"),
        ("look", "reboot_refused", "loop"),
        ("look", "no_reboot_lease", "lease"),
        ("look", "reboot_overdue", "gone"),
        ("look", "host_drifted", "drifted"),
        ("check", "host_degraded", "degraded"),
    ]
    texts = {n.host: n for n in lines}
    assert texts["silent"].text == "host silent fell silent" and texts["unknown"].text == "host unknown is unknown"
    assert "datum reboot on manual" in texts["manual"].do and "Datum never reboots it" in texts["never"].do
    assert "2026-11-30 10:30:00 UTC" in texts["gone"].detail
    assert host_need(hosts[0]) is None and host_need(hosts[9]) is None  # converged; a maintenance window waits


def test_a_host_back_from_its_reboot_unhealthy_is_a_line_of_its_own_with_or_without_its_lease():
    why = budget.unhealthy({"ok": False, "detail": "health_check (test) exited 1"})
    sick = {"host": "web1", "state": "degraded", "reason": why}
    [line] = decide(hosts=[sick])  # its lease cleared (or still live): the host's own line
    assert (line.severity.value, line.reason, line.host) == ("look", "host_unhealthy", "web1")
    assert line.text == "host web1 came back from its reboot unhealthy" and line.detail == why
    assert "datum reboots clear web1" in line.do
    overdue = {"host": "web1", "group": "web", "since": "2026-11-30T10:00:00+00:00",
               "expiresAt": "2026-11-30T10:30:00+00:00", "unhealthy": why}
    lines = decide(hosts=[sick], overdue=[overdue])  # past its timeout: the group's halt is a line too, told apart
    assert [(n.reason, n.text) for n in lines] == [
        ("reboot_overdue", "group web's reboots are halted: host web1 came back from its reboot unhealthy"),
        ("host_unhealthy", "host web1 came back from its reboot unhealthy"),
    ]
    skipped = decide(hosts=[{"host": "web2", "state": "degraded", "reason": "File[x] skipped: no provider"}])
    assert [n.reason for n in skipped] == ["host_degraded"]


def test_one_call_for_a_host_on_every_surface():
    """A host a line names calls for its severity; one without a line never for 'go and look' (a host of a group
    whose reboots another host halted waits: the line is that other host's)."""
    halted = {"host": "web2", "state": "awaiting-reboot", "reason": budget.halted(["web1"]),
              "reboot": {"required": True, "policy": "automatic"}}
    assert host_need(halted) is None
    assert host_call("awaiting-reboot", halted["reason"], None) is Act.WAIT
    assert call_label(Act.WAIT) == "wait"
    failed = {"host": "web3", "state": "failed", "reason": "File[x] failed: no"}
    assert host_call("failed", failed["reason"], host_need(failed)) is Severity.LOOK
    assert call_label(Severity.CHECK) == "check it is intended"
    assert host_call("converged", None, None) is None


def test_every_reason_has_one_severity_and_the_lines_are_json():
    table = reasons()
    assert table["host_degraded"] is Severity.CHECK and list(table)[-1] == "host_degraded"
    assert all(s is Severity.LOOK for r, s in table.items() if r != "host_degraded")
    assert {"circuit_breaker", "suppressed_unconfigured", "image_mode", "backoff_cap", "manual_reboot"} <= set(table)
    assert "backoff" not in table and "awaiting_confirmation" not in table  # they wait
    [line] = decide([rec([item("backoff", 4)])])
    assert line.to_json() == {
        "severity": "look", "reason": "backoff_cap", "reconciler": "r", "ids": ["k/a"], "direction": "align",
        "text": "k/a (r) is parked at the backoff cap after 4 failures", "detail": "disk full",
        "do": line.do,
    }
