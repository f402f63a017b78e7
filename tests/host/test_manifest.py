"""Manifest validation: every finding at once at its field path, references, cycles, the JSON Schema."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from datum.core.findings import Problem
from datum.host.document import quote_identities
from datum.host.manifest import parse_manifest
from datum.host.order import cycles, topological
from datum.host.schema import manifest_schema

CONTRACT_EXAMPLE = """
resources:
  - Package[nginx]:
      ensure: installed
  - File[nginx.conf]:
      path: /etc/nginx/nginx.conf
      content: "..."
      mode: "0644"
      requires: [Package[nginx]]
  - Service[nginx]:
      ensure: running
      enable: true
      subscribes: [File[nginx.conf]]   # restarted when it changes
"""


def findings(text: str, directory: Path = Path(".")) -> dict[str, str]:
    with pytest.raises(Problem) as caught:
        parse_manifest(text, directory)
    (finding,) = caught.value.findings
    assert finding.code == "INVALID_INPUT"
    return {f.field: f.message for f in finding.fields}


def test_the_contracts_example_is_valid_and_ordered():
    manifest = parse_manifest(CONTRACT_EXAMPLE, Path("."))
    assert [r.id for r in manifest.ordered()] == ["Package[nginx]", "File[nginx.conf]", "Service[nginx]"]
    service = manifest.resources[2]
    assert service.spec.subscribes == ["File[nginx.conf]"]
    assert manifest.paths == {"/etc/nginx/nginx.conf"}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ("- File[/a]: {mode: 644}", "resources[0].File[/a].mode", "quote the mode as an octal string, e.g. '0644'"),
        ("- File[/a]: {mode: '0999'}", "resources[0].File[/a].mode", "an octal mode such as '0644' or '2775'"),
        ("- File[/a]: {colour: red}", "resources[0].File[/a].colour", "unknown field"),
        ("- File[a.conf]: {}", "resources[0].File[a.conf].path", "must be an absolute path such as /etc/nginx/nginx.conf"),
        ("- File[/a/../b]: {}", "resources[0].File[/a/../b].path", "must not contain '..': every path resolves inside --root"),
        ("- File[/a]: {content: x, source: y}", "resources[0].File[/a]", "give one of content, source and template, not content and source"),
        ("- File[/a]: {source: nope.txt}", "resources[0].File[/a].source", "no file nope.txt next to the manifest"),
        ("- Package[nginx]: {ensure: sure}", "resources[0].Package[nginx].ensure", "installed, present, latest, absent, purged or a version such as 1.24.0-1"),
        ("- Service[x]: {ensure: up}", "resources[0].Service[x].ensure", "Input should be 'running' or 'stopped'"),
        ("- Widget[x]: {}", "resources[0].Widget[x]", "unknown resource type 'Widget'; known: Directory, Exec, File, Group, Line, Package, Service, Symlink, User"),
        ("- file: /etc/motd", "resources[0]", "'file' is not an identity of the form Type[name]"),
        ("- {File[/a]: {}, File[/b]: {}}", "resources[0]", "a resource is a mapping with one key, Type[name]"),
        ("- File[/a]: {requires: [nginx]}", "resources[0].File[/a].requires[0]", "'nginx' is not an identity of the form Type[name]"),
        ("- File[/a]: {requires: [File[/a]]}", "resources[0].File[/a].requires", "requires cycle: File[/a] -> File[/a]"),
        ("- File[/a]: {}\n  - Symlink[/a]: {target: /b}", "resources[1].Symlink[/a].path", "/a is already managed by File[/a]"),
        ("- User[Bad Name]: {}", "resources[0].User[Bad Name].name", "String should match pattern '^[a-z_][a-z0-9_.-]*\\$?$'"),
    ],
)
def test_one_finding(body, field, message):
    assert findings(f"resources:\n  {body}\n") == {field: message}


def test_every_finding_at_once_and_references_to_broken_resources_are_not_repeated():
    found = findings(
        """
resources:
  - File[/a]: {mode: 7}
  - File[/b]: {requires: [File[/a], File[/nowhere]]}
  - Exec[x]: {command: "true", subscribes: [Exec[y]]}
  - Exec[y]: {command: "true", requires: [Exec[x]]}
  - File[/b]: {}
unexpected: 1
"""
    )
    assert found == {
        "unexpected": "unknown field",
        "resources[0].File[/a].mode": "quote the mode as an octal string, e.g. '0644'",
        "resources[1].File[/b].requires[1]": "no resource File[/nowhere] in the manifest",
        "resources[4].File[/b]": "duplicate of resources[1]",
        "resources[2].Exec[x].requires": "requires cycle: Exec[x] -> Exec[y] -> Exec[x]",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resources: [", "not valid YAML at line 2"),
        ("- a\n- b\n", "a manifest is a mapping with a 'resources' list"),
        ("{}", "required: a list of resources keyed Type[name]"),
        ("resources: 3", "a list of resources keyed Type[name]"),
    ],
)
def test_document_level_findings(text, message):
    (only,) = findings(text).values()
    assert only.startswith(message)


def test_quote_identities_only_touches_references_in_flow_collections():
    assert quote_identities("requires: [Package[nginx], Service[a.b]]  # c") == 'requires: ["Package[nginx]", "Service[a.b]"]  # c'
    assert quote_identities("  - Package[nginx]:\n") == "  - Package[nginx]:\n"
    assert quote_identities('- {File[/x]: {requires: [Exec[y]]}}') == '- {"File[/x]": {requires: ["Exec[y]"]}}'


def test_a_block_scalar_that_looks_like_a_flow_list_is_kept():
    manifest = parse_manifest('resources:\n  - File[/a]:\n      content: |\n        requires: [Package[x]]\n', Path("."))
    assert manifest.resources[0].spec.content == "requires: [Package[x]]\n"


@pytest.mark.parametrize(
    ("count", "needs", "order"),
    [
        (3, {}, [0, 1, 2]),
        (3, {0: [2], 1: [0]}, [2, 0, 1]),
        (4, {0: [3], 1: [3], 2: [0, 1]}, [3, 0, 1, 2]),
    ],
)
def test_topological_order_keeps_manifest_order_for_ties(count, needs, order):
    assert topological(count, needs) == order


def test_cycles_are_named_once_each():
    assert cycles(5, {0: [1], 1: [2], 2: [0], 3: [3], 4: [0]}) == [[0, 1, 2, 0], [3, 3]]


def test_schema_is_generated_from_the_validating_models():
    schema = manifest_schema()
    patterns = schema["properties"]["resources"]["items"]["patternProperties"]
    assert len(patterns) == 9
    assert any(re.match(p, "File[nginx.conf]") for p in patterns)
    file_schema = schema["$defs"]["File"]
    assert "path" not in file_schema.get("required", [])  # the name fills it
    assert {"type": "string", "pattern": "^(?:0[0-7]{1,4}|[0-7]{1,4})$"} in file_schema["properties"]["mode"]["anyOf"]
    assert file_schema["additionalProperties"] is False
    assert schema["$defs"]["Service"]["properties"]["ensure"]["anyOf"][0]["enum"] == ["running", "stopped"]


def test_schema_command_prints_it(host):
    result = host.datum("schema")
    assert result.code == 0
    assert result.json["title"] == "Datum host manifest"
