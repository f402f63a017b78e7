"""Reading a line a surface printed back into the words ``datum explain`` knows.

An operator pastes what they see: a host reason as ``datum status``, ``datum hosts`` or the page
show it (``File[motd] failed: permission denied; blocked: Service[nginx]``, ``stale: the last
report is 2h05m old, ...``, ``/run/reboot-required present (linux-image-amd64)``), a pass line
(``File[motd]   updated``), or a line of "Needs a human" (``... is parked at the backoff cap after
12 failures``). ``words`` names the (vocabulary, name) pairs that explain it, the host state it
reads first.

A host's reason is matched by the words its producer makes it from (``datum.core.hostreasons`` for the verdict,
the reboot detection, the stale rule, the state file, the agent, the API's host rows and the fleet directory;
``datum.core.budget`` for the reboot budget), never by a copy of them; ``tests/core/test_phrases.py`` makes
each kind and reads it back, ``tests/cli/test_explain_every_word.py`` pastes what the producers make. Pure:
strings in, pairs out.
"""

from __future__ import annotations

import re

from datum.core import budget, hostreasons, needwords, packagewords
from datum.core.rollup import called_for
from datum.core.vocab import (
    Action,
    Direction,
    HostState,
    ResourceState,
    every_item_words,
    registered,
)

HOST_STATE, RESOURCE_STATE, HOST_REASON = "host state", "resource state", "host reason"
REASON, ACTION, DIRECTION = "drift reason", "plan action", "drift direction"

# A resource id followed by the word a pass line or a host reason gives it (``datum.host.output.status_word``):
# its state, or the past tense of its action (``File[/etc/motd] failed``, ``File[/etc/motd] updated``).
_STATE_WORDS = frozenset(s.value for s in ResourceState)
_PAST = frozenset(a.past for a in Action if a is not Action.NONE)
_RESOURCE_WORD = re.compile(r"\]\s+(" + "|".join(sorted(_STATE_WORDS | _PAST)) + r")\b")
_SKIPPED_BECAUSE = re.compile(r"\]\s+skipped:\s+([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)?)\b")

# Why a host awaits a reboot: a change that needs one, Debian's marker, a newer kernel, a kernel not booted.
_REBOOT = re.compile(
    r"\]\s+(?:" + "|".join(sorted(_PAST)) + r"),\s"  # Package[linux-image] updated, running kernel differs
    + "|" + "|".join(re.escape(hostreasons.present(m)) for m in hostreasons.MARKERS)  # /run/reboot-required present
    + r"|(?:^|;\s)kernel \S+ " + re.escape(hostreasons.KERNEL_IN_BOOT) + " "  # kernel 6.2 in /boot, running 6.1
    + r"|newer kernel \S+ " + re.escape(hostreasons.NOT_DEFAULT)
)


def _starts(*said: str) -> re.Pattern[str]:
    """A reason that begins with one of ``said`` (its producer's words: ``datum.core.hostreasons``, ``budget``)."""
    return re.compile("^(?:" + "|".join(re.escape(s) for s in said) + ")")


_UNKNOWN = (HOST_STATE, HostState.UNKNOWN)
_CAME_BACK = (budget.UNHEALTHY, *(f"{budget.CAME_BACK} {s.value}" for s in HostState if s is not HostState.CONVERGED))
_FLEET_DIRECTORY = (
    "^" + re.escape(hostreasons.FLEET_DIRECTORY) + " .* (?:"
    + "|".join(re.escape(p) for p in (hostreasons.NOT_THERE, hostreasons.NOT_A_DIRECTORY, hostreasons.NOT_READABLE))
    + ") " + re.escape(hostreasons.FLEET_SETTING)
)

