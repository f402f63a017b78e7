"""``Group``: a group in the root's etc/group (and etc/gshadow when it exists), edited atomically."""

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
    return [m for m in (row[3] if len(row) > 3 else "").split(",") if m]


def put_group(
    ctx: HostContext, name: str, gid: int | None, system: bool, members: list[str] | None
) -> int:
    """Create or change a group; return its gid. Shared with ``User`` for private groups."""
    table = db.read_table(ctx, db.GROUP)
    row = table.get(name)
    if gid is None:
        gid = int(row[2]) if row else db.next_id(table.ids(), system)
    clash = table.by_id(gid)
    if clash is not None and clash[0] != name:
        raise ProviderError(f"gid {gid} belongs to group {clash[0]}")
    keep = members_of(row) if row and members is None else (members or [])
    db.write_table(ctx, table.with_row(name, (name, "x", str(gid), ",".join(keep))))
    if db.exists(ctx, db.GSHADOW):
        gshadow = db.read_table(ctx, db.GSHADOW)
        old = gshadow.get(name)
        db.write_table(
            ctx, gshadow.with_row(name, (name, old[1] if old else "!", "", ",".join(keep)))
        )
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
        if change.action is Action.DELETE:
            db.remove_name(ctx, s.name, db.GROUP, db.GSHADOW)
            return None
        put_group(ctx, s.name, s.gid, s.system, s.members)
        return None


PROVIDER = GroupProvider()
