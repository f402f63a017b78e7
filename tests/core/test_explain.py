"""Every word an operator reads has one explanation, and ``datum explain`` prints it."""

from __future__ import annotations

import json

import pytest

from datum.core.explain import (
    EXPLANATIONS,
    Act,
    Vocabulary,
    advice,
    at_backoff_cap,
    explain,
    known,
    lookup,
)
from datum.core.memory import BackoffPolicy
from datum.core.vocab import (
    DESCRIPTIONS,
    AuditOutcome,
    Health,
    HostState,
    IdentityState,
    Reason,
    ResourceState,
    RolloutState,
)

VOCABULARIES = [
    (Vocabulary.REASON, Reason),
    (Vocabulary.HOST_STATE, HostState),
    (Vocabulary.RESOURCE_STATE, ResourceState),
    (Vocabulary.HEALTH, Health),
    (Vocabulary.ROLLOUT_STATE, RolloutState),
    (Vocabulary.IDENTITY_STATE, IdentityState),
    (Vocabulary.AUDIT_OUTCOME, AuditOutcome),
]


@pytest.mark.parametrize(("vocabulary", "enum"), VOCABULARIES)
def test_every_registered_word_is_explained_with_what_to_do(vocabulary, enum):
    for value in enum:
        e = explain(vocabulary, value.value)
        assert e.summary and len(e.means) > 30 and e.do, value
        assert isinstance(e.act, Act)
    assert len([e for e in EXPLANATIONS if e.vocabulary is vocabulary]) == len(enum)


def test_a_reason_s_summary_is_the_registry_s_description():
    for reason in Reason:
        assert explain(Vocabulary.REASON, reason.value).summary == DESCRIPTIONS[reason]


def test_the_seed_s_wait_versus_look():
    assert explain(Vocabulary.REASON, "awaiting_confirmation").act is Act.WAIT
    assert explain(Vocabulary.REASON, "circuit_breaker").act is Act.LOOK
    assert explain(Vocabulary.REASON, "blocked_on_owner").act is Act.OWNER
    assert explain(Vocabulary.REASON, "suppressed_unconfigured").act is Act.LOOK
    assert explain(Vocabulary.REASON, "suppressed_no_reap").act is Act.NONE
    policy = BackoffPolicy(base_passes=1, cap_passes=64)
    # failed once, retries shortly: wait; parked at the cap: go and look
    assert advice(Reason.BACKOFF, 1, policy) is Act.WAIT
    assert advice(Reason.BACKOFF, 7, policy) is Act.LOOK and at_backoff_cap(Reason.BACKOFF, 7, policy)
    assert not at_backoff_cap(Reason.BACKOFF, 6, policy)
    # the pass that retries an item (apply_failed) and the passes that wait it out (backoff) read the same
    for failures, act in ((1, Act.WAIT), (2, Act.WAIT), (3, Act.LOOK), (7, Act.LOOK)):
        assert advice(Reason.APPLY_FAILED, failures, policy) is act is advice(Reason.BACKOFF, failures, policy)
    assert at_backoff_cap(Reason.APPLY_FAILED, 7, policy) and not at_backoff_cap(Reason.APPLY_FAILED, 6, policy)
    assert advice(Reason.ACTING) is Act.WAIT


def test_lookup_normalises_and_finds_every_meaning():
    assert [e.vocabulary for e in lookup("FAILED")] == [Vocabulary.HOST_STATE, Vocabulary.RESOURCE_STATE]
    assert [e.vocabulary for e in lookup("pending")] == [Vocabulary.RESOURCE_STATE, Vocabulary.IDENTITY_STATE]
    assert lookup("awaiting_reboot")[0].name == "awaiting-reboot"
    assert lookup("blocked-on-owner")[0].name == "blocked_on_owner"
    assert lookup("nope") == []
    assert "backoff" in known() and len(known()) == len(set(known()))


def test_datum_explain_prints_the_text(datum_cli):
    rc, out, _err = datum_cli("explain", "backoff")
    assert rc == 0
    assert out.startswith("backoff (drift reason): ")
    assert "go and look" in out and "wait" in out


def test_datum_explain_json(datum_cli):
    rc, out, _err = datum_cli("explain", "circuit_breaker", "--json")
    assert rc == 0
    body = json.loads(out)
    assert body["name"] == "circuit_breaker"
    [e] = body["explanations"]
    assert e["vocabulary"] == "drift reason" and e["act"] == "look" and e["do"]


