"""A server's memory of store tokens (``datum.api.front.tokens.TokenBook``), on real SQLite and PostgreSQL stores.

Remembered tokens never lapse while the store keeps confirming them (one
query for all of them per check), a revoked or changed one is dropped at the
next check, a store that cannot answer leaves memory as it is for ``TRUST``
seconds after the last confirmation, and tokens not presented for ``IDLE``
seconds are forgotten. The clock is injected; the store and its queries are
real (counted with SQLAlchemy's cursor events).
"""

from __future__ import annotations

from contextlib import contextmanager

import sqlalchemy as sa

from datum.api.front.tokens import IDLE, RECHECK, TRUST, TokenBook, create


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def counted(store):
    """The statements ``store`` runs inside the block, as a list filled as they run."""
    seen: list[str] = []

    def count(_conn, _cursor, statement, *_args):
        seen.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", count)


def test_a_busy_token_never_lapses_and_all_are_checked_in_one_query(store):
    clock = Clock()
    book = TokenBook({}, store, clock=clock)
    minted = [create(store, "operator"), create(store, "agent", "web1"), create(store, "agent")]
    assert [book.principal(t) for t in minted] == ["operator", "agent@host:web1", "agent"]
    with counted(store) as seen:
        for _round in range(int(3 * TRUST / RECHECK)):  # three times the old 30 s memory
            clock.now += RECHECK
            book.revalidate()
            assert [book.known(t) for t in minted] == ["operator", "agent@host:web1", "agent"]
    assert len(seen) == int(3 * TRUST / RECHECK)  # one query per check, whatever the number of tokens
    assert all("tokens" in s and " IN " in s for s in seen), seen[0]


def test_a_revoked_or_changed_token_is_dropped_at_the_next_check(store):
    from datum.api.front.tokens import digest, revoke
    from datum.store.schema import tokens

    clock = Clock()
    book = TokenBook({}, store, clock=clock)
    kept, revoked, changed = create(store, "operator"), create(store, "operator"), create(store, "agent", "web1")
    assert all(book.principal(t) for t in (kept, revoked, changed))
    revoke(store, digest(revoked)[:12])
    with store.begin() as conn:
        conn.execute(sa.update(tokens).where(tokens.c.sha256 == digest(changed)).values(host="web2"))
    assert book.known(revoked) == "operator"  # remembered until the check
    book.revalidate()
    assert book.known(kept) == "operator"
    assert book.known(revoked) is None and book.principal(revoked) is None
    assert book.known(changed) is None and book.principal(changed) == "agent@host:web2"


def test_a_store_fault_keeps_memory_for_trust_seconds_after_the_last_confirmation(store):
    clock = Clock()
    book = TokenBook({}, store, clock=clock)
    token = create(store, "operator")
    assert book.principal(token) == "operator"
    with store.begin() as conn:  # the store cannot answer the check: its table is gone
        conn.execute(sa.text("ALTER TABLE tokens RENAME TO tokens_away"))
    clock.now += TRUST - 1
    book.revalidate()
    assert book.known(token) == "operator"  # kept as it was
    clock.now += 2
    book.revalidate()
    assert book.known(token) is None  # past TRUST unconfirmed: the request must ask the store
    with store.begin() as conn:
        conn.execute(sa.text("ALTER TABLE tokens_away RENAME TO tokens"))
    book.revalidate()  # the store answers again: confirmed, trusted again without a lookup
    assert book.known(token) == "operator"


def test_tokens_not_presented_for_idle_seconds_are_forgotten(store):
    clock = Clock()
    book = TokenBook({}, store, clock=clock)
    busy, idle = create(store, "operator"), create(store, "agent")
    assert book.principal(busy) and book.principal(idle)
    while clock.now < 1000.0 + IDLE + RECHECK:
        clock.now += RECHECK
        assert book.known(busy) == "operator"
        book.revalidate()
    assert book.known(busy) == "operator"
    assert book.known(idle) is None  # forgotten: its next request asks the store once
    assert book.principal(idle) == "agent"
