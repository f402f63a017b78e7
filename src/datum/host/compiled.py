"""The agent's view of its configuration, and a cache of validated manifests so an unchanged pass skips YAML and pydantic.

Validating a manifest needs PyYAML and pydantic; importing pydantic alone
costs about half of the idle-pass budget on the 2-core machine. A manifest
that validated once is stored here, in JSON, under a key made of everything
validation depends on: the manifest's bytes, the configuration file's bytes,
``DATUM_HOME`` (and where the default store comes from), Datum's version and
the code of the models, and the installed distributions the resource types
and pydantic come from (``datum.discovery``). Any change is a miss. Files a manifest names (``source``,
``template``) must still exist on a hit, or it is a miss and validation reports them.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.bounds import ANSWER_DEADLINE, MAX_ANSWER
from datum.core.vocab import Mode, RebootPolicy
from datum.host.model import MAX_BYTES, Manifest, Resource
from datum.providers.base import Attributes

if TYPE_CHECKING:  # validation's: imported when a manifest is validated, never on a cache hit
    from datum.host.manifest import SpecMemory


FORMAT = 4  # 3: the included files' digests; 4: [agent]'s bounds
AGENT = ("answer_deadline", "max_answer_bytes")  # HostConfig's fields read from [agent], not [host]
_MAX_ENTRIES = 64


@dataclass(frozen=True, slots=True)
class HostConfig:
    """What the agent needs from the configuration: the ``[host]`` section and where the store is.

    One field per ``[host]`` setting of ``datum.config.HostSettings`` (which validates and documents it),
    of the same name and default, read without pydantic on a cache hit and in the idle pass: but
    ``state`` (``state_path`` here, resolved) and ``lock_ttl`` (unused). ``from_settings``,
    ``without_file``, ``to_json`` and ``from_json`` go by these fields, so a new setting is its
    ``HostSettings`` field and its line here (docs/extending.md); tests/host/test_pass_costs.py holds
    the two lists and their defaults equal.
    """

    state_path: str
    name: str | None = None
    mode: Mode = Mode.ENFORCE
    reboot_policy: RebootPolicy = RebootPolicy.NEVER
    maintenance_window: str | None = None
    reboot_command: str = "systemctl reboot"
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    lock_wait: timedelta = timedelta(seconds=30)
    report_to: str | None = None
    token: str | None = None
    # Reboots across a fleet (datum agent): hooks and the health check after a reboot (datum.host.hooks).
    pre_reboot: str | None = None
    post_reboot: str | None = None
    health_check: str | None = None
    health_url: str | None = None
    health_timeout: timedelta = timedelta(seconds=30)
    hook_timeout: timedelta = timedelta(minutes=5)
    hooks_shell: bool = False
    # From [agent] (datum.config.AgentSettings): a server's answer, bounded in time and in size.
    answer_deadline: timedelta = timedelta(seconds=ANSWER_DEADLINE)
    max_answer_bytes: int = MAX_ANSWER

    @classmethod
    def without_file(cls) -> HostConfig:
        """With no configuration file: ``[host]``'s defaults, without importing pydantic."""
        from datum.home import default_home
        from datum.host.statefile import state_path

        return cls(state_path=state_path(os.path.join(default_home(), "agent.db"), "[host] state"))

    @classmethod
    def from_settings(cls, settings: Any) -> HostConfig:
        """From validated ``datum.config.Settings``: every field of ``settings.host`` of the same name."""
        from datum.host.statefile import state_path

        h = settings.host
        # The agent's own local state file; the server's store is the server's alone.
        where = state_path(h.state or str(Path(settings.home) / "agent.db"), "[host] state")
        return cls(state_path=where, **{
            f.name: getattr(settings.agent if f.name in AGENT else h, f.name) for f in fields(cls) if f.name != "state_path"
        })

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, timedelta):
                out[key] = value.total_seconds()
            elif isinstance(value, (Mode, RebootPolicy)):
                out[key] = value.value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostConfig:
        kinds = {f.name: f.default for f in fields(cls)}  # a field's kind is its default's
        values: dict[str, Any] = {}
        for key, value in data.items():
            kind = type(kinds.get(key))
            values[key] = (
                timedelta(seconds=value) if kind is timedelta else kind(value) if kind in (Mode, RebootPolicy) else value
            )
        return cls(**values)


def config_file(flag: str | None) -> Path | None:
    """The configuration file the CLI reads (the same rule as ``datum.config.config_path``)."""
    chosen = flag or os.environ.get("DATUM_CONFIG")
    return Path(chosen) if chosen else None


def cache_dir() -> Path:
    """``$DATUM_CACHE_DIR``, else ``manifests`` in Datum's cache (``datum.home.manifest_cache``)."""
    from datum.home import manifest_cache

    return Path(manifest_cache())


