"""The idle pass: when nothing the engine read changed, store its report again, without the engine.

A ``datum apply`` records every read its engine makes of the host through one
recorder (``datum.providers.reads``, started by ``before``): each path as the
engine resolved it inside the root, with its kind and signature or the digest
of its bytes, absences, directory listings and trees, the account tables, the
reboot markers and ``/boot``, the facts templates and the report used (kernel,
node name, boot id), the source and template files, and beside them the
manifest's, the configuration's and every included manifest's bytes and
Datum's code and plugins (``datum.host.compiled.code_files``). When every
resource converged, no command ran and no reboot is needed, ``remember`` keeps
that read set as the *idle entry* with the report and lines the pass gave, its
times left out. The next ``datum apply`` with the same manifest, root, state
file and options (``run``) takes the pass lock and replays the read set
(``datum.providers.reads.unchanged``): when every read would return what it
returned, the engine would decide what it decided, and the idle pass stores the
same report, filled with this pass's times, and prints the same lines.
Anything else (no entry, a read that differs, a reboot on record, a signal)
hands the lock it holds, and the signal watch, to the engine (``datum.host.lock.Held``),
which runs the pass as always. No dependency is listed here by hand.

Its cold start imports four of Datum's modules besides the command's (and
``datum.home``, where the entry lives): this one, the recorder, the pass
lock (``datum.host.lock``) and the state file's owner (``datum.host.statedb``); neither ``json`` nor ``typing``, ``pathlib``,
``enum``, ``signal`` nor the pass engine: what it costs is close to a bare
loop that ``lstat``s the same files. What the engine needs of it (``before``,
``remember``) imports what it uses where it is used.
"""

from __future__ import annotations

import marshal
import os
import sys
import time
from zlib import crc32

from datum.host import lock, statedb
from datum.providers import reads

TYPE_CHECKING = False  # the cold start's: no typing imported (datum.host.lock says why)
if TYPE_CHECKING:
    from typing import Any

    from datum.host.compiled import HostConfig
    from datum.host.executor import PassResult
    from datum.host.model import Manifest

FORMAT = 3  # 3: the engine's read set


class Done:
    """An idle pass that stored its report: the report's JSON text, the lines a person reads; read
    as the engine's ``PassResult`` is (``datum.cli.passes.deliver``): exit 0, no reboot."""

    __slots__ = ("text", "lines", "warnings")
    exit_code = 0
    reboot_now = False
    config = None  # an entry is never made for a configuration that posts its report
    state_path = None

    def __init__(self, text: str, lines: str, warnings: list[str]) -> None:
        self.text, self.lines, self.warnings = text, lines, warnings

    @property
    def report(self) -> dict[str, Any]:
        """The stored report, parsed (``json`` imported only when it is shown or posted)."""
        import json

        parsed: dict[str, Any] = json.loads(self.text)
        return parsed


# -- where an entry lives ----------------------------------------------------------------------


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
    key = reads.digest("\0".join(parts).encode())[:40]
    return os.path.join(manifest_cache(), f"idle-{key}.bin")


def _search_path() -> list[str]:
    """Where modules are found, but the running script's own directory (``datum`` and ``python -c``
    differ there, and neither installs anything in it; as ``datum.discovery``)."""
    return sys.path[1:]


# -- remembering a converged pass ----------------------------------------------------------------


def before(config: str | None) -> reads.Record | None:
    """Start recording the pass's reads (``datum.providers.reads``), beginning with what it is about
    to depend on besides the host: the configuration's bytes and Datum's code. A change made while
    the pass runs is then a change the next idle pass sees (None: the configuration cannot be
    read). Never a failure (a cache)."""
    record = reads.start()
    chosen = config or os.environ.get("DATUM_CONFIG")
    try:
        from datum.host.compiled import code_files

        if chosen:
            with open(chosen, "rb") as f:
                reads.remember(os.path.abspath(chosen), f.read())
        for path in code_files():
            reads.stat(path)
    except Exception:
        reads.stop()
        if os.environ.get("DATUM_DEBUG"):
            raise
        return None
    return record


