"""The agent reports to a real ``datum serve``: an ``agent`` token may post a pass, the operator reads it back."""

from __future__ import annotations

import httpx

from api.story import config_file, serving

from .conftest import Host


def _token(host: Host, cfg, principal: str, *extra: str) -> str:
    result = host.datum("token", "create", "--principal", principal, *extra, "--config", str(cfg))
    assert result.code == 0, result.err
    return result.out.strip().splitlines()[-1]


def test_apply_report_to_a_running_server(host, tmp_path):
    (tmp_path / "server").mkdir()
    cfg = config_file(tmp_path / "server", scheduler=False)
    with cfg.open("a") as fh:
        fh.write('[host]\nname = "web-1"\n')
    agent = _token(host, cfg, "agent", "--host", "web-1")
    operator = _token(host, cfg, "operator")
    manifest = host.manifest("resources:\n  - File[/etc/motd]:\n      content: 'hi\\n'\n")
    with serving(cfg, tmp_path / "serve.log") as base:
        result = host.datum(
            "apply", str(manifest), "--root", str(host.root), "--state", str(host.state),
            "--config", str(cfg), "--report-to", base, "--token", agent, "--json",
        )
        assert result.code == 2, result.err
        assert "warning" not in result.err
        seen = httpx.get(base + "v1/hosts/web-1", headers={"Authorization": f"Bearer {operator}"})
        assert seen.status_code == 200, seen.text
        body = seen.json()
        assert body["state"] == "converged"
        refused = host.datum(
            "apply", str(manifest), "--root", str(host.root), "--state", str(host.state),
            "--config", str(cfg), "--report-to", base, "--token", operator,
        )
        assert refused.code == 0  # the pass itself is fine
        assert "answered 403" in refused.err  # an operator may not report passes
    assert agent not in (tmp_path / "serve.log").read_text()
