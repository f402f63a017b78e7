"""A SIGTERM that comes while the agent's pass runs ends the loop, whenever in the pass it comes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from datum.agent.loop import cycle
from datum.host import agent

from .faulty import faulty
from .test_bad_answers import _options


def test_a_signal_after_the_last_resource_still_ends_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """SIGTERM once every resource ran, while the pass decides and stores its report: the report is
    whole (nothing was left to stop before), it is delivered, and the cycle says the loop ends.
    Before, the pass's signal watch took the signal and the loop went on, as if none had come."""
    real = agent.run_pass

    def then_signalled(*args, **kwargs):
        outcomes = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, to this process: the pass's watch takes it
        return outcomes

    before = signal.getsignal(signal.SIGTERM)
    with faulty() as server:
        opts = _options(tmp_path, server.url)
        monkeypatch.setattr(agent, "run_pass", then_signalled)
        done = cycle(opts)
    assert done.stopped, done.line
    assert done.report["state"] == "converged" and "incomplete" not in done.report
    assert server.received == [done.report["seq"]]  # delivered before the loop ends
    assert signal.getsignal(signal.SIGTERM) is before
