"""``User``: an account in the root's etc/passwd (and etc/shadow when it exists).

Edits are made as useradd makes them (``datum.providers.accounts.locked``): under
shadow-utils' locks, on the databases read again under them, written gshadow, group,
shadow, passwd.

A user without ``group`` gets a private group of its own name, as useradd
does on Debian. With ``manage_home: true`` a missing home directory is made
from the root's ``/etc/skel`` (as ``useradd -m``: mode from login.defs,
everything owned by the user, links copied as links); an existing one is left
alone, and removing the user never removes it. ``password`` is a crypt(3)
hash written to etc/shadow and never shown: a plan says ``password differs``.
``locked`` prefixes the shadow hash with ``!`` (as ``passwd -l``); like it,
it stops password logins, not SSH keys.

``ensure: absent`` removes what userdel removes (its home excepted): the passwd and shadow
rows, the name from every group's member list (etc/group) and every gshadow member and
administrator list, and the user's private group (with its gshadow row) when it has no other
member and is no other user's primary group: the group named like the user whose gid is the
user's primary gid (userdel's ``USERGROUPS_ENAB``; Datum made that group). Otherwise the next
account of that name would be a sudoer again. The plan says what goes: ``present, want absent;
member of adm, sudo; its group app goes too``. Names left in groups without a passwd row (by
an earlier removal) are removed too: ``absent from /etc/passwd; still member of sudo``.
"""

from __future__ import annotations

import stat
import time
from dataclasses import dataclass

from datum.core.vocab import Action
from datum.providers import accounts as db
from datum.providers import reads
from datum.providers.base import Attributes, Change, HostContext, Provider, ProviderError
from datum.providers.group import members_of, put_group


@dataclass(frozen=True, slots=True)
class UserWant:
    spec: Attributes
    home: str
    shell: str


@dataclass(frozen=True, slots=True, repr=False)
class UserHave:
    row: tuple[str, ...] | None
    gid_name: str | None
    groups: frozenset[str]
    shadow: tuple[str, ...] | None = None  # its etc/shadow row, when there is one
    home_exists: bool = True  # looked at only with manage_home
    listed: frozenset[str] = frozenset()  # the gshadow rows naming it, as member or administrator
    private: bool = False  # its group goes with it when it is removed (``goes_with``)

    def __repr__(self) -> str:  # the shadow row carries a hash: never in a repr or a traceback
        return f"UserHave(row={self.row!r}, groups={sorted(self.groups)!r})"


def locked_hash(field: str) -> tuple[bool, str]:
    """A shadow password field as (locked, the hash without its lock)."""
    return (True, field[1:]) if field.startswith("!") else (False, field)


def goes_with(passwd: db.Table, groups: db.Table, name: str) -> bool:
    """Whether removing user ``name`` removes its private group too, as userdel does with
    USERGROUPS_ENAB: the group named like it is its primary group, has no member but it, and is
    no other user's primary group."""
    row, group = passwd.get(name), groups.get(name)
    if row is None or group is None or len(row) < 4 or len(group) < 3 or group[2] != row[3]:
        return False
    if any(member != name for member in members_of(group)):
        return False
    return not any(r[0] != name and len(r) > 3 and r[3] == row[3] for r in passwd.rows)


def leaving(
    ctx: HostContext, name: str, passwd: db.Table, groups: db.Table
) -> tuple[frozenset[str], bool]:
    """What removing ``name`` takes besides its rows (read for the plan of ``ensure: absent``
    only): the gshadow rows naming it, as member or administrator, and whether its private
    group goes too."""
    listed: frozenset[str] = frozenset()
    if db.exists(ctx, db.GSHADOW):
        lists = (db.ADMINS, db.MEMBERS)
        gshadow = db.read_table(ctx, db.GSHADOW)
        listed = frozenset(r[0] for r in gshadow.rows if any(name in db.listed(r, c) for c in lists))
    return listed, goes_with(passwd, groups, name)


