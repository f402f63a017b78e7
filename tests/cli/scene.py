"""A populated store for the command line: what the issue's server held, built through the real parts.

The buckets reconciler ticked on a real SQLite store over real directories: twelve stray directories
its reap breaker (10) holds, a bucket whose directory a file squats (apply_failed, then backoff until
it is parked at the cap), one waiting on its owner, and a row stranded in a status nothing selects.
Seven hosts, one per host state and one whose agent fell silent, each reporting through the app's
intake a report the real verdict made. Tokens, one bound to a host. A local state file holding the
report of a host that is not this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from datum.api.app import create_app
from datum.api.front import tokens
from datum.config import load_settings
from datum.core.vocab import Action, ResourceState
from datum.host import verdict
from datum.host.executor import Outcome
from datum.host.model import Resource
from datum.host.statefile import StateStore
from datum.plugins import load
from datum.providers.file.spec import FileSpec
from datum.reconcile.runner import Runner
from datum.reconcilers import buckets as b
from datum.store import open_store

C, F, B, D, S, P = (
    ResourceState.CONVERGED, ResourceState.FAILED, ResourceState.BLOCKED, ResourceState.DRIFTED,
    ResourceState.SKIPPED, ResourceState.PENDING,
)
REBOOT = "Package[linux-image-amd64] updated, running kernel differs"
SILENT = "db-primary-eu-west-1.example.internal"


def outcomes(states: list[tuple[ResourceState, str | None]]) -> list[Outcome]:
    """One File per state, with a path as long as real ones are, and its why."""
    made = []
    for i, (state, why) in enumerate(states):
        path = f"/etc/app/conf{i}.d/settings.conf"
        made.append(
            Outcome(
                Resource(i, "File", path, FileSpec(path=path)),
                action=Action.UPDATE, state=state, changed=False,
                reason=why if state is not F else None, error=why if state is F else None,
                blocked_by=("File[/etc/app/conf1.d/settings.conf]",) if state is B else None,
            )
        )
    return made


def report(host: str, states: list[tuple[ResourceState, str | None]], *, reboot: str | None = None,
           stopped: str | None = None, finished: datetime | None = None, interval: float | None = None,
           mode: str = "enforce") -> dict[str, Any]:
    """The pass report the real verdict makes of ``states``."""
    made = outcomes(states)
    decided = verdict.decide(made, reboot_reason=reboot, stopped_by=stopped)
    end = finished or datetime.now(UTC) - timedelta(minutes=3)
    need = None
    if reboot:
        need = {"required": True, "reason": reboot, "policy": "manual", "bootId": "b00t",
                "action": "run 'datum reboot' to reboot (reboot_policy manual)"}
    return verdict.report(
        decided, made, host=host, mode=mode, started=(end - timedelta(seconds=2)).isoformat(),
        finished=end.isoformat(), duration=2.0, boot_id="b00t", reboot=need,
        extra={"intervalSeconds": interval} if interval else None,
    )


def reports() -> dict[str, dict[str, Any]]:
    """One host per host state, and one whose agent fell silent five hours ago."""
    return {
        "web1": report("web1", [(C, None), (F, "permission denied: /etc/app/conf1.d/settings.conf"),
                                (B, "blocked by File[/etc/app/conf1.d/settings.conf]")]),
        "web2": report("web2", [(C, None)] * 3),
        "web3": report("web3", [(C, None), (D, "content differs")], mode="observe"),
        "web4": report("web4", [(C, None), (S, "image_mode")]),
        "web5": report("web5", [(C, None)], reboot=REBOOT),
        "web6": report("web6", [(C, None), (P, None), (P, None)], stopped="SIGTERM"),
        SILENT: report(SILENT, [(C, None)], finished=datetime.now(UTC) - timedelta(hours=5), interval=60),
    }


@dataclass
class Scene:
    config: Path
    state_file: Path  # holds web1's report, another machine's
    reports: dict[str, dict[str, Any]]
    tokens: dict[str, str]
    operator: str


def populate(tmp_path: Path) -> Scene:
    root = tmp_path / "buckets"
    root.mkdir()
    config = tmp_path / "datum.toml"
    config.write_text(
        f'store = "sqlite:///{tmp_path / "datum.db"}"\n'
        "[reconcilers.buckets]\n"
        f'root = "{root}"\n'
        'interval = "30s"\n'
        "confirmation_ticks = 2\n"
        "breaker = { restore = 100, reap = 10, align = 100 }\n"
        "backoff = { base_passes = 1, cap_passes = 2 }\n"
        "[server]\nscheduler = false\n"
    )
    settings = load_settings(str(config))
    store = open_store(settings.store_url)
    registry = load().registry()
    try:
        for name in ("alpha", "beta", "gamma", "delta"):
            b.create(store, name)
        (root / "gamma").mkdir()
        (root / "gamma" / "q3.csv").write_text("tenant data")
        b.delete(store, "gamma")
        (root / "delta").write_text("squatter")
        for n in range(12):
            (root / f"stray-{n:02d}").mkdir()
        now = datetime.now(UTC) - timedelta(minutes=10)
        runner = Runner(registry, settings, store, clock=lambda: now)
        for _ in range(8):  # delta fails, backs off, and is parked at the backoff cap (2 passes)
            now += timedelta(seconds=30)
            runner.tick(b.NAME)
        with store.begin() as conn:  # a row in a status nobody selects, owns or finishes: stranded
            conn.execute(sa.update(b.buckets).where(b.buckets.c.name == "alpha").values(status="archiving"))
        made = {"operator": tokens.create(store, "operator")}
        made["web1"] = tokens.create(store, "agent", "web1")
        made["silent"] = tokens.create(store, "agent", SILENT)
        app = create_app(settings, registry, store)
        held = reports()
        client = TestClient(app)
        try:
            for host, doc in held.items():
                own = made["web1"] if host == "web1" else made["silent"] if host == SILENT else None
                auth = {"Authorization": f"Bearer {own or tokens.create(store, 'agent', host)}"}
                r = client.post(f"/v1/hosts/{host}/passes", json=doc, headers=auth)
                assert r.status_code == 201, r.text
        finally:
            client.close()
    finally:
        store.dispose()
    state_file = tmp_path / "web1-agent.db"
    local = StateStore(str(state_file))
    local.record("web1", held["web1"])
    local.close()
    return Scene(config, state_file, held, made, made["operator"])
