"""The framework's own tables: item memory, reconciler run state, locks, host state, tokens and the audit log.

Changing one means adding an Alembic migration in ``migrations/versions``.
"""

from __future__ import annotations

import sqlalchemy as sa

from datum.store.types import UTCDateTime

metadata = sa.MetaData()

# Per-item memory of the last executed pass: only diverged items have a row.
item_memory = sa.Table(
    "item_memory",
    metadata,
    sa.Column("reconciler", sa.String(100), primary_key=True),
    sa.Column("kind", sa.String(100), primary_key=True),
    sa.Column("item_id", sa.String(500), primary_key=True),
    sa.Column("direction", sa.String(16), nullable=False),
    sa.Column("streak", sa.Integer, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False, default=0),
    sa.Column("last_err", sa.Text),
    sa.Column("retry_after_passes", sa.Integer, nullable=False, default=0),
    # A permanent failure's fingerprint of the desired value it failed on (migration 0008_permanent).
    sa.Column("permanent", sa.String(64)),
)

# One row per reconciler: its latest tick, its last executed pass and what that pass found.
reconciler_runs = sa.Table(
    "reconciler_runs",
    metadata,
    sa.Column("reconciler", sa.String(100), primary_key=True),
    sa.Column("as_of", UTCDateTime, nullable=False),
    sa.Column("last_ran_at", UTCDateTime),
    sa.Column("completed", sa.Boolean, nullable=False, default=False),
    sa.Column("error", sa.Text),
    sa.Column("health", sa.String(16), nullable=False),
    sa.Column("drift", sa.Integer, nullable=False, default=0),
    sa.Column("blocked", sa.Integer, nullable=False, default=0),
    sa.Column("dropped", sa.Integer, nullable=False, default=0),
    sa.Column("reasons", sa.JSON, nullable=False, default=dict),
    sa.Column("items", sa.JSON, nullable=False, default=list),
    sa.Column("duration_seconds", sa.Float),
    sa.Column("executed_passes", sa.Integer, nullable=False, default=0),
    sa.Column("skipped_passes", sa.Integer, nullable=False, default=0),
    # The fencing token: raised by one on every claim of the reconciler. A pass
    # writes only while the row still carries the token it claimed with.
    sa.Column("claim", sa.BigInteger, nullable=False, default=0, server_default="0"),
    # What the metrics and the report read of the last executed pass, exact past driftCap (migration 0005):
    # ``{"items": {reason: {direction: n}}, "tripped": [direction, ...], "atBackoffCap": n,
    # "itemsReported": bool, "coverage": [row, ...] (a bespoke reconciler's ctx.report_coverage),
    # "requeueAfterPasses": n}``; NULL before it.
    sa.Column("metrics", sa.JSON(none_as_null=True)),
    # When the pass now running claimed the reconciler; NULL once it recorded its end (migration
    # 0011). Past ``pass_timeout`` the reconciler reads ``failing`` (a hung pass, or a process gone).
    sa.Column("running_since", UTCDateTime),
)

# Leases that keep one pass of a reconciler (or one host pass) running at a time.
locks = sa.Table(
    "locks",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("holder", sa.String(200)),
    sa.Column("expires_at", UTCDateTime),
)