def remember(
    manifest_path: str, root: str, mode: str | None, state: str | None, config: str | None,
    allow_outside: bool, taken: reads.Record | None, data: bytes | None, chosen: HostConfig,
    loaded: Manifest, result: PassResult,
) -> None:
    """Keep the idle entry of a ``datum apply`` that converged every resource, ran no command and
    needs no reboot (``taken``: ``before``'s record, stopped here; ``data``: the manifest's bytes
    the pass validated); remove a stale one otherwise. Never a failure (a cache)."""
    reads.stop()
    where = _where(manifest_path, root, mode, state, config, allow_outside)
    try:
        entry = _entry(manifest_path, taken, data, chosen, loaded, result)
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
    manifest_path: str, record: reads.Record | None, data: bytes | None,
    chosen: HostConfig, loaded: Manifest, result: PassResult,
) -> dict[str, Any] | None:
    """The entry's contents, or None when an idle pass could not stand for the engine's: a pass
    that did or would do something, ran a command, read the host other than through the recorder
    (a provider that does not say ``reads_recorded``), posts its report, or left a stale reboot
    marker in the state file (whether it stays stale is the state file's to say, every pass)."""
    from datum.core.vocab import ResourceState
    from datum.providers.registry import provider

    report, outcomes = result.report, result.outcomes
    if (
        record is None or record.opaque or data is None or result.state_path is None
        or report.get("state") != "converged" or "reboot" in report or report.get("incomplete")
        or result.reboot_now or result.stale_markers or chosen.report_to or chosen.token or not outcomes
        or any(o.state is not ResourceState.CONVERGED or o.changed or not provider(o.resource.type).reads_recorded
               for o in outcomes)  # a change: what was read before it is not what is there now
    ):
        return None
    seen = record.seen
    seen.setdefault(("bytes", os.path.realpath(manifest_path)), (None, reads.digest(data)))
    for included, digest in loaded.included:  # the bytes each included manifest's validation read
        seen.setdefault(("bytes", included), (None, digest))
    return {
        "format": FORMAT,
        "python": sys.version,
        "path": _search_path(),
        "started": record.started,
        "reads": record.reads(),
        "host": report["host"],
        "state_path": result.state_path,
        "lock_wait": chosen.lock_wait.total_seconds(),
        "boot_id_file": chosen.boot_id_file,
        **_template(report, outcomes),
    }


def _template(report: dict[str, Any], outcomes: list[Any]) -> dict[str, Any]:
    """The report and lines an idle pass of this manifest gives, made by the engine's own verdict
    (``datum.host.verdict``: every resource converged) and ``pass_lines``, its times left as
    numbered slots."""
    import json
    import re

    from datum.core.vocab import ResourceState
    from datum.host import verdict
    from datum.host.executor import Outcome
    from datum.host.output import pass_lines
    nonce = os.urandom(8).hex()  # no manifest, path or host name can spell a slot

    def slot(n: int) -> str:
        return f"\0{nonce}:{n}\0"

    boot_id = report.get("bootId", "")  # the boot the pass ran in, as it reported it
    idle = [Outcome(o.resource, state=ResourceState.CONVERGED) for o in outcomes]
    template = verdict.report(
        verdict.decide(idle), idle, host=report["host"], mode=report["mode"], started=slot(0), finished=slot(1),
        duration=slot(2), manifest=report["manifest"], boot_id=slot(3) if boot_id else "",
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


# -- an idle pass -------------------------------------------------------------------------------


def run(manifest: str, root: str, mode: str | None, state: str | None, config: str | None,
        allow_outside: bool) -> Done | lock.Held | None:
    """The idle pass of ``datum apply``'s arguments: ``Done`` when it stored its report; the state
    file ``Held`` when the engine must run the pass (its lock and the signal watch taken); None
    when there is no entry to check, or it was made for another Python or search path."""
    entry = _load(_where(manifest, root, mode, state, config, allow_outside))
    if entry is None or entry["path"] != _search_path():  # another Datum, a plugin found first
        return None
    boot_id = reads.boot_id(entry["boot_id_file"])
    if bool(boot_id) != entry["has_boot"]:
        return None
    from datetime import UTC, datetime

    held = lock.hold(entry["state_path"], entry["lock_wait"], boot_id)
    try:
        try:
            previous = statedb.last_pass(held.db, entry["host"])
        except statedb.Unreadable:
            previous = None
        if previous is not None and "reboot" in previous:
            return held  # a reboot on record: the engine decides whether it still holds
        started = datetime.now(UTC)
        clock = time.perf_counter()
        same = reads.unchanged(entry["reads"], entry["started"])
        if not same or (held.watch is not None and held.watch.is_set()):
            return held  # a read would differ (or a signal came: the engine stops before its first resource)
        took = time.perf_counter() - clock
        finished = datetime.now(UTC).isoformat()
        count = len(entry["slots"]) - (4 if entry["has_boot"] else 3)
        each = repr(round(took / max(count, 1), 6))  # the replay is of the pass, not of one resource
        values = [_q(started.isoformat()), _q(finished), repr(round(took, 6)), _q(boot_id), *[each] * count]
        text = "".join(_fill(entry["fragments"], entry["slots"], values))
        _store(held, entry["host"], finished, text)
        warnings = []
        if lock.unfinished(held.lease.taken_over, previous):
            warnings.append(f"{lock.unfinished_reason(held.lease.taken_over or {})}; this pass replaces it")
    except BaseException as exc:
        held.close(type(exc), exc, exc.__traceback__)
        raise
    held.close()
    return Done(text, entry["lines"], warnings)


def _store(held: lock.Held, host: str, finished: str, text: str) -> None:
    """The idle pass's report stored as the engine stores its own (``datum.host.statedb.write_pass``);
    ``NotPersisted``, carrying it, when the state file refuses it."""
    try:
        statedb.write_pass(held.db, held.path, host, "converged", finished, text)
    except statedb.Unstored as exc:
        import json

        from datum.host.statefile import NotPersisted

        raise NotPersisted(held.path, exc, json.loads(text)) from exc


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


def _q(text: str) -> str:
    return lock.json_string(text)


def _fill(fragments: list[str], slots: list[int], values: list[str]) -> list[str]:
    out = [fragments[0]]
    for slot, fragment in zip(slots, fragments[1:], strict=True):
        out.append(values[slot])
        out.append(fragment)
    return out
