"""What the OpenAPI document says in words and JSON Schema cannot, told to schemathesis (``SCHEMATHESIS_HOOKS``).

A pass report is taken only for the host of its path, and only when its
``state`` is what its resources roll up to (contract section 2). JSON Schema
cannot tie a body to its path nor one field to the others, so a case
schemathesis draws as valid would often break one of the two; this hook
mends the positive cases of ``POST /v1/hosts/{host}/passes`` with Datum's own
rollup (``datum.core.rollup``). A negative case is left as drawn: it must
still be refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import schemathesis

from datum.core.budget import unhealthy
from datum.core.rollup import host_state
from datum.core.vocab import ResourceState

PASSES = "/v1/hosts/{host}/passes"


@schemathesis.hook
def before_call(_context: Any, case: Any, _kwargs: dict[str, Any]) -> None:
    """Just before it is sent, once the stateful phase's links have filled in what they fill (a ``state``)."""
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
        case.body = {**body, "host": unquote(host), "state": state.value}
