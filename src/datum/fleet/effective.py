"""A host's effective manifest: the manifests its node rules give it, composed, with their ``vars``, validated.

What the server sends (``GET /v1/hosts/{host}/manifest``) is JSON: the
composed manifest, the files its resources name (``template``, ``source``)
and every file those templates load (``{% include %}``, ``{% import %}``,
``{% extends %}``, found by Jinja2's parser; base64) and a digest of both, which is the response's ``ETag`` and the
``manifestDigest`` of the pass reports made from it.

Everything is remembered by the directory's files as they are now (``signature``):
the rules of ``nodes.yaml`` once, each composition once whatever the number of hosts
it serves (its digest and JSON do not depend on the host), and each host's small
entry. A fleet of 10,000 hosts sharing a few compositions costs a few compositions
when the directory changes, not 10,000, and holds one copy of each body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from datum.core import hostreasons
from datum.core.findings import ErrorCode, FieldError, Problem, invalid
from datum.fleet.nodes import NODES, Rules, classify, load_rules


@dataclass(frozen=True, slots=True)
class Effective:
    host: str
    digest: str
    shared: bytes  # the JSON of everything but ``host`` (one object for every host of the composition)
    state: str  # the ``signature`` of the files it was composed from: which revision it is (datum.fleet.revision)

    @property
    def body(self) -> bytes:
        """The JSON the server sends: ``host`` first, then the composition's shared part."""
        return b'{"host":' + json.dumps(self.host).encode() + b"," + self.shared[1:]


def _with_vars(resources: list[Any], variables: dict[str, Any]) -> list[Any]:
    """Each templated resource's ``vars``: the node rules' under its own (its own win)."""
    if not variables:
        return resources
    out = []
    for item in resources:
        if isinstance(item, dict) and len(item) == 1:
            ((key, body),) = item.items()
            if isinstance(body, dict) and "template" in body:
                given = body.get("vars")
                own: dict[str, Any] = given if isinstance(given, dict) else {}
                item = {key: {**body, "vars": {**variables, **own}}}
        out.append(item)
    return out


def compose(directory: Path, manifests: list[str], variables: dict[str, Any], what: str) -> dict[str, Any]:
    """The validated composition of ``manifests`` (paths in ``directory``): ``{"resources": [...]}``.

    A Problem with every finding (include cycles, identities declared twice, any manifest finding).
    """
    from datum.host.include import expand
    from datum.host.manifest import parse_manifest

    directory = directory.resolve()
    doc, found = expand({"include": manifests}, directory / NODES, directory)
    doc["resources"] = _with_vars(doc["resources"], variables)
    if found:
        raise invalid(found, f"the effective manifest of {what} is not valid: {len(found)} findings")
    try:
        parse_manifest(json.dumps(doc), directory, f"the effective manifest of {what}")
    except Problem as problem:
        raise problem from None
    _loaded, problems = _closure(directory, doc)
    if problems:
        raise invalid(
            [FieldError(f"template {name}", wrong) for name, wrong in problems],
            f"the effective manifest of {what}: {len(problems)} findings in its templates",
        )
    return doc


def _closure(directory: Path, doc: dict[str, Any]) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """Every file the resources' templates load ({% include %}, {% import %}, {% extends %}),
    found by Jinja2's parser inside the sandbox's rules, with what is wrong (see ``template_closure``)."""
    from datum.providers.file import template_closure

    templates = []
    for item in doc["resources"]:
        ((_key, body),) = item.items()
        rel = body.get("template") if isinstance(body, dict) else None
        if isinstance(rel, str) and rel not in templates:
            templates.append(rel)
    return template_closure(str(directory), templates)


def _files(directory: Path, doc: dict[str, Any]) -> dict[str, str]:
    """The ``template`` and ``source`` files the resources name and every file those templates
    load, by relative path, base64."""
    files: dict[str, str] = {}
    for item in doc["resources"]:
        ((_key, body),) = item.items()
        for attr in ("template", "source"):
            rel = body.get(attr) if isinstance(body, dict) else None
            if isinstance(rel, str) and rel not in files:
                real = (directory / rel).resolve()
                if real.is_relative_to(directory):
                    files[rel] = base64.b64encode(real.read_bytes()).decode()
    loaded, _problems = _closure(directory, doc)  # none: compose refused them
    for name, real in loaded.items():
        if name not in files:
            files[name] = base64.b64encode(real.read_bytes()).decode()
    return files


_CACHE: dict[tuple[str, str, str, str], Effective] = {}
# Hosts' entries are small (the composition's JSON is shared): a fleet of 10,000 hosts, each with a few
# sets of facts, fits, and never clears it at every change.
_CACHE_MAX = 100_000


