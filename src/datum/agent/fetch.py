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
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datum.bounded import DEADLINE, Unusable, request
from datum.core.bounds import MAX_ANSWER
from datum.host.remote import issues_in
from datum.trust import Trust

MAX_MANIFEST = MAX_ANSWER  # a served manifest, files included, is at most this by default ([agent] max_answer_bytes)


@dataclass(frozen=True)
class Fetched:
    body: bytes | None  # the server's answer (None: not modified, or not fetched)
    digest: str | None
    why: str | None = None  # why it was not fetched
    held: bool = False  # asked to wait, the server said it holds waits (``Datum-Wait``)
    revision: str | None = None  # the fleet directory's revision the server composed it from (``Datum-Revision``)


WAIT_HEADER = "Datum-Wait"  # the server's word that it held the wait (datum.fleet.changes)
REVISION_HEADER = "Datum-Revision"  # the revision the manifest was composed from (datum.fleet.serving)
_REVISION = re.compile(r"[0-9A-Za-z:+._-]{1,100}")


def revision_of(value: str | None) -> str | None:
    """The ``Datum-Revision`` header when it is one (what a pass report's ``revision`` takes), else None."""
    return value if value is not None and _REVISION.fullmatch(value) else None


def fetch(
    server: str, host: str, token: str, etag: str | None, facts: dict[str, Any], deadline: float = DEADLINE,
    wait: int | None = None, trust: Trust | None = None, limit: int = MAX_MANIFEST,
) -> Fetched:
    """``GET`` this host's manifest: its body within ``deadline`` seconds and ``limit`` bytes, or why not.

    With ``wait`` (seconds), a long poll: the server answers when the manifest no longer matches ``etag``,
    else 304 after ``wait`` seconds (``datum.agent.push``); ``deadline`` then counts from the end of the wait.
    Over https, the server is trusted as ``trust`` says (``datum.trust``).
    """
    url = f"{server.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/manifest"
    path = url if wait is None else f"{url}?wait={wait}"
    headers = {
        "Accept": "application/json",
        "Authorization": f"Bearer {token}",
        "X-Datum-Facts": json.dumps(facts, separators=(",", ":"), default=str),
    }
    if etag:
        headers["If-None-Match"] = f'"{etag}"'
    try:
        answer = request("GET", path, headers, deadline=deadline + (wait or 0), limit=limit, trust=trust)
    except Unusable as exc:
        return Fetched(None, None, str(exc))
    held = wait is not None and answer.headers.get(WAIT_HEADER) is not None
    revision = revision_of(answer.headers.get(REVISION_HEADER))
    if answer.status == 304:
        return Fetched(None, etag, held=held, revision=revision)
    if answer.status != 200:
        return Fetched(None, None, f"{url} answered {answer.status} {answer.reason}{issues_in(answer.body)}")
    return Fetched(answer.body, (answer.headers.get("ETag") or "").strip('"') or None, held=held, revision=revision)


def materialize(body: bytes, base: Path) -> tuple[Any, str]:
    """The validated ``Manifest`` of a served body, with its files under ``base/<digest>``; and its digest.

    A Problem with every finding when it does not validate here, whatever the body holds (JSON
    nested past the parser's depth, a NUL byte or a climbing path in a file name). The caller holds
    the state file's pass lock (``datum.agent.loop.cycle``): unpacking removes every other entry
    of ``base``, which only a pass holding that lock reads.
    """
    from datum.core.findings import ErrorCode, Problem
    from datum.host.manifest import parse_manifest

    try:
        served = json.loads(body)
        digest = str(served["digest"])
        doc = served["manifest"]
        files = served.get("files") or {}
        if not isinstance(doc, dict) or not isinstance(files, dict):
            raise TypeError("'manifest' and 'files' must be objects")
    except RecursionError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, "the server's manifest is not one: it is nested too deeply") from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"the server's manifest is not one: {str(exc)[:200]}") from exc
    if not _DIGEST.fullmatch(digest):  # it names a directory: never '..', '/' or a dot file
        raise Problem.one(ErrorCode.INVALID_INPUT, f"the server's manifest digest is not one: {digest[:80]!r}")
    _names(files)
    where = base / digest.replace(":", "-")
    base_fd = _open_base(base)
    try:
        if not _is_dir(base_fd, where.name):
            _unpack(base_fd, base, where.name, doc, files)
        for old in os.listdir(base_fd):  # keep the one in use
            if old != where.name:
                _remove(base_fd, old)
    finally:
        os.close(base_fd)
    try:
        manifest = parse_manifest(json.dumps(doc), where, f"served manifest {digest}")
    except RecursionError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"served manifest {digest} is nested too deeply") from exc
    _complete(doc, where, digest)
    return manifest, digest


