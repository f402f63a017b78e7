"""``datum explain`` answers every word and every reason a surface can print, exit 0.

The words come from where the surfaces take them: every vocabulary of ``datum.core.vocab``, the
reason registry (the contract's and the plugins', with and without their namespace), the advice
labels, the coverage and reconciler words; the host reasons from their producers, run for real: the
verdict over each combination of resource states, the reboot detection over a root with Debian's
marker and a newer kernel, the stale rule, a pass that did not finish, a state file whose report
cannot be read, the API's host rows, the agent with no manifest, the reboot budget; the pass lines;
and the page's "Needs a human" lines for an item parked at the backoff cap and a stranded row.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import SimpleNamespace

import pytest

from datum.core import vocab
from datum.core.budget import (
    back_unhealthy,
    blocked,
    halted,
    no_lease,
    pre_reboot_failed,
    turn,
    waiting,
)
from datum.core.explain import ACT_LABEL
from datum.core.vocab import Action, Direction, Health, Reason, all_reasons
from datum.fleet.stale import stale_reason
from datum.host import reboot as rb
from datum.host import verdict
from datum.host.output import pass_lines
from datum.host.statefile import StateStore, Unreadable, unfinished_reason
from datum.plugins import load

from .scene import REBOOT, B, C, D, F, P, S, outcomes, reports

VOCABULARIES = [cls for _name, cls in inspect.getmembers(vocab, inspect.isclass)
                if issubclass(cls, StrEnum) and cls.__module__ == vocab.__name__]


def words() -> list[str]:
    load()
    every = [member.value for cls in VOCABULARIES for member in cls]
    every += [Action(a).past for a in Action if a is not Action.NONE]
    every += list(ACT_LABEL.values())
    every += [r.value for r in all_reasons()]
    every += [r.value.partition(".")[2] for r in all_reasons() if "." in r.value]  # a plugin's, no namespace
    every += ["stranded", "disabled", "at_backoff_cap", "selected", "terminal"]
    return every


RULES = Path(__file__).parents[2] / "contrib" / "prometheus" / "datum-rules.yml"
# The labels the alerts' annotations print, by where their values come from: a vocabulary, or None for a name
# (a host's, a reconciler's, a status a reconciler chose). A label not here fails the collection: say which.
LABEL_VALUES: dict[str, list[str] | None] = {
    "direction": [d.value for d in Direction],
    "policy": [p.value for p in vocab.RebootPolicy],
    "reason": None,  # a line's reason: attention.reasons(), collected with the API's
    "host": None, "reconciler": None, "kind": None, "status": None, "instance": None, "group": None, "cert": None,
}


def alert_words() -> list[str]:
    """Every alert's name, and the vocabulary words its annotations can print (``$labels.X``)."""
    import re

    import yaml

    alerts = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    labels = {label for r in alerts for text in (r.get("annotations") or {}).values()
              for label in re.findall(r"\$labels\.(\w+)", text)}
    assert labels <= set(LABEL_VALUES), labels - set(LABEL_VALUES)
    assert len(alerts) >= 20
    return [r["alert"] for r in alerts] + [w for label in labels for w in LABEL_VALUES[label] or ()]


