"""The server's side of hosts: the fleet server (``server.FleetServer``), what a host is served and what
it reports (``serving``, ``changes``, ``intake``), staged rollouts (``rollouts``), node classification,
effective manifests, and how stale a host is. No web framework: ``datum.api`` says all of it in HTTP."""
