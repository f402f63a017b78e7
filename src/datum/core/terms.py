"""The words of the API's fields and of the alerts, for ``datum explain``: error codes, a line's severity,
an audit row's outcome, and the name of every alert ``contrib/prometheus/datum-rules.yml`` ships.

An operator reads ``"code": "CONFLICT"`` in an answer, ``"severity": "check"`` in ``GET /v1/attention``,
``"outcome": "denied"`` in ``GET /v1/audit``, or is paged by ``DatumHostNeverReported``, and asks
``datum explain`` what it is. The error codes' meanings are ``datum.core.findings.ErrorCode``'s own (the
status, the exit status, the description); this module adds what to do. A test reads the rules file and
the OpenAPI document and fails on a word with no entry here.

Plain data, as ``datum.core.glossary``: (vocabulary, name) -> (summary, means, do, act).
"""

from __future__ import annotations

from datum.core.findings import ErrorCode
from datum.core.vocab import AuditOutcome

ERROR_CODE, SEVERITY, AUDIT_OUTCOME, ALERT = "error code", "severity", "audit outcome", "alert"

_CODE_DO: dict[ErrorCode, tuple[str, str]] = {
    ErrorCode.USAGE: ("Read the command's --help and run it again with what it takes.", "look"),
    ErrorCode.UNAUTHENTICATED: ("Send a valid bearer token (datum token create; --token-file, DATUM_TOKEN_FILE).", "look"),
    ErrorCode.FORBIDDEN: ("Use a token whose principal may do it (datum authz explain says which policy refused), "
                          "or ask an admin to grant it.", "look"),
    ErrorCode.NOT_FOUND: ("Check the name: datum hosts, datum reconcilers and datum rollout status list what exists.",
                          "look"),
    ErrorCode.METHOD_NOT_ALLOWED: ("Use the method the path answers (GET /v1 lists every endpoint with its method).",
                                   "look"),
    ErrorCode.REQUEST_TIMEOUT: ("Send the request again; if it keeps timing out, look at the network between "
                                "client and server.", "wait"),
    ErrorCode.CONFLICT: ("Read the state again (the answer says what it is now) and decide again.", "look"),
    ErrorCode.PAYLOAD_TOO_LARGE: ("Send less: the finding names the bound ([server] max_body_bytes).",
                                  "look"),
    ErrorCode.INVALID_INPUT: ("Fix the field each finding names (its path in `field`) and send it again.", "look"),
    ErrorCode.INTERNAL: ("Go and look at the server's log at the time of the answer: it holds the traceback.", "look"),
    ErrorCode.UNAVAILABLE: ("Wait and retry: the answer says what is missing (the store, the fleet directory); go "
                            "and look if it lasts.", "wait"),
}


def _codes() -> dict[tuple[str, str], tuple[str, str, str, str]]:
    out = {}
    for code, (do, act) in _CODE_DO.items():
        answered = f"The API answers it with HTTP {code.http_status}; " if code.http_status else "Only a command says it; "
        out[(ERROR_CODE, code.value)] = (
            code.description,
            f"{answered}a command that meets it ends with exit status {code.exit_status}. Each finding of the "
            "answer says what, and where (`field`).",
            do,
            act,
        )
    return out


_OTHERS: dict[tuple[str, str], tuple[str, str, str, str]] = {
    (SEVERITY, "look"): (
        "a line of Needs a human that will not clear by itself",
        "The situation of the line will not change by itself: someone has to act (the red go and look).",
        "Go and look: the line's do says what, its detail what was found.",
        "look",
    ),
    (SEVERITY, "check"): (
        "a line of Needs a human that may be intended",
        "The situation may be meant (a host that skipped resources not applicable to it): check that it is.",
        "Check it is intended; if so, nothing to do.",
        "look",
    ),
    (AUDIT_OUTCOME, AuditOutcome.ALLOWED): (
        "the request was authorised and done",
        "An acting request that the Cedar policies allowed; the row names the deciding policies.",
        "Nothing.",
        "none",
    ),
    (AUDIT_OUTCOME, AuditOutcome.DENIED): (
        "the request was refused by the Cedar policies",
        f"A token was recognised but its principal may not do this ({AuditOutcome.DENIED.status}); the row names "
        "who and what.",
        "Nothing unless it is unexpected: then look at who asked (datum token list) and why.",
        "none",
    ),
    (AUDIT_OUTCOME, AuditOutcome.UNAUTHENTICATED): (
        "the request came with no token, or one not known",
        f"A request with a missing, unknown or revoked token ({AuditOutcome.UNAUTHENTICATED.status}).",
        "Nothing unless they repeat: then look at where they come from (a revoked agent, a probe).",
        "none",
    ),
}