def _enums(node, seen_refs, schemas):
    """Every enum value reachable from ``node`` of an OpenAPI document, following $refs once."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref and ref not in seen_refs:
            seen_refs.add(ref)
            yield from _enums(schemas[ref.rsplit("/", 1)[1]], seen_refs, schemas)
        yield from (str(v) for v in node.get("enum") or ())
        for k, v in node.items():
            if k != "parameters":  # what a client sends, not what a surface prints
                yield from _enums(v, seen_refs, schemas)
    elif isinstance(node, list):
        for v in node:
            yield from _enums(v, seen_refs, schemas)


def api_words(tmp: Path) -> list[str]:
    """The words of Datum's own answers: every enum of the OpenAPI document reachable from a path that is not
    a plugin's (``reason``, ``code``, ``severity``, ``state``, ``outcome``, ...), and every reason a line of
    ``GET /v1/attention`` can carry (a free string there: ``datum.core.attention.reasons``)."""
    from datum.api.app import create_app
    from datum.config import Settings
    from datum.core import attention
    from datum.store import open_store

    loaded = load()
    settings = Settings.model_validate({"home": str(tmp / "home"), "store": f"sqlite:///{tmp / 'api.db'}"})
    store = open_store(settings.store_url)
    try:
        document = create_app(settings, loaded.registry(), store).openapi()
    finally:
        store.dispose()
    plugins = tuple(p.prefix for p in loaded.plugins if p.prefix)
    schemas = document["components"]["schemas"]
    own = {path: ops for path, ops in document["paths"].items() if not path.startswith(plugins)}
    found = list(_enums(own, set(), schemas))
    assert {"CONFLICT", "look", "denied"} <= set(found)
    return found + list(attention.reasons()) + list(attention.SEVERITY_LABEL.values())


def item_phrases() -> list[str]:
    """What a plugin's groups of items read on every surface (``ReconcilerPlugin.items``), for one and for many."""
    load()
    out = []
    for (_namespace, _key), (one, many) in vocab.every_item_words().items():
        out += [one.format(n=1, names="web1"), many.format(n=12, names="web1, web2, web3 and 9 more")]
    assert out
    return out


def test_every_word_an_api_answer_an_alert_or_a_plugins_phrase_prints_is_explained(datum_cli, tmp_path):
    """The words collected from where the surfaces take them (the OpenAPI document, the rules file, the
    plugins' registries), each asked of ``datum explain``: none is refused."""
    every = sorted(set(api_words(tmp_path) + alert_words() + item_phrases()))
    refused = []
    for word in every:
        code, out, _err = datum_cli("explain", word, "--json")
        if code != 0 or not json.loads(out)["explanations"]:
            refused.append(word)
    assert refused == [], refused


def test_an_alerts_explanation_points_at_a_word_explain_knows(datum_cli):
    from datum.core.terms import _ALERTS

    for name, (*_said, word) in _ALERTS.items():
        if word:
            code, _out, err = datum_cli("explain", word)
            assert code == 0, (name, word, err)


def test_the_vocabularies_walked_are_the_contracts():
    names = {cls.__name__ for cls in VOCABULARIES}
    assert {"ResourceState", "Action", "HostState", "Mode", "RebootPolicy", "Direction", "Health", "Reason"} <= names
    load()
    assert any("." in r.value for r in all_reasons())  # the shipped plugins register theirs


@pytest.mark.parametrize("word", sorted(set(words())))
def test_every_word_is_explained(datum_cli, word):
    code, out, err = datum_cli("explain", word, "--json")
    assert code == 0, err
    assert json.loads(out)["explanations"]


def _decided(states, **kw):
    made = outcomes(states)
    return verdict.decide(made, **kw).reason


