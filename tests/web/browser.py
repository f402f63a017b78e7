"""Driving the page in a real browser: Playwright with Debian's Chromium, and the screenshots it keeps."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """Debian's Chromium, installed by scripts/setup-browser when missing; skip only if that cannot be done."""
    if not os.access(CHROMIUM, os.X_OK):
        setup = subprocess.run([str(ROOT / "scripts" / "setup-browser")], capture_output=True, text=True)
        if not os.access(CHROMIUM, os.X_OK):
            pytest.skip(f"Chromium cannot be installed here (scripts/setup-browser: {setup.stderr.strip()[-300:]})")
    return CHROMIUM


def browser_context_at(tmp_path: Path, **options: object):  # type: ignore[no-untyped-def]
    """A Chromium context with its own profile under ``tmp_path`` (a generator: the fixture's body)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium()
    profile = tmp_path / "chromium-profile"
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=FLAGS,
            **{"viewport": {"width": 1400, "height": 1000}, **options},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def keep(shot: Path) -> None:
    """A screenshot is a test artifact under the tmp dir; the latest of each is also copied to artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / shot.name)


def sign_in(page, base: str, token: str) -> None:
    page.goto(base)
    page.fill("#token", token)
    page.click("#token-form button[type=submit]")
    page.locator("#summary").wait_for(timeout=10_000)


def next_refresh(page) -> None:
    first = page.inner_text("#status")
    page.wait_for_function("s => document.getElementById('status').textContent !== s", arg=first, timeout=5000)
