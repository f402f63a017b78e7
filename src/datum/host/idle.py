"""The idle pass: when nothing changed, prove it with probes and store the report, without the engine.

A ``datum apply`` whose every resource converged leaves an *idle entry* in the
manifest cache (``remember``): what each resource's provider says to check
(``Provider.probe``: a ``File``'s kind, mode, owner and bytes), what the pass
depended on (the manifest's and configuration's bytes, the state file, Datum's
code and the installed plugins, ``source`` files, the account files under the
root, the reboot markers and ``/boot``, the running kernel) and its report
and lines with the times left out. The next ``datum apply`` with the same
manifest, root, state file and options (``run``) checks the entry, takes the
pass lock and checks every probe: when each holds, it stores the report the
engine would have stored, filled with this pass's times, and prints the same
lines. Anything else (no entry, a dependency changed, a probe that does not
hold, a reboot on record, a signal) hands the lock it holds, and the signal,
to the engine (``Handover``), which runs the pass as always, so nothing is
decided here that the engine would decide otherwise.

A probe is checked the way the engine observes: ``lstat`` first, never through
a final link, an ``O_NOFOLLOW | O_NONBLOCK`` read of a regular file; every
directory above a probed path must still be a directory, not a link. It
imports neither ``json`` nor ``typing``, ``pathlib``, ``enum`` nor the pass
engine: what it costs is close to a bare loop that reads the same files.
"""

from __future__ import annotations

import marshal
import os
import sys
import time
from zlib import crc32

try:  # CPython's own BLAKE2: hashlib would load OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without the module
    from hashlib import blake2b

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from datum.host.agent import PassResult
    from datum.host.compiled import HostConfig
    from datum.host.model import Manifest
    from datum.host.statefile import StateStore

FORMAT = 1
_INLINE = 64 * 1024  # bytes a probe keeps as they are; above, their size and digest
_RACY_NS = 100_000_000  # a file changed this close to a pass's start may have changed during it
_S_IFMT, _S_IFREG, _S_IFDIR = 0o170000, 0o100000, 0o040000
_KINDS = {"file": _S_IFREG, "dir": _S_IFDIR}  # what a probe of each kind wants at its path
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Done:
    """An idle pass that stored its report: the report's JSON text, the lines a person reads."""

    __slots__ = ("text", "lines", "warnings")

    def __init__(self, text: str, lines: str, warnings: list[str]) -> None:
        self.text, self.lines, self.warnings = text, lines, warnings


class Handover:
    """The engine's turn: the state file, its pass lock held and, from an idle pass, the signals
    watched (``stop``); what ``close`` releases (``datum.host.agent.run(holding=)`` takes them over)."""

    __slots__ = ("store", "stop", "_exits")

    def __init__(self, store: StateStore, stop: Any = None, exits: list[Any] | None = None) -> None:
        self.store, self.stop, self._exits = store, stop, [] if exits is None else exits

    def close(self, *exc: Any) -> None:
        """Release what is held, last taken first; ``exc`` as a context's ``__exit__`` gets it."""
        exits, self._exits = self._exits, []
        for leave in reversed(exits):
            leave(*(exc or (None, None, None)))


# -- where an entry lives, and what it depends on ------------------------------------------------


def _where(manifest: str, root: str, mode: str | None, state: str | None, config: str | None,
           allow_outside: bool) -> str:
    """The entry's file: one per manifest, root, state file, configuration, options and environment."""
    from datum.home import manifest_cache

    env = os.environ
    chosen = config or env.get("DATUM_CONFIG")
    parts = (
        str(FORMAT), sys.executable, os.path.realpath(manifest), os.path.realpath(root),
        os.path.realpath(os.path.expanduser(state)) if state else "", mode or "",
        os.path.abspath(chosen) if chosen else "", "outside" if allow_outside else "",
        str(os.geteuid()), env.get("DATUM_HOME", ""), env.get("XDG_STATE_HOME", ""), env.get("HOME", ""),
    )
    key = blake2b("\0".join(parts).encode(), digest_size=20).hexdigest()
    return os.path.join(manifest_cache(), f"idle-{key}.bin")


