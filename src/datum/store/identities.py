"""The states of a host's identity as the store keeps them (the members of ``datum.core.vocab.IdentityState``, by
short names), and every query on the labels it was given at enrollment (``host_identities.labels``, a JSON object
of strings; migration ``0032_enroll_labels``).

``datum.fleet.enroll`` decides enrollment (and still runs the rest of its SQL); ``datum.fleet.labels`` holds
the labels in a server's memory, read here: every active identity that has some (``labelled``), or every
identity changed since a time (``changed_since``, a label-less or inactive one as no labels, so a revoke is
seen), and when the newest identity changed (``newest_change``). ``labels_of`` reads one host's, for the
reboot leases. Labels count only while the identity is active: a pending, denied or revoked host has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from datum.core.vocab import IdentityState
from datum.store.engine import Store
from datum.store.schema import host_identities

PENDING, ACTIVE = IdentityState.PENDING, IdentityState.ACTIVE
DENIED, REVOKED = IdentityState.DENIED, IdentityState.REVOKED
STATES = tuple(IdentityState)  # the order datum enroll list shows them in: pending first


def labels_in(text: str | None) -> dict[str, str]:
    """The labels kept as ``text`` (a JSON object of strings; None or anything else: none)."""
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


@dataclass(frozen=True, slots=True)
class Labelled:
    """A host's labels as the store says them now ({}: none, or its identity is not active), and when its
    identity last changed."""

    host: str
    labels: dict[str, str]
    changed_at: datetime


_LABELS = sa.select(host_identities.c.host, host_identities.c.state, host_identities.c.labels,
                    host_identities.c.changed_at)


def _read(store: Store, query: sa.Select[tuple[str, str, str | None, datetime]]) -> list[Labelled]:
    with store.connect() as conn:
        rows = conn.execute(query).all()
    return [Labelled(host, labels_in(text) if state == ACTIVE else {}, changed) for host, state, text, changed in rows]


def labelled(store: Store) -> list[Labelled]:
    """Every active identity that was given labels."""
    return _read(store, _LABELS.where(host_identities.c.state == ACTIVE, host_identities.c.labels.is_not(None)))


def changed_since(store: Store, since: datetime) -> list[Labelled]:
    """Every identity changed at ``since`` or after, whatever its state (an inactive one has no labels)."""
    return _read(store, _LABELS.where(host_identities.c.changed_at >= since))


def newest_change(store: Store) -> datetime | None:
    """When the identity changed last of all (None: no identity)."""
    with store.connect() as conn:
        return conn.execute(sa.select(sa.func.max(host_identities.c.changed_at))).scalar()  # type: ignore[no-any-return]


def labels_of(store: Store, host: str) -> dict[str, str]:
    """The labels ``host`` was given at enrollment, while it is active (none for a name that is pending, denied,
    revoked or never enrolled)."""
    with store.connect() as conn:
        text = conn.execute(sa.select(host_identities.c.labels).where(
            host_identities.c.host == host, host_identities.c.state == ACTIVE)).scalar_one_or_none()
    return labels_in(text)
