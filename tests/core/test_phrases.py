"""Every host reason is made from the words its producer exports and read back by ``datum explain`` from the
same words (``datum.core.hostreasons``, ``datum.core.budget``; issue 39 item 2): each kind, made, is read as the
word that explains it, and every producer of ``hostreasons`` has its round trip here."""

from __future__ import annotations

import inspect

import pytest

from datum.core import budget, hostreasons, needwords
from datum.core.phrases import words

UNKNOWN = ("host state", "unknown")
AWAITING = ("host state", "awaiting-reboot")

# producer -> (what it made, the first word datum explain reads from it)
MADE: dict[str, tuple[str, tuple[str, str]]] = {
    "stale": (hostreasons.stale("2h05m", 3, "60s", "converged"), UNKNOWN),
    "stopped": (hostreasons.stopped("SIGTERM", 2, 5) + "; File[/a] failed: x", UNKNOWN),
    "unfinished": (hostreasons.unfinished("2026-12-07T02:00:00+00:00", 4242), UNKNOWN),
    "no_manifest": (hostreasons.no_manifest("http://datum:8080 answered 403"), UNKNOWN),
    "kept_invalid": ("the server is away; and " + hostreasons.kept_invalid("resources: not a list"), UNKNOWN),
    "unreadable": (hostreasons.unreadable("the last pass report of web1", "Expecting value"), UNKNOWN),
    "not_a_state": (hostreasons.not_a_state("happy"), UNKNOWN),
    "present": (hostreasons.present("/var/run/reboot-required", "(linux-image-amd64)"), AWAITING),
    "kernel": ("File[/a] skipped: y; " + hostreasons.kernel("6.1.0-21-amd64", "6.1.0-18-amd64"), AWAITING),
    "not_default": (hostreasons.not_default("6.1.0-18-amd64", "6.1.0-21-amd64"), AWAITING),
    "changed": (hostreasons.changed("Package[linux-image-amd64]", "updated", hostreasons.RUNNING_KERNEL_DIFFERS),
                AWAITING),
    "fleet_directory": (hostreasons.fleet_directory("/srv/fleet", hostreasons.NOT_READABLE),
                        ("needs a human", "fleet_directory_unavailable")),
}


@pytest.mark.parametrize("producer", sorted(MADE))
def test_each_host_reason_made_is_read_back_as_its_word(producer):
    text, first = MADE[producer]
    assert words(text)[:1] == [first], text
    assert words(f"reason: {text}")[:1] == [first]  # as datum status prints it


def test_every_producer_of_host_reasons_has_its_round_trip():
    made = {n for n, f in inspect.getmembers(hostreasons, inspect.isfunction) if f.__module__ == hostreasons.__name__}
    assert made == set(MADE)


@pytest.mark.parametrize(
    ("text", "first"),
    [
        (hostreasons.NO_PASS, UNKNOWN),
        ("File[/a] failed: denied" + hostreasons.BLOCKED + "File[/b]", ("host state", "failed")),
        (budget.waiting(2, 2), ("host reason", "reboot_budget")),
        (budget.halted(["web3"]), ("host reason", "reboot_halted")),
        (budget.no_lease("refused"), ("host reason", "no_reboot_lease")),
        (budget.turn(["web1"]), ("host reason", "reboot_turn")),
        (budget.blocked("up == 0"), ("host reason", "reboot_blocked")),
        (budget.pre_reboot_failed("drain exited 2"), ("host reason", "pre_reboot_failed")),
        (budget.unhealthy({"ok": False}), ("host reason", "reboot_unhealthy")),
        (budget.back_unhealthy({"state": "awaiting-reboot", "reason": "x"}), ("host reason", "reboot_unhealthy")),
    ],
)
def test_the_constants_and_the_budget_s_reasons_are_read_back(text, first):
    assert words(text)[:1] == [first], text


def test_each_refusal_a_provider_says_is_read_back_as_its_name():
    from datum.core.phrases import REFUSAL
    from datum.providers import held, links

    said = {
        "link_rule": f"File[/etc/x] failed: /etc/x: {links.RULE}",
        "changed_since_observed": f"File[/etc/x] failed: {held.changed('/etc/x', 'its content')}",
        "appeared_since_observed": f"File[/etc/x] failed: {held.appeared('/etc/x', 'a file')}",
        "hard_links": f"File[/etc/x] failed: /etc/x has 2 {hostreasons.HARD_LINKS}; refusing to change its owner",
        "accounts_locked": f"User[app] failed: /etc/.pwd.lock is held: waited 5 s {hostreasons.ACCOUNTS_LOCKED}",
    }
    for name, text in said.items():
        assert (REFUSAL, name) in words(text), text


NEED_LINES = {  # each producer of datum.core.needwords, and the word its line reads back as
    "parked": (lambda: needwords.parked("bucket/delta (buckets) is") + " after 12 failures", ("item state", "at_backoff_cap")),
    "stranded": (lambda: needwords.stranded(3, "bucket", "archiving", "buckets"), ("coverage", "stranded")),
    "came_back_unhealthy": (lambda: needwords.came_back_unhealthy("web1"), ("needs a human", "host_unhealthy")),
    "held_back": (lambda: needwords.held_back(2, 7, 1), ("rollout", "held_back")),
}


@pytest.mark.parametrize("name", sorted(NEED_LINES))
def test_each_needs_a_human_line_made_is_read_back_as_its_word(name):
    make, word = NEED_LINES[name]
    assert word in words(make())


def test_every_producer_of_needs_a_human_words_has_its_round_trip():
    made = {n for n, f in inspect.getmembers(needwords, inspect.isfunction) if f.__module__ == needwords.__name__}
    assert made == set(NEED_LINES)


def test_each_package_program_s_failure_and_each_refusal_is_read_back_as_its_provider():
    """``datum.core.packagewords``: what the Package providers say when a program they run fails (made by
    ``Completed.why``, as a pass says it) or a named provider cannot work, read back as that provider; and
    every provider ``choose`` offers has its words there."""
    from datum.core.packagewords import PROGRAMS, refused
    from datum.core.phrases import PACKAGE_PROVIDER
    from datum.providers.base import Completed
    from datum.providers.package.choose import PROVIDERS

    assert set(PROVIDERS) == set(PROGRAMS)
    for provider, programs in PROGRAMS.items():
        others = {(PACKAGE_PROVIDER, p) for p in PROGRAMS if p != provider}
        for program in programs:
            failed = Completed((program, "-y", "install", "x"), 100, "", "E: Unable to locate package x")
            said = words(f"Package[x] failed: {failed.why()}")
            assert (PACKAGE_PROVIDER, provider) in said and not others & set(said), (program, said)
        said = words(f"Package[x] failed: {refused(provider, 'not on this host')}")
        assert (PACKAGE_PROVIDER, provider) in said and not others & set(said), said
