"""User and Group: the root's etc/passwd, group, shadow and gshadow, edited atomically."""

from __future__ import annotations

import stat

from datum.core.vocab import Action
from datum.providers.group import PROVIDER as GROUP
from datum.providers.group.spec import GroupSpec
from datum.providers.user import PROVIDER as USER
from datum.providers.user.spec import UserSpec


def step(provider, spec, ctx):
    """Observe, plan, apply when it differs, verify: one resource's pass (shared by other tests)."""
    want = provider.desired(getattr(spec, "name", None) or spec.path, spec, ctx)
    have = provider.observe(want, ctx)
    change = provider.plan(want, have)
    if change.action is not Action.NONE:
        provider.apply(want, have, change, ctx)
        ctx.changed()
    return change, provider.verify(want, change, ctx)


def etc(ctx, name):
    return (ctx.root / "etc" / name).read_text().splitlines()


def seed(ctx):
    d = ctx.root / "etc"
    d.mkdir()
    (d / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n")
    (d / "group").write_text("root:x:0:\nalice:x:1000:\nadm:x:4:\n")
    (d / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (d / "shadow").chmod(0o640)
    (d / "gshadow").write_text("root:*::\n")


def test_user_with_a_private_group_and_shadow_entry(ctx):
    seed(ctx)
    change, unconfirmed = step(USER, UserSpec(name="web", comment="Web server"), ctx)
    assert change.action is Action.CREATE and unconfirmed is None
    assert "web:x:1001:1001:Web server:/home/web:/bin/sh" in etc(ctx, "passwd")
    assert "web:x:1001:" in etc(ctx, "group")
    assert "web:!::0:99999:7:::" in etc(ctx, "shadow")
    assert "web:!::" in etc(ctx, "gshadow")
    assert stat.S_IMODE((ctx.root / "etc/shadow").stat().st_mode) == 0o640
    assert step(USER, UserSpec(name="web", comment="Web server"), ctx)[0].action is Action.NONE


def test_system_user_defaults(ctx):
    seed(ctx)
    step(USER, UserSpec(name="svc", system=True), ctx)
    assert "svc:x:100:100::/nonexistent:/usr/sbin/nologin" in etc(ctx, "passwd")


def test_user_changes_and_supplementary_groups(ctx):
    seed(ctx)
    change, unconfirmed = step(USER, UserSpec(name="alice", shell="/bin/bash", groups=["adm"]), ctx)
    assert change.differences == ("shell /bin/sh, want /bin/bash", "groups -, want adm")
    assert unconfirmed is None
    assert "adm:x:4:alice" in etc(ctx, "group")
    change, _ = step(USER, UserSpec(name="alice", shell="/bin/bash", groups=[]), ctx)
    assert change.differences == ("groups adm, want -",)
    assert "adm:x:4:" in etc(ctx, "group")


def test_user_uid_clash_fails(ctx):
    seed(ctx)
    want = USER.desired("bob", UserSpec(name="bob", uid=1000), ctx)
    have = USER.observe(want, ctx)
    try:
        USER.apply(want, have, USER.plan(want, have), ctx)
    except Exception as exc:  # noqa: BLE001
        assert "uid 1000 belongs to user alice" in str(exc)
    else:
        raise AssertionError("a uid clash must fail")


def test_user_absent(ctx):
    seed(ctx)
    change, unconfirmed = step(USER, UserSpec(name="alice", ensure="absent"), ctx)
    assert change.action is Action.DELETE and unconfirmed is None
    assert not any(line.startswith("alice:") for line in etc(ctx, "passwd"))


def test_group_members_and_gid(ctx):
    seed(ctx)
    change, _ = step(GROUP, GroupSpec(name="www", gid=33, members=["alice"]), ctx)
    assert change.action is Action.CREATE
    assert "www:x:33:alice" in etc(ctx, "group")
    change, _ = step(GROUP, GroupSpec(name="www", gid=33, members=[]), ctx)
    assert change.differences == ("members alice, want -",)
    change, _ = step(GROUP, GroupSpec(name="www", ensure="absent"), ctx)
    assert change.action is Action.DELETE
    assert not any(line.startswith("www:") for line in etc(ctx, "group") + etc(ctx, "gshadow"))


def test_accounts_in_an_empty_root(ctx):
    step(GROUP, GroupSpec(name="web"), ctx)
    step(USER, UserSpec(name="web", group="web"), ctx)
    assert etc(ctx, "passwd") == ["web:x:1000:1000::/home/web:/bin/sh"]
    assert not (ctx.root / "etc/shadow").exists()  # no shadow file is invented


HASH = "$6$saltsalt$" + "A" * 86


def test_password_hash_lock_and_home_from_skel_in_a_root(ctx):
    seed(ctx)
    (ctx.root / "etc/skel").mkdir()
    (ctx.root / "etc/skel/.profile").write_text("# profile\n")
    (ctx.root / "etc/skel/link").symlink_to("/etc/passwd")  # copied as a link, never followed
    (ctx.root / "etc/login.defs").write_text("UMASK 022\nHOME_MODE 0750\n")
    spec = UserSpec(name="web", manage_home=True, password=HASH, locked=True)
    change, unconfirmed = step(USER, spec, ctx)
    assert change.action is Action.CREATE and unconfirmed is None
    row = next(r for r in etc(ctx, "shadow") if r.startswith("web:"))
    assert row.split(":")[1] == "!" + HASH
    home = ctx.root / "home/web"
    assert (home / ".profile").read_text() == "# profile\n"
    assert (home / "link").is_symlink()
    assert stat.S_IMODE(home.stat().st_mode) == 0o750
    assert step(USER, spec, ctx)[0].action is Action.NONE
    # Unlock: the hash stays, the "!" goes; the plan names no hash.
    other = UserSpec(name="web", password="$6$other$" + "B" * 86, locked=False)
    want = USER.desired("web", other, ctx)
    change = USER.plan(want, USER.observe(want, ctx))
    assert change.differences == ("password differs", "locked, want unlocked")
    assert HASH not in repr(USER.observe(want, ctx)) and HASH not in repr(ctx.cache)


def test_plain_text_passwords_are_refused_without_being_repeated():
    import pytest
    from pydantic import ValidationError

    for value in ("hunter2", "!" + HASH, "$6$"):
        with pytest.raises(ValidationError) as info:
            UserSpec(name="web", password=value)
        assert "hunter2" not in str(info.value).replace("input_value='hunter2'", "")
    assert UserSpec(name="web", password="*").password == "*"


def test_a_new_hash_keeps_a_lock_unless_told_and_system_users_need_a_home(ctx):
    import pytest
    from pydantic import ValidationError

    seed(ctx)
    step(USER, UserSpec(name="web", password=HASH, locked=True), ctx)
    step(USER, UserSpec(name="web", password="$6$new$" + "C" * 86), ctx)
    row = next(r for r in etc(ctx, "shadow") if r.startswith("web:"))
    assert row.split(":")[1] == "!$6$new$" + "C" * 86  # still locked
    # A user created without a password is "!" only: its first hash unlocks it.
    step(USER, UserSpec(name="api"), ctx)
    step(USER, UserSpec(name="api", password=HASH), ctx)
    assert next(r for r in etc(ctx, "shadow") if r.startswith("api:")).split(":")[1] == HASH
    with pytest.raises(ValidationError, match="give home"):
        UserSpec(name="svc", system=True, manage_home=True)
