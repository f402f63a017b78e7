"""Hostile manifests: every finding at once at its field path (exit 65, nothing applied), alias
bombs and deep nesting refused in bounded time and memory, 10,000-resource requires chains, and
Jinja2 templates that try to escape their sandbox."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

DATUM = str(Path(sys.executable).with_name("datum"))


def _fields(out: str) -> dict[str, str]:
    """``field -> message`` of the one INVALID_INPUT finding a ``--json`` rejection prints."""
    (issue,) = json.loads(out)["issues"]
    assert issue["code"] == "INVALID_INPUT"
    return {f["field"]: f["message"] for f in issue["fields"]}


def _apply(datum_cli, tree: Path, manifest: Path, *extra: str) -> tuple[int, str, str]:
    args = ("--root", str(tree / "root"), "--state", str(tree / "s.db"))
    return datum_cli("apply", str(manifest), *args, *extra)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A manifest directory with a template and a source inside it, and a secret beside it."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "ok.j2").write_text("{{ hostname }}\n")
    (tmp_path / "m" / "inside.txt").write_text("inside\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    (tmp_path / "m" / "link-out.txt").symlink_to(tmp_path / "secret.txt")
    (tmp_path / "root").mkdir()
    return tmp_path


CASES = [
    # (attributes of File[/a] or a whole resource line, field, words in the message)
    ("File[/a]: {mode: '17777'}", "resources[0].File[/a].mode", "at most '07777'"),
    ("File[/a]: {mode: '77777'}", "resources[0].File[/a].mode", "at most '07777'"),
    ("File[/a]: {owner: 4294967295}", "resources[0].File[/a].owner", "at most 4294967294"),
    ("File[/a]: {owner: '4294967296'}", "resources[0].File[/a].owner", "at most 4294967294"),
    ("File[/a]: {group: 99999999999999999999}", "resources[0].File[/a].group", "at most"),
    ("File[/a]: {group: -1}", "resources[0].File[/a].group", "not negative"),
    ("User[u]: {uid: 4294967295}", "resources[0].User[u].uid", "at most 4294967294"),
    ("User[u]: {uid: -1}", "resources[0].User[u].uid", "not negative"),
    ("User[u]: {uid: true}", "resources[0].User[u].uid", "not true or false"),
    ("Group[g]: {gid: 4294967296}", "resources[0].Group[g].gid", "at most 4294967294"),
    (
        "File[/a]: {mode: '0644', mode: '0600'}",
        "resources[0].File[/a].mode",
        "duplicate key 'mode'",
    ),
    (
        "File[/a]: {template: ok.j2, vars: {x: 1, x: 2}}",
        "resources[0].File[/a].vars.x",
        "duplicate key 'x'",
    ),
    ("{File[/a]: {}, File[/a]: {}}", "resources[0].File[/a]", "duplicate key 'File[/a]'"),
    (
        "File[/a]: {template: ok.j2, vars: {hostname: x}}",
        "resources[0].File[/a].vars.hostname",
        "name of a fact",
    ),
    (
        "File[/a]: {template: ok.j2, vars: {facts: {}}}",
        "resources[0].File[/a].vars.facts",
        "name of a fact",
    ),
    (
        "File[/a]: {source: ../secret.txt}",
        "resources[0].File[/a].source",
        "outside the manifest's directory",
    ),
    (
        "File[/a]: {source: link-out.txt}",
        "resources[0].File[/a].source",
        "outside the manifest's directory",
    ),
    ("File[/a]: {source: /etc/hostname}", "resources[0].File[/a].source", "--allow-source-outside"),
    (
        "Package[p]: {source: ../secret.txt}",
        "resources[0].Package[p].source",
        "outside the manifest's directory",
    ),
    (
        "File[/a]: {template: ../secret.txt}",
        "resources[0].File[/a].template",
        "templates stay next to it",
    ),
    ('File[/a]: {source: "a\\0b"}', "resources[0].File[/a].source", "not a usable file name"),
    (
        "Line[l]: {path: /a, line: x, match: '" + "(" * 2000 + "'}",
        "resources[0].Line[l].match",
        "not a regular expression",
    ),
    ("Exec[e]: {timeout: .inf}", "resources[0].Exec[e].timeout", "finite"),
]


@pytest.mark.parametrize(("body", "field", "words"), CASES, ids=[c[1] + ":" + c[2] for c in CASES])
def test_each_hostile_value_is_a_finding_at_its_field(tree, datum_cli, body, field, words):
    manifest = tree / "m" / "manifest.yaml"
    manifest.write_text(f"resources:\n  - {body}\n")
    code, out, _err = datum_cli("validate", str(manifest), "--json")
    assert code == 65, out
    found = _fields(out)
    assert field in found, found
    assert words in found[field]


def test_every_finding_at_once_and_nothing_applied(tree, datum_cli):
    manifest = tree / "m" / "manifest.yaml"
    manifest.write_text(
        "resources:\n"
        "  - File[/a]: {mode: '10000', owner: 4294967295, content: x}\n"
        "  - File[/b]: {template: ok.j2, vars: {kernel: x, y: 1, y: 2}}\n"
        "  - File[/c]: {source: ../secret.txt}\n"
        "  - File[/d]: {content: fine}\n"
        "comment: 1\n"
        "comment: 2\n"  # a duplicate, and an unknown field too
    )
    code, out, _err = _apply(datum_cli, tree, manifest, "--json")
    assert code == 65
    assert set(_fields(out)) == {
        "comment",
        "resources[0].File[/a].mode",
        "resources[0].File[/a].owner",
        "resources[1].File[/b].vars.kernel",
        "resources[1].File[/b].vars.y",
        "resources[2].File[/c].source",
    }
    assert list((tree / "root").iterdir()) == []


def test_allow_source_outside_lets_a_source_out_and_reads_what_was_validated(tree, datum_cli):
    manifest = tree / "m" / "manifest.yaml"
    manifest.write_text(
        "resources:\n  - File[/a]: {source: ../secret.txt}\n  - File[/b]: {source: link-out.txt}\n"
    )
    assert _apply(datum_cli, tree, manifest)[0] == 65
    code, out, _ = _apply(datum_cli, tree, manifest, "--allow-source-outside")
    assert code == 2, out
    assert (tree / "root" / "a").read_text() == (tree / "root" / "b").read_text() == "secret\n"
    # The flag is part of the validated-manifest cache's key: without it, still refused.
    assert _apply(datum_cli, tree, manifest)[0] == 65
    assert datum_cli("validate", str(manifest))[0] == 65
    assert datum_cli("plan", str(manifest), "--root", str(tree / "root"))[0] == 65


def test_a_source_link_swapped_to_point_outside_after_validation_fails_that_resource(
    tree, datum_cli
):
    manifest = tree / "m" / "manifest.yaml"
    link = tree / "m" / "data.txt"
    link.symlink_to(tree / "m" / "inside.txt")
    manifest.write_text("resources:\n  - File[/a]: {source: data.txt}\n")
    assert _apply(datum_cli, tree, manifest)[0] == 2
    link.unlink()
    link.symlink_to(tree / "secret.txt")  # the cached, validated manifest is unchanged
    code, out, _ = _apply(datum_cli, tree, manifest)
    assert code == 4
    assert "resolves outside the manifest's directory" in out
    assert (tree / "root" / "a").read_text() == "inside\n"


# --- bounded memory and time ---------------------------------------------------------------


def _billion_laughs() -> str:
    """10**10 values once expanded, in a template's vars (pydantic's Any; JSON in the cache)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)]
    head = ["resources:", "  - File[/a]:", "      template: ok.j2", "      vars:"]
    return "\n".join([*head, *(f"        {line}" for line in lines), "        bomb: *l9"]) + "\n"


