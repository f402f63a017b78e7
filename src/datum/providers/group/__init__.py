"""``Group``: a group in the root's etc/group (and etc/gshadow when it exists).

Edits are made as groupadd makes them (``datum.providers.accounts.locked``): under lckpwdf and
the group and gshadow locks, on the files read again under them, gshadow written before group.
An edit keeps the gshadow row's password and administrators.
"""

from __future__ import annotations

from dataclasses import dataclass

from datum.core.vocab import Action
from datum.providers import accounts as db
from datum.providers.base import Attributes, Change, HostContext, Provider, ProviderError


@dataclass(frozen=True, slots=True)
class GroupWant:
    spec: Attributes


@dataclass(frozen=True, slots=True)
class GroupHave:
    row: tuple[str, ...] | None


def members_of(row: tuple[str, ...]) -> list[str]:
    return db.listed(row, db.MEMBERS)


def put_group(
    edit: db.Edit, name: str, gid: int | None, system: bool, members: list[str] | None
) -> int:
    """Stage a group created or changed; return its gid. Shared with ``User`` for private groups
    and memberships."""
    table = edit.table(db.GROUP)
    row = table.get(name)
    if gid is None:
        gid = int(row[2]) if row else db.next_id(table.ids(), system)
    clash = table.by_id(gid)
    if clash is not None and clash[0] != name:
        raise ProviderError(f"gid {gid} belongs to group {clash[0]}")
    keep = ",".join(members_of(row) if row and members is None else (members or []))
    edit.put(table.with_row(name, (name, "x", str(gid), keep)))
    if edit.present(db.GSHADOW):
        gshadow = edit.table(db.GSHADOW)
        old = gshadow.get(name) or (name, "!", "")
        edit.put(gshadow.with_row(name, (name, old[1], old[2] if len(old) > 2 else "", keep)))
    return gid


class GroupProvider(Provider[Attributes, GroupWant, GroupHave]):
    type = "Group"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.group.spec:GroupSpec"
    namevar = "name"

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> GroupWant:
        return GroupWant(spec)

    def observe(self, want: GroupWant, ctx: HostContext) -> GroupHave:
        return GroupHave(db.read_table(ctx, db.GROUP).get(want.spec.name))

    def plan(self, want: GroupWant, have: GroupHave) -> Change:
        s = want.spec
        if s.ensure == "absent":
            return Change(Action.DELETE, ("present, want absent",)) if have.row else Change()
        if have.row is None:
            return Change(Action.CREATE, ("absent",))
        differences = []
        if s.gid is not None and have.row[2] != str(s.gid):
            differences.append(f"gid {have.row[2]}, want {s.gid}")
        if s.members is not None and sorted(members_of(have.row)) != sorted(s.members):
            differences.append(
                f"members {','.join(members_of(have.row)) or '-'}, want {','.join(s.members) or '-'}"
            )
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def apply(
        self, want: GroupWant, have: GroupHave, change: Change, ctx: HostContext
    ) -> str | None:
        s = want.spec
        with db.locked(ctx, db.GROUP, db.GSHADOW) as edit:
            if change.action is Action.DELETE:
                edit.put(edit.table(db.GROUP).with_row(s.name, None))
                if edit.present(db.GSHADOW):
                    edit.put(edit.table(db.GSHADOW).with_row(s.name, None))
            else:
                put_group(edit, s.name, s.gid, s.system, s.members)
        return None


PROVIDER = GroupProvider()
