"""Where Datum keeps its state when the configuration does not say (``DATUM_HOME``), and what may name it.

Apart from ``datum.config`` so that a pass with no configuration file learns it
without importing pydantic and the whole settings model; the URL rule is here
so that ``--state`` (``datum.host.statefile``) and ``[host] state``
(``datum.config``) say the same. Paths are strings: the idle pass finds its
entry here on its cold start (``datum.host.idle``), without ``pathlib``.
"""

from __future__ import annotations

import os


def url_refused(state: str) -> str | None:
    """Why ``state`` cannot name the host's state file (it is a URL), or None when it can."""
    if "://" in state:
        return f"{state!r} is a URL; the host's state is a local file (a path), written by this host only"
    return None


def default_home() -> str:
    """``$DATUM_HOME``; else ``/var/lib/datum`` as root; else ``$XDG_STATE_HOME/datum``."""
    if home := os.environ.get("DATUM_HOME"):
        return os.path.expanduser(home)
    if os.geteuid() == 0:
        return "/var/lib/datum"
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "datum")


def cache_root() -> str:
    """Datum's cache: ``$DATUM_CACHE_DIR``, else under ``$DATUM_HOME``, else the system's cache directory."""
    if chosen := os.environ.get("DATUM_CACHE_DIR"):
        return chosen
    if home := os.environ.get("DATUM_HOME"):
        return os.path.join(os.path.expanduser(home), "cache")
    if os.geteuid() == 0:
        return "/var/cache/datum"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "datum")


def manifest_cache() -> str:
    """Where validated manifests and idle entries are kept: ``$DATUM_CACHE_DIR``, else
    ``manifests`` in Datum's cache."""
    return os.environ.get("DATUM_CACHE_DIR") or os.path.join(cache_root(), "manifests")


def environment() -> str:
    """What else a validated manifest depends on: where ``default_home`` (and the store) default
    to, by user and environment (a key part of the manifest cache and of the idle entry)."""
    env = os.environ
    return "\0".join(
        (str(os.geteuid()), env.get("DATUM_HOME", ""), env.get("XDG_STATE_HOME", ""), env.get("HOME", ""))
    )
