"""Staged rollouts of the fleet's manifests, as the server side of hosts decides them.

``plan`` (which wave each host is in), ``status`` (which revision each host
runs) and ``snapshot`` (a revision's files, kept so any server can serve it
again). What every replica agrees on is in the store (``datum.store.rollouts``).
"""
