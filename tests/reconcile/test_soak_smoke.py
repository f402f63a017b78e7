"""A few seconds of ``./scripts/soak``: racing, killed and stopped runners on one SQLite store."""

from __future__ import annotations

import soak_claims


def test_soak_smoke_finds_no_overlap_no_early_pass_and_no_stall(capsys):
    assert soak_claims.main(["--smoke"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert '"problems": []' in out and '"passes": 0' not in out