# Host reasons of a host that reads unknown (or waits on its reboot budget): pattern -> words.
_FAMILIES: list[tuple[re.Pattern[str], list[tuple[str, str]]]] = [
    # before the unreadable report: a directory that "cannot be read by the server" is no host's
    (re.compile(_FLEET_DIRECTORY), [("needs a human", "fleet_directory_unavailable")]),
    (_starts(hostreasons.STALE + " "), [_UNKNOWN, (HOST_REASON, "stale")]),
    (_starts(hostreasons.STOPPED + " "), [_UNKNOWN, (HOST_REASON, "stopped")]),
    (re.compile("^" + re.escape(hostreasons.UNFINISHED) + " .* " + re.escape(hostreasons.UNFINISHED_END)),
     [_UNKNOWN, (HOST_REASON, "unfinished")]),
    (re.compile(re.escape(hostreasons.UNREADABLE) + "|" + re.escape(hostreasons.NOT_A_STATE) + "$"),
     [_UNKNOWN, (HOST_REASON, "unreadable")]),
    (_starts(hostreasons.NO_PASS), [_UNKNOWN]),
    (re.compile("^" + re.escape(hostreasons.NO_MANIFEST) + "|; and " + re.escape(hostreasons.KEPT_INVALID)),
     [_UNKNOWN, (HOST_REASON, "no_manifest")]),
    (_starts(budget.WAITING), [(HOST_REASON, "reboot_budget")]),
    (_starts(budget.HALTED), [(HOST_REASON, "reboot_halted")]),
    (_starts(budget.NO_LEASE), [(HOST_REASON, "no_reboot_lease")]),
    (_starts(budget.TURN), [(HOST_REASON, "reboot_turn")]),
    (_starts(budget.BLOCKED), [(HOST_REASON, "reboot_blocked")]),
    (_starts(budget.PRE_REBOOT_FAILED), [(HOST_REASON, "pre_reboot_failed")]),
    (_starts(*_CAME_BACK), [(HOST_REASON, "reboot_unhealthy")]),
    # "Needs a human" on the page.
    (re.compile(r"^host \S+ " + re.escape(needwords.CAME_BACK_UNHEALTHY)), [("needs a human", "host_unhealthy")]),
    (re.compile(rf"\b{re.escape(needwords.AT_BACKOFF_CAP)}\b"), [("item state", "at_backoff_cap"), (REASON, "backoff")]),
    (re.compile(rf"\b{re.escape(needwords.HELD_BACK)}\b"), [("rollout", "held_back")]),
    (re.compile(rf"\b{re.escape(needwords.STRANDED_IN)}\b"), [("coverage", "stranded")]),
    # A reconciler switched off, as the page's fold and datum drift say it ("pg_roles disabled · no pass runs").
    (re.compile(r"\bno pass runs\b"), [("reconciler state", "disabled")]),
]

# Why a resource refused to act as root, wherever in the line: pattern -> the refusal's name.
REFUSAL = "refusal"
_REFUSALS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(re.escape(said)), name) for said, name in (
        (hostreasons.LINK_RULE, "link_rule"),
        (hostreasons.CHANGED_SINCE, "changed_since_observed"),
        (hostreasons.APPEARED_SINCE, "appeared_since_observed"),
        (hostreasons.HARD_LINKS, "hard_links"),
        (hostreasons.ACCOUNTS_LOCKED, "accounts_locked"),
    )
]

# Which package manager a Package failure came from, by the program its reason names (``datum.core.packagewords``).
PACKAGE_PROVIDER = "package provider"
_PROVIDERS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?:" + "|".join(re.escape(p) for p in programs) + ") " + re.escape(packagewords.EXITED)
                + r" \d|\b" + re.escape(packagewords.refused(name, ""))), name)
    for name, programs in packagewords.PROGRAMS.items()
]

_LABEL = re.compile(r"^(?:reason|host state)\s*:\s*", re.IGNORECASE)


def bare(text: str) -> str:
    """``text`` without the label a pass line gives it (``reason: ...``, ``host state: failed``)."""
    return _LABEL.sub("", text.strip())


def words(text: str) -> list[tuple[str, str]]:
    """The (vocabulary, name) pairs that explain ``text``, each once, the host's state first; [] for none.

    A leading ``reason:`` or ``host state:`` (as ``datum status`` prints them) is ignored.
    """
    line = bare(text)
    found: list[tuple[str, str]] = []
    for pattern, pairs in [*_FAMILIES, *_item_phrases()]:
        if pattern.search(line):
            found += pairs
            break
    said = [m.group(1) for m in _RESOURCE_WORD.finditer(line)]
    if hostreasons.BLOCKED in line:
        said.append(ResourceState.BLOCKED.value)
    if not found and _REBOOT.search(line):
        found.append((HOST_STATE, HostState.AWAITING_REBOOT))
    if not found:  # the host state the resources it names roll up to (contract section 2)
        found += [(HOST_STATE, state) for state in called_for(ResourceState(w) for w in said if w in _STATE_WORDS)[:1]]
    found += [(ACTION if w in _PAST else RESOURCE_STATE, w) for w in said]
    found += [(REASON, m.group(1)) for m in _SKIPPED_BECAUSE.finditer(line) if _registered(m.group(1))]
    found += [(REFUSAL, name) for pattern, name in _REFUSALS if pattern.search(line)]
    found += [(PACKAGE_PROVIDER, name) for pattern, name in _PROVIDERS if pattern.search(line)]
    return [(v, str(n)) for v, n in dict.fromkeys(found)]


def _item_phrases() -> list[tuple[re.Pattern[str], list[tuple[str, str]]]]:
    """The plugins' item phrases (``datum.core.vocab.register_item_words``: ``host db1 is declared and has never
    reported``) as patterns, each to the word it says: its reason (a plugin's by its whole name), or its
    direction."""
    out = []
    for (namespace, key), phrases in every_item_words().items():
        if key in {d.value for d in Direction}:
            word = (DIRECTION, key)
        else:
            word = (REASON, key if _registered(key) else f"{namespace}.{key}")
        for phrase in phrases:
            pattern = re.escape(phrase).replace(r"\{names\}", ".+").replace(r"\{n\}", r"\d+")
            out.append((re.compile(pattern), [word]))
    return out


def _registered(reason: str) -> bool:
    try:
        registered(reason)
    except ValueError:
        return False
    return True
