"""Fetching this host's effective manifest (``ETag``, 304) and making it runnable on the host.

The server sends the composed manifest as JSON with the files its resources
name (templates, sources) and every file those templates load
(``{% include %}``, ``{% import %}``, ``{% extends %}``); a served manifest
whose templates load a file it does not carry does not validate here. The agent writes them under its state file's
directory (``<state>.manifest/<digest>/``) and validates the manifest there,
as ``datum apply`` would a file.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datum.host.remote import _NoRedirects, issues_of


@dataclass(frozen=True)
class Fetched:
    body: bytes | None  # the server's answer (None: not modified, or not fetched)
    digest: str | None
    why: str | None = None  # why it was not fetched


def fetch(
    server: str, host: str, token: str, etag: str | None, facts: dict[str, Any], timeout: float = 30
) -> Fetched:
    url = f"{server.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/manifest"
    headers = {
        "Accept": "application/json",
        "Authorization": f"Bearer {token}",
        "X-Datum-Facts": json.dumps(facts, separators=(",", ":"), default=str),
    }
    if etag:
        headers["If-None-Match"] = f'"{etag}"'
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.build_opener(_NoRedirects).open(request, timeout=timeout) as response:
            body = response.read()
            return Fetched(body, (response.headers.get("ETag") or "").strip('"') or None)
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return Fetched(None, etag)
        return Fetched(None, None, f"{url} answered {exc.code} {exc.reason}{issues_of(exc)}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Fetched(None, None, f"cannot reach {url}: {getattr(exc, 'reason', exc)}")


def materialize(body: bytes, base: Path) -> tuple[Any, str]:
    """The validated ``Manifest`` of a served body, with its files under ``base/<digest>``; and its digest.

    A Problem with every finding when it does not validate here. The caller holds the state file's
    pass lock (``datum.agent.loop.cycle``): unpacking removes every other entry of ``base``, which
    only a pass holding that lock reads.
    """
    from datum.core.findings import Problem
    from datum.host.manifest import parse_manifest

    try:
        served = json.loads(body)
        digest = str(served["digest"])
        doc = served["manifest"]
        files = served.get("files") or {}
        if not isinstance(doc, dict) or not isinstance(files, dict):
            raise TypeError("'manifest' and 'files' must be objects")
    except (ValueError, KeyError, TypeError) as exc:
        raise Problem.one("INVALID_INPUT", f"the server's manifest is not one: {exc}") from exc
    if not _DIGEST.fullmatch(digest):  # it names a directory: never '..', '/' or a dot file
        raise Problem.one("INVALID_INPUT", f"the server's manifest digest is not one: {digest[:80]!r}")
    where = base / digest.replace(":", "-")
    if not where.is_dir() or where.is_symlink():
        _unpack(base, where, doc, files)
    manifest = parse_manifest(json.dumps(doc), where, f"served manifest {digest}")
    _complete(doc, where, digest)
    return manifest, digest


# What the server's digests look like ("sha256:" + hex); anything else is refused before it names a path.
_DIGEST = re.compile(r"[a-z0-9]{1,16}:[0-9a-f]{16,128}")


def _unpack(base: Path, where: Path, doc: dict[str, Any], files: dict[str, Any]) -> None:
    """Write a served manifest's files under ``where`` (built aside, renamed in), then drop the older ones
    (and what a killed agent left half-built): the pass lock is held, so no other pass reads them.

    Nothing is written outside ``base``: a file named outside the manifest is
    refused, and removal never follows a link (``shutil.rmtree`` refuses one;
    a link or file in ``base`` is unlinked, not followed).
    """
    from datum.core.findings import Problem

    partial = base / f".{where.name}.tmp{os.getpid()}"
    try:
        _remove(partial)
        base.mkdir(mode=0o700, parents=True, exist_ok=True)  # what a served manifest holds is root's alone
        if not base.is_symlink() and base.stat().st_mode & 0o077:
            base.chmod(0o700)  # as an older version left it
        partial.mkdir(mode=0o700)
        inside = partial.resolve()
        for rel, data in files.items():
            target = (partial / rel).resolve() if isinstance(rel, str) else inside
            if target == inside or not target.is_relative_to(inside):
                raise Problem.one("INVALID_INPUT", f"the server's manifest names a file outside it: {rel}")
            try:
                content = base64.b64decode(data, validate=True)
            except (ValueError, TypeError) as exc:
                raise Problem.one("INVALID_INPUT", f"the server's file {rel} is not base64: {exc}") from exc
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_private(target, content)
        _write_private(partial / "manifest.json", json.dumps(doc).encode())
        if where.is_symlink():  # not the agent's: a link is removed, never written through
            where.unlink()
        try:
            partial.rename(where)
        except OSError:  # another agent got there first: the same digest, the same content
            pass
    except OSError as exc:  # a file and a directory of one name, a full disk: said, never a crash
        raise Problem.one(
            "INVALID_INPUT",
            f"the server's manifest cannot be written under {base}: {exc.strerror or exc} ({exc.filename})",
        ) from exc
    finally:
        _remove(partial)
    for old in base.iterdir():  # keep the one in use
        if old != where:
            _remove(old)


def _write_private(path: Path, data: bytes) -> None:
    """``data`` in a new file readable by its owner alone (0600, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _remove(path: Path) -> None:
    """Remove a directory tree, or unlink a link or file; never follow a link; best effort
    (what cannot be removed now is tried again by the next fetch)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def _complete(doc: dict[str, Any], where: Path, digest: str) -> None:
    """Refuse a served manifest whose templates load a file it did not send (or one outside it):
    applied, those resources would fail; the last complete one is applied instead."""
    from datum.core.findings import FieldError, invalid
    from datum.providers.file import template_closure

    templates: list[str] = []
    for item in doc.get("resources") or []:
        body = next(iter(item.values())) if isinstance(item, dict) and len(item) == 1 else None
        rel = body.get("template") if isinstance(body, dict) else None
        if isinstance(rel, str) and rel not in templates:
            templates.append(rel)
    _loaded, problems = template_closure(str(where), templates)
    if problems:
        raise invalid(
            [FieldError(f"template {name}", wrong) for name, wrong in problems],
            f"served manifest {digest}: " + "; ".join(f"template {n}: {w}" for n, w in problems[:3]),
        )
