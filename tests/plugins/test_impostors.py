"""Names are owned: impostor plugins installed with pip into a real environment, in front of Datum and behind it.

Installed into one directory with ``pip install --target``: a distribution
that declares a reconciler named ``buckets`` (with routes under Datum's
``/v1/buckets``), one that mounts routes under ``/v1/buckets/steal``, one
whose Cedar fragment redeclares ``buckets:Write``, one that declares the
resource type ``File``; and two unrelated distributions that both declare a
reconciler ``twin`` and a resource type ``TwinNote``. The directory is put
before Datum on ``sys.path`` (``PYTHONPATH``) and after it (a ``.pth`` file
read after Datum's): in both orders Datum's own keep their names, the
impostors are refused and named with why, and neither twin is loaded.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from . import tiny
from .test_plugin_in_a_venv import TOKEN, free_port

ROUTER = """
from fastapi import APIRouter

router = APIRouter()


@router.get("")
def taken() -> dict:
    return {"impostor": True}


@router.get("/steal")
def steal() -> dict:
    return {"impostor": True}
"""

IMPOSTOR = '''"""Reconcilers that try to take what is Datum's."""
from datum.sdk import ReconcilerPlugin


class R:
    def __init__(self, settings, store):
        pass

    def run(self, ctx):
        pass


buckets = ReconcilerPlugin(name="buckets", reconciler=R, routes="impostor_pkg.routes:router", prefix="/v1/buckets")
squatter = ReconcilerPlugin(name="squatter", reconciler=R, routes="impostor_pkg.routes:router", prefix="/v1/buckets/steal")
forger = ReconcilerPlugin(
    name="forger", reconciler=R, routes="impostor_pkg.routes:router", prefix="/v1/forger",
    cedar_schema='action "buckets:Write" in ["write"] appliesTo { principal: [Principal], resource: [Server] };',
)
'''

FILE_IMPOSTOR = '''"""A File type that writes something else."""
from datum.providers.file import FileProvider


class File(FileProvider):
    def apply(self, want, have, change, ctx):
        raise RuntimeError("the impostor File ran")
'''

TWIN = '''"""One of two unrelated distributions that both declare ``twin``."""
from datum.sdk import ReconcilerPlugin


class R:
    def __init__(self, settings, store):
        pass

    def run(self, ctx):
        pass


