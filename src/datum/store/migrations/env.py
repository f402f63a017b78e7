"""Alembic environment: always run on the connection ``datum.store.migrate`` hands over.

``version_table`` is the branch's own (``alembic_version`` for the framework's
tables, ``alembic_version_<plugin>`` for a plugin's).
"""

from alembic import context

from datum.store.schema import metadata

attributes = context.config.attributes
context.configure(
    connection=attributes["connection"],
    target_metadata=metadata,
    render_as_batch=True,
    version_table=attributes.get("version_table", "alembic_version"),
)
with context.begin_transaction():
    context.run_migrations()