def remove_user(edit: db.Edit, name: str) -> None:
    """Stage what userdel removes (the home excepted): the name from every group list, its private
    group, its shadow and passwd rows (``edit`` writes passwd last)."""
    passwd, groups = edit.table(db.PASSWD), edit.table(db.GROUP)
    private = goes_with(passwd, groups, name)
    groups = groups.without(name, db.MEMBERS)
    edit.put(groups.with_row(name, None) if private else groups)
    if edit.present(db.GSHADOW):
        gshadow = edit.table(db.GSHADOW).without(name, db.ADMINS, db.MEMBERS)
        edit.put(gshadow.with_row(name, None) if private else gshadow)
    if edit.present(db.SHADOW):
        edit.put(edit.table(db.SHADOW).with_row(name, None))
    edit.put(passwd.with_row(name, None))


def removal(name: str, have: UserHave) -> Change:
    """The plan of ``ensure: absent``: what goes, or what an earlier removal left."""
    groups = sorted((have.groups | have.listed) - ({name} if have.private else set()))
    if have.row is not None:
        parts = ["present, want absent"]
        parts += [f"member of {', '.join(groups)}"] if groups else []
        parts += [f"its group {name} goes too"] if have.private else []
    elif groups or have.shadow is not None:
        parts = [f"absent from {db.PASSWD}"]
        parts += [f"still member of {', '.join(groups)}"] if groups else []
        parts += [f"still in {db.SHADOW}"] if have.shadow is not None else []
    else:
        return Change()
    return Change(Action.DELETE, ("; ".join(parts),))


def home_mode(ctx: HostContext) -> int:
    """The mode useradd -m gives a home: HOME_MODE from the root's login.defs, else 0777 & ~UMASK."""
    values: dict[str, str] = {}
    try:
        data = reads.read_bytes(ctx.real("/etc/login.defs")) or b""
        for line in data.decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) >= 2 and not parts[0].startswith("#"):
                values[parts[0]] = parts[1]
        if "HOME_MODE" in values:
            return int(values["HOME_MODE"], 8)
        return 0o777 & ~int(values.get("UMASK", "077"), 8)
    except (OSError, ValueError):
        return 0o700


def make_home(ctx: HostContext, home: str, uid: int, gid: int) -> None:
    """``home`` from the root's /etc/skel, owned by uid:gid, by descriptor (``user.home``)."""
    from datum.providers.user.home import make_home as build

    build(ctx, home, uid, gid, home_mode(ctx))


