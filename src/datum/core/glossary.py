"""The words the surfaces print beyond states, health and reasons: what each means and what to do.

``datum.core.explain`` holds the contract's states, health values and drift reasons; this module
holds the rest of what an operator reads on the page, in the terminal or in the JSON: drift
directions, plan actions (and their past tense in pass lines), the host's and the reconcilers'
modes, reboot policies, the advice labels, the coverage words (``stranded``), an item parked at
the backoff cap, a reconciler switched off (``disabled``), and the host reasons that say why a
host reads ``unknown``. ``datum.core.explain`` builds its explanations from these rows, so
``datum explain`` and the page say the same.

Plain data: (vocabulary, name) -> (summary, means, do, act), the vocabulary and the act as
``datum.core.explain``'s ``Vocabulary`` and ``Act`` values.
"""

from __future__ import annotations

from datum.core.vocab import IdentityState, RolloutState

_NOTHING_ALONE = "Nothing by itself: the item's reason says whether it waits or needs a human (datum explain REASON)."

WORDS: dict[tuple[str, str], tuple[str, str, str, str]] = {
    ("drift direction", "restore"): (
        "desired, absent from the substrate: converging creates it",
        "The item has a desired row but does not exist in the substrate; converging it creates it.",
        _NOTHING_ALONE,
        "none",
    ),
    ("drift direction", "reap"): (
        "in the substrate with no desired row: converging deletes it",
        "The item exists in the substrate and nothing desires it; converging it deletes it, only after the "
        "confirmation streak and within the breaker's threshold.",
        _NOTHING_ALONE + " A reap nobody meant means desired state was read wrong: go and look before it proceeds.",
        "none",
    ),
    ("drift direction", "align"): (
        "in both, values differ: converging changes it",
        "The item exists in the desired state and in the substrate, and their values differ; converging it "
        "changes the substrate to the desired value.",
        _NOTHING_ALONE,
        "none",
    ),
    ("plan action", "none"): (
        "nothing to change",
        "The resource is as the manifest asks; the pass leaves it alone.",
        "Nothing.",
        "none",
    ),
    ("plan action", "create"): (
        "the resource does not exist and is created",
        "The pass finds the resource absent and creates it (in observe mode it only reports that it would).",
        "Nothing, unless the creation is not meant: then change the manifest.",
        "none",
    ),
    ("plan action", "update"): (
        "the resource differs and is changed",
        "The pass finds the resource different from the manifest (content, mode, owner, version, ...) and "
        "changes what differs, nothing more (in observe mode it only reports the difference).",
        "Nothing, unless the change is not meant: then change the manifest.",
        "none",
    ),
    ("plan action", "delete"): (
        "the resource must be absent and is removed",
        "The manifest asks for the resource to be absent and the pass removes it.",
        "Nothing, unless the removal is not meant: then change the manifest.",
        "none",
    ),
    ("plan action", "restart"): (
        "a service is restarted for a change it subscribes to",
        "Something the service subscribes to changed on this pass, so the pass restarts (or refreshes) it.",
        "Nothing.",
        "none",
    ),
    ("plan action", "created"): (
        "created on this pass, and converged",
        "A pass line's past tense: the pass created the resource and it reached converged.",
        "Nothing.",
        "none",
    ),
    ("plan action", "updated"): (
        "changed on this pass, and converged",
        "A pass line's past tense: the pass changed what differed and the resource reached converged.",
        "Nothing. If it is updated pass after pass, something else changes it back: go and look.",
        "none",
    ),
    ("plan action", "deleted"): (
        "removed on this pass, and converged",
        "A pass line's past tense: the pass removed the resource, as the manifest asks.",
        "Nothing.",
        "none",
    ),
    ("plan action", "restarted"): (
        "restarted on this pass, and converged",
        "A pass line's past tense: the pass restarted the service for a change it subscribes to.",
        "Nothing.",
        "none",
    ),
    ("host mode", "enforce"): (
        "the host is converged: what differs is changed",
        "The host's reconciliation mode (host configuration, never desired state): a pass changes every "
        "resource that differs from the manifest.",
        "Nothing.",
        "none",
    ),
    ("host mode", "observe"): (
        "drift is reported and nothing is changed",
        "The host's reconciliation mode (host configuration, never desired state): a pass reads every "
        "resource and reports what differs as drifted, and changes nothing; the host then reads drifted.",
        "Review the drift (datum plan shows the diffs); switch the host to enforce when the changes are meant.",
        "none",
    ),
    ("reconciler mode", "enforce"): (
        "the reconciler acts on confirmed items",
        "The reconciler's mode: confirmed items are created, aligned and reaped, within the breaker.",
        "Nothing.",
        "none",
    ),
    ("reconciler mode", "dry_run"): (
        "the reconciler reports what it would do and commits nothing",
        "The reconciler's mode: confirmed items are reported with reason dry_run and nothing is committed.",
        "Review what it would do; set mode = \"enforce\" for the reconciler when it should be done.",
        "none",
    ),
    ("reconciler mode", "restore"): (
        "the reconciler creates and aligns, never deletes",
        "The reconciler's safe mode: items are created and aligned, reaps are recorded with reason "
        "suppressed_restore_mode and never performed.",
        "Nothing if safe mode is meant; set mode = \"enforce\" to let it delete.",
        "none",
    ),
    ("reboot policy", "never"): (
        "the host never reboots itself",
        "A needed reboot is recorded (the host reads awaiting-reboot) and never performed by Datum.",
        "Someone must reboot the host (datum reboot on it, or your own tooling); it reads awaiting-reboot until then.",
        "look",
    ),
    ("reboot policy", "manual"): (
        "the host reboots when a person runs datum reboot",
        "A needed reboot is recorded and waits for a person: the report says \"run 'datum reboot' to reboot\".",
        "Run datum reboot on the host when it suits; it reads awaiting-reboot until it comes back from a new boot.",
        "look",
    ),
    ("reboot policy", "maintenance"): (
        "the host reboots itself in its maintenance window",
        "A needed reboot is made by the agent inside the configured maintenance window, when the group's "
        "reboot budget has a slot.",
        "Wait for the window. Go and look if the host stays awaiting-reboot past it.",
        "wait",
    ),
    ("reboot policy", "automatic"): (
        "the host reboots itself as soon as a reboot is needed",
        "A needed reboot is made by the agent right after the pass that found it, when the group's reboot "
        "budget has a slot.",
        "Wait. Go and look if the host stays awaiting-reboot across passes (the reason says why).",
        "wait",
    ),
    ("advice", "wait"): (
        "it clears by itself",
        "Datum's advice: what is shown resolves without anyone acting (a confirmation streak, a retry, a "
        "window).",
        "Wait. Go and look only if it does not clear after a few passes.",
        "wait",
    ),
    ("advice", "go and look"): (
        "it will not clear by itself",
        "Datum's advice: waiting changes nothing; someone has to find and remove the cause.",
        "Go and look: datum explain on the reason or state says where.",
        "look",
    ),
    ("advice", "waits on its owner"): (
        "only the item's owner can clear it",
        "Datum's advice: the platform has done all it can and the item waits on its owner (a tenant emptying "
        "a bucket).",
        "Nothing for the operator; tell the owner if it has waited long.",
        "owner",
    ),
    ("advice", "nothing to do"): (
        "nothing is wrong",
        "Datum's advice: what is shown is expected (a mode, a converged state).",
        "Nothing.",
        "none",
    ),
    ("advice", "wait, or go and look"): (
        "it depends on how often it failed",
        "Datum's advice for backoff and apply_failed when not told apart per item: a first failure retries "
        "shortly; one that keeps failing, or is parked at the backoff cap, will not clear by itself.",
        "Wait for the retry; go and look at lastErr when failures climb.",
        "depends",
    ),
    ("coverage", "stranded"): (
        "rows in a status nothing will ever move",
        "Work-query coverage: rows sit in a status that the reconciler's work query does not select, that is "
        "not terminal, and that no other component owns (count > 0, not selected, not terminal, no ownedBy). "
        "Nothing will move them: they are stuck for good.",
        "Go and look: move the rows to a status something drives, teach the work query this status, or declare "
        "who owns it (ownedBy) or that it is final (terminal).",
        "look",
    ),
    ("coverage", "selected"): (
        "the work query picks this status up",
        "Work-query coverage: rows in this status are read by the reconciler's work query on every pass.",
        "Nothing.",
        "none",
    ),
    ("coverage", "terminal"): (
        "a legitimately final status",
        "Work-query coverage: rows in this status are finished (deleted, say); nothing needs to move them.",
        "Nothing.",
        "none",
    ),
    ("item state", "at_backoff_cap"): (
        "an item parked at the backoff cap: more waiting will not help",
        "The item's apply failed on enough consecutive tries that its backoff window reached the configured "
        "cap (backoff cap_passes): it is retried only once per cap, and it stays under this heading, retry "
        "after retry, while it keeps failing.",
        "Go and look at its lastErr and remove the cause; the next retry then converges it.",
        "look",
    ),
    ("reconciler state", "disabled"): (
        "the reconciler is switched off",
        "The reconciler is installed but not enabled ([reconcilers.NAME] enabled = false, or off by default as "
        "pg_roles is until configured): no pass runs, so it has no health, items or coverage to report. It is "
        "not stuck and not waiting for a tick.",
        "Nothing if it is meant to be off. To run it, configure it and set enabled = true under "
        "[reconcilers.NAME], then restart datum serve.",
        "none",
    ),
    # Why a resource refused to act as root (``datum.providers.links``, ``datum.providers.held``).
    ("refusal", "link_rule"): (
        "a link on the resource's path could have been planted by an ordinary user",
        "Datum runs as root and resolves links itself, so it follows a link only when a trusted uid (root, or "
        "the uid Datum runs as) owns it and only a trusted uid can replace it: the directory holding it is "
        "root's and nobody else may write it, or it is sticky (/tmp). The reason names the link, its owner "
        "and the rule; nothing was touched. This is the hole behind CVE-2017-18925 and CVE-2018-6954.",
        "Go and look at the link: if it is meant, have root own it in a directory only root writes (or "
        "manage the path the link leads to instead); if nobody meant it, someone tried to redirect root.",
        "look",
    ),
    ("refusal", "changed_since_observed"): (
        "the path was swapped between the pass's look and its change",
        "A directory on the way, or the object itself, is not what the pass observed any more (a link or "
        "something else took its place), so the change was not made: every change is made through "
        "descriptors opened without following links, never by the path again.",
        "Wait for the next pass, which looks again. Go and look if it happens again: something (or someone) "
        "keeps swapping that path.",
        "depends",
    ),
    ("refusal", "appeared_since_observed"): (
        "something took the name the pass was about to create",
        "The pass found nothing at the path and was creating it, but a file, link or directory appeared "
        "there meanwhile; it is never overwritten (replace: false, a Symlink without force, and any creation).",
        "Wait for the next pass, which sees what is there now and says what it would do with it.",
        "wait",
    ),
    ("refusal", "hard_links"): (
        "a file with other names, where users may hard-link files they do not own",
        "The file's owner or mode would change, but it has more than one name and fs.protected_hardlinks is "
        "off, so another of its names may be a file such as /etc/shadow; Datum refuses, as systemd-tmpfiles does.",
        "Go and look: remove the extra names, or turn fs.protected_hardlinks on (sysctl fs.protected_hardlinks=1).",
        "look",
    ),
    ("refusal", "accounts_locked"): (
        "another program held the account databases' lock",
        "User and Group edit etc/passwd, group, shadow and gshadow as useradd does: under glibc's lckpwdf "
        "lock (etc/.pwd.lock) and shadow-utils' FILE.lock files. One was held by another process (useradd, "
        "vipw, passwd, another pass) for the whole 15 s Datum waits, so nothing was written.",
        "Wait for the next pass. Go and look if it repeats: the reason names the lock and the pid holding it "
        "(a vipw left open, a hung useradd); a lock file whose pid is gone is removed by itself.",
        "depends",
    ),
    # Which package manager a Package resource went through (``datum.providers.package.choose``).
    ("package provider", "apt"): (
        "Package on a Debian-family host: dpkg and apt",
        "The Package provider chosen when the root has dpkg's status file (/var/lib/dpkg/status), or by "
        "provider: apt on the resource. dpkg-query observes; dpkg installs a .deb given as source, apt-get "
        "installs from the repository (on the running system), one resource at a time, never prompting. A "
        "failure's reason ends with apt's or dpkg's last lines.",
        "Nothing by itself. A Package failed with apt's or dpkg's lines: go and look at what they name.",
        "none",
    ),
    ("package provider", "dnf"): (
        "Package on an RPM host: rpm's database read, one dnf transaction a pass",
        "The Package provider chosen when the root has an rpm database (/var/lib/rpm or /usr/lib/sysimage/rpm) "
        "and no dpkg status, or by provider: dnf on the resource (RHEL, Rocky, Alma, Fedora, Amazon Linux). "
        "Observe and plan read the rpm database alone (rpm -qa), never the network; latest is the newest dnf's "
        "metadata cache knows. The Package changes of a pass are one transaction: dnf install (strict) for "
        "installs, upgrades, pinned versions (a downgrade too) and local .rpm files, then rpm -e for removals, "
        "which refuses a package another one needs. One missing package or broken dependency fails every "
        "Package of the transaction with dnf's last lines, and nothing is installed. Versions are "
        "epoch:version-release in rpm's order. A kernel, systemd or glibc the transaction changed, and what dnf "
        "needs-restarting -r names, need a reboot. Groups (@core) and modules (nginx:1.20) are not supported: "
        "only package names.",
        "Nothing by itself. A Package failed with dnf's lines: go and look at the Problem they name (a package "
        "no repository has, a dependency nothing provides), fix the repository or the manifest; the next pass "
        "tries the whole transaction again.",
        "none",
    ),
    ("host reason", "stale"): (
        "the agent fell silent: its last report is overdue",
        "The host's last report is older than [fleet] stale_after times the interval its agent reports at, so "
        "the server no longer trusts the state it said (shown at the end: it said converged) and reads the "
        "host unknown. The agent stopped, cannot reach the server, or the host is down.",
        "Go and look at the host: is datum agent running (systemctl status datum-agent), can it reach the "
        "server and is its token valid? The next report it delivers replaces this.",
        "look",
    ),
    ("host reason", "stopped"): (
        "a signal stopped the pass before it reached every resource",
        "The pass was stopped by a signal (SIGTERM, SIGINT) part-way; the resources it did not reach are "
        "pending, so the host state is not known. What it applied is persisted and the report is marked "
        "incomplete.",
        "Wait for the next pass, which replaces it. Go and look if passes keep being stopped (a service "
        "manager's timeout, a shutdown during passes).",
        "wait",
    ),
    ("host reason", "unfinished"): (
        "a pass started and never persisted its report",
        "The process that ran the pass died before it stored a report (killed, out of memory, the host lost "
        "power); the last report is no longer current, so the host state is not known.",
        "Go and look at why the process died (the journal); the next pass takes over and replaces it.",
        "look",
    ),
    ("host reason", "unreadable"): (
        "the stored report cannot be read",
        "The last report (or its summary) is stored, but cannot be read as a pass report: damaged, or written "
        "by a version that stores another form. The reason names the field at fault. The host reads unknown.",
        "Go and look if it persists; the next good pass replaces it.",
        "look",
    ),
    ("host reason", "no_manifest"): (
        "the agent had no manifest to apply",
        "datum agent could not fetch its manifest from the server and has none kept from before that "
        "validates, so no pass ran; the reason says why the fetch failed.",
        "Go and look at what the reason names: the server's address and reachability, the agent's token "
        "(fleet:ReadManifest for its host), the fleet's nodes.yaml rule for this host.",
        "look",
    ),
    # Staged rollouts ([fleet.rollout], datum.store.rollouts): the states of a rollout and why a host is held.
    ("rollout state", "rolling"): (
        "a new revision is going out wave by wave",
        "The fleet's manifests changed and [fleet.rollout] is configured: the new revision is served to the "
        "canaries, then to each wave of each nodes.yaml group once every host released so far converged on it and "
        "the soak passed. The other hosts are served the previous revision meanwhile (unless their manifest is "
        "the same in both).",
        "Wait: datum rollout status shows the waves. Pause it (datum rollout pause) to stop releasing waves.",
        RolloutState.ROLLING.severity,
    ),
    ("rollout state", "paused"): (
        "an operator stopped releasing waves",
        "Someone ran datum rollout pause (or POST /v1/rollouts/current/pause): the hosts already released keep "
        "the new revision, no further wave is released, the others keep the previous revision.",
        "Resume it when ready (datum rollout resume), or abort it (datum rollout abort); datum rollout status says "
        "who paused it.",
        RolloutState.PAUSED.severity,
    ),
    ("rollout state", "halted"): (
        "too many released hosts failed on the new revision: it stopped by itself",
        "More than [fleet.rollout] max_failed of the hosts released so far failed their last pass on the new "
        "revision. No further host receives it; the hosts already on it keep it. The rollout names each failed "
        "host and its reason (datum rollout status, GET /v1/rollouts, the page, datum_rollout_failed_host).",
        "Go and look at the failed hosts' reasons. Abort (datum rollout abort) to serve them the previous revision "
        "again, or fix the manifests (a newer revision supersedes this one) or the hosts and resume (it halts "
        "again at once while they still fail).",
        RolloutState.HALTED.severity,
    ),
    ("rollout state", "aborted"): (
        "an operator sent everyone back to the previous revision",
        "Someone ran datum rollout abort: every host is served the previous revision again, the ones that had "
        "taken the new one included (the abort named them). It stays so until the next revision of the "
        "manifests, which rolls out from the last done revision.",
        "Fix the manifests: the next change starts a new rollout.",
        RolloutState.ABORTED.severity,
    ),
    ("rollout state", "done"): (
        "every wave has the revision: it is the stable one",
        "Every host planned in the rollout converged on its revision (or the revision was the first the store "
        "saw, stable at once). The next revision rolls out from this one.",
        "Nothing to do.",
        RolloutState.DONE.severity,
    ),
    ("rollout state", "superseded"): (
        "a newer revision came before this rollout finished",
        "The manifests changed again while this rollout was rolling, paused or halted: the newer revision rolls "
        "out instead, from the last done revision (not from this one).",
        "Nothing to do: datum rollout status shows the newer rollout.",
        RolloutState.SUPERSEDED.severity,
    ),
    # An enrolled host's identity (datum.core.vocab.IdentityState; datum enroll list, POST /v1/enroll). Homonyms:
    # pending is a resource state too, denied an audit outcome; datum explain says each meaning.
    ("identity state", IdentityState.PENDING): (
        "a host asked to enroll and waits for a decision",
        "The host enrolled through a join token made for a pattern of names (datum enroll create --pattern): it "
        "is given no session until the approval hook ([enroll] approve, asked after the request is answered) or a "
        "person decides. A hook that does not answer within [enroll] approve_timeout leaves it pending, for a "
        "person. datum agent enroll asks again until its --wait ends, saying what it waits for.",
        "Decide: datum enroll approve NAME (it is given sessions) or datum enroll deny NAME; datum enroll list "
        "says who asked, from where and through which join token.",
        IdentityState.PENDING.severity,
    ),
    ("identity state", IdentityState.ACTIVE): (
        "an enrolled host that is given sessions from its key",
        "Its join token was made for it (datum enroll create --host), or the approval hook or datum enroll approve "
        "approved it: datum agent signs for a short session ([enroll] session_ttl) and renews it, and the labels it "
        "was given at enrollment count in nodes.yaml.",
        "Nothing. datum enroll deny NAME or datum host revoke NAME ends its sessions.",
        IdentityState.ACTIVE.severity,
    ),
    ("identity state", IdentityState.DENIED): (
        "a host's request to enroll was refused",
        "The approval hook exited non-zero, or someone ran datum enroll deny NAME (a pending host's, or an active "
        "one's: its sessions ended). It is given no session; asking again with the same key through a pattern's "
        "join token leaves it denied (datum agent enroll exits 65 with the reason). Not a name another key holds: "
        "that request is refused outright (409), and nothing is recorded.",
        "Nothing if it is meant. To let it in: datum enroll approve NAME, or a join token made for it (datum "
        "enroll create --host NAME). A host rebuilt with a new key: datum host forget NAME first, or a join token "
        "made with --replace.",
        IdentityState.DENIED.severity,
    ),
    ("identity state", IdentityState.REVOKED): (
        "an enrolled host whose sessions were ended for good",
        "Someone ran datum host revoke NAME: every session of the host and every agent token bound to it were "
        "deleted, and every server refuses them within 2 s. It is given no session, and enrolling again with its "
        "key is refused (403) until its identity is forgotten.",
        "Nothing if it is meant. To let the host back: datum host forget NAME, then enroll it again with a new "
        "join token (datum enroll create).",
        IdentityState.REVOKED.severity,
    ),
    ("rollout", "held_back"): (
        "this host is served the previous revision until its wave is released",
        "A rollout is under way and the host's wave is not released yet (hosts first heard of after the rollout "
        "started wait for the last wave), so it is served the previous revision and keeps converging to it; a "
        "host whose effective manifest is the same in both revisions is served the new one at once. GET /v1/hosts "
        "(heldBack), datum hosts and the host's page say so while its last pass ran the previous revision.",
        "Wait for its wave; datum rollout status shows the waves and the soak.",
        "wait",
    ),
    ("rollout", "accepted"): (
        "a released host failing on the new revision whose failure a resume of the halted rollout accepted",
        "The rollout halted because more than max_failed of its released hosts failed on the revision; datum "
        "rollout resume accepted the failures of the hosts failing then: until their next pass they count "
        "neither failed nor waited for, and the waves go on with the others. A pass after the resume counts, "
        "failed anew or after converging, and can halt the rollout again. The rollout is done only once a host "
        "converged on the revision.",
        "Fix the accepted hosts (datum hosts --state failed, their pass's reason), or abort if the revision is bad.",
        "look",
    ),
    ("rollout", "silent"): (
        "a released host fell silent before any pass on the new revision, or never reported: not waited for",
        "The host's agent has not reported for [fleet] stale_after of its intervals, and its last pass ran an "
        "older revision, so the wave does not wait for it: it takes the new revision when it comes back. So is a "
        "canary named by hand that has never reported (a misspelt name, a host not enrolled yet). A host "
        "silent since a pass on the new revision counts as failed instead (a revision can cut a host off). A "
        "wave completes only once at least one released host converged on the revision.",
        "Go and look at why the host stopped reporting (datum hosts --state unknown); the rollout goes on "
        "without it unless all its canaries are silent.",
        "look",
    ),
    # The acts of a rollout's state machine (datum.core.vocab.RolloutAct) that are not the name of the state they
    # enter: the `action` of an event of type rollout (GET /v1/events, datum events, datum rollout status).
    ("rollout", "started"): (
        "a rollout of a new revision began",
        "A server saw a new revision of the fleet's manifests and started its rollout: the canaries are served it "
        "first (rolling), or, for the first revision the store ever saw, it is stable at once (done). The event "
        "says from which revision it rolls.",
        "Watch the canaries (datum rollout status).",
        "none",
    ),
    ("rollout", "released"): (
        "the next wave was given the new revision",
        "Every host of the waves released so far had its verdict on the revision and the soak passed: the server "
        "released the next wave (its number is the event's wave), whose hosts are served the new revision now.",
        "Nothing: datum rollout status shows the wave's hosts converging.",
        "none",
    ),
    ("rollout", "resumed"): (
        "an operator let a paused or halted rollout go on",
        "Someone ran datum rollout resume (or POST /v1/rollouts/current/resume): the waves are released again. "
        "Resuming a halted rollout accepts the failures it named (the event lists those hosts); a host failing "
        "after that counts again.",
        "Watch the waves; the event says who resumed it and why (--reason).",
        "none",
    ),
    ("rollout", "canary"): (
        "a host that takes a new revision first, alone",
        "[fleet.rollout] canary names hosts (or a count of them per group) that are served a new revision before "
        "anyone else. The first wave waits until they converged on it and the soak passed; a canary failing on it "
        "can halt the rollout (max_failed). A canary applies a failing revision part-way: resources before the "
        "failure are applied, as a pass always does.",
        "Watch the canary (datum hosts, its page) after a change; abort if it fails on the revision.",
        "none",
    ),
    ("rollout", "wave"): (
        "a share of each nodes.yaml group that takes the new revision together",
        "[fleet.rollout] waves splits every group into waves (fractions or counts). Wave N is released once wave "
        "N-1 converged on the revision and soaked; hosts of unreleased waves are held back on the previous "
        "revision. datum rollout status shows the waves, their hosts and the one in force.",
        "Nothing to do, unless the rollout halts.",
        "none",
    ),
    ("rollout", "soak"): (
        "how long a converged wave runs the revision before the next is released",
        "[fleet.rollout] soak is the time after a wave (or the canary) converged on the new revision during which "
        "nothing more is released: a problem that shows only after a while (a leak, a cron job) halts the rollout "
        "before it reaches the next wave.",
        "Wait for it to end; datum rollout status says when the wave completed.",
        "wait",
    ),
    ("advice", "check it is intended"): (
        "not broken, but not what the manifest asks: confirm it is meant",
        "A line of Needs a human that is not a failure: a host that skipped resources (degraded: no provider here, "
        "an image-mode /usr), which may be exactly what the fleet intends.",
        "Read the reason; if it is intended nothing needs doing, else change the manifest or the host.",
        "look",
    ),
    ("needs a human", "plugin_broken"): (
        "a reconciler plugin did not load",
        "The plugin's module raised on import, declares an API version this Datum does not speak, or claims a name "
        "another distribution claims; nothing of it runs until it loads.",
        "Fix the plugin's installation; datum reconcilers names the error.",
        "look",
    ),
    ("needs a human", "reconciler_failing"): (
        "a reconciler cannot run its passes",
        "Its substrate cannot be read, its pass raised or ran past its pass_timeout; its items keep their last "
        "known state and nothing is applied.",
        "Go and look at the error it reports (datum reconcilers, the page).",
        "look",
    ),
    ("needs a human", "reconciler_degraded"): (
        "a reconciler runs, but said why it is not well",
        "The reconciler's pass returned a degraded result with a reason of its own (Result.degraded).",
        "Go and look at what it says, and at its items.",
        "look",
    ),
    ("needs a human", "backoff_cap"): (
        "an item failed so often it is parked at the backoff cap",
        "Its apply failed again and again; it retries only every backoff-cap passes now and will not fix itself.",
        "Go and look at its lastErr and remove the cause; the next retry converges.",
        "look",
    ),
    ("needs a human", "repeated_failures"): (
        "an item failed three times or more",
        "Its apply keeps failing (backoff or apply_failed, failures at or above 3): it will not fix itself.",
        "Go and look at its lastErr and remove the cause.",
        "look",
    ),
    ("needs a human", "stranded"): (
        "desired-state rows in a status no work query selects",
        "Rows of a reconciler's table sit in a status that no work query of any kind selects and nothing owns: "
        "nothing will ever move them.",
        "Move them to a status a work query selects, or fix the work query (datum drift NAME --json: coverage).",
        "look",
    ),
    ("needs a human", "host_failed"): (
        "a host's last pass failed",
        "A resource failed or was blocked on the host's last pass; its reason names them.",
        "Go and look at the failed resource's reason (datum hosts, the host's page); the next pass retries.",
        "look",
    ),
    ("needs a human", "host_unknown"): (
        "a host's state cannot be told",
        "The host fell silent (its last report is overdue), its pass did not finish, or its report cannot be "
        "read: the last state is not trusted.",
        "Go and look at the host and its agent; the next report replaces this.",
        "look",
    ),
    ("needs a human", "host_drifted"): (
        "a host's last pass found drift it did not correct",
        "The host runs in observe mode (or datum agent --dry-run): its last pass found resources that differ from "
        "the manifest and changed nothing.",
        "Look at the drift (datum hosts, its page), then switch it to enforce, or fix the host or the manifest.",
        "look",
    ),
    ("needs a human", "host_degraded"): (
        "a host skipped resources",
        "Some resources of the host were skipped: no provider on this host, or a difference under an image-mode /usr.",
        "Check it is intended; else change the manifest or the host.",
        "look",
    ),
    ("needs a human", "reboot_refused"): (
        "a host came back from its reboot to the old kernel",
        "The host rebooted for a newer kernel but booted the old one again (the newer one is not the default "
        "boot entry); Datum does not reboot for it again.",
        "Make the newer kernel the default boot entry, or remove it.",
        "look",
    ),
    ("needs a human", "manual_reboot"): (
        "a host awaits a reboot by hand",
        "The host needs a reboot and its reboot_policy is manual (or a maintenance window never comes): Datum "
        "does not reboot it.",
        "Reboot it when it suits (datum reboot on the host), or change its reboot_policy.",
        "look",
    ),
    ("needs a human", "no_reboot_lease"): (
        "a host cannot get a reboot lease from the server",
        "The host needs a reboot, but its agent cannot reach the server for a lease of its group's reboot budget.",
        "Go and look at the agent's connection to the server (its token, the network).",
        "look",
    ),
    ("needs a human", "pre_reboot_failed"): (
        "a host does not reboot because its pre_reboot hook fails",
        "[host] pre_reboot (a drain) exited non-zero, so the host keeps running and holds no reboot slot.",
        "Go and look at the hook's output in the host's reason; fix it or the service it drains.",
        "look",
    ),
    ("needs a human", "reboot_overdue"): (
        "a host took a reboot lease and is not back",
        "The host rebooted (or was about to) under a lease and has not reported from a new boot within [fleet] "
        "reboot_timeout, or came back unhealthy; its group's reboots are halted meanwhile.",
        "Go and look at the host; once it is back and healthy the group goes on, or run datum reboots clear HOST.",
        "look",
    ),
    ("needs a human", "fleet_directory_unavailable"): (
        "the server cannot read its fleet directory",
        "The directory [fleet] manifests names is not there (not made yet, removed to be cloned again, a link to "
        "nowhere), is not a directory, or cannot be read: no host is served a manifest from it (the manifest "
        "request answers 503 saying so, and each agent keeps the manifest it has), never one composed before.",
        "Put the directory back or fix [fleet] manifests; the server sees it again within a second. /readyz stays "
        "ready meanwhile: the rest of the server answers.",
        "look",
    ),
    ("needs a human", "host_unhealthy"): (
        "a host came back from its reboot unhealthy",
        "The host rebooted under its group's reboot lease and its health check ([host] health_check, health_url) "
        "or post_reboot has failed at every pass since: it reads degraded, its reason naming what failed, from the "
        "first check that failed until one passes, whether or not its lease was cleared.",
        "Go and look at the host's service and at what the reason names; its next pass checks again. datum reboots "
        "clear HOST lets its group's reboots go on meanwhile.",
        "look",
    ),
    ("needs a human", "rollout_halted"): (
        "the staged rollout stopped by itself: too many hosts failed on its revision",
        "More than max_failed of the released hosts failed on the new revision (or fell silent after a pass on "
        "it), so nothing more is released: the held-back hosts stay on the previous revision until someone "
        "answers. The line names the failed hosts.",
        "Look at why they failed (datum hosts --state failed), then datum rollout resume (accepting those "
        "failures: the waves go on) or datum rollout abort (the previous revision again to those that took it).",
        "look",
    ),
    ("needs a human", "rollout_paused"): (
        "someone paused the staged rollout",
        "datum rollout pause (or the API) stopped the waves; nothing more is released until it is resumed or "
        "aborted. The line says who paused it.",
        "When ready: datum rollout resume, or datum rollout abort.",
        "look",
    ),
}

