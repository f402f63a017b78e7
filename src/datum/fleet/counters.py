"""What one server process counts itself: the pass reports it took, by outcome, and how long taking each took.

Everything else on ``/metrics`` is read from the store at scrape time, so that every replica says the
same; these are the process's own (each replica its own series, summed by Prometheus), because only
the process that took a report knows how long it took. Fleet-wide, whatever ``[metrics] per_host``.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Intake is one short transaction: its buckets are milliseconds to a few seconds (a store under load).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
OUTCOMES = ("stored", "duplicate", "older")


class IntakeCounters:
    """``datum_reports_received_total{outcome}`` and ``datum_report_intake_seconds``, of this process."""

    def __init__(self) -> None:
        self.received = Counter(
            "datum_reports_received",
            "Pass reports this server process took, by outcome: stored, duplicate (the same pass again) or "
            "older (a pass older than the host's latest, kept in its history only).",
            ["outcome"], registry=None,
        )
        for outcome in OUTCOMES:  # every outcome there from the start, 0 until one comes
            self.received.labels(outcome)
        self.seconds = Histogram(
            "datum_report_intake_seconds",
            "Seconds this server process took to accept and store one pass report (refused ones not counted).",
            buckets=BUCKETS, registry=None,
        )

    def took(self, outcome: str, seconds: float) -> None:
        self.received.labels(outcome).inc()
        self.seconds.observe(seconds)