def test_datum_explain_unknown_names_the_nearest_three(datum_cli):
    """Issue 40: the error was one line of every known name (84 of them); now the nearest three, on
    one line of at most 80 columns, every name still in the JSON's details."""
    rc, _out, err = datum_cli("explain", "blocked-on-ownr")
    assert rc == 64
    assert "try blocked_on_owner" in err and "awaiting-reboot" not in err
    assert all(len(line) <= 80 for line in err.splitlines())
    rc, out, _err = datum_cli("explain", "nope", "--json")
    assert rc == 64
    finding = json.loads(out)["issues"][0]
    assert finding["code"] == "NOT_FOUND" and "backoff" in finding["details"]["known"]
    rc, _out, err = datum_cli("explain", "zzzzqqqq")
    assert rc == 64 and "datum explain lists every word it knows" in err


def test_every_explanation_fits_80_columns(datum_cli):
    """Issue 40: 30 of the headings (name, vocabulary, summary) were wider than 80 columns."""
    for e in EXPLANATIONS:
        assert all(len(line) <= 80 for line in e.text(80).splitlines()), e.name


@pytest.mark.parametrize(
    ("said", "vocabulary", "name"),
    [
        ("check it is intended", "advice", "check it is intended"),
        ("at the backoff cap", "item state", "at_backoff_cap"),
        ("held back on the previous revision until its wave 2 is released", "rollout", "held_back"),
        ("canary", "rollout", "canary"),
        ("wave", "rollout", "wave"),
        ("soak", "rollout", "soak"),
        ("pg_roles disabled · no pass runs", "reconciler state", "disabled"),  # the page's fold of a reconciler off
    ],
)
def test_the_words_the_surfaces_print_are_explained(said, vocabulary, name):
    """Issue 40: datum explain refused these, which the page, datum hosts and the metrics print."""
    assert (vocabulary, name) in [(e.vocabulary.value, e.name) for e in lookup(said)]


def test_every_needs_a_human_code_is_explained():
    """Each line of Needs a human carries a code (/v1/attention's reason): every one is explained."""
    from datum.core import attention

    codes = set(attention.reasons()) | {attention.HOST_DEGRADED}
    explained = {e.name for e in lookup_all()}
    assert codes <= explained, sorted(codes - explained)


def lookup_all():
    from datum.core.explain import plugin_explanations

    return [*EXPLANATIONS, *plugin_explanations()]


def test_datum_explain_without_a_name_lists_everything_the_plugins_too(datum_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _err = datum_cli("explain")
    assert rc == 0
    from datum.core.explain import plugin_explanations

    listed = out.splitlines()
    assert all(len(line) <= 80 for line in listed)
    rows = [line[2:] for line in listed if line.startswith("  ") and not line.startswith("   ")]
    every = [*EXPLANATIONS, *plugin_explanations()]
    every.sort(key=lambda e: [x.vocabulary for x in EXPLANATIONS].index(e.vocabulary))  # by vocabulary, stable
    assert len(rows) == len(every)
    for e, row in zip(every, rows, strict=True):  # a name, then its summary (on the next line when it is long)
        assert row == e.name or row.startswith(f"{e.name} "), (e.name, row)
    assert any(e.name == "pg_roles.membership_outside_prefix" for e in every)  # a plugin's, no dot typed
    headings = [line[:-1] for line in listed if not line.startswith(" ")]
    assert headings == list(dict.fromkeys(e.vocabulary.value for e in EXPLANATIONS))


def test_the_reboot_budget_s_host_reasons_are_explained_as_the_host_shows_them(datum_cli):
    from datum.core.budget import no_lease, waiting

    assert waiting(2, 2) == "waiting for the group's reboot budget (2/2 rebooting)"
    [e] = lookup(waiting(2, 2))
    assert (e.vocabulary, e.name, e.act) == (Vocabulary.HOST_REASON, "reboot_budget", Act.WAIT)
    assert [x.name for x in lookup("reboot-budget")] == ["reboot_budget"]
    [e] = lookup(no_lease("cannot reach http://datum:8080/v1/hosts/web1/reboot-lease: refused"))
    assert (e.name, e.act) == ("no_reboot_lease", Act.LOOK)
    rc, out, _err = datum_cli("explain", waiting(1, 1))
    assert rc == 0 and out.startswith("reboot_budget (host reason): ")
    assert "reboot_concurrency" in out


def test_an_audit_outcome_is_the_outcome_of_its_status_and_only_a_refusal_is_one():
    assert [AuditOutcome.of(s) for s in (401, 403, 200, 201, 404, 409, 503, None)] == [
        AuditOutcome.UNAUTHENTICATED, AuditOutcome.DENIED, *[AuditOutcome.ALLOWED] * 6]
    assert {o for o in AuditOutcome if o.refusal} == {AuditOutcome.DENIED, AuditOutcome.UNAUTHENTICATED}
    assert all(AuditOutcome.of(o.status) is o for o in AuditOutcome if o.refusal)