def code_files() -> list[str]:
    """What "the code changed" means, for this cache and the idle pass's alike: every module of
    Datum, what the installed plugins are found under (``datum.discovery``)
    and the files their modules load from."""
    import datum
    from datum.discovery import dependencies

    top = os.path.dirname(datum.__file__)
    found = []
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        # Files only: a directory's own times change when Python writes its __pycache__ there
        # (a fresh checkout's first import), and a module added beside the others changes nothing
        # until a module that imports it changes too.
        found += [os.path.join(here, f) for f in sorted(files) if f.endswith(".py")]
    # The running script's own directory (``datum`` and ``python -c`` differ there, and neither
    # installs anything in it) is left out, as the idle pass's search path leaves it.
    script = sys.path[0] if sys.path else ""
    found += [d for d in dependencies() if d != script]
    return found + [origin for _value, origin, _mtime in plugin_modules() if origin]


def _code_stamp() -> str:
    """Changes when the code changes (``code_files``, each by its signature; also in a development
    checkout), and with the installed distributions the resource types come from."""
    import datum
    from datum.discovery import stamp
    from datum.providers.reads import stat

    return "\0".join([datum.__version__, stamp(), *(f"{p}:{stat(p)}" for p in code_files())])


def plugin_modules() -> list[tuple[str, str | None, str]]:
    """Each resource-type plugin's entry point, the file its module loads from (None: none, or
    it cannot be found) and that file's modification time (``None``; ``?``: it cannot be found)."""
    from datum.discovery import entry_points

    found: list[tuple[str, str | None, str]] = []
    for ep in entry_points("datum.resources"):
        if ep.value.startswith("datum."):
            continue  # Datum's own modules: in the code stamp
        import importlib.util

        try:
            spec = importlib.util.find_spec(ep.value.partition(":")[0].strip())
            origin = spec.origin if spec is not None else None
            found.append((ep.value, origin, str(os.stat(origin).st_mtime_ns) if origin else "None"))
        except (ImportError, ValueError, OSError):
            found.append((ep.value, None, "?"))
    return found


def _digest(*parts: bytes) -> str:
    from datum.home import environment

    digest = blake2b(f"{FORMAT}\0{_code_stamp()}\0{environment()}\0".encode(), digest_size=32)
    for part in parts:
        digest.update(part + b"\0")
    return digest.hexdigest()


def _config_bytes(config: str | None) -> bytes:
    conf = config_file(config)
    return conf.read_bytes() if conf is not None else b"<no configuration>"


def manifest_bytes(manifest_path: str) -> bytes | None:
    """The manifest's bytes, read once for a pass: its key and its validation are of the same
    bytes (an edit between two reads cannot put one version's validation under the other's key)."""
    try:
        with open(manifest_path, "rb") as f:
            return f.read(MAX_BYTES + 1)  # one byte more: validation says it is too large
    except OSError:
        return None


def cache_key(manifest_path: str, config: str | None, data: bytes | None = None) -> str | None:
    """The key of this manifest (its bytes ``data``, read here when not given) and configuration;
    None when either cannot be read. The files it ``include``s are checked on a hit (``load``):
    each must hold the bytes its validation read."""
    try:
        manifest = Path(manifest_path).resolve()
        if data is None:
            data = manifest.read_bytes()
        return _digest(str(manifest).encode(), data, _config_bytes(config))
    except OSError:
        return None


def config_key(flag: str | None) -> str | None:
    """The key of the configuration alone; None when its file cannot be read."""
    try:
        return "config-" + _digest(_config_bytes(flag))
    except OSError:
        return None  # datum.config says what is wrong with it


