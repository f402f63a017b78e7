"""Fields that do not apply are absent, never null: how Datum's models declare them, once.

``absent(description)`` is the default of such a field. Its published JSON
schema leaves it out of ``required`` and carries no ``default: null``, and a
dump (``exclude_none``) leaves it out, so a client reading Datum's JSON never
has to handle ``null``. Two kinds of model use it:

- what Datum only writes (a drift report, a host listing): ``T |
  SkipJsonSchema[None] = absent(...)``. The schema says ``T``; building the
  model from values that may be None is fine.
- what a client also sends (a pass report): ``T = absent(...)``, typed as
  its value. Pydantic does not validate a default, so the field is None in
  Python when absent, but an explicit ``null`` is refused like any value that
  is not a ``T``: the OpenAPI document says exactly what the server takes.

``Text`` is a string Datum stores: PostgreSQL's text and ``jsonb`` cannot hold
a NUL, so no string the server takes to store may carry one (SQLite could:
one rule for both, refused with ``422`` and published as a pattern).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

NO_NUL = r"^[^\x00]*$"  # a JSON Schema pattern, and pydantic's and Python's regular expression alike
Text = Annotated[str, StringConstraints(pattern=NO_NUL)]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def absent(description: str | None = None, alias: str | None = None, **constraints: Any) -> Any:
    """An optional field: absent from the JSON, never null, where it does not apply (``constraints``: ``ge``, ...)."""
    return Field(default=None, alias=alias, description=description, json_schema_extra=_no_default, **constraints)