# What the server's digests look like ("sha256:" + hex); anything else is refused before it names a path.
_DIGEST = re.compile(r"[a-z0-9]{1,16}:[0-9a-f]{16,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _names(files: dict[str, Any]) -> None:
    """Refuse every served file name that is not a plain relative path inside the manifest, at once."""
    from datum.core.findings import FieldError, invalid
    from datum.unpack import outside

    wrong = []
    for rel in files:
        parts = rel.split("/")
        if outside(rel):
            wrong.append(FieldError(f"files.{rel[:200]!r}", "names a file outside it"))
        elif _CONTROL.search(rel) or len(rel) > 4096 or any(len(p.encode("utf-8", "replace")) > 255 for p in parts):
            wrong.append(FieldError(f"files.{rel[:200]!r}", "is not a file name (a control character, or too long)"))
        else:
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                wrong.append(FieldError(f"files.{rel[:200]!r}", "is not a file name (not UTF-8)"))
    if wrong:
        shown = "; ".join(f"{e.field[6:]} {e.message}" for e in wrong[:3])
        raise invalid(wrong, f"the server's manifest names a file it cannot hold: {shown}")


def _open_base(base: Path) -> int:
    """``<state>.manifest``, made when missing and opened without following a link: anything that is not
    the agent's own directory there (a link, a file) is refused, and nothing it leads to is touched."""
    from datum.core.findings import ErrorCode, Problem
    from datum.safefs import open_dir

    try:
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
        fd = open_dir(base)
        if os.fstat(fd).st_mode & 0o077:  # what a served manifest holds is root's alone (an older one was 0755)
            os.fchmod(fd, 0o700)
        return fd
    except NotADirectoryError as exc:
        raise Problem.one(
            ErrorCode.UNAVAILABLE,
            f"{base} is not the agent's directory (a link or a file was found there): "
            "refused, and nothing it leads to is read or removed; remove it and the next pass makes its own",
        ) from exc
    except OSError as exc:
        raise Problem.one(ErrorCode.UNAVAILABLE, f"cannot open {base}: {exc.strerror or exc}") from exc


def _is_dir(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _unpack(base_fd: int, base: Path, name: str, doc: dict[str, Any], files: dict[str, Any]) -> None:
    """Write a served manifest's files in ``base/name`` (built aside, renamed in) with the one safe
    unpacker (``datum.unpack``): nothing is written outside ``base``, no link is followed."""
    from datum.core.findings import ErrorCode, Problem
    from datum.safefs import open_dir
    from datum.unpack import Refused, unpack

    members: list[tuple[str, bytes]] = []
    for rel, data in files.items():
        try:
            members.append((rel, base64.b64decode(data, validate=True)))
        except (ValueError, TypeError) as exc:
            raise Problem.one(ErrorCode.INVALID_INPUT, f"the server's file {rel} is not base64: {exc}") from exc
    members.append(("manifest.json", json.dumps(doc).encode()))
    partial = f".{name}.tmp{os.getpid()}"
    try:
        _remove(base_fd, partial)
        os.mkdir(partial, 0o700, dir_fd=base_fd)
        top = open_dir(partial, dir_fd=base_fd)
        try:
            unpack(top, members, MAX_MANIFEST)
        except Refused as exc:  # never, the names checked and the body bounded already: said if it were
            raise Problem.one(ErrorCode.INVALID_INPUT, f"the server's manifest cannot be written under {base}: {exc}") from exc
        finally:
            os.close(top)
        if not _is_dir(base_fd, name):
            _remove(base_fd, name)  # not the agent's: a link is removed, never written through
        try:
            os.rename(partial, name, src_dir_fd=base_fd, dst_dir_fd=base_fd)
        except OSError:  # another agent got there first: the same digest, the same content
            pass
    except OSError as exc:  # a file and a directory of one name, a full disk: said, never a crash
        raise Problem.one(
            ErrorCode.INVALID_INPUT,
            f"the server's manifest cannot be written under {base}: {exc.strerror or exc} ({exc.filename})",
        ) from exc
    finally:
        _remove(base_fd, partial)


def _remove(base_fd: int, name: str) -> None:
    """Remove the entry ``name`` of the directory open at ``base_fd``: a tree through descriptors, a link
    or file unlinked; never following a link, never crossing a mount point; best effort (what cannot be
    removed now is tried again by the next fetch)."""
    from datum.safefs import Appeared, OtherFilesystem, remove_tree, tally

    try:
        if _is_dir(base_fd, name):
            remove_tree(base_fd, name, decided=tally(name, dir_fd=base_fd).entries)
        else:
            os.unlink(name, dir_fd=base_fd)
    except (OSError, Appeared, OtherFilesystem):
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
