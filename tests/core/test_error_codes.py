"""What an error code means is written once (issue 39 item 2): ``datum.core.findings.ErrorCode`` carries each
code's HTTP status, exit status and description, and the API's and the CLI's tables are derived from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import datum
from datum.api.front import handlers
from datum.api.front.errors import ERROR_STATUSES, STATUS_BY_CODE
from datum.api.front.errors import ErrorCode as Published
from datum.cli import exits
from datum.cli.main import report_problem
from datum.core.findings import (
    EXIT_INVALID,
    EXIT_REFUSED,
    EXIT_SOFTWARE,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    ErrorCode,
    Problem,
)


def test_every_answered_code_has_its_status_and_the_status_its_code():
    answered = {c for c in ErrorCode if c.http_status is not None}
    assert STATUS_BY_CODE == {c.value: c.http_status for c in answered}
    assert {c.value for c in Published} == {c.value for c in answered}  # the OpenAPI's list of codes
    for code in answered:
        assert handlers._CODE_BY_STATUS[code.http_status] == code.value
        described = ERROR_STATUSES.get(code.http_status)  # type: ignore[arg-type]
        assert described is not None and described[0].startswith(code.value + ":"), code


@pytest.mark.parametrize("code", list(ErrorCode))
def test_the_cli_ends_with_the_code_s_exit_status(code: ErrorCode, capsys):  # type: ignore[no-untyped-def]
    assert report_problem(Problem.one(code.value, "x"), as_json=False) == code.exit_status
    assert code.exit_status in (EXIT_USAGE, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_SOFTWARE, EXIT_REFUSED) and code.description


def test_a_code_of_no_member_is_an_internal_error_and_the_help_s_table_says_the_same_numbers():
    assert report_problem(Problem.one("PLUGIN_SPECIFIC", "x"), as_json=False) == EXIT_SOFTWARE
    assert [int(n) for n, _ in (exits._USAGE, exits._INVALID, exits._UNAVAILABLE, exits._INTERNAL, exits._REFUSED)] == [
        EXIT_USAGE, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_SOFTWARE, EXIT_REFUSED]


SRC = Path(datum.__file__).parent


def _named_codes() -> tuple[list[str], list[str]]:
    """(bare code strings, names of ErrorCode that are no member) in the sources, each as path:line."""
    codes = {c.value for c in ErrorCode}
    bare, unknown = [], []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = str(path.relative_to(SRC))
        exempt: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):  # an f-string's literal parts are words, not codes
                exempt.update(id(n) for n in node.values)
            if where == "core/findings.py" and isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
                exempt.update(id(n) for n in ast.walk(node))  # the members' own values
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in codes and id(node) not in exempt:
                bare.append(f"{where}:{node.lineno} {node.value!r}")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in ("ErrorCode", "CoreCode") and not hasattr(ErrorCode, node.attr)):
                unknown.append(f"{where}:{node.lineno} {node.value.id}.{node.attr}")
    return bare, unknown


def test_every_code_in_the_sources_is_an_error_code_member_never_a_bare_string():
    """A typo in a code is an AttributeError where it is named, and this test names it before it runs; a bare
    string would be a code no member has (answered 500, exit 70) without anyone noticing."""
    bare, unknown = _named_codes()
    assert not bare, "say ErrorCode.X (datum.core.findings), not the string: " + ", ".join(bare)
    assert not unknown, "no such ErrorCode member: " + ", ".join(unknown)
