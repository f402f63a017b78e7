"""What the OpenAPI document says in words and JSON Schema cannot, told to schemathesis (``SCHEMATHESIS_HOOKS``).

A pass report is taken only for the host of its path, and only when its
``state`` is what its resources roll up to (contract section 2). JSON Schema
cannot tie a body to its path nor one field to the others, so a case
schemathesis draws as valid would often break one of the two; this hook
mends the positive cases of ``POST /v1/hosts/{host}/passes`` with Datum's own
rollup (``datum.core.rollup``), and moves a ``startedAt`` or ``finishedAt``
outside the times a host's clock can hold (``datum.host.report.EARLIEST`` to
``LATEST``: 422, the clock is wrong; a ``date-time`` format has no bounds to
say it) to ``EARLIEST``. A negative case is left as drawn: it must
still be refused.

An operator's ``DELETE /v1/reboots/{host}`` clears a lease once; every later
case would find none (404) and never reach the clearing. Before each case the
host it names is given a live lease in the served store
(``DATUM_SCHEMATHESIS_STORE``, ``datum.store.leases.take``), so the case is
answered by the route's own rules: the lease dropped with ``force=true`` (200),
kept without it (409).
"""

from __future__ import annotations

import os
from datetime import timedelta
from functools import cache
from typing import Any
from urllib.parse import unquote

import schemathesis

from datum.core.budget import unhealthy
from datum.core.rollup import host_state
from datum.core.vocab import ResourceState
from datum.host.report import EARLIEST, LATEST

PASSES = "/v1/hosts/{host}/passes"
CLEAR = "/v1/reboots/{host}"
STORE = "DATUM_SCHEMATHESIS_STORE"  # the served store's URL (schemathesis_run.run)


@cache
def _store() -> Any:
    from datum.store import open_store

    return open_store(os.environ[STORE])


def _leased(case: Any) -> None:
    """The host a positive ``DELETE /v1/reboots/{host}`` names holds a live lease (see above)."""
    from datum.api.routes.reboots import host_fits
    from datum.store.leases import take

    host = (case.path_parameters or {}).get("host")
    if STORE not in os.environ or not isinstance(host, str) or not host_fits(unquote(host)):
        return
    take(_store(), unquote(host), "schemathesis", "schemathesis-boot", 1_000_000, timedelta(hours=1))


@schemathesis.hook
def before_call(_context: Any, case: Any, _kwargs: dict[str, Any]) -> None:
    """Just before it is sent, once the stateful phase's links have filled in what they fill (a ``state``)."""
    if case.operation.path == CLEAR and case.operation.method.upper() == "DELETE":
        _leased(case)
        return
    if case.operation.path != PASSES or case.operation.method.upper() != "POST":
        return
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    body, host = case.body, (case.path_parameters or {}).get("host")
    if isinstance(body, dict) and isinstance(host, str):
        resources = body.get("resources") or []
        states = [ResourceState(r["state"]) for r in resources if isinstance(r, dict) and "state" in r]
        reboot = body.get("reboot")
        awaiting = isinstance(reboot, dict) and reboot.get("required") is True
        # a new body: the coverage phase shares one among the cases it draws ahead; the path parameter
        # is held percent-encoded, as it is sent
        sick = unhealthy(body.get("health")) is not None  # back from a reboot, its health check failing: degraded
        state = host_state(states, awaiting_reboot=awaiting, unhealthy=sick)
        case.body = {**body, "host": unquote(host), "state": state.value, **_clock_bounded(body)}


def _clock_bounded(body: dict[str, Any]) -> dict[str, Any]:
    """``startedAt`` and ``finishedAt`` that a host's clock could hold: each outside the bounds made ``EARLIEST``."""
    from datetime import UTC, datetime

    mended = {}
    for name in ("startedAt", "finishedAt"):
        value = body.get(name)
        if not isinstance(value, str):
            continue
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            continue
        if not EARLIEST <= (at if at.tzinfo else at.replace(tzinfo=UTC)) < LATEST:
            mended[name] = EARLIEST.isoformat().replace("+00:00", "Z")
    return mended
