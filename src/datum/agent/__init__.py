"""``datum agent``: the host's own loop. Fetch the effective manifest, run a pass, keep the report, send it.

- ``state``: the spool, the sequence number and the last manifest, in the agent's local state file;
- ``fetch``: ``GET /v1/hosts/{host}/manifest`` with ``ETag``, and the manifest made runnable;
- ``post``: delivering spooled reports in order;
- ``loop``: one cycle, and the long-running loop with interval, splay and signals.
"""
