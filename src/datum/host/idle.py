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
to the engine (``statefile.Held``), which runs the pass as always, so nothing is
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
    from datum.host.statefile import Held

FORMAT = 2  # 2: hex digests, included manifests
_INLINE = 64 * 1024  # bytes a probe keeps as they are; above, their size and digest
_RACY_NS = 1_100_000_000  # a file changed this close to a pass's start may have changed during it
_S_IFMT, _S_IFREG, _S_IFDIR = 0o170000, 0o100000, 0o040000
_KINDS = {"file": _S_IFREG, "dir": _S_IFDIR}  # what a probe of each kind wants at its path
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Done:
    """An idle pass that stored its report: the report's JSON text, the lines a person reads."""

    __slots__ = ("text", "lines", "warnings")

    def __init__(self, text: str, lines: str, warnings: list[str]) -> None:
        self.text, self.lines, self.warnings = text, lines, warnings


# -- where an entry lives, and what it depends on ------------------------------------------------


def _where(manifest: str, root: str, mode: str | None, state: str | None, config: str | None,
           allow_outside: bool) -> str:
    """The entry's file: one per manifest, root, state file, configuration, options and environment."""
    import datum
    from datum.home import environment, manifest_cache

    chosen = config or os.environ.get("DATUM_CONFIG")
    parts = (
        str(FORMAT), sys.executable, datum.__file__ or "",
        os.path.realpath(manifest), os.path.realpath(root),
        os.path.realpath(os.path.expanduser(state)) if state else "", mode or "",
        os.path.abspath(chosen) if chosen else "", "outside" if allow_outside else "",
        environment(),
    )
    key = blake2b("\0".join(parts).encode(), digest_size=20).hexdigest()
    return os.path.join(manifest_cache(), f"idle-{key}.bin")


def _search_path() -> list[str]:
    """Where modules are found, but the running script's own directory (``datum`` and ``python -c``
    differ there, and neither installs anything in it; as ``datum.discovery``)."""
    return sys.path[1:]


