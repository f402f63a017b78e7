"""The contract's vocabularies as enums, and the closed registry of drift reasons.

Every string an operator reads in a report comes from here. A reconciler may
only emit a reason that is registered in this module: one of the contract's
(``Reason``), or one a plugin registered under its own namespace when it was
loaded (``register_reason``: ``NAMESPACE.NAME``, a ``PluginReason``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from enum import StrEnum


class ResourceState(StrEnum):
    """The state a host resource reached within one pass."""

    PENDING = "pending"
    APPLYING = "applying"
    CONVERGED = "converged"
    DRIFTED = "drifted"
    FAILED = "failed"
    BLOCKED = "blocked"
    SKIPPED = "skipped"


class Action(StrEnum):
    """What the plan intends for a resource."""

    NONE = "none"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    RESTART = "restart"

    @property
    def past(self) -> str:
        """The past tense used in pass lines (``created``, ``updated``, ...)."""
        return _PAST[self]


_PAST = {
    Action.NONE: "none",
    Action.CREATE: "created",
    Action.UPDATE: "updated",
    Action.DELETE: "deleted",
    Action.RESTART: "restarted",
}


class HostState(StrEnum):
    """A host's state across passes.

    Each member carries its place in the rollup (contract section 2), so no other module restates it:
    its ``precedence`` (the first state a pass calls for is the host's: ``datum.core.rollup.called_for``),
    the resource states ``behind`` it, and its ``exit_bit`` in the exit code of ``apply``, ``plan`` and
    ``status`` (section 4). The roll-up, the verdict's bits, ``datum status``'s exit code and
    ``datum explain``'s reading of a pasted line all derive from ``ROLLUP``.
    """

    CONVERGED = "converged"
    DRIFTED = "drifted"
    FAILED = "failed"
    DEGRADED = "degraded"
    AWAITING_REBOOT = "awaiting-reboot"
    UNKNOWN = "unknown"

    @property
    def precedence(self) -> int:
        """Its rule's place in the rollup, first rule that matches: 0 for ``failed``, the last for ``converged``."""
        return _PRECEDENCE[self]

    @property
    def behind(self) -> frozenset[ResourceState]:
        """The resource states that call for it (``failed``: a failed or blocked resource); none for
        ``awaiting-reboot`` (the host's reboot calls for it) and ``converged`` (what is left)."""
        return ROLLUP[self.precedence][1]

    @property
    def exit_bit(self) -> int:
        """Its bit in the exit code (``failed`` and ``unknown``: 4), 0 for ``converged``."""
        return ROLLUP[self.precedence][2]


# The host state rollup, first rule that matches (contract section 2; ``unknown`` for no pass or a report that
# cannot be read comes before it): each state, the resource states that call for it, its exit bit (section 4).
# A host awaiting its reboot calls for ``awaiting-reboot``, one back from a reboot unhealthy for ``degraded``.
ROLLUP: tuple[tuple[HostState, frozenset[ResourceState], int], ...] = (
    (HostState.FAILED, frozenset({ResourceState.FAILED, ResourceState.BLOCKED}), 4),
    (HostState.DRIFTED, frozenset({ResourceState.DRIFTED}), 8),
    (HostState.AWAITING_REBOOT, frozenset(), 16),
    (HostState.DEGRADED, frozenset({ResourceState.SKIPPED}), 32),
    (HostState.UNKNOWN, frozenset({ResourceState.PENDING, ResourceState.APPLYING}), 4),  # a pass that did not finish
    (HostState.CONVERGED, frozenset(), 0),
)
_PRECEDENCE = {state: i for i, (state, _behind, _bit) in enumerate(ROLLUP)}


class RolloutState(StrEnum):
    """A staged rollout's state (``datum.store.rollouts``); what each means is ``datum explain STATE``'s.

    Each member carries its consequences, so no other module spells them: whether it is under way (holds
    hosts back; a newer revision supersedes it), whether the fleet waits for a person (a line of *Needs a
    human*, severity ``look``), and whether it went wrong (printed as bad).
    """

    ROLLING = "rolling"
    PAUSED = "paused"
    HALTED = "halted"
    ABORTED = "aborted"
    DONE = "done"
    SUPERSEDED = "superseded"

    @property
    def under_way(self) -> bool:
        """Rolling, paused or halted: it may hold hosts back, and a newer revision supersedes it."""
        return self in (RolloutState.ROLLING, RolloutState.PAUSED, RolloutState.HALTED)

    @property
    def waits_for_human(self) -> bool:
        """Paused or halted: nothing is released until someone resumes or aborts it."""
        return self in (RolloutState.PAUSED, RolloutState.HALTED)

    @property
    def severity(self) -> str:
        """What it asks of a person, as ``datum explain`` grades it (``datum.core.explain.Act``): ``look`` when
        it waits for one (a line of *Needs a human*), ``wait`` while it rolls, else ``none``."""
        if self.waits_for_human:
            return "look"
        return "wait" if self is RolloutState.ROLLING else "none"

    @property
    def bad(self) -> bool:
        """Halted or aborted: the revision went wrong somewhere (printed in red)."""
        return self in (RolloutState.HALTED, RolloutState.ABORTED)


class RolloutAct(StrEnum):
    """A transition of a rollout's state machine: stored with its time, author and reason, and an event
    (``type: rollout``) in ``GET /v1/events``. Which states each leaves and the one it enters is
    ``TRANSITIONS``; the store's conditional updates and the API's commands read them there."""

    STARTED = "started"
    RELEASED = "released"  # the next wave: the state stays rolling
    HALTED = "halted"
    PAUSED = "paused"
    RESUMED = "resumed"
    ABORTED = "aborted"
    DONE = "done"
    SUPERSEDED = "superseded"

    @property
    def sources(self) -> tuple[RolloutState, ...]:
        """The states this act may leave (none for ``started``: a new rollout)."""
        return TRANSITIONS[self][0]

    @property
    def target(self) -> RolloutState:
        """The state it enters (``started``: rolling, or done for a revision stable at once)."""
        return TRANSITIONS[self][1]


_UNDER_WAY = (RolloutState.ROLLING, RolloutState.PAUSED, RolloutState.HALTED)
TRANSITIONS: dict[RolloutAct, tuple[tuple[RolloutState, ...], RolloutState]] = {
    RolloutAct.STARTED: ((), RolloutState.ROLLING),
    RolloutAct.RELEASED: ((RolloutState.ROLLING,), RolloutState.ROLLING),
    RolloutAct.HALTED: ((RolloutState.ROLLING,), RolloutState.HALTED),
    RolloutAct.PAUSED: ((RolloutState.ROLLING,), RolloutState.PAUSED),
    RolloutAct.RESUMED: ((RolloutState.PAUSED, RolloutState.HALTED), RolloutState.ROLLING),
    RolloutAct.ABORTED: (_UNDER_WAY, RolloutState.ABORTED),
    RolloutAct.DONE: ((RolloutState.ROLLING,), RolloutState.DONE),
    RolloutAct.SUPERSEDED: (_UNDER_WAY, RolloutState.SUPERSEDED),
}
# The acts an operator asks for (``datum rollout pause|resume|abort``, ``POST /v1/rollouts/current/{command}``).
COMMANDS: dict[str, RolloutAct] = {"pause": RolloutAct.PAUSED, "resume": RolloutAct.RESUMED, "abort": RolloutAct.ABORTED}


class IdentityState(StrEnum):
    """An enrolled host's identity as the server keeps it (``host_identities.state``): what ``datum enroll list``
    shows and ``POST /v1/enroll`` answers; what each means is ``datum explain STATE``'s (``("identity state",
    NAME)`` in ``datum.core.glossary``). Listed in this order (pending first: they wait for someone).

    Each member carries its consequences, so no other module spells them: whether the host is given sessions
    (``sessions``: only while active; its enrollment labels count only then), the states a person's decision
    moves it from (``entered_from``: ``datum enroll approve`` and ``deny``, ``datum host revoke``; pending is
    entered only by a request), whether it ends every agent token bound to the host as well as its sessions
    (``ends_bound_tokens``: revoked), and what it asks of a person (``severity``: ``look`` while pending).
    """

    PENDING = "pending"
    ACTIVE = "active"
    DENIED = "denied"
    REVOKED = "revoked"

    @property
    def sessions(self) -> bool:
        """Active: the host is given sessions from its key (``POST /v1/enroll/session``); in any other state it is
        refused one, and entering it ends the sessions it has."""
        return self is IdentityState.ACTIVE

    @property
    def entered_from(self) -> tuple[IdentityState, ...]:
        """The states a person's decision moves an identity from into this one (none for pending: a request)."""
        return _ENTERED_FROM[self]

    @property
    def ends_bound_tokens(self) -> bool:
        """Revoked: every agent token bound to the host ends too, not only its sessions."""
        return self is IdentityState.REVOKED

    @property
    def severity(self) -> str:
        """What it asks of a person, as ``datum explain`` grades it: ``look`` while pending (the approval hook or
        ``datum enroll approve`` decides), else ``none``."""
        return "look" if self is IdentityState.PENDING else "none"


_ENTERED_FROM: dict[IdentityState, tuple[IdentityState, ...]] = {
    IdentityState.PENDING: (),
    IdentityState.ACTIVE: (IdentityState.PENDING, IdentityState.DENIED),  # datum enroll approve
    IdentityState.DENIED: (IdentityState.PENDING, IdentityState.ACTIVE),  # datum enroll deny
    IdentityState.REVOKED: (IdentityState.PENDING, IdentityState.ACTIVE, IdentityState.DENIED),  # datum host revoke
}


class AuditOutcome(StrEnum):
    """How an act recorded in the audit log ended (``audit_log.outcome``; ``GET /v1/audit``, ``datum audit``); what
    each means is ``datum explain OUTCOME``'s (``("audit outcome", NAME)`` in ``datum.core.terms``).

    Each member carries its consequences, so no other module spells them: the HTTP status it is the outcome of
    (``status``: 401 unauthenticated, 403 denied; ``of`` reads a status back), and whether it is a refusal
    (``refusal``: a row written whatever the method, and printed as bad).
    """

    ALLOWED = "allowed"
    DENIED = "denied"
    UNAUTHENTICATED = "unauthenticated"

    @property
    def status(self) -> int | None:
        """The HTTP status that makes this outcome (None for allowed: whatever the route answered)."""
        return _OUTCOME_STATUS.get(self)

    @property
    def refusal(self) -> bool:
        """Denied or unauthenticated: the request was refused before it reached its route."""
        return self.status is not None

    @classmethod
    def of(cls, status: int | None) -> AuditOutcome:
        """The outcome of an answer with HTTP ``status`` (None: an act of the CLI or the server's own)."""
        return next((o for o, s in _OUTCOME_STATUS.items() if s == status), cls.ALLOWED)


_OUTCOME_STATUS: dict[AuditOutcome, int] = {AuditOutcome.UNAUTHENTICATED: 401, AuditOutcome.DENIED: 403}


class Mode(StrEnum):
    """Host reconciliation mode: host configuration, never desired state."""

    ENFORCE = "enforce"
    OBSERVE = "observe"


class RebootPolicy(StrEnum):
    """Whether and when a host may restart itself."""

    NEVER = "never"
    MANUAL = "manual"
    MAINTENANCE = "maintenance"
    AUTOMATIC = "automatic"


class Direction(StrEnum):
    """Which half of the set-diff produced an item."""

    RESTORE = "restore"
    REAP = "reap"
    ALIGN = "align"


class Health(StrEnum):
    """A reconciler's health rollup."""

    OK = "ok"
    DEGRADED = "degraded"
    FAILING = "failing"
    UNKNOWN = "unknown"


class ConvergeMode(StrEnum):
    """How a reconciler acts on confirmed items."""

    ENFORCE = "enforce"
    DRY_RUN = "dry_run"
    RESTORE = "restore"


class Reason(StrEnum):
    """Why an item did not converge on a pass: the closed registry.

    The framework's reasons come first; the reconciler-specific ones follow.
    Adding a reason means adding it here, with a line in ``DESCRIPTIONS``.
    """

    # framework
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    BACKOFF = "backoff"
    CIRCUIT_BREAKER = "circuit_breaker"
    DRY_RUN = "dry_run"
    SUPPRESSED_RESTORE_MODE = "suppressed_restore_mode"
    SUPPRESSED_NO_REAP = "suppressed_no_reap"
    SUPPRESSED_UNCONFIGURED = "suppressed_unconfigured"
    APPLY_FAILED = "apply_failed"
    BLOCKED_ON_OWNER = "blocked_on_owner"
    ACTING = "acting"
    # reconciler-specific
    COOLDOWN = "cooldown"
    PROCESS_SUSPENDED = "process_suspended"
    REFRESH_STALLED = "refresh_stalled"
    REBALANCE_STALLED = "rebalance_stalled"
    LB_HEALTH_SUSPECT = "lb_health_suspect"
    REPLACE_BUDGET = "replace_budget"
    UNEXPECTED_STATE = "unexpected_state"
    UNEXPECTED_KIND = "unexpected_kind"
    UNEXPECTED_VALUE = "unexpected_value"
    IMAGE_MODE = "image_mode"


FRAMEWORK_REASONS: frozenset[Reason] = frozenset(
    {
        Reason.AWAITING_CONFIRMATION,
        Reason.BACKOFF,
        Reason.CIRCUIT_BREAKER,
        Reason.DRY_RUN,
        Reason.SUPPRESSED_RESTORE_MODE,
        Reason.SUPPRESSED_NO_REAP,
        Reason.SUPPRESSED_UNCONFIGURED,
        Reason.APPLY_FAILED,
        Reason.BLOCKED_ON_OWNER,
        Reason.ACTING,
    }
)

SPECIFIC_REASONS: frozenset[Reason] = frozenset(set(Reason) - FRAMEWORK_REASONS)

REASONS: frozenset[str] = frozenset(r.value for r in Reason)

DESCRIPTIONS: dict[Reason, str] = {
    Reason.AWAITING_CONFIRMATION: "streak has not reached confirmationsNeeded yet",
    Reason.BACKOFF: "a previous apply failed; waiting out an exponential window",
    Reason.CIRCUIT_BREAKER: (
        "too many candidates in this direction (over the count, over the fraction, or a reap "
        "into an empty desired set without allow_empty); acted on none"
    ),
    Reason.DRY_RUN: "confirmed and would have been acted on; nothing committed",
    Reason.SUPPRESSED_RESTORE_MODE: "reap not performed: the reconciler is in restore mode",
    Reason.SUPPRESSED_NO_REAP: "reap not performed: reaping is switched off",
    Reason.SUPPRESSED_UNCONFIGURED: "cannot act: a prerequisite is not configured",
    Reason.APPLY_FAILED: "acted this pass and the apply errored",
    Reason.BLOCKED_ON_OWNER: "waits on its owner; the platform has done all it can",
    Reason.ACTING: "confirmed and applied successfully on this pass",
    Reason.COOLDOWN: "waits out the group's cooldown",
    Reason.PROCESS_SUSPENDED: "the process that would act is suspended",
    Reason.REFRESH_STALLED: "an instance refresh cannot advance",
    Reason.REBALANCE_STALLED: "a rebalance cannot move a member without exceeding maxSize",
    Reason.LB_HEALTH_SUSPECT: "every member reads unhealthy from one vantage; replacement held",
    Reason.REPLACE_BUDGET: "more members unhealthy than may be replaced at once",
    Reason.UNEXPECTED_STATE: "read a state it does not know; reported instead of acted on",
    Reason.UNEXPECTED_KIND: "read a kind it does not know; reported instead of acted on",
    Reason.UNEXPECTED_VALUE: "read a value it does not know; reported instead of acted on",
    Reason.IMAGE_MODE: "the node runs image mode; changes only with a new image",
}

# Reasons that put a reconciler's health at `degraded`.
DEGRADING_REASONS: frozenset[Reason] = frozenset(
    {
        Reason.BACKOFF,
        Reason.APPLY_FAILED,
        Reason.CIRCUIT_BREAKER,
        Reason.SUPPRESSED_UNCONFIGURED,
    }
)


class PluginReason(str):
    """A reconciler-specific reason a plugin registered under its namespace: ``namespace.name``.

    A string, with the ``value`` a ``Reason`` has, so both read the same
    wherever a reason is reported.
    """

    __slots__ = ()

    @property
    def value(self) -> str:
        return str(self)

    @property
    def namespace(self) -> str:
        return self.partition(".")[0]


AnyReason = Reason | PluginReason

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_PLUGIN_REASONS: dict[str, PluginReason] = {}
_PLUGIN_DESCRIPTIONS: dict[str, str] = {}
_PLUGIN_DOS: dict[str, str] = {}
# How a plugin words a group of its items (``ReconcilerPlugin.items``): (namespace, key) -> (one, many).
_ITEM_WORDS: dict[tuple[str, str], tuple[str, str]] = {}


def register_reason(namespace: str, name: str, description: str, do: str = "") -> PluginReason:
    """Register ``namespace.name``; raise ``ValueError`` when it cannot be.

    Names are lower-case identifiers; the description is what ``datum explain``
    says, ``do`` what it tells the operator to do (a generic "go and look" when
    empty). Registering the same reason again with the same description is
    harmless (a plugin loaded twice); with another one it is refused.
    """
    for part, what in ((namespace, "namespace"), (name, "name")):
        if not _NAME.match(part):
            raise ValueError(f"reason {what} {part!r} is not a lower-case identifier ([a-z][a-z0-9_]*)")
    if not description.strip():
        raise ValueError(f"reason {namespace}.{name} needs a description")
    key = f"{namespace}.{name}"
    known = _PLUGIN_DESCRIPTIONS.get(key)
    if known is not None and known != description:
        raise ValueError(f"reason {key!r} is already registered with another description")
    _PLUGIN_DESCRIPTIONS[key] = description
    if do.strip():
        _PLUGIN_DOS[key] = do
    return _PLUGIN_REASONS.setdefault(key, PluginReason(key))


def plugin_do(reason: str) -> str:
    """What a plugin's reason tells the operator to do, as its plugin registered it; "" when it said nothing."""
    return _PLUGIN_DOS.get(str(reason), "")


ITEM_FIELDS = ("n", "names")  # what an item phrase may name: how many items, and which (a few, then "and N more")


def item_words_problem(key: str, one: str, many: str, reasons: Iterable[str] = ()) -> str | None:
    """What is wrong with a plugin's item phrase ``key: (one, many)``, or None: ``key`` is a direction, one of the
    framework's reasons or one of the plugin's own (``reasons``, short names), and each phrase names
    ``{names}`` and no field but ``ITEM_FIELDS``."""
    if key not in {d.value for d in Direction} | {r.value for r in FRAMEWORK_REASONS} | set(reasons):
        return f"item phrase {key!r}: not a direction, a framework reason or one of the plugin's own reasons"
    for phrase in (one, many):
        fields = {f for _text, f, _spec, _conv in string.Formatter().parse(phrase) if f is not None}
        if "names" not in fields or not fields <= set(ITEM_FIELDS):
            return f"item phrase {key!r}: {phrase!r} must name {{names}} and may name {{n}}, nothing else"
    return None


def register_item_words(namespace: str, key: str, one: str, many: str) -> None:
    """How the reconciler ``namespace`` words a group of its items: ``key`` is a direction, a framework reason or
    one of its own reasons (short name); ``one`` and ``many`` the phrase for one item and for several, with
    ``{names}`` and ``{n}`` (checked by ``item_words_problem``)."""
    _ITEM_WORDS[(namespace, key)] = (one, many)


def item_words(namespace: str, key: str) -> tuple[str, str] | None:
    """The phrase the reconciler ``namespace`` registered for ``key`` (a direction, or a reason: a plugin's by
    its whole name or short name), or None."""
    if key.startswith(namespace + "."):
        key = key[len(namespace) + 1:]
    return _ITEM_WORDS.get((namespace, key))


def every_item_words() -> dict[tuple[str, str], tuple[str, str]]:
    """Every registered item phrase: (namespace, key) -> (one, many)."""
    return dict(sorted(_ITEM_WORDS.items()))


def unregister_namespace(namespace: str) -> None:
    """Forget every reason and item phrase of ``namespace`` (a plugin that failed to load after registering)."""
    for key in [k for k in _PLUGIN_REASONS if k.partition(".")[0] == namespace]:
        del _PLUGIN_REASONS[key]
        del _PLUGIN_DESCRIPTIONS[key]
        _PLUGIN_DOS.pop(key, None)
    for pair in [p for p in _ITEM_WORDS if p[0] == namespace]:
        del _ITEM_WORDS[pair]


def plugin_reasons() -> dict[PluginReason, str]:
    """Every plugin reason registered so far, with its description."""
    return {_PLUGIN_REASONS[k]: d for k, d in sorted(_PLUGIN_DESCRIPTIONS.items())}


def all_reasons() -> list[AnyReason]:
    """The contract's reasons, then the plugins' (what metrics enumerate)."""
    return [*Reason, *plugin_reasons()]


def describe(reason: AnyReason) -> str:
    """What a registered reason means."""
    if isinstance(reason, Reason):
        return DESCRIPTIONS[reason]
    return _PLUGIN_DESCRIPTIONS[str(reason)]


def registered(reason: str) -> AnyReason:
    """Return the registered reason for ``reason``, or raise ``ValueError``."""
    try:
        return Reason(reason)
    except ValueError:
        pass
    found = _PLUGIN_REASONS.get(str(reason))
    if found is None:
        raise ValueError(f"reason {reason!r} is not in the registry")
    return found


def is_specific(reason: AnyReason) -> bool:
    """A reconciler's reason (the contract's specific ones, or any plugin's), not the framework's."""
    return isinstance(reason, PluginReason) or reason in SPECIFIC_REASONS
