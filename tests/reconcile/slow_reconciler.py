"""A test reconciler whose applies are slow and observable, in-process or as ``datum`` in a subprocess.

Its substrate is a folder: ``ROOT/desired.json`` lists the item names wanted,
``ROOT/items/NAME`` exist. An apply appends ``applying NAME`` to
``ROOT/progress``, waits ``delay`` seconds (``SLOW_DELAY`` overrides), creates
the item, then writes its status through ``ctx.begin()`` (one more ``writes``
in ``slow_status``) and appends ``applied NAME``. Every executed pass appends
its tick time and pid to ``ROOT/passes``, waits ``pass_delay`` seconds, and
holds ``flock`` on ``ROOT/inpass.lock`` while it runs: a pass that finds it
taken appends to ``ROOT/overlaps`` (two passes at once).

Run as a script it is the ``datum`` command with this reconciler registered:
``python slow_reconciler.py reconcile slow --config FILE``.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from datum.config import ReconcilerSettings
from datum.core.vocab import Direction
from datum.reconcile import Registry

NAME = "slow"

status_rows = sa.MetaData()
slow_status = sa.Table(
    "slow_status",
    status_rows,
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("writes", sa.Integer, nullable=False),
)


class SlowSettings(ReconcilerSettings):
    root: str
    delay: float = 0.0
    pass_delay: float = 0.0


class Slow:
    name = NAME
    items_reported = True
    coverage = None
    # In-process tests: called with (pass context, item name) before an apply acts.
    on_apply = None
    # In-process tests: False leaves the status writes out (only the runner writes).
    write_status = True

    def __init__(self, settings: SlowSettings, store):
        self.root = Path(settings.root)
        self.delay = float(os.environ.get("SLOW_DELAY", settings.delay))
        self.pass_delay = settings.pass_delay
        store.ensure(status_rows)

    def run(self, ctx):
        with open(self.root / "inpass.lock", "a") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with open(self.root / "overlaps", "a") as f:
                    f.write(f"{os.getpid()} {ctx.now.isoformat()}\n")
            self._run(ctx)

    def _run(self, ctx):
        with open(self.root / "passes", "a") as f:
            f.write(f"{ctx.now.isoformat()} {os.getpid()}\n")
        time.sleep(self.pass_delay)
        want = json.loads((self.root / "desired.json").read_text())
        items = self.root / "items"
        items.mkdir(exist_ok=True)
        actual = {p.name: True for p in items.iterdir()}

        def apply(direction, key, desired, have):
            self._log(f"applying {key}")
            if Slow.on_apply is not None:
                Slow.on_apply(ctx, key)
            time.sleep(self.delay)
            if direction is Direction.REAP:
                (items / key).unlink()
            else:
                (items / key).touch()
            if not Slow.write_status:
                return
            with ctx.begin() as conn:
                done = conn.execute(
                    sa.update(slow_status)
                    .where(slow_status.c.name == key)
                    .values(writes=slow_status.c.writes + 1)
                )
                if done.rowcount == 0:
                    conn.execute(sa.insert(slow_status).values(name=key, writes=1))
            self._log(f"applied {key}")

        ctx.converge("item", dict.fromkeys(want, True), actual, apply)

    def _log(self, line):
        with open(self.root / "progress", "a") as f:
            f.write(line + "\n")
            f.flush()


def registry() -> Registry:
    from datum.plugins import load

    r = load().registry()
    r.register(NAME, Slow, SlowSettings)
    return r


def with_slow_plugin() -> None:
    """Make this process's plugins the installed ones plus this reconciler (as a plugin would be)."""
    import dataclasses

    from datum.plugins import ReconcilerPlugin, load, loader

    loaded = load()
    plugin = ReconcilerPlugin(name=NAME, reconciler=Slow, settings=SlowSettings)
    loader._loaded = dataclasses.replace(loaded, plugins=(*loaded.plugins, plugin))


def writes(store) -> dict[str, int]:
    """How many status writes each item got."""
    store.ensure(status_rows)
    with store.connect() as conn:
        return dict(conn.execute(sa.select(slow_status.c.name, slow_status.c.writes)).all())


def setup(root: Path, store_url: str, items, **section) -> Path:
    """The substrate folder and a configuration file naming it; returns the configuration's path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "desired.json").write_text(json.dumps(list(items)))
    values = {"root": str(root), "confirmation_ticks": 1, **section}
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
    config = root / "datum.toml"
    config.write_text(f"store = {json.dumps(store_url)}\n\n[reconcilers.{NAME}]\n{body}\n")
    return config


def progress(root: Path) -> list[str]:
    try:
        return (root / "progress").read_text().splitlines()
    except FileNotFoundError:
        return []


if __name__ == "__main__":
    with_slow_plugin()
    from datum.cli.main import main

    main(sys.argv[1:])
