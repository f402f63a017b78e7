"""``File`` ``validate``: the candidate content is checked by a command before it replaces the file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from datum.core.vocab import Action
from datum.providers.base import ProviderError
from datum.providers.file import PROVIDER as FILE
from datum.providers.file.spec import FileSpec


def spec(content: str, validate: str = "grep -q '^good' %s") -> FileSpec:
    return FileSpec.model_validate({"path": "/etc/app.conf", "content": content, "validate": validate})


def plan(s: FileSpec, ctx):
    want = FILE.desired(s.path, s, ctx)
    have = FILE.observe(want, ctx)
    return want, have, FILE.plan(want, have)


def test_a_rejected_candidate_fails_and_the_old_file_stays(ctx):
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc/app.conf").write_text("good old\n")
    with pytest.raises(ProviderError, match=r"validate rejected the content: grep -q '\^good' %s exited 1"):
        plan(spec("bad new\n"), ctx)
    assert (ctx.root / "etc/app.conf").read_text() == "good old\n"
    assert not list((ctx.root / "etc").glob(".datum-tmp-*"))


def test_an_accepted_candidate_is_written_and_the_command_saw_its_bytes(ctx):
    (ctx.root / "etc").mkdir()
    want, have, change = plan(spec("good new\n", "grep -qx 'good new' %s"), ctx)
    assert change.action is Action.CREATE
    FILE.apply(want, have, change, ctx)
    assert (ctx.root / "etc/app.conf").read_text() == "good new\n"
    # In place: nothing to check, nothing run.
    assert plan(spec("good new\n", "false %s"), ctx)[2].action is Action.NONE


def test_the_message_names_the_candidate_as_percent_s_not_its_temporary_path(ctx):
    (ctx.root / "etc").mkdir()
    with pytest.raises(ProviderError) as info:
        plan(spec("x\n", "cat %s /nonexistent-datum"), ctx)
    assert "datum-validate-" not in str(info.value)


def test_validate_needs_percent_s_and_content():
    with pytest.raises(ValidationError, match="needs %s"):
        spec("x", "visudo -c")
    with pytest.raises(ValidationError, match="needs content"):
        FileSpec.model_validate({"path": "/etc/x", "validate": "true %s"})
    assert spec("x").validate_cmd == "grep -q '^good' %s"


def test_the_copy_keeps_the_destinations_suffix(ctx):
    """A checker that reads the kind from the name (``systemd-analyze verify %s`` on a unit)."""
    (ctx.root / "etc").mkdir()
    s = FileSpec.model_validate(
        {"path": "/etc/app.service", "content": "x\n", "validate": "case %s in *.service) exit 0;; esac; exit 1"}
    )
    assert plan(s, ctx)[2].action is Action.CREATE


# A checker that prints what it refused, as nginx -t does, with the line above its verdict.
LOUD = "echo \"[emerg] unexpected '}' in %s:9: $(cat %s)\" >&2; echo 'test failed' >&2; exit 1"


def test_the_reason_keeps_the_lines_above_the_last(ctx):
    (ctx.root / "etc").mkdir()
    with pytest.raises(ProviderError) as info:
        plan(spec("listen 80}\n", LOUD), ctx)
    assert str(info.value).endswith("exited 1: [emerg] unexpected '}' in %s:9: listen 80} | test failed")


def test_a_sensitive_files_checker_output_is_withheld(ctx):
    (ctx.root / "etc").mkdir()
    s = FileSpec.model_validate(
        {"path": "/etc/app.conf", "content": "hunter2-secret\n", "validate": LOUD, "sensitive": True}
    )
    with pytest.raises(ProviderError) as info:
        plan(s, ctx)
    assert "hunter2" not in str(info.value)
    assert "emerg" not in str(info.value).replace(LOUD, "")
    assert str(info.value).endswith("exited 1 (its output withheld: sensitive: true)")