# Every alert of the shipped rules: (summary, do, act, the word to read next with datum explain).
_ALERTS: dict[str, tuple[str, str, str, str]] = {
    "DatumStrandedRows": ("rows sit in a status no work query selects and nothing owns",
                          "Add the status to the work query or give it an owner.", "look", "stranded"),
    "DatumBreakerTripped": ("a reconciler's breaker refuses to act on a direction",
                            "Check why so many items diverge before raising the threshold.", "look", "circuit_breaker"),
    "DatumItemsAtBackoffCap": ("items are parked at the backoff cap",
                               "Read their lastErr (datum drift RECONCILER) and fix the cause.", "look", "at_backoff_cap"),
    "DatumReconcilerFailing": ("a reconciler cannot complete a pass",
                               "Read the error of datum drift RECONCILER and fix its source.", "look", "failing"),
    "DatumReconcilerNotExecuting": ("an enabled reconciler has executed no pass for three intervals",
                                    "Check that a datum serve with the scheduler on runs and that its ticks are not "
                                    "all skipped.", "look", "unknown"),
    "DatumReconcilerNeverRan": ("an enabled reconciler has never executed a pass",
                                "Start a datum serve with the scheduler on, or run datum reconcile RECONCILER.",
                                "look", "unknown"),
    "DatumHostFailed": ("a host failed its last pass",
                        "Read the host's reason (datum status on it, GET /v1/hosts/HOST) and fix the failed resource.",
                        "look", "failed"),
    "DatumHostSilent": ("a host has not reported for more than stale_after of its intervals",
                        "Check that its datum agent runs and reaches the server.", "look", "stale"),
    "DatumHostUnknown": ("a host reads unknown",
                         "Read its reason and get a pass to complete on it.", "look", "unknown"),
    "DatumHostDrifted": ("a host in observe mode found drift",
                         "Review the drift, then fix the host or the manifest, or switch it to enforce.",
                         "look", "drifted"),
    "DatumHostNeverReported": ("declared hosts have never reported a pass",
                               "datum drift hosts names them: install datum agent there, or stop declaring them.",
                               "look", "hosts.never_reported"),
    "DatumHostAwaitingManualReboot": ("a host awaits a reboot by hand (reboot_policy manual or never)",
                                      "Run datum reboot on it when it suits you.", "look", "manual"),
    "DatumHostAwaitingRebootTooLong": ("a host has awaited a reboot for over a day",
                                       "Read its reason (its window, its group's budget, the old kernel).",
                                       "look", "awaiting-reboot"),
    "DatumRebootOverdue": ("a host took a reboot lease and has not come back",
                           "Go and look at it; datum reboots clear HOST once looked at.", "look", "reboot_halted"),
    "DatumRebootsBlockedLong": ("no reboot lease has been granted for over 6 hours (the block query)",
                                "Resolve the alerts the block query selects, or fix the query or the URL.",
                                "look", "reboot_blocked"),
    "DatumRolloutHalted": ("a staged rollout halted: its hosts failed on the new revision",
                           "datum rollout status says which and why; then abort, or fix and resume.",
                           "look", "halted"),
    "DatumFleetDirectoryBehind": ("a server's fleet directory is behind the rollout in force",
                                  "Bring the copy up to date (git pull, the sync that feeds it).", "look",
                                  "fleet_directory_unavailable"),
    "DatumHostsFailed": ("hosts failed their last pass (no per-host series)",
                         "GET /v1/hosts?state=failed or datum hosts --state failed names them.", "look", "failed"),
    "DatumHostsSilent": ("hosts have not reported for more than stale_after (no per-host series)",
                         "GET /v1/hosts?state=unknown names them; check their agents.", "look", "stale"),
    "DatumHostsAwaitingManualReboot": ("hosts await a reboot by hand (no per-host series)",
                                       "GET /v1/attention names them; run datum reboot on each.", "look", "manual"),
    "DatumTLSCertExpiringSoon": ("the server's certificate expires within 21 days",
                                 "Renew it: with tls = auto a SIGHUP issues it again; else put the new files in "
                                 "place and send SIGHUP (datum tls show says which).", "look", ""),
}


def _alerts() -> dict[tuple[str, str], tuple[str, str, str, str]]:
    out = {}
    for name, (summary, do, act, word) in _ALERTS.items():
        more = f" datum explain {word} says what that is." if word else ""
        out[(ALERT, name)] = (
            summary,
            f"An alert of contrib/prometheus/datum-rules.yml: it fires when {summary}; its description "
            f"annotation says why it matters.{more}",
            do,
            act,
        )
    return out


WORDS: dict[tuple[str, str], tuple[str, str, str, str]] = {**_codes(), **_OTHERS, **_alerts()}
ALERTS = frozenset(_ALERTS)
