"""What every reason, host state, resource state and health means, and what the operator should do.

The one source of this text: the page shows it in place and ``datum explain
NAME`` prints it. Each entry says what the word means and which of the seed's
two opposite responses it calls for: *wait* (it clears by itself) or *look*
(it will not, someone has to act), plus *owner* (only the item's owner can
clear it) and *none* (nothing is wrong). ``backoff`` and ``apply_failed`` are
*depends*: the reason alone cannot tell "failed once, retries shortly" from
"failed twelve times and parked at the backoff cap"; ``advice`` decides per
item from its ``failures`` and backoff window.

A test fails when a registered reason, or a value of any vocabulary here, has
no entry.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from enum import StrEnum

from datum.core.glossary import WORDS
from datum.core.memory import BackoffPolicy
from datum.core.phrases import bare, words
from datum.core.terms import WORDS as TERMS
from datum.core.vocab import (
    DESCRIPTIONS,
    AnyReason,
    Health,
    HostState,
    Reason,
    ResourceState,
    plugin_do,
    plugin_reasons,
)


class Act(StrEnum):
    """What the operator should do about it, in one word."""

    WAIT = "wait"
    LOOK = "look"
    OWNER = "owner"
    NONE = "none"
    DEPENDS = "depends"


ACT_LABEL = {
    Act.WAIT: "wait",
    Act.LOOK: "go and look",
    Act.OWNER: "waits on its owner",
    Act.NONE: "nothing to do",
    Act.DEPENDS: "wait, or go and look",
}


class Vocabulary(StrEnum):
    REASON = "drift reason"
    HOST_STATE = "host state"
    RESOURCE_STATE = "resource state"
    HEALTH = "reconciler health"
    HOST_REASON = "host reason"
    # datum.core.glossary's
    DIRECTION = "drift direction"
    ACTION = "plan action"
    HOST_MODE = "host mode"
    RECONCILER_MODE = "reconciler mode"
    REBOOT_POLICY = "reboot policy"
    ADVICE = "advice"
    COVERAGE = "coverage"
    ITEM_STATE = "item state"
    RECONCILER_STATE = "reconciler state"
    ROLLOUT_STATE = "rollout state"
    IDENTITY_STATE = "identity state"
    REFUSAL = "refusal"
    NEED = "needs a human"
    ROLLOUT = "rollout"
    PACKAGE_PROVIDER = "package provider"
    # datum.core.terms'
    ERROR_CODE = "error code"
    SEVERITY = "severity"
    AUDIT_OUTCOME = "audit outcome"
    ALERT = "alert"


@dataclass(frozen=True)
class Explanation:
    """One word of one vocabulary: a one-line summary, what it means, what to do."""

    vocabulary: Vocabulary
    name: str
    summary: str
    means: str
    do: str
    act: Act

    def to_json(self) -> dict[str, str]:
        return {
            "vocabulary": self.vocabulary.value,
            "name": self.name,
            "summary": self.summary,
            "means": self.means,
            "do": self.do,
            "act": self.act.value,
        }

    def text(self, width: int = 80) -> str:
        """The terminal form, its paragraphs wrapped to ``width``."""
        wrap = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="  ")
        heading = textwrap.fill(f"{self.name} ({self.vocabulary.value}): {self.summary}", width, subsequent_indent="  ")
        return (
            f"{heading}\n\n"
            f"{wrap.fill(self.means)}\n\n"
            f"{wrap.fill(f'what to do ({ACT_LABEL[self.act]}): {self.do}')}\n"
        )


_R = Vocabulary.REASON
_LOOK_UNKNOWN = (
    "Go and look: Datum met something it does not know and acts on nothing it cannot read. Check the item "
    "in the substrate; if the value is legitimate, Datum needs to learn it (a newer release or a plugin update)."
)

# reason -> (means, do, act); the summary is vocab.DESCRIPTIONS.
_REASONS: dict[Reason, tuple[str, str, Act]] = {
    Reason.AWAITING_CONFIRMATION: (
        "The item has diverged on fewer consecutive passes (streak) than confirmationsNeeded. Datum never "
        "acts on one read, so it waits for the difference to be seen again before it changes anything.",
        "Wait: the item is acted on once its streak reaches confirmationsNeeded, or clears by itself if the "
        "read was transient. Go and look only if it stays here pass after pass (the difference flaps).",
        Act.WAIT,
    ),
    Reason.BACKOFF: (
        "A previous apply of this item failed, and it sits out retryAfterPasses passes before the next try; "
        "the window doubles with each consecutive failure, up to the backoff cap. lastErr says what broke.",
        "Failed once or twice and retrying soon: wait. failures climbing, or parked at the backoff cap: it "
        "will not fix itself, go and look at lastErr and remove the cause; the next retry then converges.",
        Act.DEPENDS,
    ),
    Reason.CIRCUIT_BREAKER: (
        "More items in this direction were candidates than the breaker allows (a count, a fraction of what "
        "exists, or a reap into an empty desired set without allow_empty), so Datum acted on none of them. "
        "Mass action usually means a bad read, not a real wish.",
        "Go and look: check that desired and actual state were read correctly (an empty or truncated desired "
        "set, a wrong root). If the change is really meant, raise the direction's breaker threshold or make "
        "it in smaller steps; the items then proceed on the next pass.",
        Act.LOOK,
    ),
    Reason.DRY_RUN: (
        "Confirmed and would have been acted on, but the reconciler runs in dry_run mode: nothing was committed.",
        "Nothing is wrong. Review what it would do; switch the reconciler to enforce when it should be done.",
        Act.NONE,
    ),
    Reason.SUPPRESSED_RESTORE_MODE: (
        "A reap deliberately not performed: the reconciler runs in restore mode, which creates and aligns "
        "but never deletes. Recorded so a fleet left in safe-mode does not look like one with nothing to reap.",
        "Nothing to fix if safe-mode is meant. To let Datum delete these, switch the reconciler to enforce; "
        "otherwise remove them by hand or give them a desired row.",
        Act.NONE,
    ),
    Reason.SUPPRESSED_NO_REAP: (
        "A reap deliberately not performed: reaping is switched off for this reconciler (no_reap, safe-mode). "
        "A reap is the reconciler's own removal of what is there and not desired: a bucket deleted, a role "
        "dropped; for the hosts reconciler, the agent tokens bound to an undeclared host revoked (nothing on "
        "the host is touched).",
        "Nothing to fix if safe-mode is meant. If the item should be there, declare it (its desired state: for "
        "a host, nodes.yaml expected: true); if not, turn reaping back on to let Datum reap it, or remove it "
        "by hand (datum host revoke NAME for a host).",
        Act.NONE,
    ),
    Reason.SUPPRESSED_UNCONFIGURED: (
        "The reconciler cannot act because a prerequisite is not configured (no backup target, no "
        "credential, no endpoint). Nobody chose this: setup is incomplete.",
        "Go and look: complete the reconciler's configuration. Waiting changes nothing.",
        Act.LOOK,
    ),
    Reason.APPLY_FAILED: (
        "Datum acted on the item this pass and the apply errored; lastErr says why. It enters backoff on "
        "the next pass.",
        "Failed once or twice, it may be transient: wait for the retry (backoff). Failed three times or more, "
        "or parked at the backoff cap: it will not fix itself, go and look at lastErr and remove the cause.",
        Act.DEPENDS,
    ),
    Reason.BLOCKED_ON_OWNER: (
        "The platform has done everything it can and the item waits on its owner, e.g. a tenant's bucket "
        "delete parked while the bucket still holds objects. Counted in blocked, never in drift, and never "
        "degrades health.",
        "Nothing for the operator to fix: the owner must act (here, empty the bucket), then Datum finishes "
        "by itself. Tell the owner if it has waited long.",
        Act.OWNER,
    ),
    Reason.ACTING: (
        "Confirmed and applied successfully on this pass; the next pass should find it converged.",
        "Wait one pass. If the same item is acting pass after pass, the change does not stick (something "
        "else undoes it): go and look.",
        Act.WAIT,
    ),
    Reason.COOLDOWN: (
        "An auto scaling group's policy-driven change waits out the group's cooldown.",
        "Wait: it proceeds when the cooldown ends.",
        Act.WAIT,
    ),
    Reason.PROCESS_SUSPENDED: (
        "The process that would act (Launch, Terminate, InstanceRefresh, AZRebalance) is suspended on the group.",
        "Go and look: someone suspended it. Resume the process when the suspension is no longer meant.",
        Act.LOOK,
    ),
    Reason.REFRESH_STALLED: (
        "An instance refresh cannot advance: its healthy floor cannot be met at the group's maxSize.",
        "Go and look: raise the group's maxSize or lower the refresh's minimum healthy percentage.",
        Act.LOOK,
    ),
    Reason.REBALANCE_STALLED: (
        "An AZ rebalance cannot move a member without exceeding the group's maxSize.",
        "Go and look: raise maxSize for the rebalance, or accept the imbalance.",
        Act.LOOK,
    ),
    Reason.LB_HEALTH_SUSPECT: (
        "Every member of a load_balancer-health group reads unhealthy from the load balancer's single "
        "vantage; replacement is held and judged on instance health instead.",
        "Go and look at the load balancer and its health check, not the instances: replacing them all "
        "would not help.",
        Act.LOOK,
    ),
    Reason.REPLACE_BUDGET: (
        "More members are unhealthy than may be replaced at once; these wait for earlier replacements to finish.",
        "Wait: they are replaced as earlier replacements finish. Go and look if the count does not fall.",
        Act.WAIT,
    ),
    Reason.UNEXPECTED_STATE: (
        "The reconciler read a state it does not know, and reports it instead of acting on it.",
        _LOOK_UNKNOWN,
        Act.LOOK,
    ),
    Reason.UNEXPECTED_KIND: (
        "The reconciler read a kind it does not know, and reports it instead of acting on it.",
        _LOOK_UNKNOWN,
        Act.LOOK,
    ),
    Reason.UNEXPECTED_VALUE: (
        "The reconciler read a value it does not know, and reports it instead of acting on it.",
        _LOOK_UNKNOWN,
        Act.LOOK,
    ),
    Reason.IMAGE_MODE: (
        "The node runs image mode (bootc): its /usr is the read-only OS image, so the item changes only "
        "when a new image is booted. Datum reports the difference and never writes.",
        "Go and look: boot an image that carries the desired version. A host binary that differs from the "
        "control plane's means the OS image and the control plane were not released together.",
        Act.LOOK,
    ),
}

# (vocabulary, name) -> (summary, means, do, act)
_OTHERS: dict[tuple[Vocabulary, str], tuple[str, str, str, Act]] = {
    (Vocabulary.HOST_STATE, HostState.CONVERGED): (
        "every resource is as the manifest asks",
        "The last pass found every resource converged, and no reboot is pending.",
        "Nothing.",
        Act.NONE,
    ),
    (Vocabulary.HOST_STATE, HostState.DRIFTED): (
        "observe mode found resources that differ from the manifest",
        "The host runs in observe mode: the last pass found resources that differ from the manifest and "
        "changed nothing.",
        "Go and look at the differences (the host's page here shows the diffs, as datum plan does on the "
        "host); then run in enforce mode or change the manifest.",
        Act.LOOK,
    ),
    (Vocabulary.HOST_STATE, HostState.FAILED): (
        "at least one resource failed",
        "At least one resource failed on the last pass; a blocked resource always traces back to one. The "
        "reason names the resources behind it.",
        "Go and look at the failed resource's error (the host's page here, or datum status on the host), "
        "fix the cause; the next pass retries.",
        Act.LOOK,
    ),
    (Vocabulary.HOST_STATE, HostState.DEGRADED): (
        "some resources were skipped, or the host came back from its reboot unhealthy",
        "At least one resource was skipped (its reason says why) and the rest converged; or the host is back "
        "from a reboot made under its group's reboot lease and its health check or post_reboot has not passed "
        "yet (the reason: came back unhealthy, and what failed).",
        "Look at why they were skipped; often intended (not applicable on this host), then nothing to do. A "
        "host that came back unhealthy: go and look at its service (reboot_unhealthy).",
        Act.LOOK,
    ),
    (Vocabulary.HOST_STATE, HostState.AWAITING_REBOOT): (
        "a change needs a reboot that has not happened",
        "A change made by this or an earlier pass needs a reboot, and the boot id has not changed since.",
        "With reboot policy maintenance or automatic, wait for the window, and for a slot of the group's "
        "reboot budget (datum agent: the reason says when it waits for one). With manual or never, someone "
        "must reboot the host (datum reboot); it stays here until then.",
        Act.DEPENDS,
    ),
    (Vocabulary.HOST_STATE, HostState.UNKNOWN): (
        "no pass has completed, or the last report cannot be read",
        "Datum cannot say where the host stands: no pass has completed yet, the pass was stopped, or the "
        "stored report cannot be read (the reason names the field at fault).",
        "Go and look: check that the agent runs and reports; a report that cannot be read is replaced by "
        "the next good pass.",
        Act.LOOK,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.PENDING): (
        "not reached yet in this pass",
        "The pass has not reached this resource yet.",
        "Wait.",
        Act.WAIT,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.APPLYING): (
        "being applied now",
        "The pass is applying this resource now.",
        "Wait.",
        Act.WAIT,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.CONVERGED): (
        "as the manifest asks",
        "The resource is as the manifest asks (it may have been changed on this pass to get there).",
        "Nothing.",
        Act.NONE,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.DRIFTED): (
        "differs from the manifest; observe mode changed nothing",
        "The resource differs from the manifest and the pass ran in observe mode, so nothing was changed.",
        "Go and look at the diff; run in enforce mode or change the manifest.",
        Act.LOOK,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.FAILED): (
        "could not be read or applied",
        "The resource could not be read or applied on this pass; its error says why.",
        "Go and look at the error and fix the cause; the next pass retries.",
        Act.LOOK,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.BLOCKED): (
        "not attempted: something it requires failed",
        "The resource was not attempted because a resource it requires failed or is blocked.",
        "Go and look at what it is blocked by; fixing that unblocks this one.",
        Act.LOOK,
    ),
    (Vocabulary.RESOURCE_STATE, ResourceState.SKIPPED): (
        "skipped on this pass",
        "The resource was skipped (its reason says why, e.g. not applicable here); the host reads degraded.",
        "Look whether that is intended; if so, nothing to do.",
        Act.LOOK,
    ),
    (Vocabulary.HEALTH, Health.OK): (
        "the last pass completed and nothing needs attention",
        "The last executed pass completed; no item is in backoff or apply_failed, no breaker tripped, "
        "nothing waits on configuration. Items waiting for confirmation or on their owner do not count.",
        "Nothing.",
        Act.NONE,
    ),
    (Vocabulary.HEALTH, Health.DEGRADED): (
        "items are failing, a breaker tripped, or configuration is missing",
        "The last executed pass completed, but an item is in backoff or apply_failed, a breaker tripped, "
        "or items wait on suppressed_unconfigured.",
        "Go and look at the items: their reasons say which, and whether to wait or act.",
        Act.LOOK,
    ),
    (Vocabulary.HEALTH, Health.FAILING): (
        "the last pass could not complete",
        "The last executed pass could not complete: desired or actual state could not be read. The items "
        "shown come from the last completed pass.",
        "Go and look at the pass's error (the substrate or the store it reads) and fix it; the next pass "
        "that completes replaces the items.",
        Act.LOOK,
    ),
    (Vocabulary.HEALTH, Health.UNKNOWN): (
        "no pass has executed yet",
        "No pass of this reconciler has executed yet, so nothing is known.",
        "Wait for the first tick; if it never comes, check that the scheduler runs (datum serve) or run "
        "datum reconcile NAME.",
        Act.WAIT,
    ),
}


# Host reasons worth a word of their own: name -> (summary, means, do, act); more in datum.core.glossary.
# ``datum explain`` takes the name or the reason as the host shows it (``datum.core.phrases``).
_HOST_REASONS: dict[str, tuple[str, str, str, Act]] = {
    "reboot_budget": (
        "a reboot is due, and the group's reboot budget is full",
        "The host needs a reboot its policy (automatic, or maintenance inside the window) would make now, "
        "but as many hosts of its group (nodes.yaml group) as [fleet] reboot_concurrency allows are "
        "rebooting: (2/2 rebooting) counts them. It does not reboot, and asks again at its next pass. A "
        "slot frees when a rebooting host reports from a new boot id; one that has not come back by [fleet] "
        "reboot_timeout halts the group (reboot_halted).",
        "Wait: it reboots at a pass after a slot frees. Go and look if it waits long: GET /v1/reboots or the "
        "page's Rebooting section names the hosts holding the slots.",
        Act.WAIT,
    ),
    "reboot_halted": (
        "a reboot is due, and the group's reboots are halted",
        "A host of the same group took a reboot lease and has not reported from a new boot, converged and "
        "healthy, within [fleet] reboot_timeout: it may not have come back, or came back unhealthy (the reason "
        "says so: its health check or post_reboot failed, or it is not converged). Until it does, or an operator clears "
        "its lease, no other host of the group is granted one, so that one host that does not come back is "
        "looked at before the next goes down. This host stays up and asks again at its next pass.",
        "Go and look at the host the reason names (GET /v1/reboots, the page's Rebooting section): bring it "
        "back, then its next report frees the group; or, once looked at, run datum reboots clear HOST.",
        Act.LOOK,
    ),
    "reboot_turn": (
        "a reboot is due, and hosts before it in its group's reboot_order go first",
        "The group has a reboot_order in nodes.yaml (by name, or a list of hosts), and hosts before this one "
        "in it asked for a reboot lease too: the free slots go to them first (the reason names them). An ask "
        "holds a host's place for two of its agent's intervals ([fleet] reboot_request_ttl): a host that stops "
        "asking (it no longer needs a reboot) holds no one back once its ask expired.",
        "Wait: it reboots when the hosts ahead of it have rebooted and come back healthy. Go and look if it "
        "waits long: GET /v1/reboots lists the group's waiting hosts in order and who holds the slots.",
        Act.WAIT,
    ),
    "reboot_blocked": (
        "a reboot is due, and the Prometheus block query holds every group's reboots",
        "[fleet] reboot_block_query returns series on [fleet] prometheus_url (for example a paging alert "
        "firing), or Prometheus cannot be asked (fail safe): no reboot lease is granted in any group, as kured "
        "does. The reason says the query and what it returned.",
        "Wait for the alert to resolve; go and look at it (or at why Prometheus cannot be reached) if it lasts. "
        "datum reboots list and the page's Rebooting section say whether reboots are blocked.",
        Act.WAIT,
    ),
    "pre_reboot_failed": (
        "a reboot is due, and the pre_reboot hook failed",
        "The host was granted its reboot lease, but [host] pre_reboot (a drain, say) did not exit 0 within "
        "[host] hook_timeout: it did not reboot, and gave the lease back. The reason names the hook's program "
        "and its output's tail. It tries again at its next pass.",
        "Go and look at why the hook fails on the host (run it by hand), and fix it or the hook.",
        Act.LOOK,
    ),
    "reboot_unhealthy": (
        "back from its reboot, and not healthy yet: its reboot lease holds",
        "The host reported from a new boot, but not converged, or its health check ([host] health_check, "
        "health_url) or post_reboot hook failed (then it reads degraded, from the first check that failed until "
        "one passes, even once its lease is cleared): the server keeps its reboot lease (GET /v1/reboots says "
        "unhealthy and why), so the next host of its group does not go down. The agent checks again at each "
        "pass; past [fleet] reboot_timeout the group's reboots halt (reboot_halted).",
        "Go and look at the host's service and at what the detail names; once it is healthy its next pass frees "
        "the lease. Once looked at, datum reboots clear HOST lets the group go on.",
        Act.LOOK,
    ),
    "no_reboot_lease": (
        "a reboot is due, and the server could not grant the reboot lease",
        "The host needs a reboot its policy would make now, but datum agent reboots only under a lease of "
        "its group's reboot budget, and the server could not be asked (unreachable, an error answer, a "
        "policy that refuses fleet:TakeRebootLease): the reason says which. The host stays up.",
        "Go and look at what the reason names: the server's reachability, the agent's token, the Cedar "
        "policy (fleet:TakeRebootLease for the agent's own host). It asks again at its next pass.",
        Act.LOOK,
    ),
}


def _build() -> list[Explanation]:
    out = [
        Explanation(_R, r.value, DESCRIPTIONS[r], means, do, act) for r, (means, do, act) in _REASONS.items()
    ]
    out += [
        Explanation(vocabulary, str(name), summary, means, do, act)
        for (vocabulary, name), (summary, means, do, act) in _OTHERS.items()
    ]
    out += [
        Explanation(Vocabulary.HOST_REASON, name, summary, means, do, act)
        for name, (summary, means, do, act) in _HOST_REASONS.items()
    ]
    out += [
        Explanation(Vocabulary(vocabulary), str(name), summary, means, do, Act(act))
        for (vocabulary, name), (summary, means, do, act) in {**WORDS, **TERMS}.items()
    ]
    return out


EXPLANATIONS: tuple[Explanation, ...] = tuple(_build())
_BY_KEY: dict[tuple[Vocabulary, str], Explanation] = {(e.vocabulary, e.name): e for e in EXPLANATIONS}


def normalise(name: str) -> str:
    """``Blocked-On-Owner`` -> ``blocked_on_owner``: the form names are compared in."""
    return name.strip().lower().replace("-", "_")


def plugin_explanations() -> list[Explanation]:
    """The reasons plugins registered: what their plugin says they mean; an operator goes and looks."""
    return [
        Explanation(
            _R,
            reason.value,
            description,
            f"A reason of the {reason.namespace} reconciler plugin: {description}.",
            plugin_do(reason) or f"Go and look at the item's lastErr, and at the {reason.namespace} plugin's documentation.",
            Act.LOOK,
        )
        for reason, description in plugin_reasons().items()
    ]


def known() -> list[str]:
    """Every name that can be explained, sorted, each once."""
    return sorted({e.name for e in (*EXPLANATIONS, *plugin_explanations())})


def lookup(name: str) -> list[Explanation]:
    """Every explanation of ``name`` (``failed`` is a host state and a resource state), or [].

    A plugin's reason is found by its whole name or by the name within its namespace
    (``membership_outside_prefix``). A line a surface printed is read into its words
    (``datum.core.phrases``): a host reason as the host shows it
    (``File[motd] failed: permission denied``, ``waiting for the group's reboot budget (2/2 rebooting)``).
    """
    key = normalise(bare(name))
    plugins = plugin_explanations()
    found = [e for e in (*EXPLANATIONS, *plugins) if normalise(e.name) == key]
    if not found:
        found = [e for e in plugins if normalise(e.name.partition(".")[2]) == key]
    if found:
        return found
    out: list[Explanation] = []
    for vocabulary, word in words(name):
        try:
            out.append(explain(Vocabulary(vocabulary), word))
        except KeyError:
            continue
    return out


def host_explanation(state: str, reason: str | None) -> Explanation:
    """What a host in ``state`` with ``reason`` calls for: the host reason's own explanation when it has one
    (its agent fell silent, it waits for the reboot budget), else its state's. The page and the CLI show this."""
    own = [e for e in lookup(reason or "") if e.vocabulary is Vocabulary.HOST_REASON] if reason else []
    return own[0] if own else explain(Vocabulary.HOST_STATE, state)


def explain(vocabulary: Vocabulary, name: str) -> Explanation:
    """The explanation of ``name`` in ``vocabulary``; KeyError when there is none."""
    found = _BY_KEY.get((vocabulary, str(name)))
    if found is None and vocabulary is _R:
        found = next((e for e in plugin_explanations() if e.name == str(name)), None)
    if found is None:
        raise KeyError((vocabulary, str(name)))
    return found


# Consecutive failures from which a failing item (``backoff`` or ``apply_failed``) is a human's: failed once or
# twice, it retries shortly; three times, it will not fix itself.
REPEATED_FAILURES = 3


def advice(reason: AnyReason, failures: int | None = None, backoff: BackoffPolicy | None = None) -> Act:
    """What one item calls for: wait or look, deciding ``depends`` from its failures and backoff window.

    ``backoff`` and ``apply_failed`` read the same (the pass that retries an item and the passes that wait
    it out are one situation): *look* once it failed ``REPEATED_FAILURES`` times or is parked at the backoff
    cap (``at_backoff_cap``), else *wait*.
    """
    if not isinstance(reason, Reason):
        return Act.LOOK  # a plugin's reason: its plugin knows, so go and look
    act = _REASONS[reason][2]
    if act is not Act.DEPENDS:
        return act
    n = failures or 0
    return Act.LOOK if n >= REPEATED_FAILURES or at_backoff_cap(reason, failures, backoff) else Act.WAIT


def at_backoff_cap(reason: AnyReason, failures: int | None, backoff: BackoffPolicy | None) -> bool:
    """Whether a failing item (``backoff`` or ``apply_failed``) has a window at the policy's cap: waiting will
    not help. The same on the pass that retries it as on the passes that wait it out."""
    if reason not in (Reason.BACKOFF, Reason.APPLY_FAILED) or not failures or backoff is None:
        return False
    return backoff.at_cap(failures)
