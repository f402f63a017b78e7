"""nodes.yaml: one model, its schema, every finding at its field with its line; labels, and facts as claims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from datum.core.findings import Problem
from datum.fleet.effective import check_fleet, effective
from datum.fleet.nodes import classify, group_of, load_rules
from datum.fleet.nodes_model import Match, NodeRule, NodesFile, nodes_schema


def _fleet(tmp_path: Path, nodes: str, **files: str) -> Path:
    for name, text in {"web.yaml": "resources:\n  - File[/srv/web]:\n      content: web\n", **files}.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "nodes.yaml").write_text(nodes)
    return tmp_path


def _findings(directory: Path) -> dict[str, str]:
    with pytest.raises(Problem) as refused:
        load_rules(directory)
    (finding,) = refused.value.findings
    assert finding.code == "INVALID_INPUT"
    return {f.field: f.message for f in finding.fields}


def test_every_finding_comes_at_once_at_its_field_with_its_line(tmp_path):
    d = _fleet(
        tmp_path,
        "nodes:\n"                                  # 1
        "  - match: {name: 'web*'}\n"               # 2
        "    manifests: [web.yaml, gone.yaml]\n"    # 3
        "    colour: red\n"                         # 4
        "  - match: {}\n"                           # 5
        "    manifests: [web.yaml]\n"               # 6
        "  - match: {name: x}\n"                    # 7
        "    group: '  '\n"                         # 8
        "    expected: 'yes'\n"                     # 9
        "reboot_order:\n"                           # 10
        "  cache: name\n"                           # 11
        "surprise: 1\n",                            # 12
    )
    found = _findings(d)
    assert found == {
        "nodes.yaml: nodes[0].manifests[1]": "no manifest gone.yaml in the fleet directory (line 3)",
        "nodes.yaml: nodes[0].colour": "unknown field (line 4)",
        "nodes.yaml: nodes[1].match": "{name: GLOB}, {labels: {LABEL: VALUE}} and/or {facts: {PATH: VALUE}}: "
        "a host must fit all given (line 5)",
        "nodes.yaml: nodes[2].group": "a group name (reboot budget, rollout waves), 1 to 253 characters (line 8)",
        "nodes.yaml: nodes[2].expected": "true or false: whether the host this rule names is declared (line 9)",
        "nodes.yaml: reboot_order.cache": "no rule gives group 'cache' (groups: default) (line 11)",
        "nodes.yaml: surprise": "unknown field (line 12)",
    }
    assert list(found) == sorted(found, key=lambda f: int(found[f].rsplit("line ", 1)[1].rstrip(")")))  # file order


def test_a_missing_field_is_at_the_line_of_the_rule_that_lacks_it_and_a_duplicate_key_says_both(tmp_path):
    d = _fleet(tmp_path, "nodes:\n  - manifests: [web.yaml]\n  - match: {name: a, name: b}\n    manifests: [web.yaml]\n")
    found = _findings(d)
    assert found["nodes.yaml: nodes[0].match"].startswith("required: {name: GLOB}")
    assert found["nodes.yaml: nodes[0].match"].endswith("(line 2)")
    assert found["nodes.yaml: nodes[1].match.name"] == (
        "duplicate key 'name' (line 3, column 22): already given (line 3, column 13)"
    )


@pytest.mark.parametrize("what", ["vars: {db_password: hunter2}", "group: db"])
def test_a_rule_on_facts_that_grants_anything_but_manifests_is_refused_naming_the_rule_and_line(tmp_path, what):
    d = _fleet(
        tmp_path,
        "nodes:\n"
        "  - match: {name: 'web*'}\n"
        "    manifests: [web.yaml]\n"
        "  - match: {facts: {role: db}}\n"
        "    manifests: [web.yaml]\n"
        f"    {what}\n",
    )
    key = what.split(":")[0]
    assert _findings(d) == {
        f"nodes.yaml: nodes[1].{key}": f"a rule that matches on facts (what the host's agent claims) gives manifests "
        f"only, never {key}: match it on name or labels (nodes.yaml `labels:`) (line 6)",
    }
    with pytest.raises(Problem):  # nothing is served from it: not the rule alone, the file
        effective(d, "web1", {})
    # with name and facts, still a claim
    (d / "nodes.yaml").write_text(f"nodes:\n  - match: {{name: db1, facts: {{role: db}}}}\n    manifests: [web.yaml]\n    {what}\n")
    assert list(_findings(d)) == [f"nodes.yaml: nodes[0].{key}"]


def test_a_rule_on_facts_adds_no_manifest_holding_a_sensitive_resource_even_through_an_include(tmp_path):
    d = _fleet(
        tmp_path,
        "nodes:\n  - match: {facts: {role: db}}\n    manifests: [web.yaml, db.yaml]\n",
        **{
            "db.yaml": "include: [secret.yaml]\nresources:\n  - File[/etc/db.conf]:\n      content: x\n",
            "secret.yaml": "resources:\n  - File[/etc/db.key]:\n      content: k\n      sensitive: 'yes'\n",
        },
    )
    assert _findings(d) == {
        "nodes.yaml: nodes[0].manifests[1]": "db.yaml holds File[/etc/db.key] marked sensitive: a rule that matches "
        "on facts (what the host's agent claims) adds no sensitive resource; give it by name or labels (line 3)",
    }
    (d / "secret.yaml").write_text("resources:\n  - File[/etc/db.key]:\n      content: k\n      sensitive: false\n")
    assert len(load_rules(d)) == 1
    # the same manifest by name or labels is the server's to give
    (d / "secret.yaml").write_text("resources:\n  - File[/etc/db.key]:\n      content: k\n      sensitive: true\n")
    (d / "nodes.yaml").write_text("labels:\n  db1: {role: db}\nnodes:\n  - match: {labels: {role: db}}\n    manifests: [db.yaml]\n")
    assert check_fleet(d) == (1, 1)
    assert "/etc/db.key" in effective(d, "db1", {}).body.decode()


NODES = """\
labels:
  "web*": {role: web}
  web9: {role: canary, tier: 1}
