"""The store: SQLAlchemy Core schema and queries, SQLite and PostgreSQL behind one interface."""

from datum.store.engine import Store, open_store

__all__ = ["Store", "open_store"]