plugin = ReconcilerPlugin(name="twin", reconciler=R)
'''


def wheels(out: Path) -> list[Path]:
    return [
        tiny.build(out, "datum_impostor", "6.6.6", {
            "impostor_pkg/__init__.py": IMPOSTOR, "impostor_pkg/routes.py": ROUTER, "impostor_pkg/files.py": FILE_IMPOSTOR,
        }, "[datum.reconcilers]\nbuckets = impostor_pkg:buckets\nsquatter = impostor_pkg:squatter\n"
           "forger = impostor_pkg:forger\n\n[datum.resources]\nFile = impostor_pkg.files:File\n"),
        *(tiny.build(out, f"datum_twin_{x}", "1.0", {f"twin_{x}/__init__.py": TWIN},
                     f"[datum.reconcilers]\ntwin = twin_{x}:plugin\n\n[datum.resources]\nTwinNote = twin_{x}:Nope\n")
          for x in "ab"),
    ]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> tuple[Path, Path]:
    """A venv that sees this checkout's Datum, and the impostors installed by pip into a directory
    that a ``.pth`` puts after Datum (``PYTHONPATH`` puts it before)."""
    root = tmp_path_factory.mktemp("impostors")
    venv, target = root / "venv", root / "impostors"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = list(Path(venv / "lib").glob("python*/site-packages"))
    (purelib / "datum-host.pth").write_text(f"import site; site.addsitedir({site.getsitepackages()[0]!r})\n")
    (purelib / "zz-impostors.pth").write_text(f"{target}\n")  # read after datum-host.pth
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check",
         "--target", str(target), *map(str, wheels(root / "dist"))],
        check=True, capture_output=True, text=True,
    )
    return venv, target


ORDERS = ["impostors-first", "datum-first"]


def environ(env: tuple[Path, Path], order: str, home: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if order == "impostors-first":
        out["PYTHONPATH"] = str(env[1])
    out["DATUM_HOME"] = str(home)
    return out


def datum(env: tuple[Path, Path], order: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env[0] / "bin" / "python"), "-c", "from datum.cli.main import main; main()", *args],
        capture_output=True, text=True, env=environ(env, order, home), timeout=60,
    )


def config(tmp_path: Path) -> Path:
    import hashlib

    cfg = tmp_path / "datum.toml"
    cfg.write_text(
        f'store = "sqlite:///{tmp_path / "datum.db"}"\n'
        f'[server]\ntokens = {{ operator = ["sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()}"] }}\n'
        f'[reconcilers.buckets]\nroot = "{tmp_path / "buckets"}"\n'
    )
    return cfg


@pytest.mark.parametrize("order", ORDERS)
def test_the_order_on_the_path_decides_nothing_the_impostors_are_refused_and_named(env, tmp_path, order):
    probe = subprocess.run(
        [str(env[0] / "bin" / "python"), "-c", "import sys; from importlib.metadata import distribution as d; "
         "print(sys.path.index(str(d('datum-impostor')._path.parent)) < sys.path.index(str(d('datum')._path.parent)))"],
        capture_output=True, text=True, env=environ(env, order, tmp_path), check=False,
    )
    assert probe.stdout.strip() == str(order == "impostors-first"), probe.stderr  # the order is as named
    done = datum(env, order, tmp_path, "reconcilers", "--json", "--config", str(config(tmp_path)))
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    rows = {r["name"]: r for r in listed}
    assert sorted(r["name"] for r in listed) == ["buckets", "forger", "hosts", "pg_roles", "squatter", "twin"]  # one row each
    assert "error" not in rows["buckets"]  # Datum's, loaded, not shown broken beside its impostor
    assert "the prefix /v1/buckets/steal collides with Datum's own" in rows["squatter"]["error"]
    twin = rows["twin"]["error"]
    assert twin.count("neither is loaded") == 2 and "datum-twin-a declares the name twin, as does twin_b:plugin from datum-twin-b" in twin, twin
    assert "plugin buckets (impostor_pkg:buckets) not loaded: the name buckets collides with Datum's own" in done.stderr
    # The resource types: Datum's File applies; TwinNote is neither's, named with both.
    schema = datum(env, order, tmp_path, "schema")
    assert "File" in json.loads(schema.stdout)["$defs"] and "TwinNote" not in json.loads(schema.stdout)["$defs"]
    assert "the resource type File collides with Datum's own (datum.providers.file:FileProvider): datum-impostor may not take it" in schema.stderr
    assert "datum-twin-a declares the resource type TwinNote, as does twin_b:Nope from datum-twin-b" in schema.stderr
    manifest, root = tmp_path / "m.yaml", tmp_path / "root"
    manifest.write_text("resources:\n  - File[/hello.txt]:\n      content: hi\n")
    root.mkdir()
    applied = datum(env, order, tmp_path, "apply", str(manifest), "--root", str(root), "--state", str(tmp_path / "s.db"))
    assert applied.returncode == 2 and (root / "hello.txt").read_text() == "hi", applied.stdout + applied.stderr


@pytest.mark.parametrize("order", ORDERS)
def test_the_server_serves_datums_routes_and_reports_every_impostor(env, tmp_path, order):
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(env[0] / "bin" / "python"), "-c", "from datum.cli.main import main; main()",
             "serve", "--config", str(config(tmp_path)), "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, env={**environ(env, order, tmp_path), "PYTHONUNBUFFERED": "1"},
        )
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {TOKEN}"}
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                answer = httpx.get(f"{base}/v1/buckets", headers=auth)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert answer.status_code == 200 and answer.json() == [], answer.text  # Datum's buckets, empty
        assert httpx.get(f"{base}/v1/buckets/steal", headers=auth).status_code != 200
        assert httpx.get(f"{base}/v1/forger", headers=auth).status_code == 404  # its fragment is refused
        metrics = httpx.get(f"{base}/metrics", headers=auth).text
        broken = {line.split('"')[1] for line in metrics.splitlines() if line.startswith("datum_plugin_broken{")}
        assert broken == {"squatter", "twin", "forger"}, broken
        paths = httpx.get(f"{base}/openapi.json").json()["paths"]
        assert "/v1/buckets/steal" not in paths and "/v1/forger" not in paths
        assert "Cedar schema fragment of forger collides with Datum's own" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
