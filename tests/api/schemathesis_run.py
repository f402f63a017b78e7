"""schemathesis, every check, against a real ``datum serve`` on loopback over a populated store.

The suite's test (``test_schemathesis_live.py``) runs it small; ``scripts/schemathesis``
runs it bigger, on SQLite or PostgreSQL::

    ./scripts/schemathesis [--max-examples N] [--seed S] [--store postgresql://...]

The store holds the buckets story (backoff, a tripped breaker, a stranded
status), hosts in every state, and a fleet directory, so the generated cases
reach the handlers, not only their refusals. Requests carry the ``admin``
token (every action allowed). The schemathesis command line is run as anyone
would run it (``schemathesis run --checks all``), with the hooks of
``schemathesis_hooks.py`` and the configuration of ``schemathesis.toml``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):  # run as a script: the tests' package, as pytest imports it
    sys.path.insert(0, str(HERE.parent))
    __package__ = "api"

from datum.config import RolloutSettings  # noqa: E402

from .story import build_story, config_file, pass_report, play, serve_fleet, serving  # noqa: E402

HOOKS = HERE / "schemathesis_hooks.py"
CONFIG = HERE / "schemathesis.toml"
KEPT_PASS = "3f2b8c1e-0d5a-4c7e-9b61-5a0e7d2c4f18"  # as schemathesis.toml names it


def _converged(host: str) -> dict[str, object]:
    return pass_report(host, "converged") | {
        "exitCode": 0, "counts": {"converged": 1}, "intervalSeconds": 60,
        "resources": [{"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"}],
    }


def populated(tmp: Path, store: str | None = None) -> tuple[Path, str]:
    """A store and fleet directory to serve: the ``datum serve`` configuration file and an admin token."""
    story = build_story(tmp, store)
    play(story)
    # a pass kept by a known id: schemathesis.toml names it for the single-pass read
    story.client.post("/v1/hosts/web1/passes", json=pass_report() | {"passId": KEPT_PASS}, headers=story.agent("web1"))
    story.client.post("/v1/hosts/web2/passes", json=_converged("web2"), headers=story.agent("web2"))
    awaiting = _converged("db1") | {
        "state": "awaiting-reboot", "reason": "Package[linux-image] updated, running kernel differs",
        "reboot": {"required": True, "policy": "manual", "reason": "kernel 6.1.0-9 in /boot, running 6.1.0-8",
                   "action": "run 'datum reboot' to reboot (reboot_policy manual)"},
    }
    story.client.post("/v1/hosts/db1/passes", json=awaiting, headers=story.agent("db1"))
    fleet = serve_fleet(story, tmp / "fleet", rule="*")  # every host has a manifest
    # a staged rollout under way, so pause, resume and abort reach their handlers (200 or 409, not 404)
    state = story.app.state.datum
    rollout = RolloutSettings(canary=["web1"])
    state.settings = state.settings.model_copy(
        update={"fleet": state.settings.fleet.model_copy(update={"rollout": rollout})}
    )
    story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))  # the first revision: stable at once
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/motd]:\n      content: changed\n")
    story.client.get("/v1/hosts/web1/manifest", headers=story.agent("web1"))  # the second: rolling
    token = story.tokens["admin"]
    story.client.close()
    story.store.dispose()
    cfg = config_file(tmp, scheduler=False)
    if store is not None:
        cfg.write_text(cfg.read_text().replace(cfg.read_text().splitlines()[0], f'store = "{store}"', 1))
    cfg.write_text(cfg.read_text() + f'[fleet]\nmanifests = "{fleet}"\n[fleet.rollout]\ncanary = ["web1"]\n')
    return cfg, token


def run(
    base: str, token: str, *, examples: int, seed: int, cwd: Path, workers: int = 1, extra: Sequence[str] = (),
    cfg: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``schemathesis run --checks all`` against ``base`` (and ``extra`` options); its output and exit code.

    It runs in ``cwd``, where schemathesis leaves its ``.schemathesis`` directory. With ``cfg`` (what ``base``
    serves) its hooks reach the served store (``schemathesis_hooks.STORE``).
    """
    from datum.config import load_settings

    store = {"DATUM_SCHEMATHESIS_STORE": load_settings(cfg).store_url} if cfg is not None else {}
    schemathesis = Path(sys.executable).with_name("schemathesis")
    return subprocess.run(
        [
            str(schemathesis), "--config-file", str(CONFIG), "run", f"{base}openapi.json",
            "--checks", "all",
            "--header", f"Authorization: Bearer {token}",
            "--max-examples", str(examples),
            "--seed", str(seed),
            "--workers", str(workers),
            "--no-color",
            *extra,
        ],
        capture_output=True, text=True, timeout=1800, cwd=cwd,
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), **store},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--store", help="a PostgreSQL URL (an empty database); default: SQLite in a temporary directory")
    args, extra = parser.parse_known_args(argv)  # the rest goes to schemathesis (--phases fuzzing, ...)
    with tempfile.TemporaryDirectory(prefix="datum-schemathesis-") as tmp:
        cfg, token = populated(Path(tmp), args.store)
        with serving(cfg, Path(tmp) / "serve.log") as base:
            done = run(
                base, token, examples=args.max_examples, seed=args.seed, cwd=Path(tmp), workers=args.workers,
                extra=extra, cfg=cfg,
            )
    print(done.stdout + done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