def load_config(flag: str | None) -> HostConfig:
    """The host configuration: with no file, the defaults (``HostConfig.without_file``); else
    validated by ``datum.config`` (pydantic) once, then from its own cache entry while the file
    and the environment it reads are unchanged, so a pass whose manifest changed does not
    validate an unchanged configuration again."""
    if config_file(flag) is None:  # nothing to validate: not even a first pass builds the settings model
        return HostConfig.without_file()
    key = config_key(flag)
    if key is not None:
        try:
            data = json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
            if data.get("format") == FORMAT:
                return HostConfig.from_json(data["config"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    from datum.config import load_settings

    config = HostConfig.from_settings(load_settings(flag))
    if key is not None and not config.token:  # a token stays in the configuration file only
        _write(key, {"format": FORMAT, "config": config.to_json()})
    return config


def _memory_key(manifest_path: str) -> str | None:
    try:
        return "specs-" + _digest(str(Path(manifest_path).resolve()).encode())
    except OSError:
        return None


def spec_memory(manifest_path: str) -> SpecMemory:
    """The resources this manifest's last validation validated (keyed on the code of the
    models, like every entry here), so a change to it validates only what changed."""
    from datum.host.manifest import SpecMemory

    key = _memory_key(manifest_path)
    try:
        data = json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8")) if key else None
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("specs"), dict):
        return SpecMemory(known=data["specs"])
    return SpecMemory()


def remember_specs(manifest_path: str, memory: SpecMemory) -> None:
    """Keep ``memory.used`` (this manifest's resources) for its next change; never a failure."""
    key = _memory_key(manifest_path)
    if key is None or not memory.used or memory.used == memory.known:
        return
    try:
        text = json.dumps({"format": FORMAT, "specs": memory.used}, separators=(",", ":"))
    except (TypeError, ValueError):
        return  # a value JSON cannot hold (a date): validated in full next time
    _write(key, text)


def load(key: str | None) -> tuple[HostConfig, Manifest] | None:
    """The validated configuration and manifest for ``key``, or None on a miss."""
    if key is None:
        return None
    try:
        data = json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("format") != FORMAT or not all(os.path.isfile(f) for f in data["files"]):
        return None
    m = data["manifest"]
    included = tuple((path, digest) for path, digest in m["included"])
    if not all(_included_unchanged(path, digest) for path, digest in included):
        return None  # an included file changed: validated again
    resources = tuple(
        Resource(r["index"], r["type"], r["name"], Attributes(**r["spec"]))
        for r in m["resources"]
    )
    manifest = Manifest(
        Path(m["dir"]), resources, tuple(m["order"]), m["source"], frozenset(m["paths"]), included,
        tuple(data["files"]),
    )
    return HostConfig.from_json(data["config"]), manifest


def _included_unchanged(path: str, digest: str) -> bool:
    """Whether an included file still holds the bytes its validation read."""
    from datum.host.digest import of_file

    try:
        return of_file(path, MAX_BYTES + 1) == digest
    except OSError:
        return False


def store(key: str | None, config: HostConfig, manifest: Manifest) -> None:
    """Remember a validated pair; silently not when it cannot be (a cache is never a failure)."""
    if key is None or config.token:
        return  # a token stays in the configuration file only
    try:
        data = {
            "format": FORMAT,
            "config": config.to_json(),
            "files": list(manifest.besides),
            "manifest": {
                "dir": str(manifest.dir),
                "source": manifest.source,
                "order": list(manifest.order),
                "paths": sorted(manifest.paths),
                "included": [list(pair) for pair in manifest.included],
                "resources": [
                    {"index": r.index, "type": r.type, "name": r.name, "spec": vars(r.spec)}
                    for r in manifest.resources
                ],
            },
        }
        text = json.dumps(data, separators=(",", ":"))
    except (TypeError, ValueError):
        return  # e.g. a template variable YAML parsed as a date: validate in full every time
    _write(key, text)


def _write(key: str, data: str | dict[str, Any]) -> None:
    """One cache entry, written atomically; the oldest go past ``_MAX_ENTRIES``; never a failure."""
    from datum.providers.fs import write_atomic

    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    directory = cache_dir()
    try:
        directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # Datum's cache: its owner's alone
        directory.mkdir(exist_ok=True, mode=0o700)
        # Not made durable: an entry lost or emptied by a power cut is a miss (its JSON is checked).
        write_atomic(directory / f"{key}.json", text.encode(), mode=0o600, durable=False)
        prune(directory)
    except OSError:
        return


def prune(directory: Path) -> None:
    """Keep the newest ``_MAX_ENTRIES`` validated manifests and as many idle entries."""
    for pattern in ("*.json", "idle-*.bin"):
        entries = sorted(directory.glob(pattern), key=lambda p: p.stat().st_mtime)
        for old in entries[:-_MAX_ENTRIES]:
            old.unlink(missing_ok=True)


def prepare(manifest_path: str, config: str | None, allow_outside: bool = False) -> tuple[HostConfig, Manifest, bytes | None]:
    """The configuration, the validated manifest (from this cache when neither changed) and the
    manifest's bytes they were made from (read once)."""
    data = manifest_bytes(manifest_path)
    key = cache_key(manifest_path, config, data) if data is not None else None
    if key is not None and allow_outside:  # validated under another rule: another entry
        key = f"{key[:48]}-outside"
    hit = load(key)
    if hit is not None:
        return (*hit, data)
    from datum.host.manifest import load_manifest

    chosen = load_config(config)
    memory = spec_memory(manifest_path)
    loaded = load_manifest(manifest_path, allow_source_outside=allow_outside, memory=memory, data=data)
    store(key, chosen, loaded)
    remember_specs(manifest_path, memory)
    return chosen, loaded, data
