"""Alembic migrations of the framework's own tables (item memory, reconciler runs, locks, hosts)."""
