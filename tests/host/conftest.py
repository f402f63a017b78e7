"""End-to-end helpers: a sandbox root, a manifest writer, and ``datum`` run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DATUM = str(Path(sys.executable).with_name("datum"))


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)

    def line(self, resource_id: str) -> str:
        """The pass line of ``resource_id``: what follows the id."""
        for line in self.out.splitlines():
            if line.startswith(resource_id + " "):
                return line[len(resource_id) :].strip()
        raise AssertionError(f"no pass line for {resource_id} in:\n{self.out}")

    def field(self, name: str) -> str:
        for line in self.out.splitlines():
            if line.startswith(f"{name}:"):
                return line.split(":", 1)[1].strip()
        raise AssertionError(f"no {name}: line in:\n{self.out}")


@dataclass
class Host:
    """A sandbox: a root directory, a manifest directory, a state file and a boot id file."""

    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state.db"

    @property
    def boot_id(self) -> Path:
        return self.base / "boot_id"

    @property
    def config(self) -> Path:
        return self.base / "datum.toml"

    def manifest(self, text: str, name: str = "manifest.yaml") -> Path:
        path = self.base / name
        path.write_text(text)
        return path

    def configure(self, text: str) -> None:
        self.config.write_text(text)

    def reboot(self, boot_id: str) -> None:
        self.boot_id.write_text(boot_id + "\n")

    def datum(self, *args: str, timeout: float = 120) -> Run:
        env = {
            **os.environ,
            "DATUM_HOME": str(self.base / "home"),
            "DATUM_BOOT_ID_FILE": str(self.boot_id),
            "DATUM_CONFIG": str(self.config) if self.config.exists() else "",
        }
        if not env["DATUM_CONFIG"]:
            del env["DATUM_CONFIG"]
        done = subprocess.run([DATUM, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)
        return Run(done.returncode, done.stdout, done.stderr)

    def apply(self, manifest: Path, *args: str) -> Run:
        return self.datum("apply", str(manifest), "--root", str(self.root), "--state", str(self.state), *args)

    def status(self, *args: str) -> Run:
        return self.datum("status", "--state", str(self.state), *args)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    h = Host(tmp_path)
    h.root.mkdir()
    h.reboot("boot-1")
    return h
