"""The fleet server imports no web framework: every module under ``datum.fleet``, imported in a fresh
interpreter, leaves fastapi, starlette and cedarpy out of ``sys.modules`` (``datum.api`` speaks HTTP
for it). A module added under ``datum.fleet`` is imported too: it is found by walking the package."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import datum.fleet

FORBIDDEN = ("fastapi", "starlette", "cedarpy")

PROBE = """
import importlib, json, pkgutil, sys
import datum.fleet
names = sorted(m.name for m in pkgutil.walk_packages(datum.fleet.__path__, "datum.fleet."))
for name in names:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {forbidden})
print(json.dumps({{"modules": names, "loaded": loaded}}))
"""


def test_no_module_of_the_fleet_server_imports_a_web_framework() -> None:
    code = PROBE.format(forbidden=set(FORBIDDEN))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    found = json.loads(done.stdout)
    expected = sorted(m.name for m in pkgutil.walk_packages(datum.fleet.__path__, "datum.fleet."))
    assert found["modules"] == expected and "datum.fleet.server" in expected  # every module, the new ones too
    assert found["loaded"] == [], f"datum.fleet imports {found['loaded']}"


def test_the_contract_fails_when_a_fleet_module_imports_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The probe itself: a module that imports starlette, put under a copy of ``datum.fleet``'s path, is caught."""
    package = tmp_path / "datum" / "fleet"
    package.mkdir(parents=True)
    (package / "leaky.py").write_text("import starlette\n")
    code = (
        "import datum.fleet\n"
        f"datum.fleet.__path__.append({str(package)!r})\n"
        + PROBE.format(forbidden=set(FORBIDDEN)).replace("import datum.fleet\n", "", 1)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    found = json.loads(done.stdout)
    assert "datum.fleet.leaky" in found["modules"] and "starlette" in found["loaded"]
