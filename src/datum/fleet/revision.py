"""The fleet directory's revision: what names one state of the manifests a server serves.

A revision is one state of the ``[fleet] manifests`` directory (``nodes.yaml``,
the manifests, included files and templates). Its id:

- the directory's git commit (``git rev-parse HEAD``, 40 hex digits) when the
  directory is in a git work tree and nothing under it differs from that commit;
- ``<commit>+dirty.<12 hex>`` when it is in a git work tree with changes under
  it (modified, added or untracked files, ``git status``): the hex is the start
  of the content digest below, so two different uncommitted edits are two revisions;
- ``sha256:<hex>`` when it is not in a git work tree (or git is not installed):
  the digest of every file's path and content (``.git`` left out).

"The directory changed" has one truth, ``datum.fleet.effective.signature`` (a
``stat`` per path): the revision is computed again only when the signature
moves, and remembered per signature, so a request costs no read. Computing it
reads every file once (and runs git twice): never on the event loop (``known``
is what the loop may call).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from datum.fleet.effective import held_still, last_signature, signature

GIT_TIMEOUT = 10.0  # seconds a git command may take before the directory is named by its digest alone
MAX_ID = 100  # the longest revision id (a report's ``revision``)


@dataclass(frozen=True, slots=True)
class Revision:
    id: str
    commit: str | None = None  # the git commit, when the directory is in a git work tree
    dirty: bool = False  # the work tree differs from ``commit`` under the directory


# Per resolved fleet directory: the signature it was computed for, and the revision.
_KNOWN: dict[str, tuple[str, Revision]] = {}


def known(resolved: Path) -> Revision | None:
    """The revision of ``resolved`` (already resolved) when it is remembered for its files as the last
    ``signature`` of them saw them, else None; no ``stat``, no read: the manifest's answers call it on the
    event loop right after the lookup of the manifest itself took that signature."""
    seen = _KNOWN.get(str(resolved))
    if seen is None or seen[0] != last_signature(resolved):
        return None
    return seen[1]


def revision(directory: Path) -> Revision:
    """The revision of the fleet directory's files as they are now (remembered until its signature moves)."""
    resolved = directory.resolve()
    now = signature(resolved)  # before reading: an edit meanwhile is another signature, read again next time
    seen = _KNOWN.get(str(resolved))
    if seen is not None and seen[0] == now:
        return seen[1]
    now, found = held_still(resolved, lambda _state: name(resolved))  # never a revision of a file half written
    if len(_KNOWN) >= 100:
        _KNOWN.clear()
    _KNOWN[str(resolved)] = (now, found)
    return found


def named_for(resolved: Path, state: str) -> Revision | None:
    """The revision named for the files in ``state`` (a ``signature``) when it is the last one named, else None."""
    seen = _KNOWN.get(str(resolved))
    return seen[1] if seen is not None and seen[0] == state else None


def still_named(resolved: Path, found: Revision) -> str | None:
    """The ``signature`` ``found`` was named for when the directory's files still are in that state, else None
    (they moved on since: ``found`` is no longer what the directory holds)."""
    seen = _KNOWN.get(str(resolved))
    if seen is None or seen[1] != found or signature(resolved) != seen[0]:
        return None
    return seen[0]


def name(resolved: Path) -> Revision:
    """The revision of ``resolved`` computed now, nothing remembered."""
    digest = content_digest(resolved)
    commit = _git(resolved, "rev-parse", "--verify", "-q", "HEAD")
    if commit is None or len(commit) not in (40, 64) or not all(c in "0123456789abcdef" for c in commit):
        return Revision("sha256:" + digest)
    changes = _git(resolved, "--no-optional-locks", "status", "--porcelain", "--untracked-files=normal", "--", ".")
    if changes is None:
        return Revision("sha256:" + digest)
    if changes:
        return Revision(f"{commit}+dirty.{digest[:12]}", commit, True)
    return Revision(commit, commit)


def content_digest(resolved: Path) -> str:
    """SHA-256 of every file under ``resolved`` (its path relative to it, then its bytes), ``.git`` left out."""
    h = hashlib.sha256()
    for top, dirs, files in os.walk(resolved):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for file in sorted(files):
            path = os.path.join(top, file)
            rel = os.path.relpath(path, resolved).encode("utf-8", "surrogateescape")
            try:
                with open(path, "rb") as f:
                    content = f.read()
            except OSError:  # gone or unreadable: named by its path alone (the signature sees it change)
                content = b""
            h.update(len(rel).to_bytes(8, "big") + rel + len(content).to_bytes(8, "big") + content)
    return h.hexdigest()


def commit_of(revision_id: str) -> str | None:
    """The git commit a revision id names (``<commit>`` or ``<commit>+dirty.<digest>``), None for a digest."""
    commit = revision_id.split("+", 1)[0]
    return commit if len(commit) in (40, 64) and all(c in "0123456789abcdef" for c in commit) else None


def ancestor_of(resolved: Path, ours: Revision, theirs: str) -> bool:
    """Whether the directory's commit is a strict ancestor of revision ``theirs``'s (a checkout that lags behind
    a commit it has fetched: a failed pull); False when either is no commit, or git cannot tell (``theirs`` not
    fetched here): proven ancestry only, never a guess."""
    return _strictly_before(resolved, ours.commit, commit_of(theirs))


def descends_from(resolved: Path, ours: Revision, theirs: str) -> bool:
    """Whether revision ``theirs``'s commit is a strict ancestor of the directory's (the directory moved on from
    it, whatever the order the store first saw the two in); proven ancestry only, as ``ancestor_of``."""
    return _strictly_before(resolved, commit_of(theirs), ours.commit)


def _strictly_before(resolved: Path, older: str | None, newer: str | None) -> bool:
    if older is None or newer is None or older == newer:
        return False
    return _git(resolved, "merge-base", "--is-ancestor", older, newer) is not None


def _git(where: Path, *args: str) -> str | None:
    """git's output in ``where`` (stripped), or None when git is missing, refuses or takes too long."""
    if args[0] == "--no-optional-locks":
        command = ["git", args[0], "-C", str(where), *args[1:]]
    else:
        command = ["git", "-C", str(where), *args]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(  # noqa: S603 - fixed arguments, no shell
            command, capture_output=True, text=True, timeout=GIT_TIMEOUT, env=env, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()
