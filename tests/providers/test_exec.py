"""Exec: guards, verification and the environment a command sees."""

from __future__ import annotations

import pytest

from datum.core.vocab import Action
from datum.providers.base import ProviderError
from datum.providers.exec import PROVIDER as EXEC
from datum.providers.exec.spec import ExecSpec


def plan(spec, ctx):
    want = EXEC.desired(spec.command, spec, ctx)
    return want, EXEC.plan(want, EXEC.observe(want, ctx))


@pytest.mark.parametrize(
    ("spec", "action"),
    [
        ({"command": "true"}, Action.UPDATE),
        ({"command": "true", "creates": "/done"}, Action.CREATE),
        ({"command": "true", "creates": "/present"}, Action.NONE),
        ({"command": "true", "unless": "true"}, Action.NONE),
        ({"command": "true", "unless": "false"}, Action.UPDATE),
        ({"command": "true", "onlyif": "false"}, Action.NONE),
        ({"command": "true", "onlyif": "true"}, Action.UPDATE),
        ({"command": "true", "refreshonly": True}, Action.NONE),
    ],
)
def test_guards(ctx, spec, action):
    (ctx.root / "present").touch()
    assert plan(ExecSpec(**spec), ctx)[1].action is action


def test_runs_in_the_root_with_datum_root_set(ctx):
    spec = ExecSpec(command='echo "$DATUM_ROOT" > marker', creates="/marker")
    want, change = plan(spec, ctx)
    EXEC.apply(want, None, change, ctx)
    assert EXEC.verify(want, change, ctx) is None
    assert (ctx.root / "marker").read_text().strip() == str(ctx.root)


def test_verification_fails_when_creates_is_not_created(ctx):
    want, change = plan(ExecSpec(command="true", creates="/never"), ctx)
    EXEC.apply(want, None, change, ctx)
    assert EXEC.verify(want, change, ctx) == "verification failed: /never still absent"


def test_a_failing_command_says_why(ctx):
    want, change = plan(ExecSpec(command="echo nope >&2; exit 7"), ctx)
    with pytest.raises(ProviderError, match="exit status 7: nope"):
        EXEC.apply(want, None, change, ctx)


def test_cwd_is_a_path_under_the_root(ctx):
    (ctx.root / "srv").mkdir()
    spec = ExecSpec(command="pwd > here", cwd="/srv")
    want, change = plan(spec, ctx)
    EXEC.apply(want, None, change, ctx)
    assert (ctx.root / "srv" / "here").read_text().strip() == str(ctx.root / "srv")


def test_the_agents_token_is_not_passed_to_commands(ctx, monkeypatch):
    monkeypatch.setenv("DATUM_TOKEN", "datum_secret")
    monkeypatch.setenv("LANG_PROBE", "kept")
    spec = ExecSpec(command='echo "${DATUM_TOKEN:-none} $LANG_PROBE" > env', creates="/env")
    want, change = plan(spec, ctx)
    EXEC.apply(want, None, change, ctx)
    assert (ctx.root / "env").read_text().strip() == "none kept"


def test_a_failing_commands_reason_keeps_its_last_lines_bounded_and_redacted(ctx):
    """The lines above the last explain it (nginx's [emerg] above "test failed"); stdout fills
    what stderr leaves; at most ten lines; a Datum token printed by the command is redacted."""
    token = "datum_" + "A" * 40
    command = (
        "for i in $(seq 1 30); do echo out$i; done; "
        f"echo '[emerg] unexpected }}' {token} >&2; echo 'test failed' >&2; exit 1"
    )
    want, change = plan(ExecSpec(command=command), ctx)
    with pytest.raises(ProviderError) as info:
        EXEC.apply(want, None, change, ctx)
    why = str(info.value)
    assert why == (
        "exit status 1: out23 | out24 | out25 | out26 | out27 | out28 | out29 | out30 | "
        "[emerg] unexpected } datum_[redacted] | test failed"
    )