class UserProvider(Provider[Attributes, UserWant, UserHave]):
    type = "User"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.user.spec:UserSpec"
    namevar = "name"

    def secret(self, spec: Attributes) -> bool:
        return spec.password is not None

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> UserWant:
        home = spec.home or ("/nonexistent" if spec.system else f"/home/{spec.name}")
        shell = spec.shell or ("/usr/sbin/nologin" if spec.system else "/bin/sh")
        if spec.manage_home and spec.ensure == "present":
            ctx.real(home)  # a link on the way the link rule refuses fails it before any row is written
        return UserWant(spec, home, shell)

    def observe(self, want: UserWant, ctx: HostContext) -> UserHave:
        name = want.spec.name
        passwd = db.read_table(ctx, db.PASSWD)
        row = passwd.get(name)
        groups = db.read_table(ctx, db.GROUP)
        gid_row = groups.by_id(int(row[3])) if row and len(row) > 3 and row[3].isdigit() else None
        member = frozenset(r[0] for r in groups.rows if name in members_of(r))
        shadow = None
        if db.exists(ctx, db.SHADOW):
            shadow = db.read_table(ctx, db.SHADOW).get(name)
        home = True
        if want.spec.manage_home and row is not None:
            home = reads.kind(ctx.real(want.home)) == stat.S_IFDIR
        listed, private = (
            leaving(ctx, name, passwd, groups) if want.spec.ensure == "absent" else (frozenset(), False)
        )
        return UserHave(row, gid_row[0] if gid_row else None, member, shadow, home, listed, private)

    def plan(self, want: UserWant, have: UserHave) -> Change:
        s = want.spec
        if s.ensure == "absent":
            return removal(s.name, have)
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
        if s.manage_home and not have.home_exists:
            differences.append(f"no home directory {want.home}")
        locked, current = locked_hash(have.shadow[1] if have.shadow and len(have.shadow) > 1 else "")
        if s.password is not None and current != s.password:
            differences.append("password differs")  # never the hash, old or new
        if s.locked is not None and s.locked != locked:
            differences.append("unlocked, want locked" if s.locked else "locked, want unlocked")
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def apply(self, want: UserWant, have: UserHave, change: Change, ctx: HostContext) -> str | None:
        s = want.spec
        with db.locked(ctx) as edit:
            if change.action is Action.DELETE:
                remove_user(edit, s.name)
                return None
            uid, gid = self._put(edit, want)
        if s.manage_home:
            make_home(ctx, want.home, uid, gid)
        return None

    def _put(self, edit: db.Edit, want: UserWant) -> tuple[int, int]:
        """Stage the user's rows as the databases are now (under the lock); return its uid and gid.
        Refusals come before anything is written: ``edit`` writes only when this returns."""
        s = want.spec
        shadow_row = self._shadow_row(edit, s)
        passwd = edit.table(db.PASSWD)
        old = passwd.get(s.name)
        uid = (
            s.uid
            if s.uid is not None
            else (int(old[2]) if old else db.next_id(passwd.ids(), s.system))
        )
        clash = passwd.by_id(uid)
        if clash is not None and clash[0] != s.name:
            raise ProviderError(f"uid {uid} belongs to user {clash[0]}")
        gid = (
            db.id_in(edit.table(db.GROUP), s.group, "group")
            if s.group is not None
            else self._private_group(edit, s.name, uid, s.system)
        )
        edit.put(
            passwd.with_row(
                s.name, (s.name, "x", str(uid), str(gid), s.comment, want.home, want.shell)
            )
        )
        if shadow_row is not None:
            edit.put(edit.table(db.SHADOW).with_row(s.name, shadow_row))
        if s.groups is not None:
            self._memberships(edit, s.name, set(s.groups))
        return uid, gid

    def _shadow_row(self, edit: db.Edit, s: Attributes) -> tuple[str, ...] | None:
        """The etc/shadow row to write (None: none to write): created locked without a
        password, then hash and lock as asked. Unlocking to no password is refused."""
        if not edit.present(db.SHADOW):
            if s.password is not None or s.locked is not None:
                raise ProviderError(f"no {db.SHADOW} in the root: password and locked need it")
            return None
        old = edit.table(db.SHADOW).get(s.name)
        today = str(int(time.time() // 86400))
        row = list(old) if old else [s.name, "!", "", "0", "99999", "7", "", "", ""]
        row += [""] * (9 - len(row))
        locked, current = locked_hash(row[1])
        if s.password is not None and s.password != current:
            # A "!" that only stood for "no password yet" goes with the first hash; a lock put
            # on an account that had one stays unless locked: false says otherwise.
            if current in ("", "*"):
                locked = False
            current = s.password
            row[2] = today  # the date of the last password change, as passwd sets it
        if s.locked is not None:
            locked = s.locked
        if not locked and current in ("", "*"):
            if s.locked is False:
                raise ProviderError(f"cannot unlock {s.name}: it has no password (give password:)")
            locked = True
        row[1] = ("!" if locked else "") + current
        return tuple(row) if old is None or tuple(row) != old else None

    def _private_group(self, edit: db.Edit, name: str, uid: int, system: bool) -> int:
        """The gid of the group named like the user, created with gid = uid when that is free."""
        groups = edit.table(db.GROUP)
        existing = groups.get(name)
        if existing is not None:
            return int(existing[2])
        return put_group(edit, name, uid if groups.by_id(uid) is None else None, system, None)

    def _memberships(self, edit: db.Edit, user: str, wanted: set[str]) -> None:
        table = edit.table(db.GROUP)
        missing = wanted - {r[0] for r in table.rows}
        if missing:
            raise ProviderError(f"no group {', '.join(sorted(missing))} in {db.GROUP}")
        for row in table.rows:
            members = members_of(row)
            has = user in members
            if has != (row[0] in wanted):
                members = [m for m in members if m != user] + ([user] if not has else [])
                put_group(edit, row[0], int(row[2]), False, members)


PROVIDER = UserProvider()