# Every host's latest pass: its state, the reason, and the whole pass report.
hosts = sa.Table(
    "hosts",
    metadata,
    sa.Column("host", sa.String(253), primary_key=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("boot_id", sa.String(100)),
    sa.Column("finished_at", UTCDateTime),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("report", sa.JSON, nullable=False),
    # Store and forward (migration 0003): the latest pass's id and its agent's per-host sequence number.
    sa.Column("pass_id", sa.String(64)),
    sa.Column("seq", sa.BigInteger),
    # What the host listing reads instead of the report (migration host_summaries): datum.core.hostsummary's
    # summary of the last pass, and its agent's interval (what makes a silent host stale, in SQL).
    sa.Column("summary", sa.JSON(none_as_null=True)),
    sa.Column("interval_seconds", sa.Float),
    # The fleet directory's revision its last pass ran (as in its summary): the database counts the hosts by
    # revision and state in hosts_revision_status_counts (migration 0017_revision_counts), so that the hosts
    # per revision are read without reading every host.
    sa.Column("revision", sa.String(100)),
    # The host's group (nodes.yaml's ``group``, ``default`` when none), from its name and labels when it last
    # reported, never its facts (migration 0018_host_groups): counted with its state in hosts_group_status_counts.
    sa.Column("group_name", sa.String(253), nullable=False, server_default="default"),
    sa.Index("ix_hosts_state_host", "state", "host"),
    # The hosts of some groups, by name: every list of a token scoped to host groups (migration 0025_token_groups).
    sa.Index("ix_hosts_group_host", "group_name", "host"),
    # What finds the stale hosts without reading every host (migration 0014_host_counts, with the
    # counts by state the database keeps in hosts_status_counts).
    sa.Index("ix_hosts_finished_at", "finished_at"),
    sa.Index("ix_hosts_interval_seconds", "interval_seconds"),
)

# One row per executed reconciler pass and per stored host pass (datum.store.history), kept
# ``[server] history`` long: counts always, diverged items' reasons only when they changed.
pass_history = sa.Table(
    "pass_history",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("subject", sa.String(16), nullable=False),
    sa.Column("name", sa.String(253), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("completed", sa.Boolean, nullable=False),
    sa.Column("drift", sa.Integer, nullable=False),
    sa.Column("blocked", sa.Integer, nullable=False),
    sa.Column("counts", sa.JSON, nullable=False),
    sa.Column("items", sa.JSON(none_as_null=True)),
    # The host pass the row is (its passId; migration 0010): an older pass is recorded once however often it comes.
    sa.Column("pass_id", sa.String(64)),
    # A host pass as the host measured it and what it was (migration 0013_pass_archive; NULL on reconciler
    # rows): ``at`` is when the server received it, ``finished_at`` what listings order by, ``digest`` the
    # report in ``pass_reports`` (datum.store.passes), ``older`` a pass that arrived after a newer one.
    sa.Column("started_at", UTCDateTime),
    sa.Column("finished_at", UTCDateTime),
    sa.Column("duration_seconds", sa.Float),
    sa.Column("seq", sa.BigInteger),
    sa.Column("reason", sa.Text),
    sa.Column("digest", sa.String(64)),
    sa.Column("older", sa.Boolean),
    sa.Index("ix_pass_history_subject_at", "subject", "name", "at"),
    sa.Index("ix_pass_history_finished", "subject", "name", "finished_at", "id"),
    sa.Index("ix_pass_history_received", "subject", "at"),
)

# Every distinct host pass report, once (datum.store.passes): keyed by the digest of what it says
# (datum.core.passcontent), so a pass that changed nothing adds a pass_history row and no report.
# ``last_seen`` is the receipt of the newest pass that had it: retention drops it with that pass.
pass_reports = sa.Table(
    "pass_reports",
    metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("host", sa.String(253), nullable=False),
    sa.Column("report", sa.JSON, nullable=False),
    sa.Column("last_seen", UTCDateTime, nullable=False),
    sa.Index("ix_pass_reports_last_seen", "last_seen"),
)

# One row per resource a host pass changed, or found failed, drifted or blocked (GET /v1/events).
pass_events = sa.Table(
    "pass_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("pass_row", sa.BigInteger, nullable=False),  # pass_history.id
    sa.Column("host", sa.String(253), nullable=False),
    sa.Column("pass_id", sa.String(64)),
    sa.Column("finished_at", UTCDateTime, nullable=False),
    sa.Column("received_at", UTCDateTime, nullable=False),
    sa.Column("resource", sa.String(1000), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("changed", sa.Boolean, nullable=False),
    sa.Column("reason", sa.Text),
    sa.Index("ix_pass_events_finished", "finished_at", "id"),
    sa.Index("ix_pass_events_host", "host", "finished_at", "id"),
    sa.Index("ix_pass_events_pass_row", "pass_row"),
    # GET /v1/events by resource, type or state (migration 0019_events_index): one index range, newest first.
    sa.Index("ix_pass_events_resource", "resource", "finished_at", "id"),
    sa.Index("ix_pass_events_type", "type", "finished_at", "id"),
    sa.Index("ix_pass_events_state", "state", "finished_at", "id"),
)

# Bearer tokens that ``datum token create`` minted (datum.api.front.tokens): only their SHA-256 is kept.
# Made by ``create_all`` on first use before migration 0006 took it over.
tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("principal", sa.String(100), nullable=False, index=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # The one host a token may speak for (datum token create --host; migration 0003 on an older table).
    sa.Column("host", sa.String(253)),
    # The host groups a token is scoped to, comma-separated and sorted (datum token create --group; migration
    # 0026_token_groups); NULL: every group.
    sa.Column("groups", sa.Text),
    # A session an enrolled host had for its key (datum.fleet.enroll, migration 0027_enrollment): it ends at
    # expires_at; a token datum token create minted has neither.
    sa.Column("session", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
    sa.Column("expires_at", UTCDateTime),
)

# Enrollment (datum.fleet.enroll, migration 0027_enrollment). A join token (datum enroll create) is kept as its
# SHA-256, like a token: for one named host (its approval) or a pattern of names (each request approved by the
# hook or by a person), at most ``uses`` times, until ``expires_at``.
join_tokens = sa.Table(
    "join_tokens",
    metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("host", sa.String(253)),
    sa.Column("pattern", sa.String(253)),
    sa.Column("group_name", sa.String(253)),
    sa.Column("uses", sa.Integer, nullable=False),
    sa.Column("used", sa.Integer, nullable=False, default=0, server_default="0"),
    # A host enrolling with it may take over a name another key holds (a rebuilt host).
    sa.Column("replace", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    # The labels (a JSON object) the hosts enrolled with it are given (migration 0032_enroll_labels).
    sa.Column("labels", sa.Text),
)

# A host's identity: its name, its public key, and whether it may have sessions (active) or not (pending,
# denied, revoked), since when, through which join token (its id), from where, and why it is in that state.
host_identities = sa.Table(
    "host_identities",
    metadata,
    sa.Column("host", sa.String(253), primary_key=True),
    sa.Column("public_key", sa.String(64), nullable=False),
    sa.Column("fingerprint", sa.String(80), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("join_token", sa.String(12)),
    sa.Column("group_name", sa.String(253)),
    sa.Column("source", sa.String(100)),
    sa.Column("facts", sa.Text),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("changed_at", UTCDateTime, nullable=False),
    # A pending request the approval hook is to be asked about from then on (datum.fleet.approvals, migration
    # 0031_enroll_hook_due); a server asking moves it past the hook's timeout; None: not the hook's.
    sa.Column("hook_due", UTCDateTime),
    # The labels it was given at enrollment, its join token's (a JSON object): nodes.yaml matches on them as on
    # its own `labels:` (datum.fleet.labels, migration 0032_enroll_labels).
    sa.Column("labels", sa.Text),
    sa.Index("ix_host_identities_state", "state", "host"),
)

# Secrets every server of one store shares: ``nonce`` keys the HMAC of the nonces a host signs (datum.fleet.enroll).
server_secrets = sa.Table(
    "server_secrets",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(128), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

# The nonces hosts have signed (datum.store.nonces, migration 0029_spent_nonces): each is taken once, by one
# insert every replica's store refuses a second time, and kept until no server could take it anyway.
spent_nonces = sa.Table(
    "spent_nonces",
    metadata,
    sa.Column("nonce", sa.String(100), primary_key=True),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Index("ix_spent_nonces_expires", "expires_at"),
)

# The audit log (datum.store.audit, migrations 0028_audit_log and 0030_audit_sealed_later): one row per acting
# request and per refusal, written with ``id`` only (no lock: any number at once); chained afterwards, in ``id``
# order, by ``datum.store.auditchain.seal``, which gives it ``seq`` and ``hash`` over its fields and ``prev``.
audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("seq", sa.BigInteger),  # the chain's order, from 1, no gap; None until sealed
    sa.Column("at", UTCDateTime, nullable=False),  # the store's clock
    sa.Column("principal", sa.String(253)),  # None: no known token (unauthenticated)
    sa.Column("token", sa.String(12)),  # the token's id (datum token list), never the token
    sa.Column("source", sa.String(253)),  # the client's address; a CLI act: the machine's name
    sa.Column("action", sa.String(200)),
    sa.Column("resource", sa.Text),  # as Cedar writes it: Host::"web1"
    sa.Column("request", sa.Text),  # POST /v1/rollouts/current/abort; a CLI act: its command
    sa.Column("outcome", sa.String(20), nullable=False),  # allowed, denied, unauthenticated
    sa.Column("status", sa.Integer),  # the HTTP answer's status; None for a CLI act
    sa.Column("policy", sa.Text),  # the ids of the Cedar policies that decided, comma-separated
    sa.Column("detail", sa.Text),
    sa.Column("prev", sa.String(64)),  # None until sealed
    sa.Column("hash", sa.String(64)),  # None until sealed
    # the sealed rows only: a row's entry is made by its seal (0033), not by its write
    sa.Index("ix_audit_log_seq", "seq", unique=True, sqlite_where=sa.text("seq IS NOT NULL"),
             postgresql_where=sa.text("seq IS NOT NULL")),
    sa.Index("ix_audit_log_at", "at"),
    sa.Index("ix_audit_log_principal", "principal", "id"),
    # the rows waiting to be sealed, in the order they are sealed (what ``seal`` reads, and nothing else)
    sa.Index("ix_audit_log_unsealed", "id", sqlite_where=sa.text("seq IS NULL"),
             postgresql_where=sa.text("seq IS NULL")),
    sqlite_autoincrement=True,  # an id is never given twice, even after the newest row is pruned
)

# The chain's two ends: ``head``, the last row sealed (its seq and hash; locked by every seal, so the chain stays
# one line across servers), and ``anchor``, the last row pruned (seq 0 and 64 zeros before any), where verify starts.
audit_chain = sa.Table(
    "audit_chain",
    metadata,
    sa.Column("name", sa.String(16), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("at", UTCDateTime),  # when that row was written
    sa.Column("prev", sa.String(64)),  # the head's: the hash of the row before it (what a write's RETURNING reads)
)

# The fleet's reboot budget (datum.store.leases, migration 0009_reboot_leases): one row per group, locked by every
# grant in it so two servers cannot both hand out its last slot; and one lease per host rebooting.
reboot_groups = sa.Table(
    "reboot_groups",
    metadata,
    sa.Column("group_name", sa.String(253), primary_key=True),
    sa.Column("grants", sa.BigInteger, nullable=False, default=0, server_default="0"),
)

reboot_leases = sa.Table(
    "reboot_leases",
    metadata,
    sa.Column("host", sa.String(253), primary_key=True),
    sa.Column("group_name", sa.String(253), nullable=False),
    # The boot the host asked from: a report from another boot id releases the lease.
    sa.Column("boot_id", sa.String(100), nullable=False),
    sa.Column("since", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    # Set while the host reports from a new boot but not converged and healthy (migration 0021_reboot_requests):
    # why its lease is not released yet; an overdue lease with it halts its group as "unhealthy".
    sa.Column("unhealthy", sa.String(1000)),
    sa.Index("ix_reboot_leases_group", "group_name", "expires_at"),
)

# Hosts waiting for a reboot lease (datum.store.leases, migration 0021_reboot_requests): written by each ask,
# read by the grant under the group's lock to grant in nodes.yaml's reboot_order. A request lives until
# expires_at (two of the agent's intervals, or [fleet] reboot_request_ttl): a host that stopped asking (it no
# longer needs a reboot) stops holding the others back.
reboot_requests = sa.Table(
    "reboot_requests",
    metadata,
    sa.Column("host", sa.String(253), primary_key=True),
    sa.Column("group_name", sa.String(253), nullable=False),
    sa.Column("boot_id", sa.String(100), nullable=False),
    sa.Column("asked_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Index("ix_reboot_requests_group", "group_name", "expires_at"),
)

# Every revision of the fleet directory a server has served (datum.store.revisions, migration 0016_revisions):
# its id (datum.fleet.revision), when a server first saw it (the store's clock), its git commit when it has one.
revisions = sa.Table(
    "revisions",
    metadata,
    sa.Column("id", sa.String(100), primary_key=True),
    sa.Column("first_seen", UTCDateTime, nullable=False),
    sa.Column("git_commit", sa.String(64)),
    sa.Index("ix_revisions_first_seen", "first_seen"),
)

# Each revision's files, once (datum.store.snapshots, migration 0020_rollouts): what lets any replica serve a
# revision that is no longer the directory's current one (a rollout's previous). ``content`` is zlib'd JSON.
revision_files = sa.Table(
    "revision_files",
    metadata,
    sa.Column("revision", sa.String(100), primary_key=True),
    sa.Column("content", sa.LargeBinary, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
)

# Staged rollouts of revisions (datum.store.rollouts, migration 0020_rollouts): one row per rollout, the newest
# (highest id) the one in force; ids are given, not generated, so two replicas starting one race on the key.
rollouts = sa.Table(
    "rollouts",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("revision", sa.String(100), nullable=False),
    sa.Column("previous", sa.String(100)),  # the stable revision it rolls from; None for the first ever
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("wave", sa.Integer, nullable=False),  # 0 the canaries, 1.. the waves
    sa.Column("last_wave", sa.Integer, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("wave_started_at", UTCDateTime, nullable=False),
    sa.Column("wave_completed_at", UTCDateTime),  # every host of the released waves converged: the soak runs
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("by", sa.String(200)),  # who paused, resumed or aborted it last
    sa.Column("reason", sa.Text),  # why it halted (or was superseded)
    sa.Column("failed", sa.JSON(none_as_null=True)),  # the hosts that failed on it when it halted: [{host, reason}]
)

# Every transition of a rollout's state machine (migration 0025_rollout_events; ``datum.core.vocab.RolloutAct``),
# written in the transaction that makes it: when, which act, the state entered, the wave released so far, who
# (a principal, or ``server`` for what the server decided) and why; the hosts it named (a halt's failed
# hosts). ``GET /v1/events`` lists them as events of type ``rollout``; ``/v1/rollouts`` reads its times from them.
rollout_events = sa.Table(
    "rollout_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("rollout", sa.BigInteger, nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("act", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("revision", sa.String(100), nullable=False),
    sa.Column("wave", sa.Integer, nullable=False),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("hosts", sa.JSON(none_as_null=True)),
    sa.Index("ix_rollout_events_at", "at", "id"),
    sa.Index("ix_rollout_events_rollout", "rollout", "id"),
)

# Which wave each host known when a rollout started belongs to; hosts not listed wait for the last wave.
rollout_hosts = sa.Table(
    "rollout_hosts",
    metadata,
    sa.Column("rollout", sa.BigInteger, primary_key=True),
    sa.Column("host", sa.String(253), primary_key=True),
    sa.Column("wave", sa.Integer, nullable=False),
    sa.Column("grp", sa.String(253), nullable=False),
    # when a resume accepted the host's failure (migration 0022_rollout_accepted): the host's updated_at as the
    # resume found it; while its row is still that one, it counts neither failed nor waited for
    sa.Column("accepted_at", UTCDateTime),
    # why the rollout's revision could not be served to the host once released (migration 0023_rollout_unserved):
    # INVALID_INPUT (its manifest does not validate) counts failed; NOT_FOUND (no manifest for it) is not waited for
    sa.Column("unserved", sa.Text),
    sa.Column("unserved_code", sa.String(20)),
    sa.Index("ix_rollout_hosts_wave", "rollout", "wave"),
)