def _sig(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _now(path: str, follow: bool) -> tuple[int, int, int, int, int] | None:
    """What ``path`` is now (None: absent, or under something that is not a directory)."""
    try:
        return _sig(os.stat(path) if follow else os.lstat(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _digest(path: str | None) -> bytes | None:
    """The BLAKE2 of a file's bytes (None for no file)."""
    if path is None:
        return None
    with open(path, "rb") as f:
        return blake2b(f.read(), digest_size=32).digest()


def _code_files() -> list[str]:
    """Datum's modules and their directories, what the installed plugins are found under
    (``datum.discovery``) and the files they load from."""
    import datum
    from datum.discovery import dependencies
    from datum.host.compiled import plugin_modules

    top = os.path.dirname(datum.__file__)
    found = []
    for here, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found.append(here)
        found += [os.path.join(here, f) for f in files if f.endswith(".py")]
    return found + dependencies() + [origin for _value, origin, _mtime in plugin_modules() if origin]


def _resolution(root: str, host_path: str) -> list[tuple[str, str, Any]]:
    """What ``host_path`` under ``root`` resolves through, as dependencies: each directory on the way
    stays a directory, each link stays the same link (``datum.providers.fs`` resolves links inside
    the root), and the place it resolves to stays absent, or the same file or directory."""
    from datum.providers.fs import real_path

    top = "" if root == "/" else root
    parts = host_path.strip("/").split("/")
    deps: list[tuple[str, str, Any]] = []
    for i in range(len(parts) - 1):
        path = top + "/" + "/".join(parts[: i + 1])
        sig = _now(path, False)
        if sig is None:
            return [*deps, (path, "absent", None)]
        deps.append((path, "same", sig) if sig[0] & _S_IFMT != _S_IFDIR else (path, "dir", None))
    real = real_path(root, host_path)
    sig = _now(real, False)
    return [*deps, (real, "absent" if sig is None else "same", sig)]


def _parents(root: str, path: str) -> list[str]:
    """The directories from below ``root`` down to ``path``'s parent."""
    top = "" if root == "/" else root
    rel = path[len(top):].strip("/").split("/")[:-1]
    return [top + "/" + "/".join(rel[: i + 1]) for i in range(len(rel))]


# -- remembering a converged pass ----------------------------------------------------------------


def before(manifest: str, config: str | None) -> dict[str, Any] | None:
    """What a pass is about to depend on, taken before it reads any of it: the manifest's and
    configuration's bytes and Datum's code. A change made while the pass runs is then a change
    the next idle pass sees (None: the manifest or configuration cannot be read)."""
    chosen = config or os.environ.get("DATUM_CONFIG")
    try:
        return {
            "started": time.time_ns(),
            "manifest": _digest(os.path.realpath(manifest)),
            "config": (os.path.abspath(chosen), _digest(chosen)) if chosen else None,
            "code": [(p, "stat", _now(p, True)) for p in _code_files()],
        }
    except OSError:
        return None


def remember(
    manifest_path: str, root: str, mode: str | None, state: str | None, config: str | None,
    allow_outside: bool, taken: dict[str, Any] | None, chosen: HostConfig, loaded: Manifest,
    result: PassResult,
) -> None:
    """Keep the idle entry of a ``datum apply`` that converged every resource and needs no reboot
    (``taken``: ``before``'s); remove a stale one otherwise. Never a failure (a cache)."""
    where = _where(manifest_path, root, mode, state, config, allow_outside)
    try:
        entry = _entry(manifest_path, root, state, taken, chosen, loaded, result) if taken else None
        payload = None if entry is None else marshal.dumps(entry)
    except Exception:  # a cache is never a failure: without an entry, the engine runs every pass
        if os.environ.get("DATUM_DEBUG"):
            raise
        payload = None
    if payload is None:
        try:
            os.unlink(where)
        except OSError:
            pass
        return
    tmp = f"{where}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
        # The owner's alone, as the validated manifests beside it: it holds the files' bytes.
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb") as f:
            f.write(crc32(payload).to_bytes(4, "big") + payload)
        os.replace(tmp, where)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _entry(
    manifest_path: str, root: str, state: str | None, taken: dict[str, Any], chosen: HostConfig,
    loaded: Manifest, result: PassResult,
) -> dict[str, Any] | None:
    """The entry's contents, or None when an idle pass could not stand for the engine's."""
    from datum.core.vocab import ResourceState
    from datum.host import compiled
    from datum.host.agent import pass_report
    from datum.host.executor import Outcome
    from datum.host.output import pass_lines
    from datum.host.reboot import MARKERS
    from datum.host.statefile import state_path
    from datum.providers.facts import read_boot_id, running_kernel

    report, outcomes = result.report, result.outcomes
    if (
        report.get("state") != "converged" or "reboot" in report or report.get("incomplete")
        or result.reboot_now or chosen.report_to or chosen.token or not outcomes
        or any(o.state is not ResourceState.CONVERGED or o.probe is None for o in outcomes)
        or compiled.cache_key(manifest_path, None) is None  # it includes others: not one file's bytes
    ):
        return None
    real_root = os.path.realpath(root)
    host_deps: list[tuple[str, str, Any]] = []
    try:
        for place in (*MARKERS, "/boot"):
            host_deps += _resolution(real_root, place)
        if any(o.probe[0] != "absent" and (o.probe[3] is not None or o.probe[4] is not None) for o in outcomes):
            host_deps += _resolution(real_root, "/etc/passwd") + _resolution(real_root, "/etc/group")
    except Exception:  # noqa: BLE001 - a link out of the root: the engine says what it says
        return None
    if any(kind == "same" and path.endswith(MARKERS) for path, kind, _sig in host_deps):
        return None  # a reboot marker present (the engine found it stale): the engine decides each pass
    sources = [
        os.path.join(str(loaded.dir), r.spec.source) for r in loaded.resources if getattr(r.spec, "source", None)
    ]
    taken = dict(taken)
    # What this pass read that may have changed while it ran (the kernel's file times are coarse):
    # a newer one is not trusted, and the next pass that converges keeps the entry.
    recent, code = taken.pop("started") - _RACY_NS, taken.pop("code")
    source_deps = [(p, "stat", _now(p, True)) for p in sources]
    if any(sig is not None and sig[4] > recent for _p, _kind, sig in source_deps + host_deps):
        return None
    boot_id = read_boot_id(chosen.boot_id_file)
    # The report and lines an idle pass of this manifest gives, its times as numbered slots.
    idle = [Outcome(o.resource, state=ResourceState.CONVERGED) for o in outcomes]
    template = pass_report(
        report["host"], report["mode"], "converged", _slot(0), _slot(1), _slot(2), report["manifest"], 0, idle,
        boot_id=_slot(3) if boot_id else "",
    )
    for n, item in enumerate(template["resources"]):
        item["durationSeconds"] = _slot(4 + n)
    import json
    import re

    pieces = re.split(r'"\\u0000(\d+)\\u0000"', json.dumps(template))
    return {
        "format": FORMAT,
        "python": sys.version,
        **taken,
        "deps": code + source_deps + list(dict.fromkeys(host_deps)),
        "kernel": running_kernel(),
        "name": chosen.name,
        "host": report["host"],
        "state_path": state_path(state) if state else chosen.state_path,
        "lock_wait": chosen.lock_wait.total_seconds(),
        "boot_id_file": chosen.boot_id_file,
        "has_boot": bool(boot_id),
        "dirs": sorted({d for o in outcomes for d in _parents(real_root, str(o.probe[1]))}),
        "probes": [_compact(o.probe) for o in outcomes],
        "fragments": pieces[0::2],
        "slots": [int(n) for n in pieces[1::2]],
        "lines": "".join(line + "\n" for line in pass_lines(template)),
    }


def _compact(probe: tuple[Any, ...]) -> tuple[Any, ...]:
    """A probe whose bytes are large keeps their size and BLAKE2 instead (checked by reading
    the file in chunks): the entry stays small whatever the files weigh."""
    content = probe[5] if probe[0] == "file" else None
    if isinstance(content, bytes) and len(content) > _INLINE:
        return (*probe[:5], (len(content), blake2b(content, digest_size=32).digest()))
    return probe


def _slot(n: int) -> str:
    return f"\0{n}\0"


# -- an idle pass -------------------------------------------------------------------------------


def run(manifest: str, root: str, mode: str | None, state: str | None, config: str | None,
        allow_outside: bool) -> Done | Handover | None:
    """The idle pass of ``datum apply``'s arguments: ``Done`` when it stored its report; a
    ``Handover`` when the engine must run the pass (the lock held); None when there is no entry
    to check, or it no longer stands for this manifest, configuration, code or host."""
    entry = _load(_where(manifest, root, mode, state, config, allow_outside))
    if entry is None or not _stands(entry, manifest):
        return None
    from datum.host.statefile import StateStore, Unreadable, unfinished, unfinished_reason
    from datum.providers.facts import read_boot_id

    boot_id = read_boot_id(entry["boot_id_file"])
    if bool(boot_id) != entry["has_boot"]:
        return None
    from datetime import UTC, datetime, timedelta

    from datum.signals import PASS_SIGNALS, stop_on

    store = StateStore(entry["state_path"])
    exits: list[Any] = [lambda *_exc: store.close()]
    handover = Handover(store, None, exits)
    try:
        lease = store.lease(timedelta(seconds=entry["lock_wait"]), boot_id)
        lease.__enter__()
        exits.append(lease.__exit__)
        watching = stop_on(*PASS_SIGNALS, once=True)
        handover.stop = watching.__enter__()
        exits.append(watching.__exit__)
        try:
            previous = store.summary(entry["host"])
        except Unreadable:
            previous = None
        if previous is not None and "reboot" in previous:
            return handover  # a reboot on record: the engine decides whether it still holds
        started = datetime.now(UTC)
        clock = time.perf_counter()
        took = _walk(entry, handover.stop)
        if took is None:
            return handover
        finished = datetime.now(UTC).isoformat()
        values = [_q(started.isoformat()), _q(finished), repr(round(time.perf_counter() - clock, 6)),
                  _q(boot_id), *took]
        text = "".join(_fill(entry["fragments"], entry["slots"], values))
        store.record_idle(entry["host"], finished, text)
        warnings = []
        if unfinished(store.taken_over, previous):
            warnings.append(f"{unfinished_reason(store.taken_over or {})}; this pass replaces it")
    except BaseException as exc:
        handover.close(type(exc), exc, exc.__traceback__)
        raise
    handover.close()
    return Done(text, entry["lines"], warnings)


def _load(where: str) -> dict[str, Any] | None:
    try:
        with open(where, "rb") as f:
            data = f.read()
        if crc32(data[4:]).to_bytes(4, "big") != data[:4]:  # a torn or damaged write
            return None
        entry = marshal.loads(data[4:])
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("python") != sys.version:
        return None
    return entry


def _stands(entry: dict[str, Any], manifest: str) -> bool:
    """Whether the entry still stands: the same manifest and configuration bytes, code, plugins,
    files it read, reboot places, kernel and host name."""
    try:
        if _digest(os.path.realpath(manifest)) != entry["manifest"]:
            return False
        config = entry["config"]
        if config is not None and _digest(config[0]) != config[1]:
            return False
    except OSError:
        return False
    if os.uname().release != entry["kernel"] or (entry["name"] or os.uname().nodename) != entry["host"]:
        return False
    for path, kind, sig in entry["deps"]:
        if kind == "stat":
            if _now(path, True) != sig:
                return False
            continue
        now = _now(path, False)
        if kind == "dir" and (now is None or now[0] & _S_IFMT != _S_IFDIR):
            return False
        if kind != "dir" and now != sig:
            return False
    return True


def _walk(entry: dict[str, Any], stop: Any) -> list[str] | None:
    """Every probe's duration, as the report writes it; None as soon as one does not hold (or a
    signal came: the engine then stops before its first resource, as it would have)."""
    for path in entry["dirs"]:
        now = _now(path, False)
        if now is None or now[0] & _S_IFMT != _S_IFDIR:
            return None
    took = []
    clock = time.perf_counter
    for probe in entry["probes"]:
        if stop.signal is not None:
            return None
        began = clock()
        if not holds(probe):
            return None
        took.append(repr(round(clock() - began, 6)))
    return took


def holds(probe: tuple[Any, ...]) -> bool:
    """Whether what ``probe`` describes (``Provider.probe``) is so now."""
    kind, where = probe[0], probe[1]
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        return kind == "absent"
    except OSError:
        return False
    if st.st_mode & _S_IFMT != _KINDS.get(kind):
        return False
    mode, uid, gid = probe[2:5]
    if (
        (mode is not None and st.st_mode & 0o7777 != mode)
        or (uid is not None and st.st_uid != uid)
        or (gid is not None and st.st_gid != gid)
    ):
        return False
    content = probe[5] if kind == "file" else None
    if content is None:
        return True
    size, digest = (len(content), None) if isinstance(content, bytes) else content
    if st.st_size != size:
        return False
    try:
        fd = os.open(where, _READ)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_mode & _S_IFMT != _S_IFREG:
            return False
        if digest is None:
            return os.read(fd, size + 1) == content
        hashed = blake2b(digest_size=32)
        while chunk := os.read(fd, 1 << 20):
            hashed.update(chunk)
        return hashed.digest() == digest
    finally:
        os.close(fd)


def _q(text: str) -> str:
    from datum.core.jsontext import string

    return string(text)


def _fill(fragments: list[str], slots: list[int], values: list[str]) -> list[str]:
    out = [fragments[0]]
    for slot, fragment in zip(slots, fragments[1:], strict=True):
        out.append(values[slot])
        out.append(fragment)
    return out
