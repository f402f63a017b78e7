"""Fuzzing the manifest loader: any input is a Manifest or findings in the contract's shape,
never a traceback; ``datum validate`` exits 0 or 65, never 70."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datum.core.findings import Problem
from datum.host.manifest import Manifest, load_manifest, parse_manifest

FAST = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DIRECTORY = Path(tempfile.mkdtemp(prefix="datum-fuzz-"))
atexit.register(shutil.rmtree, DIRECTORY, ignore_errors=True)
(DIRECTORY / "t.j2").write_text("{{ hostname }}\n")
(DIRECTORY / "s.txt").write_text("s\n")


def _shape(problem: Problem) -> None:
    """The contract's error shape: issues of code and message, fields of field and message."""
    data = problem.to_json()
    assert set(data) == {"issues"} and data["issues"]
    for issue in data["issues"]:
        assert issue["code"] == "INVALID_INPUT"
        assert isinstance(issue["message"], str) and issue["message"]
        assert set(issue) <= {"code", "message", "fields"}
        for f in issue.get("fields", []):
            assert set(f) == {"field", "message"}
            assert isinstance(f["field"], str) and isinstance(f["message"], str) and f["message"]


def _loads(text: str) -> None:
    try:
        manifest = parse_manifest(text, DIRECTORY)
    except Problem as problem:
        _shape(problem)
        return
    assert isinstance(manifest, Manifest)
    assert sorted(manifest.order) == list(range(len(manifest.resources)))


TOKENS = [
    "resources:",
    "\n",
    "  ",
    "    ",
    "- ",
    "File[/a]:",
    "File[/a]",
    "Exec[x]:",
    "Directory[/]:",
    "User[u]:",
    "{",
    "}",
    "[",
    "]",
    ", ",
    ": ",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "<<: ",
    "? ",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "!!binary ",
    "!!python/object:os.system ",
    "!!set ",
    "!!timestamp ",
    "!!float ",
    "!!int ",
    "!x ",
    "mode: ",
    "'0644'",
    "'77777'",
    "0777",
    "owner: ",
    "4294967295",
    "-1",
    "uid: ",
    "requires: ",
    "subscribes: ",
    "source: ",
    "../s.txt",
    "s.txt",
    "template: ",
    "t.j2",
    "vars: ",
    "hostname: ",
    "content: ",
    "|\n",
    ">-\n",
    "'",
    '"',
    "\\",
    "#",
    "\t",
    "\x00",
    "\ufeff",
    "~",
    "null",
    "true",
    "2001-13-45",
    "1" * 5000,
    ".nan",
    ".inf",
    "0x1F",
    "1_000",
    "=",
    "\u2028",
    "\r\n",
]


@FAST
@given(st.text(max_size=400))
def test_any_text(text):
    _loads(text)


@FAST
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map("".join))
def test_yaml_ish_token_soup(text):
    _loads(text)


_TYPES = [
    "File",
    "Directory",
    "Symlink",
    "Line",
    "Package",
    "Service",
    "User",
    "Group",
    "Exec",
    "Widget",
]
_ATTRS = [
    "path",
    "ensure",
    "mode",
    "owner",
    "group",
    "content",
    "source",
    "template",
    "vars",
    "purge",
    "force",
    "target",
    "line",
    "match",
    "create",
    "name",
    "uid",
    "gid",
    "groups",
    "members",
    "home",
    "shell",
    "command",
    "creates",
    "unless",
    "onlyif",
    "refreshonly",
    "cwd",
    "environment",
    "timeout",
    "requires",
    "subscribes",
    "sensitive",
    "reboot",
    "enable",
    "system",
    "comment",
]
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "0644",
            "17777",
            "File[/a]",
            "Exec[x]",
            "/etc/x",
            "../s.txt",
            "t.j2",
            "s.txt",
            "present",
            "absent",
        ]
    )
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.sampled_from(_ATTRS), inner, max_size=4)
    ),
    max_leaves=20,
)
_identity = st.builds(
    lambda t, n: f"{t}[{n}]",
    st.sampled_from(_TYPES),
    st.text(max_size=12) | st.sampled_from(["/a", "/b", "x", "/"]),
)
_resource = st.one_of(
    st.dictionaries(
        _identity,
        st.none() | st.dictionaries(st.sampled_from(_ATTRS), _values, max_size=6),
        min_size=1,
        max_size=2,
    ),
    _values,
)
_document = st.one_of(
    st.fixed_dictionaries(
        {"resources": st.lists(_resource, max_size=6)}, optional={"extra": _values}
    ),
    _values,
)


@FAST
@given(_document)
def test_yaml_structures(doc: Any):
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    _loads(text)


@FAST
@given(st.binary(max_size=300))
def test_any_bytes_from_a_file(data):
    path = DIRECTORY / "fuzz.yaml"
    path.write_bytes(data)
    try:
        manifest = load_manifest(path)
    except Problem as problem:
        _shape(problem)
    else:
        assert isinstance(manifest, Manifest)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        _document.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
        st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
    )
)
def test_validate_exits_0_or_65_never_70(datum_cli, text):
    path = DIRECTORY / "cli.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, out, err = datum_cli("validate", str(path), "--json")
    assert code in (0, 65), (code, out, err)
    assert "Traceback" not in out + err


def test_fuzz_found_these_before():
    """Inputs that once escaped as exceptions other than findings."""
    for text in [
        'resources:\n  - File[/a]: {source: "a\\0b"}\n',
        "resources:\n  - File[/a]: {source: " + "x" * 5000 + "}\n",
        "x: 2001-13-45\n",
        "x: " + "1" * 5000 + "\n",
        "resources:\n  - Line[l]: {path: /a, line: x, match: '" + "(" * 5000 + "'}\n",
        "resources:\n  - File[/a]: {owner: '\u00b2'}\n",
        "[" * 2000,
        "a: " + "- " * 2000,
        "resources: !!binary notbase64\n",
        "resources: !!python/object:os.system ls\n",
    ]:
        _loads(text)
