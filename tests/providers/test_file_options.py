"""``File`` ``replace: false``, ``backup`` / ``backups``, template ``trim_blocks`` / ``lstrip_blocks``."""

from __future__ import annotations

import os
import stat

import pytest
from pydantic import ValidationError

from datum.core.vocab import Action
from datum.providers.file import PROVIDER as FILE
from datum.providers.file.spec import FileSpec
from providers.test_accounts import step as converge


def step(ctx, **attrs):
    spec = FileSpec.model_validate({"path": "/etc/app.conf", **attrs})
    return converge(FILE, spec, ctx)[0]


def test_replace_false_creates_but_never_rewrites_content(ctx):
    (ctx.root / "etc").mkdir()
    assert step(ctx, content="first\n", replace=False).action is Action.CREATE
    assert (ctx.root / "etc/app.conf").read_text() == "first\n"
    assert step(ctx, content="second\n", replace=False).action is Action.NONE
    # Mode and owner are still managed.
    change = step(ctx, content="second\n", replace=False, mode="0600")
    assert change.action is Action.UPDATE and "content" not in change.differences
    assert (ctx.root / "etc/app.conf").read_text() == "first\n"
    assert stat.S_IMODE((ctx.root / "etc/app.conf").stat().st_mode) == 0o600


def test_backup_keeps_the_replaced_content_pruned_to_backups(ctx):
    (ctx.root / "etc").mkdir()
    conf = ctx.root / "etc/app.conf"
    conf.write_text("v0\n")
    os.chmod(conf, 0o640)
    for n in range(1, 5):
        assert step(ctx, content=f"v{n}\n", backup=True, backups=2).action is Action.UPDATE
    kept = sorted((ctx.root / "etc").glob("app.conf.datum-backup-*"))
    assert [p.read_text() for p in kept] == ["v2\n", "v3\n"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o640 for p in kept)
    assert conf.read_text() == "v4\n"
    # No change, no backup; no backup of a file that did not exist.
    assert step(ctx, content="v4\n", backup=True).action is Action.NONE
    assert len(list((ctx.root / "etc").glob("app.conf.datum-backup-*"))) == 2


def test_trim_and_lstrip_blocks(ctx, tmp_path):
    (ctx.root / "etc").mkdir()
    (tmp_path / "t.j2").write_text("{% for x in [1, 2] %}\n    {% if x %}\nx={{ x }}\n    {% endif %}\n{% endfor %}\n")
    step(ctx, template="t.j2")
    assert (ctx.root / "etc/app.conf").read_text() == "\n    \nx=1\n    \n\n    \nx=2\n    \n\n"
    step(ctx, template="t.j2", trim_blocks=True, lstrip_blocks=True)
    assert (ctx.root / "etc/app.conf").read_text() == "x=1\nx=2\n"


def test_findings():
    with pytest.raises(ValidationError, match="apply to a template"):
        FileSpec.model_validate({"path": "/x", "content": "a", "trim_blocks": True})
    with pytest.raises(ValidationError):
        FileSpec.model_validate({"path": "/x", "content": "a", "backups": 0})
