"""Cedar's memo: one decision for every resource id no policy names, each named id decided by itself.

Each decision the memo gives is compared with Cedar's own for the same request
(a fresh ``Authorizer`` per request, so nothing memoised), over policies that
name hosts in every way a policy can: in the scope, in a condition, through a
bound principal's ``host`` attribute, in a set.
"""

from __future__ import annotations

import pytest

from datum.api.front import authz as authz_module
from datum.api.front.authz import (
    Action,
    Authorizer,
    bound,
    host,
    scoped,
    shipped_policies,
    shipped_schema,
)

POLICIES = shipped_policies() + """
@id("no-reports-for-db1")
forbid (principal, action == Action::"fleet:ReportPass", resource == Host::"db1");

@id("ops-reads-two-hosts")
permit (principal == Principal::"ops", action == Action::"fleet:ReadManifest", resource)
when { [Host::"web7", Host::"web8"].contains(resource) };

@id("ci-not-on-the-vault")
permit (principal == Principal::"ci", action == Action::"fleet:ReadHost", resource is Host)
unless { resource == Host::"vault" };
"""

PRINCIPALS = ["agent", "ops", "ci", "operator", "nobody", bound("agent", "web1"), bound("agent", "db1"),
              bound("other", "web2"), scoped("operator", ["web"]), scoped("viewer", ["db", "web"])]
GROUPS = [None, "web", "db"]  # the host's recorded group, when the decision is told it
HOSTS = ["web1", "web2", "web7", "web8", "db1", "vault", "h-0001", "h-0002", "agent", "ops", "Host"]
ACTIONS = [Action.REPORT_PASS, Action.READ_MANIFEST, Action.READ_HOST, Action.READ_SUBSTRATE]


def test_every_memoised_decision_is_cedars_own():
    memo = Authorizer(POLICIES, shipped_schema())
    # Cedar's own decision: an Authorizer whose memo is emptied before every request, so nothing it answers
    # was memoised (one Authorizer, not one per request: parsing the policies 1,320 times was this test's minute)
    cedar = Authorizer(POLICIES, shipped_schema())
    requests = [(p, a, n, g) for p in PRINCIPALS for a in ACTIONS for n in HOSTS for g in GROUPS]
    own = {}
    for principal, action, name, group in requests:
        cedar._memo.clear()
        own[principal, action, name, group] = cedar.allowed(principal, action, host(name), group)
    for _round in range(2):  # the second round answers from the memo
        for principal, action, name, group in requests:
            said = memo.allowed(principal, action, host(name), group)
            assert said is own[principal, action, name, group], (principal, action, name, group)


def test_ids_no_policy_names_share_one_cedar_call_and_named_ones_do_not(monkeypatch):
    authz = Authorizer(POLICIES, shipped_schema())
    calls: list[str] = []
    real = authz_module.cedarpy.is_authorized

    def counted(request, *args):
        calls.append(request["resource"]["id"])
        return real(request, *args)

    monkeypatch.setattr(authz_module.cedarpy, "is_authorized", counted)
    assert all(authz.allowed("admin", Action.REPORT_PASS, host(f"h-{n:05d}")) for n in range(1000))
    assert calls == ["h-00000"]
    assert not authz.allowed("admin", Action.REPORT_PASS, host("db1"))  # named by the forbid: its own call
    assert calls == ["h-00000", "db1"]
    # A bound principal's own host is named by its attribute: decided apart from every other host.
    web1 = bound("agent", "web1")
    assert authz.allowed(web1, Action.REPORT_PASS, host("web1"))
    assert not authz.allowed(web1, Action.REPORT_PASS, host("web2"))
    assert not authz.allowed(web1, Action.REPORT_PASS, host("web3"))  # as web2: no call
    assert calls == ["h-00000", "db1", "web1", "web2"]
    # A token scoped to groups: one call per group its hosts are in, not one per host.
    web = scoped("operator", ["web"])
    assert all(authz.allowed(web, Action.READ_HOST, host(f"w-{n:05d}"), "web") for n in range(1000))
    assert not any(authz.allowed(web, Action.READ_HOST, host(f"d-{n:05d}"), "db") for n in range(1000))
    assert calls[4:] == ["w-00000", "d-00000"]


def test_policies_with_templates_decide_every_id_by_itself():
    assert authz_module._named(POLICIES) is not None
    assert "db1" in (authz_module._named(POLICIES) or ())
    template = 'permit (principal == ?principal, action, resource);'
    assert authz_module._named(template) is None


def test_a_policy_document_of_another_shape_decides_every_id_by_itself(monkeypatch):
    """Should cedarpy name its parts otherwise, the memo must fail closed: no id shares a decision."""
    monkeypatch.setattr(authz_module.cedarpy, "policies_to_json_str", lambda text: '{"policies": {}}')
    assert authz_module._named(POLICIES) is None


@pytest.mark.parametrize("principal", ["agent", bound("agent", "web1")])
def test_the_memo_stays_bounded(monkeypatch, principal):
    monkeypatch.setattr(authz_module, "MEMO_MAX", 10)
    policies = shipped_policies() + "".join(
        f'\nforbid (principal, action == Action::"fleet:ReadHost", resource == Host::"n{n}");' for n in range(30)
    )
    authz = Authorizer(policies, shipped_schema())
    for n in range(30):
        authz.allowed(principal, Action.READ_HOST, host(f"n{n}"))
        assert len(authz._memo) <= 11
