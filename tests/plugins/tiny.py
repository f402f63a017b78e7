"""The source of a tiny third-party plugin package, written out by the tests and installed with pip.

One reconciler (``tiny``: files under a root, one of them always jammed, with
its own reason), one resource type (``TinyNote``), its routes under ``/v1/tiny``
and its Cedar fragment; and a second package whose import raises.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

NAME, VERSION = "datum_tiny_plugin", "0.1.0"

ENTRY_POINTS = """\
[datum.reconcilers]
tiny = tiny_plugin:plugin
broken = broken_plugin:plugin

[datum.resources]
TinyNote = tiny_plugin.resource:TinyNote
"""

INIT = '''"""A tiny Datum plugin: everything it uses comes from datum.sdk."""
from datum.sdk import ReconcilerPlugin

plugin = ReconcilerPlugin(
    name="tiny",
    reconciler="tiny_plugin.reconciler:Tiny",
    settings="tiny_plugin.reconciler:TinySettings",
    reasons={"jammed": "the file is jammed; reported, never forced"},
    cedar_schema='action "tiny:Read" in ["read"] appliesTo { principal: [Principal], resource: [Server] };',
    routes="tiny_plugin.routes:router",
    prefix="/v1/tiny",
)
'''

RECONCILER = '''"""Files named in ``want`` exist under ``root``; ``jammed`` ones wait for the plugin's own reason."""
from pathlib import Path

from datum.sdk import Direction, ReconcilerSettings, Waiting


class TinySettings(ReconcilerSettings):
    root: str
    want: list[str] = []
    jammed: list[str] = []


class Tiny:
    name = "tiny"
    items_reported = True
    coverage = None

    def __init__(self, settings, store):
        self.settings = settings
        self.root = Path(settings.root)

    def run(self, ctx):
        self.root.mkdir(parents=True, exist_ok=True)
        desired = dict.fromkeys(self.settings.want, True)
        actual = {p.name: True for p in self.root.iterdir()}
        ctx.converge("note", desired, actual, self.apply)

    def apply(self, direction, name, want, have):
        if name in self.settings.jammed:
            raise Waiting("tiny.jammed", f"{name} is jammed")
        path = self.root / name
        if direction is Direction.REAP:
            path.unlink()
        else:
            path.write_text("note")
'''

ROUTES = '''"""GET /v1/tiny: what the tiny plugin serves."""
from fastapi import APIRouter, Depends

from datum.sdk.http import needs

router = APIRouter(tags=["tiny"])


@router.get("")
def tiny(_p: str = Depends(needs("tiny:Read"))) -> dict:
    return {"plugin": "tiny"}
'''

RESOURCE = '''"""TinyNote[path]: a file holding a note, the tiny plugin's resource type (datum.resources)."""
from dataclasses import dataclass

from datum.sdk import Action, Change, HostPath, PathProvider, Spec


class TinyNoteSpec(Spec):
    path: HostPath
    text: str = "note"


@dataclass(frozen=True)
class Want:
    real: str
    text: str


class TinyNote(PathProvider):
    type = "TinyNote"
    namevar = "path"
    spec = TinyNoteSpec

    def desired(self, name, spec, ctx):
        return Want(ctx.real(spec.path), spec.text)

    def observe(self, want, ctx):
        try:
            with open(want.real) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def plan(self, want, have):
        return Change() if have == want.text else Change(Action.CREATE if have is None else Action.UPDATE)

    def apply(self, want, have, change, ctx):
        with open(want.real, "w") as f:
            f.write(want.text)
'''

BROKEN = '''raise RuntimeError("this plugin is broken on purpose")
'''


FILES = {
    "tiny_plugin/__init__.py": INIT,
    "tiny_plugin/reconciler.py": RECONCILER,
    "tiny_plugin/routes.py": ROUTES,
    "tiny_plugin/resource.py": RESOURCE,
    "broken_plugin/__init__.py": BROKEN,
}


def wheel(out: Path) -> Path:
    """The plugin as a wheel in ``out``."""
    return build(out, NAME, VERSION, FILES, ENTRY_POINTS)


def build(out: Path, name: str, version: str, files: dict[str, str], entry_points: str) -> Path:
    """A wheel of distribution ``name`` in ``out``, built here (a zip and four metadata files: no build backend to fetch)."""
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: datum-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": entry_points,
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return target