nodes:
  - match: {labels: {role: web}}
    manifests: [web.yaml]
    vars: {db_password: web-secret}
    group: web
  - match: {labels: {role: db}}
    manifests: [db.yaml]
    vars: {db_password: db-secret}
    group: db
  - match: {labels: {tier: "1"}}
    group: canary
  - match: {facts: {role: db}}
    manifests: [motd.yaml]
"""


def test_labels_are_given_by_name_and_a_host_claiming_another_roles_facts_gets_nothing_of_it(tmp_path):
    d = _fleet(
        tmp_path, NODES,
        **{"db.yaml": "resources:\n  - File[/etc/db]:\n      content: db\n",
           "motd.yaml": "resources:\n  - File[/etc/motd]:\n      content: hi\n"},
    )
    rules = load_rules(d)
    assert rules.labels_of("web1") == {"role": "web"}
    assert rules.labels_of("web9") == {"role": "canary", "tier": "1"}  # a later pattern's value wins
    assert rules.labels_of("db1") == {}
    claims = {"role": "db", "labels": {"role": "db"}, "tier": "1"}  # another role's facts, and "labels" as a fact
    assert classify(rules, "web1", claims) == (["web.yaml", "motd.yaml"], {"db_password": "web-secret"}, [0, 3])
    assert group_of(rules, "web1") == "web" and group_of(rules, "web9") == "canary" and group_of(rules, "x") is None
    served = json.loads(effective(d, "web1", claims).body)
    assert served["manifests"] == ["web.yaml", "motd.yaml"] and "/etc/db" not in json.dumps(served)


def test_the_published_schema_is_the_models_and_takes_what_the_loader_takes(tmp_path):
    schema = nodes_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "https://datum.dev/schemas/nodes.json"
    check = Draft202012Validator(schema)
    assert not list(check.iter_errors(yaml.safe_load(NODES)))
    refused = {
        "nodes:\n  - match: {name: x}\n    manifests: [a.yaml]\n    colour: red\n",
        "nodes:\n  - match: {}\n    manifests: [a.yaml]\n",
        "nodes:\n  - match: {name: x}\n    group: g\nreboot_order:\n  g: ['a*']\n",
        "nodes: []\nsurprise: 1\n",
    }
    for text in refused:
        assert list(check.iter_errors(yaml.safe_load(text))), text
    # every field says what it takes: the text a finding says
    for model in (NodesFile, NodeRule, Match):
        for name, field in model.model_fields.items():
            assert field.description, (model.__name__, name)


def test_datum_schema_nodes_prints_it(tmp_path):
    from click.testing import CliRunner

    from datum.cli.host import schema

    out = CliRunner().invoke(schema, ["--nodes"])
    assert out.exit_code == 0 and json.loads(out.output) == nodes_schema()
