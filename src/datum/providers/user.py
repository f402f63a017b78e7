"""``User``: an account in the root's etc/passwd (and etc/shadow when it exists), edited atomically.

A user without ``group`` gets a private group of its own name, as useradd
does on Debian. The home directory is not created: a ``Directory`` does that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers import accounts as db
from datum.providers.base import Change, HostContext, Provider, ProviderError
from datum.providers.group import members_of, put_group

if TYPE_CHECKING:
    from datum.providers.specs import UserSpec


@dataclass(frozen=True)
class UserWant:
    spec: UserSpec
    home: str
    shell: str


@dataclass(frozen=True)
class UserHave:
    row: tuple[str, ...] | None
    gid_name: str | None
    groups: frozenset[str]


class UserProvider(Provider["UserSpec", UserWant, UserHave]):
    type = "User"

    def desired(self, name: str, spec: UserSpec, ctx: HostContext) -> UserWant:
        home = spec.home or ("/nonexistent" if spec.system else f"/home/{spec.name}")
        shell = spec.shell or ("/usr/sbin/nologin" if spec.system else "/bin/sh")
        return UserWant(spec, home, shell)

    def observe(self, want: UserWant, ctx: HostContext) -> UserHave:
        row = db.read_table(ctx, db.PASSWD).get(want.spec.name)
        groups = db.read_table(ctx, db.GROUP)
        gid_row = groups.by_id(int(row[3])) if row and len(row) > 3 and row[3].isdigit() else None
        member = frozenset(r[0] for r in groups.rows if want.spec.name in members_of(r))
        return UserHave(row, gid_row[0] if gid_row else None, member)

    def plan(self, want: UserWant, have: UserHave) -> Change:
        s = want.spec
        if s.ensure == "absent":
            return Change(Action.DELETE, ("present, want absent",)) if have.row else Change()
        if have.row is None:
            return Change(Action.CREATE, ("absent",))
        row = have.row + ("",) * (7 - len(have.row))
        differences = []
        if s.uid is not None and row[2] != str(s.uid):
            differences.append(f"uid {row[2]}, want {s.uid}")
        want_group = s.group or s.name
        if row[3] != want_group and have.gid_name != want_group:
            differences.append(f"group {have.gid_name or row[3]}, want {want_group}")
        for label, value, index in (
            ("comment", s.comment, 4),
            ("home", want.home, 5),
            ("shell", want.shell, 6),
        ):
            if row[index] != value:
                differences.append(f"{label} {row[index] or '-'}, want {value or '-'}")
        if s.groups is not None and have.groups != frozenset(s.groups):
            differences.append(
                f"groups {','.join(sorted(have.groups)) or '-'}, want {','.join(sorted(s.groups)) or '-'}"
            )
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def apply(self, want: UserWant, have: UserHave, change: Change, ctx: HostContext) -> str | None:
        s = want.spec
        if change.action is Action.DELETE:
            db.remove_name(ctx, s.name, db.PASSWD, db.SHADOW)
            return None
        passwd = db.read_table(ctx, db.PASSWD)
        uid = (
            s.uid
            if s.uid is not None
            else (int(have.row[2]) if have.row else db.next_id(passwd.ids(), s.system))
        )
        clash = passwd.by_id(uid)
        if clash is not None and clash[0] != s.name:
            raise ProviderError(f"uid {uid} belongs to user {clash[0]}")
        gid = (
            db.gid_of(ctx, s.group)
            if s.group is not None
            else self._private_group(ctx, s.name, uid, s.system)
        )
        db.write_table(
            ctx,
            passwd.with_row(
                s.name, (s.name, "x", str(uid), str(gid), s.comment, want.home, want.shell)
            ),
        )
        if db.exists(ctx, db.SHADOW):
            shadow = db.read_table(ctx, db.SHADOW)
            if shadow.get(s.name) is None:
                db.write_table(
                    ctx, shadow.with_row(s.name, (s.name, "!", "", "0", "99999", "7", "", "", ""))
                )
        if s.groups is not None:
            self._memberships(ctx, s.name, set(s.groups))
        return None

    def _private_group(self, ctx: HostContext, name: str, uid: int, system: bool) -> int:
        """The gid of the group named like the user, created with gid = uid when that is free."""
        groups = db.read_table(ctx, db.GROUP)
        existing = groups.get(name)
        if existing is not None:
            return int(existing[2])
        return put_group(ctx, name, uid if groups.by_id(uid) is None else None, system, None)

    def _memberships(self, ctx: HostContext, user: str, wanted: set[str]) -> None:
        table = db.read_table(ctx, db.GROUP)
        missing = wanted - {r[0] for r in table.rows}
        if missing:
            raise ProviderError(f"no group {', '.join(sorted(missing))} in {db.GROUP}")
        for row in table.rows:
            members = members_of(row)
            has = user in members
            if has != (row[0] in wanted):
                members = [m for m in members if m != user] + ([user] if not has else [])
                put_group(ctx, row[0], int(row[2]), False, members)


PROVIDER = UserProvider()
