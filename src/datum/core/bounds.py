"""How much of a server's answer an agent waits for and takes: 60 s for the whole answer, 16 MiB of body.

The defaults of the ``[agent]`` settings (``answer_deadline``, ``max_answer_bytes``), which ``datum agent``
and ``datum apply --report-to`` read, and the bounds ``datum.bounded`` and the manifest fetch fall back on
when no configuration is read. Here, below both, so each takes them from one place.
"""

from __future__ import annotations

ANSWER_DEADLINE = 60.0  # seconds for a whole answer: the request sent, its headers and body read
MAX_ANSWER = 16 * 2**20  # bytes of a manifest's answer (files included): the server's own bound on what it serves
