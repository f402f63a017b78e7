"""Staged rollouts of the fleet's manifests, as the server side of hosts decides them.

``plan`` (which wave each host is in), ``serve`` (which revision each host
is served), ``machine`` (when a rollout starts and moves on), ``status``
(which revision each host runs), ``snapshot`` (a revision's files, kept
so any server can serve it again) and ``command`` (the operator's pause,
resume and abort, for the API and the CLI alike). What one server process remembers of them
is the fleet server's (``datum.fleet.server.Remembered``); what every replica
agrees on is in the store (``datum.store.rollouts``).
"""