def host_reasons(tmp: Path) -> dict[str, tuple[str, str]]:
    """Each host reason a producer makes -> the (vocabulary, name) explain must put first."""
    running, newer = "6.1.0-18-amd64", "6.1.0-21-amd64"
    root = tmp / "root"
    (root / "run").mkdir(parents=True)
    (root / "run" / "reboot-required").write_text("*** System restart required ***\n")
    (root / "run" / "reboot-required.pkgs").write_text("linux-image-amd64\nlibc6\n")
    (root / "boot").mkdir()
    (root / "boot" / f"vmlinuz-{newer}").write_text("")
    change = f"Package[linux-image-amd64] {Action.UPDATE.past}, running kernel differs"
    found = rb.detect(root, running, [change])
    kept, _attempt = rb.not_booted(list(found.reasons), newer, running,
                                   {"requestedAt": "2026-11-01T00:00:00Z", "kernel": newer, "bootId": "old"}, "new")
    unreadable_pkgs = tmp / "root2"
    (unreadable_pkgs / "run" / "reboot-required.pkgs").mkdir(parents=True)
    (unreadable_pkgs / "run" / "reboot-required").write_text("")
    odd = rb.detect(unreadable_pkgs, running, [])
    host, reboot, reason = "host state", "awaiting-reboot", "host reason"
    made = {
        _decided([(C, None), (F, "permission denied")]): (host, "failed"),
        _decided([(C, None), (B, "blocked by File[/etc/app/conf1.d/settings.conf]")]): (host, "failed"),
        _decided([(F, "apt-get exited 100: E: Unable to locate package nope"), (D, "x"), (S, "y")] * 4,
                 reboot_reason=REBOOT): (host, "failed"),
        _decided([(C, None), (D, "content differs")]): (host, "drifted"),
        _decided([(C, None), (S, "image_mode")]): (host, "degraded"),
        _decided([(C, None), (S, "systemd is not PID 1")]): (host, "degraded"),
        _decided([(C, None)], reboot_reason=REBOOT): (host, reboot),
        _decided([(C, None), (S, "y")], reboot_reason="; ".join(found.reasons)): (host, reboot),
        "; ".join(kept): (host, reboot),
        "; ".join(odd.reasons): (host, reboot),
        _decided([(C, None), (P, None), (P, None)], stopped_by="SIGTERM"): (host, "unknown"),
        _decided([(F, "x"), (P, None)], reboot_reason=REBOOT, stopped_by="SIGINT"): (host, "unknown"),
        stale_reason(18000, 3, 60, "converged"): (host, "unknown"),
        unfinished_reason({"startedAt": "2026-11-30T10:00:00+00:00", "pid": 4242}): (host, "unknown"),
        waiting(2, 2): (reason, "reboot_budget"),
        no_lease("cannot reach http://datum:8080/v1/hosts/web1/reboot-lease: refused"): (reason, "no_reboot_lease"),
        halted(["web3"], {"web3": back_unhealthy({"state": "converged", "health": {"ok": False}})}): (reason, "reboot_halted"),
        turn(["web3", "web1"]): (reason, "reboot_turn"),
        blocked("the Prometheus query up == 0 returns 1 series: up{job=\"x\"}"): (reason, "reboot_blocked"),
        pre_reboot_failed("pre_reboot (drain) exited 2"): (reason, "pre_reboot_failed"),
        str(back_unhealthy({"state": "failed", "reason": "File[/etc/x] failed: denied"})): (reason, "reboot_unhealthy"),
    }
    assert len(found.reasons) == 3 and len(made) == 21, found.reasons  # the change, the marker, the kernel
    return made


def unknown_reasons(tmp: Path) -> list[str]:
    """Why a host reads unknown, as the state file, the API and the agent say it."""
    from datum.agent.loop import _manifest
    from datum.api.models import host_summary
    from datum.cli.host import NO_PASS

    path = tmp / "agent.db"
    local = StateStore(str(path))
    local.record("web1", reports()["web1"])
    local.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE agent_reports SET report = '{\"state\": 3'")
    db.close()
    local = StateStore(str(path))
    with pytest.raises(Unreadable) as damaged:
        local.get("web1")
    local.close()
    row = {"host": "web1", "state": "unknown", "updatedAt": datetime.now(UTC)}
    api = [
        host_summary({**row, "unreadable": "Expecting value: line 1 column 1"}).reason,
        host_summary({**row, "reported": "happy"}).reason,
        host_summary({**row, "state": "failed", "finishedAt": "not a time"}).reason,
    ]
    got = SimpleNamespace(why="http://datum:8080/v1/hosts/web1/manifest answered 403 Forbidden", body=None)
    _none, _digest, never = _manifest(None, got, None, tmp / "m")
    _none, _digest, spoiled = _manifest(None, got, ("sha256:x", b"{not a manifest", "2026-11-30"), tmp / "m")
    return [NO_PASS, str(damaged.value), *api, never, spoiled]


def test_every_host_reason_pasted_as_shown_is_explained_by_the_state_it_reads(datum_cli, tmp_path):
    for text, (vocabulary, name) in host_reasons(tmp_path).items():
        for shown in (text, f"reason: {text}"):  # as the report has it, and as datum status prints it
            code, out, err = datum_cli("explain", shown, "--json")
            assert code == 0, (shown, err)
            first = json.loads(out)["explanations"][0]
            assert (first["vocabulary"], first["name"]) == (vocabulary, name), (shown, first)
    for text in unknown_reasons(tmp_path):
        assert text
        code, out, err = datum_cli("explain", text, "--json")
        assert code == 0, (text, err)
        first = json.loads(out)["explanations"][0]
        assert (first["vocabulary"], first["name"]) == ("host state", "unknown"), (text, first)


