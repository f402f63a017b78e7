"""A few kills of ``./scripts/soak-host``: ``datum apply`` SIGKILLed mid-pass over many Files."""

from __future__ import annotations

from host import soak_host


def test_soak_host_smoke_no_partial_file_no_stale_status_no_blocked_pass(capsys):
    assert soak_host.main(["--smoke"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert '"killed mid-pass"' in out, out  # at least one kill landed inside a pass