def _sig(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _now(path: str, follow: bool) -> tuple[int, int, int, int, int] | None:
    """What ``path`` is now (None: absent, or under something that is not a directory)."""
    try:
        return _sig(os.stat(path) if follow else os.lstat(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _digest(path: str | None) -> str | None:
    """The digest of a file's bytes (``datum.host.digest``; None for no file)."""
    if path is None:
        return None
    from datum.host.digest import of_file

    return of_file(path)


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


def _resolution(root: str, host_path: str) -> tuple[list[tuple[str, str, Any]], bool]:
    """What ``host_path`` under ``root`` resolves through, as dependencies (each directory on the
    way stays a directory; each link, the final one included, stays the same link: links resolve
    inside the root, ``datum.providers.fs``; the place it resolves to stays absent, or the same
    file or directory), and whether anything is there."""
    from datum.providers.fs import real_path

    top = "" if root == "/" else root
    parts = host_path.strip("/").split("/")
    deps: list[tuple[str, str, Any]] = []
    for i in range(len(parts)):
        path = top + "/" + "/".join(parts[: i + 1])
        sig = _now(path, False)
        if sig is None:
            return [*deps, (path, "absent", None)], False
        last = i == len(parts) - 1
        deps.append((path, "dir", None) if sig[0] & _S_IFMT == _S_IFDIR and not last else (path, "same", sig))
    real = real_path(root, host_path)
    sig = _now(real, False)
    return [*deps, (real, "absent" if sig is None else "same", sig)], sig is not None


def _parents(root: str, path: str) -> list[str]:
    """The directories from below ``root`` down to ``path``'s parent."""
    top = "" if root == "/" else root
    rel = path[len(top):].strip("/").split("/")[:-1]
    return [top + "/" + "/".join(rel[: i + 1]) for i in range(len(rel))]


# -- remembering a converged pass ----------------------------------------------------------------


def before(config: str | None) -> dict[str, Any] | None:
    """What a pass is about to depend on, taken before it reads any of it: the configuration's
    bytes and Datum's code. A change made while the pass runs is then a change the next idle pass
    sees (None: the configuration cannot be read). Never a failure (a cache)."""
    chosen = config or os.environ.get("DATUM_CONFIG")
    try:
        return {
            "started": time.time_ns(),
            "config": (os.path.abspath(chosen), _digest(chosen)) if chosen else None,
            "code": [(p, "stat", _now(p, True)) for p in _code_files()],
        }
    except Exception:
        if os.environ.get("DATUM_DEBUG"):
            raise
        return None


def remember(
    manifest_path: str, root: str, mode: str | None, state: str | None, config: str | None,
    allow_outside: bool, taken: dict[str, Any] | None, data: bytes | None, chosen: HostConfig,
    loaded: Manifest, result: PassResult,
) -> None:
    """Keep the idle entry of a ``datum apply`` that converged every resource and needs no reboot
    (``taken``: ``before``'s; ``data``: the manifest's bytes the pass validated); remove a stale one
    otherwise. Never a failure (a cache)."""
    where = _where(manifest_path, root, mode, state, config, allow_outside)
    try:
        entry = _entry(manifest_path, root, state, taken, data, chosen, loaded, result)
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
    from pathlib import Path

    from datum.host.compiled import prune
    from datum.providers.fs import write_atomic

    try:
        os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
        # The owner's alone, written beside and renamed in, never through a planted link; not made
        # durable: an entry lost or emptied by a power cut fails its CRC, and the engine runs.
        write_atomic(where, crc32(payload).to_bytes(4, "big") + payload, mode=0o600, durable=False)
        prune(Path(where).parent)
    except OSError:
        pass


def _entry(
    manifest_path: str, root: str, state: str | None, taken: dict[str, Any] | None, data: bytes | None,
    chosen: HostConfig, loaded: Manifest, result: PassResult,
) -> dict[str, Any] | None:
    """The entry's contents, or None when an idle pass could not stand for the engine's."""
    from datum.core.vocab import ResourceState
    from datum.host.digest import of_bytes
    from datum.host.reboot import MARKERS
    from datum.host.statefile import state_path
    from datum.providers.facts import running_kernel

    report, outcomes = result.report, result.outcomes
    if (
        taken is None or data is None
        or report.get("state") != "converged" or "reboot" in report or report.get("incomplete")
        or result.reboot_now or chosen.report_to or chosen.token or not outcomes
        or any(o.state is not ResourceState.CONVERGED or o.probe is None for o in outcomes)
    ):
        return None
    real_root = os.path.realpath(root)
    host_deps: list[tuple[str, str, Any]] = []
    try:
        for place in MARKERS:
            deps, present = _resolution(real_root, place)
            if present:
                return None  # a marker (the engine found it stale): the engine decides every pass
            host_deps += deps
        # A newer kernel in /boot; the accounts owner and group names resolve against.
        for place in ("/boot", "/etc/passwd", "/etc/group"):
            host_deps += _resolution(real_root, place)[0]
    except Exception:  # noqa: BLE001 - a link out of the root: the engine says what it says
        return None
    sources = [
        os.path.join(str(loaded.dir), r.spec.source) for r in loaded.resources if getattr(r.spec, "source", None)
    ]
    taken = dict(taken)
    # What this pass read that may have changed while it ran: a file time is coarse (a second on
    # some file systems), so a file changed this close to the pass's start is not trusted; the
    # next pass that converges keeps the entry.
    recent, code = taken.pop("started") - _RACY_NS, taken.pop("code")
    source_deps = [(p, "stat", _now(p, True)) for p in sources]
    if any(sig is not None and max(sig[3], sig[4]) > recent for _p, _kind, sig in code + source_deps + host_deps):
        return None
    parents = {d for o in outcomes for d in _parents(real_root, str(o.probe[1]))}
    dirs = [(d, "dir" if _now(d, False) is not None else "absent") for d in sorted(parents)]
    return {
        "format": FORMAT,
        "python": sys.version,
        "path": _search_path(),
        **taken,
        "manifest": of_bytes(data),
        "deps": code + source_deps + list(dict.fromkeys(host_deps))
        + [(path, "digest", digest) for path, digest in loaded.included],
        "kernel": running_kernel(),
        "name": chosen.name,
        "host": report["host"],
        "state_path": state_path(state) if state else chosen.state_path,
        "lock_wait": chosen.lock_wait.total_seconds(),
        "boot_id_file": chosen.boot_id_file,
        "dirs": dirs,
        "probes": [_compact(o.probe, _secret(o.resource.spec)) for o in outcomes],
        **_template(report, outcomes, chosen),
    }


def _template(report: dict[str, Any], outcomes: list[Any], chosen: HostConfig) -> dict[str, Any]:
    """The report and lines an idle pass of this manifest gives, made by the engine's own
    ``pass_report`` and ``pass_lines``, its times left as numbered slots."""
    import json
    import re

    from datum.core.vocab import ResourceState
    from datum.host.agent import pass_report
    from datum.host.executor import Outcome
    from datum.host.output import pass_lines
    from datum.providers.facts import read_boot_id

    nonce = os.urandom(8).hex()  # no manifest, path or host name can spell a slot

    def slot(n: int) -> str:
        return f"\0{nonce}:{n}\0"

    boot_id = read_boot_id(chosen.boot_id_file)
    idle = [Outcome(o.resource, state=ResourceState.CONVERGED) for o in outcomes]
    template = pass_report(
        report["host"], report["mode"], "converged", slot(0), slot(1), slot(2), report["manifest"], 0, idle,
        boot_id=slot(3) if boot_id else "",
    )
    for n, item in enumerate(template["resources"]):
        item["durationSeconds"] = slot(4 + n)
    pieces = re.split(rf'"\\u0000{nonce}:(\d+)\\u0000"', json.dumps(template))
    slots = [int(n) for n in pieces[1::2]]
    if sorted(slots) != [0, 1, 2, *([3] if boot_id else []), *range(4, 4 + len(outcomes))]:  # each once
        raise ValueError(f"the report's slots came out as {slots[:8]}")  # never stored
    return {
        "has_boot": bool(boot_id),
        "fragments": pieces[0::2],
        "slots": slots,
        "lines": "".join(line + "\n" for line in pass_lines(template)),
    }


def _secret(spec: Any) -> bool:
    """A file whose bytes the entry keeps only as a digest: ``sensitive``, or read from a
    ``source`` (its bytes are not in the manifest, and may be readable by its owner only)."""
    return bool(getattr(spec, "sensitive", False) or getattr(spec, "source", None))


def _compact(probe: tuple[Any, ...], secret: bool = False) -> tuple[Any, ...]:
    """A probe whose bytes are large, or secret, keeps their size and BLAKE2 instead (checked by
    reading the file in chunks): the entry stays small, and holds no secret."""
    content = probe[5] if probe[0] == "file" else None
    if isinstance(content, bytes) and (secret or len(content) > _INLINE):
        return (*probe[:5], (len(content), blake2b(content, digest_size=32).digest()))
    return probe


# -- an idle pass -------------------------------------------------------------------------------


def run(manifest: str, root: str, mode: str | None, state: str | None, config: str | None,
        allow_outside: bool) -> Done | Held | None:
    """The idle pass of ``datum apply``'s arguments: ``Done`` when it stored its report; the state
    file ``Held`` when the engine must run the pass (its lock and the signal watch taken); None when there is no entry
    to check, or it no longer stands for this manifest, configuration, code or host."""
    entry = _load(_where(manifest, root, mode, state, config, allow_outside))
    if entry is None or not _stands(entry, manifest):
        return None
    from datum.host.statefile import Held, StateStore, Unreadable, unfinished, unfinished_reason
    from datum.providers.facts import read_boot_id

    boot_id = read_boot_id(entry["boot_id_file"])
    if bool(boot_id) != entry["has_boot"]:
        return None
    from datetime import UTC, datetime, timedelta

    from datum.signals import PASS_SIGNALS, stop_on

    store = StateStore(entry["state_path"])
    handover = Held(store)
    handover.callback(store.close)
    try:
        handover.enter(store.lease(timedelta(seconds=entry["lock_wait"]), boot_id))
        handover.stop = handover.enter(stop_on(*PASS_SIGNALS, once=True))
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
    if entry["path"] != _search_path():  # a directory added where modules are found: another Datum, a plugin
        return False
    for path, kind, sig in entry["deps"]:
        if kind == "stat":
            if _now(path, True) != sig:
                return False
            continue
        if kind == "digest":  # an included manifest: the bytes its validation read
            try:
                if _digest(path) != sig:
                    return False
            except OSError:
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
    for path, kind in entry["dirs"]:  # each directory above a probed path, or its absence
        now = _now(path, False)
        if (now is None or now[0] & _S_IFMT != _S_IFDIR) if kind == "dir" else now is not None:
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