def test_a_skipped_reason_that_is_a_registered_one_is_explained_too(datum_cli):
    text = _decided([(C, None), (S, "image_mode")])
    _code, out, _err = datum_cli("explain", text, "--json")
    assert [(e["vocabulary"], e["name"]) for e in json.loads(out)["explanations"]] == [
        ("host state", "degraded"), ("resource state", "skipped"), ("drift reason", "image_mode"),
    ]


def test_every_pass_line_is_explained(datum_cli):
    for report in reports().values():
        for line in pass_lines(report):
            if line.strip():
                code, _out, err = datum_cli("explain", line)
                assert code == 0, (line, err)


def test_the_pages_lines_for_an_item_at_the_backoff_cap_and_a_stranded_row(datum_cli):
    from datum.config import ReconcilerSettings
    from datum.reconcile.report import CoverageEntry, DriftItem, DriftReport
    from datum.web import view as v

    at = datetime(2026, 11, 24, tzinfo=UTC)
    item = DriftItem(kind="bucket", direction=Direction.ALIGN, id="archive", streak=60, confirmations_needed=2,
                     reason=Reason.BACKOFF, failures=12, last_err="disk full", retry_after_passes=3)
    row = CoverageEntry(kind="bucket", status="archiving", count=3, selected=False, terminal=False,
                        oldest_age_seconds=600, stranded=True)
    report = DriftReport(reconciler="buckets", as_of=at, last_ran_at=at, health=Health.DEGRADED, drift=1,
                         blocked=0, items_reported=True, items=[item], dropped=0, drift_cap=500,
                         coverage_reported=True, coverage=[row])
    own = ReconcilerSettings.model_validate({"backoff": {"base_passes": 1, "cap_passes": 8}})
    from datum.core.attention import Reconciler, decide

    config = own.converge_config()
    needs = decide([Reconciler(report=report.dump(), enabled=True, backoff=config.backoff, breaker=config.breaker)])
    lines = [a.need.text for a in v.overview([v.reconciler_view(report, own, [], lambda s: None)], [], {}, needs).attention]
    parked = next(t for t in lines if "backoff cap" in t)
    stranded = next(t for t in lines if "stranded" in t)
    for text, first in ((parked, ("item state", "at_backoff_cap")), (stranded, ("coverage", "stranded"))):
        code, out, err = datum_cli("explain", text, "--json")
        assert code == 0, (text, err)
        e = json.loads(out)["explanations"][0]
        assert (e["vocabulary"], e["name"]) == first


def test_the_lines_of_a_missing_fleet_directory_and_a_host_back_unhealthy_are_explained(datum_cli):
    from datum.core import budget
    from datum.core.attention import decide

    sick = {"host": "web1", "state": "degraded", "reason": budget.unhealthy({"ok": False, "detail": "x exited 1"})}
    lines = decide(hosts=[sick], fleet_directory="the fleet directory /srv/fleet is not there ([fleet] manifests)")
    assert [n.reason for n in lines] == ["fleet_directory_unavailable", "host_unhealthy"]
    for line in lines:
        code, out, err = datum_cli("explain", line.text, "--json")
        assert code == 0, (line.text, err)
        e = json.loads(out)["explanations"][0]
        assert (e["vocabulary"], e["name"]) == ("needs a human", line.reason)


def test_a_word_datum_never_prints_still_exits_64(datum_cli):
    code, _out, err = datum_cli("explain", "the weather in Lisbon")
    assert code == 64 and "not a word Datum knows" in err
    code, out, _err = datum_cli("explain", "the weather in Lisbon", "--json")
    known = json.loads(out)["issues"][0]["details"]["known"]
    assert code == 64 and {"stranded", "disabled", "pg_roles.membership_outside_prefix"} <= set(known)
