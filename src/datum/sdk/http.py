"""What a plugin's HTTP routes use: authorization, the store, error documentation, the response base.

Imported only by the server (it brings FastAPI). A plugin's router is a plain
``fastapi.APIRouter`` without a prefix; Datum mounts it under the prefix the
plugin declares, so its operations appear in ``/openapi.json`` and answer in
Datum's error shape like every other.

- ``needs(action, resource)``: a dependency that authenticates the bearer
  token and asks Cedar for ``action`` (a string the plugin's schema fragment
  declares, ``"buckets:Write"``) on ``resource`` (default ``Server::"datum"``;
  ``path_resource("Bucket", "name")`` for one named by a path parameter);
  the server decides it before it reads a request's body, so a resource
  comes from the path, headers or query, never from the body;
- ``store_of(request)``: the store (``503 UNAVAILABLE`` before it is wired);
- ``changed(request)``: desired state changed, drop the cached drift reports;
- ``error_responses(401, 403, ...)``: the documented error answers;
- ``Out`` and ``absent``: a response model base whose fields that do not
  apply are left out, never null.
"""

from __future__ import annotations

from fastapi import Request

from datum.api.front.errors import error_responses
from datum.api.front.security import needs, path_resource
from datum.api.front.state import state_of
from datum.api.models import Out
from datum.reconcile.report import absent
from datum.store import Store

__all__ = ["Out", "absent", "changed", "error_responses", "needs", "path_resource", "store_of"]


def store_of(request: Request) -> Store:
    """The store the server is wired to."""
    _registry, store = state_of(request).wired()
    return store


def changed(request: Request) -> None:
    """Desired state changed: the next drift report is computed afresh."""
    state_of(request).reports.invalidate()