def _bounded(args: list[str], env: dict[str, str], seconds: float = 30) -> tuple[int, str, float]:
    """Run ``datum`` with 1 GiB of address space at most; its exit code, stdout and wall time."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.monotonic()
    try:
        done = subprocess.run(
            [DATUM, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=seconds,
            preexec_fn=limit,
            check=False,  # noqa: PLW1509 - a limit, set before exec
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"datum {args[0]} ran past {seconds}s")
    return done.returncode, done.stdout, time.monotonic() - started


@pytest.mark.parametrize("command", ["validate", "apply"])
def test_a_billion_laughs_is_refused_quickly_in_bounded_memory(tree, command):
    manifest = tree / "m" / "manifest.yaml"
    manifest.write_text(_billion_laughs())
    env = {**os.environ, "DATUM_HOME": str(tree / "home")}
    args = [command, str(manifest), "--json"]
    if command == "apply":
        args += ["--root", str(tree / "root"), "--state", str(tree / "s.db")]
    code, out, took = _bounded(args, env)
    assert code == 65, out
    ((field, message),) = _fields(out).items()
    assert field.startswith("resources[0].File[/a].vars.")
    assert "once aliases are expanded" in message
    assert took < 10
    assert list((tree / "root").iterdir()) == []


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            "resources:\n  - File[/a]:\n      template: ok.j2\n      vars:\n        deep: "
            + "[" * 100
            + "]" * 100
            + "\n",
            "resources[0].File[/a].vars.deep[0][0]",
            "nested deeper than 64 levels",
        ),
        ("resources: &r\n  - *r\n", "resources[0]", "recursive alias"),
        (
            "x: &x [1, 2, 3]\n"
            + "".join(f"y{i}: &y{i} [*{'x' if i == 0 else f'y{i - 1}'}, *x]\n" for i in range(80))
            + "resources: []\n",
            "y",  # refused where the expansion passes the bound (a prefix is enough here)
            "nested deeper than 64 levels",
        ),
    ],
)
def test_nesting_and_recursive_aliases_are_refused_at_their_path(
    tree, datum_cli, text, field, words
):
    manifest = tree / "m" / "manifest.yaml"
    manifest.write_text(text)
    code, out, _ = datum_cli("validate", str(manifest), "--json")
    assert code == 65, out
    ((where, message),) = _fields(out).items()
    assert where.startswith(field)
    assert words in message


# --- a 10,000-resource requires chain ---------------------------------------------------


def _chain(count: int, first: str) -> str:
    """File[/f0] <- File[/f1] <- ...: each requires (or subscribes to) the one before."""
    lines = ["resources:", f"  - File[/f{0}]: {first}"]
    lines += [
        f"  - File[/f{i}]: {{ensure: absent, {('requires', 'subscribes')[i % 2]}: [File[/f{i - 1}]]}}"
        for i in range(1, count)
    ]
    return "\n".join(lines) + "\n"


def test_a_requires_chain_of_10000_validates_and_applies(tree, datum_cli):
    manifest = tree / "m" / "manifest.yaml"
    # Listed last-first, so the order is the chain's, not the file's.
    text = _chain(10_000, "{ensure: absent}")
    head, *items = text.splitlines()
    manifest.write_text("\n".join([head, *reversed(items)]) + "\n")
    started = time.monotonic()
    code, out, _ = _apply(datum_cli, tree, manifest, "--json")
    assert code == 0, out[-2000:]
    report = json.loads(out)
    assert [r["id"] for r in report["resources"]][:2] == ["File[/f0]", "File[/f1]"]
    assert report["resources"][-1]["id"] == "File[/f9999]"
    assert time.monotonic() - started < 60


def test_a_failure_at_the_head_of_a_10000_chain_blocks_every_one_after(tree, datum_cli):
    manifest = tree / "m" / "manifest.yaml"
    (tree / "root" / "plain").write_text("a file, not a directory\n")
    head, *items = _chain(10_000, "{path: /plain/below, content: x}").splitlines()
    manifest.write_text("\n".join([head, *reversed(items)]) + "\n")
    code, out, _ = _apply(datum_cli, tree, manifest, "--json")
    assert code == 4, out[-2000:]
    resources = json.loads(out)["resources"]
    states = [r["state"] for r in resources]
    assert resources[0]["id"] == "File[/f0]" and states[0] == "failed"
    assert resources[-1]["blockedBy"] == ["File[/f9998]"]
    assert states[1:] == ["blocked"] * 9_999


def test_a_cycle_through_10000_resources_is_named_without_recursion():
    from datum.host.order import cycles

    count = 10_000
    needs = {i: [(i + 1) % count] for i in range(count)}
    (cycle,) = cycles(count, needs)
    assert cycle[0] == cycle[-1] == 0 and len(cycle) == count + 1
