"""``Line`` ``after`` / ``before`` / ``first_match``: where a new line goes, which match is replaced."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from datum.providers.line import edit
from datum.providers.line.spec import LineSpec

TEXT = "[main]\na=1\n[extra]\nb=2\n[main]\nc=3\n"


def line(**kw) -> LineSpec:
    return LineSpec.model_validate({"path": "/etc/x.ini", **kw})


def test_after_the_last_or_first_matching_line():
    assert edit(TEXT, line(line="new=1", after=r"^\[main\]")) == (
        "[main]\na=1\n[extra]\nb=2\n[main]\nnew=1\nc=3\n"
    )
    assert edit(TEXT, line(line="new=1", after=r"^\[main\]", first_match=True)) == (
        "[main]\nnew=1\na=1\n[extra]\nb=2\n[main]\nc=3\n"
    )


def test_before_a_match_and_bof():
    assert edit(TEXT, line(line="# top", before="BOF")) == "# top\n" + TEXT
    assert edit(TEXT, line(line="x=0", before=r"^\[extra\]")) == (
        "[main]\na=1\nx=0\n[extra]\nb=2\n[main]\nc=3\n"
    )


def test_no_anchor_match_appends_and_a_present_line_is_not_moved():
    assert edit(TEXT, line(line="z=9", after="^nothing")) == TEXT + "z=9\n"
    assert edit(TEXT, line(line="b=2", before="BOF")) == TEXT
    assert edit("a\r\nb", line(line="n", after="^a$")) == "a\r\nn\r\nb"  # the file's own endings


def test_first_match_replaces_the_first_matching_line():
    assert edit("k=1\nk=2\n", line(line="k=0", match="^k=", first_match=True)) == "k=0\nk=2\n"
    assert edit("k=1\nk=2\n", line(line="k=0", match="^k=")) == "k=1\nk=0\n"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"after": "a", "before": "b"}, "not both"),
        ({"after": "BOF"}, "after takes EOF"),
        ({"before": "("}, "not a regular expression"),
    ],
)
def test_anchor_findings(kw, message):
    with pytest.raises(ValidationError, match=message):
        line(line="x", **kw)


def test_create_with_mode_owner_and_group(ctx):
    import stat

    from datum.core.vocab import Action
    from datum.providers.line import PROVIDER as LINE
    from providers.test_accounts import seed, step

    seed(ctx)
    spec = line(line="secret=1", create=True, mode="0640", owner="alice", group="adm")
    change, unconfirmed = step(LINE, spec, ctx)
    assert change.action is Action.CREATE and unconfirmed is None
    assert change.diff.strip() == "(diff redacted: file is not world-readable)"
    st = (ctx.root / "etc/x.ini").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 1000, 4)
    with pytest.raises(ValidationError, match="create: true makes"):
        line(line="x", mode="0600")