# Under ``.git`` only what a commit or a checkout moves: a ``git fetch`` or ``gc`` writing objects for minutes
# is no change of the fleet, and must not keep the directory from holding still.
_GIT_KEPT = ("HEAD", "packed-refs")


def _walk(directory: Path) -> list[str]:
    """Every directory and file under ``directory``, in order (each directory, then its files); of ``.git``,
    ``HEAD``, ``packed-refs`` and ``refs/heads`` alone."""
    paths = []
    for top, dirs, files in os.walk(directory):
        dirs.sort()
        paths.append(top)
        if os.path.basename(top) == ".git" and os.path.dirname(top) == str(directory):
            dirs[:] = ["refs"] if "refs" in dirs else []
            files = [f for f in files if f in _GIT_KEPT]
        elif top == os.path.join(str(directory), ".git", "refs"):
            dirs[:] = ["heads"] if "heads" in dirs else []
            files = []
        paths.extend(os.path.join(top, name) for name in sorted(files))
    return paths


def _stats(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...] | None:
    """Inode, size and mtime of each path (a link's target's; a dangling link's own, as an editor's lock file
    ``.#web.yaml`` is); None when one is gone."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            try:
                st = os.lstat(path)
            except OSError:
                return None
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


# Per fleet directory: the paths of its last walk, their stats then, the signature of that walk, and when
# (``time.monotonic``) this process first saw the files so.
_SEEN: dict[str, tuple[tuple[str, ...], tuple[tuple[int, int, int], ...], str, float]] = {}
_MISSING: dict[str, float] = {}  # per fleet directory found missing: since when (``time.monotonic``)


def _signed(directory: Path) -> tuple[str, float]:
    """``signature``, and since when (``time.monotonic``) this process has seen the files in that state."""
    key = str(directory)
    seen = _SEEN.get(key)
    if seen is not None:
        paths, stats, signature, since = seen
        if _stats(paths) == stats:
            return signature, since
    if not os.path.isdir(directory):  # missing (not made yet, removed, a link to nowhere): a state of its own,
        _SEEN.pop(key, None)  # its walk never remembered, so the walk that finds it made is a change
        since = _MISSING.setdefault(key, time.monotonic())
        return hashlib.sha256(f"no directory at {key}".encode()).hexdigest(), since
    _MISSING.pop(key, None)
    walked = tuple(_walk(directory))
    now = _stats(walked)
    if now is None:  # a file went away during the walk: not remembered, walked again next time
        return hashlib.sha256(os.urandom(16)).hexdigest(), time.monotonic()
    # the signature of exactly the stats compared above: an edit after this stat is another one
    signature = hashlib.sha256(repr((walked, now)).encode()).hexdigest()
    since = time.monotonic()
    if len(_SEEN) >= 100:
        _SEEN.clear()
    _SEEN[key] = (walked, now, signature, since)
    return signature, since


def directory_of(configured: str | os.PathLike[str]) -> Path:
    """The fleet directory the configured path names now, resolved: a link switched to another release is
    followed at the next look (a release deployed beside the old one and the link renamed over is the one way
    to change every file at once). Resolve once per request and pass it on: its files, revisions and
    caches are the resolved directory's.

    Two ``stat`` calls when nothing moved (the manifest's fast answer calls it; ``realpath`` ``lstat``s every
    component): the last resolution holds while the configured path and it still lead to the same directory."""
    key = os.fspath(configured)
    try:
        now = os.stat(key)
        seen = _DIRECTORIES.get(key)
        if seen is not None and seen[1] == (now.st_dev, now.st_ino):
            again = os.stat(seen[0])
            if (again.st_dev, again.st_ino) == seen[1]:
                return seen[0]
    except OSError:  # gone, or not yet there: resolved as it is, nothing remembered
        return Path(os.path.realpath(key))
    resolved = Path(os.path.realpath(key))
    if len(_DIRECTORIES) >= 100:
        _DIRECTORIES.clear()
    _DIRECTORIES[key] = (resolved, (now.st_dev, now.st_ino))  # a switch meanwhile: the next look sees it moved
    return resolved


_DIRECTORIES: dict[str, tuple[Path, tuple[int, int]]] = {}  # configured path: (resolved, its device and inode)


def signature(directory: Path) -> str:
    """Every file of the fleet directory with its size and mtime: any edit is another signature.

    The directory is walked again only when a ``stat`` of what the last walk found differs: a file
    written (size, mtime), replaced (inode) or removed, or a directory whose entries changed (a
    directory's mtime moves when a file or subdirectory is added, removed or renamed in it). So an
    edit is seen by the next request, and a request costs a ``stat`` per path, not a walk and a hash.
    """
    return _signed(directory)[0]


def last_signature(resolved: Path) -> str | None:
    """The signature ``signature`` last computed for ``resolved`` (no ``stat``): what the request that just
    asked for a manifest saw, so what names its revision (``datum.fleet.revision.known``)."""
    seen = _SEEN.get(str(resolved))
    return None if seen is None else seen[2]


def _key(directory: Path, host: str, facts: dict[str, Any], labels: Mapping[str, str]) -> tuple[str, str, str, str]:
    """What an effective manifest is remembered by: ``directory`` (resolved) and its files' state, the host, its facts
    and the labels it was given at enrollment."""
    told = json.dumps([facts, labels], sort_keys=True, default=str) if facts or labels else "{}"
    return (str(directory), host, told, signature(directory))


T = TypeVar("T")

# A read waits until this process has seen the fleet directory's files unmoved for this long: a file written in
# place (truncated, then written: an editor without a rename, a ``cp``, a ``git checkout``) is, for a moment,
# a shorter file that may still validate, and an agent served it would converge to half a manifest. Seen by
# this process's own clock, never inferred from the files' mtimes: those can be ahead (a time copied from
# elsewhere, a file server's clock), behind, or whole seconds coarse.
QUIET = 0.25  # seconds
SETTLE_BY = 5.0  # seconds a directory may keep moving before a read of it is refused (UNAVAILABLE)
# Per fleet directory: when (``time.monotonic``) a read last gave up on it. Within SETTLE_BY of that, a read
# that finds it moving gives up at once: a directory written to without end does not hold a worker thread
# per request for SETTLE_BY each.
_UNSETTLED: dict[str, float] = {}


def _unavailable(resolved: Path) -> str | None:
    """Why nothing can be read from the fleet directory ``resolved`` now, or None: not there (not made yet, removed
    to be cloned again, a link to nowhere), not a directory, or not readable by the server."""
    if not os.path.exists(resolved):
        return hostreasons.fleet_directory(resolved, hostreasons.NOT_THERE)
    if not os.path.isdir(resolved):
        return hostreasons.fleet_directory(resolved, hostreasons.NOT_A_DIRECTORY)
    if not os.access(resolved, os.R_OK | os.X_OK):
        return hostreasons.fleet_directory(resolved, hostreasons.NOT_READABLE)
    return None


def unavailable(configured: Path | None) -> str | None:
    """Why the fleet directory ``[fleet] manifests`` names cannot be served from now, or None (and None without
    one): what the manifest answer refuses with (``503``) and what *Needs a human* says
    (``datum.core.attention``, reason ``fleet_directory_unavailable``). ``/readyz`` does not read it: a server
    without its directory still answers everything else."""
    return None if configured is None else _unavailable(directory_of(configured))


def held_still(resolved: Path, read: Callable[[str], T]) -> tuple[str, T]:
    """``read(state)`` of the fleet directory ``resolved`` made once this process has seen its files hold still
    for ``QUIET``, and not moved while they were read, with ``state``, their ``signature`` then. Every read that
    names or serves what the directory holds (a composition, its rules, a revision, a revision's snapshot) goes
    through here, so none is made of a file being written (by a writer that does not pause for longer than
    ``QUIET``). A read that fails (a file cut mid-line does not validate) is made again when the files moved
    meanwhile. A directory that keeps moving for ``SETTLE_BY`` is a Problem UNAVAILABLE: the agent keeps what
    it has and asks again. So is a directory that is not there (not made yet, removed to be cloned
    again, a link to nowhere): never a composition remembered from before it went."""
    key = str(resolved)
    why = _unavailable(resolved)
    if why is not None:
        raise Problem.one(
            ErrorCode.UNAVAILABLE, f"{why}: nothing is served from it until it is there; the host keeps the manifest it has",
        )
    start = time.monotonic()
    gave_up = _UNSETTLED.get(key)
    deadline = start if gave_up is not None and start - gave_up < SETTLE_BY else start + SETTLE_BY
    while True:
        state, since = _signed(resolved)
        wait = QUIET - (time.monotonic() - since)
        if wait <= 0:
            try:
                out = read(state)
            except (Problem, OSError):
                if signature(resolved) == state:
                    raise  # what the still files say
            else:
                if signature(resolved) == state:
                    _UNSETTLED.pop(key, None)
                    return state, out
            wait = QUIET / 5  # moved while it was read: looked at again shortly, never in a busy loop
        if time.monotonic() + wait > deadline:
            _UNSETTLED[key] = time.monotonic()
            raise Problem.one(ErrorCode.UNAVAILABLE, f"the fleet directory {resolved} did not hold still for {QUIET} s")
        time.sleep(wait)


def effective(directory: Path, host: str, facts: dict[str, Any], labels: Mapping[str, str] | None = None) -> Effective:
    """``host``'s effective manifest (``labels``: those it was given at enrollment); NOT_FOUND when no rule matches
    it, INVALID_INPUT with every finding.

    Remembered per (directory, host, facts, labels) until a file of the directory changes (size or mtime);
    composed through ``held_still``.
    """
    directory = directory.resolve()
    labels = labels or {}
    key = _key(directory, host, facts, labels)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    state, found = held_still(
        directory, lambda state: _CACHE.get((*key[:3], state)) or _effective(directory, host, facts, state, labels)
    )
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[(*key[:3], state)] = found
    return found


def remembered(resolved: Path, host: str, facts: dict[str, Any], labels: Mapping[str, str] | None = None) -> Effective | None:
    """``effective`` when it is remembered for the directory's files as they are now, else None; never
    composes. ``resolved`` is the fleet directory already resolved. Costs a ``stat`` per file of the
    directory (a handful), no read: the manifest fast path calls it on the event loop."""
    return _CACHE.get(_key(resolved, host, facts, labels or {}))


def forget_all_but(resolved: Path, now: str) -> None:
    """Drop what is remembered of ``resolved`` for any state of its files but ``now`` (its ``signature``):
    after an edit, the older entries would only be found again if the edit were undone exactly."""
    where = str(resolved)
    caches: tuple[dict[Any, Any], ...] = (_CACHE, _RULES, _COMPOSED)
    for cache in caches:
        for key in list(cache):  # a copy: worker threads add entries meanwhile
            if key[0] == where and key[-1] != now:
                cache.pop(key, None)


# Per (directory, signature): the rules of its nodes.yaml. Per (directory, manifests, vars, signature):
# the composition's digest and shared JSON.
_RULES: dict[tuple[str, str], Rules] = {}
_COMPOSED: dict[tuple[str, tuple[str, ...], str, str], tuple[str, bytes]] = {}


def rules_now(directory: Path, state: str | None = None) -> Rules:
    """``directory``'s (resolved) ``nodes.yaml`` (its rules, labels and ``reboot_order``) for its files as they
    are now (``state``: their ``signature``, given by a read ``held_still`` makes; else read here through it),
    read once per state; a Problem when it does not validate."""
    where = str(directory)

    def read(now: str) -> Rules:
        kept = _RULES.get((where, now))  # an empty Rules is falsy: None tells "not read yet"
        return load_rules(directory) if kept is None else kept

    if state is None:
        known = _RULES.get((where, signature(directory)))
        if known is not None:
            return known
        state, rules = held_still(directory, read)
    else:
        rules = read(state)
    if len(_RULES) >= 100:
        _RULES.clear()
    _RULES[(where, state)] = rules
    return rules


def _effective(directory: Path, host: str, facts: dict[str, Any], state: str, labels: Mapping[str, str]) -> Effective:
    where = str(directory)
    rules = rules_now(directory, state)
    manifests, variables, _matched = classify(rules, host, facts, labels)
    if not manifests:
        raise Problem.one(ErrorCode.NOT_FOUND, f"no rule of {NODES} matches host {host!r}")
    told = json.dumps(variables, sort_keys=True, default=str)
    key = (where, tuple(manifests), told, state)
    composed = _COMPOSED.get(key)
    if composed is None:  # a composition that does not validate is not remembered: its findings name the host
        doc = compose(directory, manifests, variables, f"host {host!r}")
        files = _files(directory, doc)
        canonical = json.dumps({"manifest": doc, "files": files}, sort_keys=True, separators=(",", ":"))
        digest = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
        shared = {"digest": digest, "manifests": manifests, "manifest": doc, "files": files}
        composed = (digest, json.dumps(shared, separators=(",", ":")).encode())
        if len(_COMPOSED) >= 1_000:
            _COMPOSED.clear()
        _COMPOSED[key] = composed
    return Effective(host, composed[0], composed[1], state)


def check_fleet(directory: Path) -> tuple[int, int]:
    """Validate ``nodes.yaml`` and every rule's composition at once: (rules, manifests), or a Problem."""
    directory = directory.resolve()
    rules = load_rules(directory)
    found: list[FieldError] = []
    seen: set[str] = set()
    for rule in rules:
        seen.update(rule.manifests)
        if not rule.manifests:  # a rule that gives only a reboot group
            continue
        try:
            compose(directory, list(rule.manifests), rule.vars, f"{NODES} nodes[{rule.index}]")
        except Problem as problem:
            for finding in problem.findings:
                fields = finding.fields or (FieldError("", finding.message),)
                found.extend(FieldError(f"nodes[{rule.index}]: {f.field}", f.message) for f in fields)
    if found:
        raise invalid(found, f"the fleet in {directory} is not valid: {len(found)} findings")
    return len(rules), len(seen)
