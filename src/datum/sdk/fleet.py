"""What a reconciler over the fleet itself uses (Datum's ``hosts`` is one).

``FleetSettings`` is the ``[fleet]`` section (a reconciler's settings read it from the validation
context: ``info.context["settings"].fleet``); ``declared(fleet_dir, inventory)`` the hosts an
operator declared, each a ``Declared`` saying where (None when nothing declares any);
``sightings(store, stale_after, now)`` when the server last heard from every host and the state
it reads, stale ones ``unknown`` (a ``Sighting`` each, the host listing's rule); and
``revoke_host_tokens(conn, host)`` deletes the agent tokens bound to a host, in the caller's
(fenced: ``ctx.begin()``) transaction, and says how many.
"""

from __future__ import annotations

from datum.config import FleetSettings
from datum.fleet.inventory import Declared, declared
from datum.store.hosts import Sighting, revoke_host_tokens, sightings

__all__ = ["Declared", "FleetSettings", "Sighting", "declared", "revoke_host_tokens", "sightings"]
