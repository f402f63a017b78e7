"""Datum's configuration: TOML from ``--config`` or ``DATUM_CONFIG``, defaults for everything.

The base directory for the default store and bucket root is ``DATUM_HOME``,
else ``/var/lib/datum`` for root and ``$XDG_STATE_HOME/datum`` for others.
"""

from __future__ import annotations

import os
import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from datum.core.bounds import ANSWER_DEADLINE, MAX_ANSWER
from datum.core.breaker import Threshold
from datum.core.converge import ConvergeConfig
from datum.core.findings import ErrorCode, FieldError, Finding, Problem, invalid
from datum.core.memory import BackoffPolicy
from datum.core.vocab import ConvergeMode, Direction, Mode, RebootPolicy
from datum.home import default_home, url_refused
from datum.validation import field_errors

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any, zero: bool = False) -> timedelta:
    """``"30s"``, ``"5m"``, ``"1h"``, ``"250ms"`` or a number of seconds; ``0`` too when ``zero``."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("a duration such as '30s' or '5m'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError("a duration such as '30s' or '5m'")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0 or (seconds == 0 and not zero):
        raise ValueError("a duration must be positive" + (" or 0" if zero else ""))
    return timedelta(seconds=seconds)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
MaybeNone = Annotated[timedelta, BeforeValidator(lambda v: parse_duration(v, zero=True))]  # 0: none at all


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThresholdSettings(_Strict):
    """A breaker threshold given as a table: a count, a fraction of its population, or both."""

    count: int | None = Field(default=None, ge=0)
    fraction: float | None = Field(default=None, ge=0, le=1)


class ReapThresholdSettings(ThresholdSettings):
    """The reap threshold: a key the table leaves out keeps its default (10, a tenth of what exists)."""

    count: int | None = Field(default=10, ge=0)
    fraction: float | None = Field(default=0.1, ge=0, le=1)


class WriteThresholdSettings(ThresholdSettings):
    """The restore and align thresholds: a table without ``count`` keeps the count of 100."""

    count: int | None = Field(default=100, ge=0)


def _threshold(value: Any) -> Any:
    return {"count": value} if isinstance(value, int) and not isinstance(value, bool) else value


Limit = Annotated[WriteThresholdSettings | None, BeforeValidator(_threshold)]
ReapLimit = Annotated[ReapThresholdSettings | None, BeforeValidator(_threshold)]


class BreakerSettings(_Strict):
    """Per-direction breaker thresholds; a bare number is a count.

    A reap trips past 10 candidates or past a tenth of what exists, whichever
    comes first; a bare number replaces the count and keeps the fraction, and
    a table keeps the default of every key it leaves out (``fraction = 1``
    switches the fraction off). Restores and aligns trip past 100, and on a
    fraction of what is desired only when one is given.
    """

    restore: Limit = WriteThresholdSettings()
    reap: ReapLimit = ReapThresholdSettings()
    align: Limit = WriteThresholdSettings()


class BackoffSettings(_Strict):
    base_passes: int = Field(default=1, ge=1)
    cap_passes: int = Field(default=64, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> BackoffSettings:
        if self.cap_passes < self.base_passes:
            raise ValueError("cap_passes must be >= base_passes")
        return self


class ReconcilerSettings(_Strict):
    """The settings every reconciler has. A reconciler may extend this with its own."""

    interval: Duration = timedelta(seconds=30)
    confirmation_ticks: int = Field(default=2, ge=1)
    drift_cap: int = Field(default=500, ge=0)
    breaker: BreakerSettings = BreakerSettings()
    backoff: BackoffSettings = BackoffSettings()
    mode: ConvergeMode = ConvergeMode.ENFORCE
    no_reap: bool = False
    allow_empty: bool = False
    enabled: bool = True
    lock_ttl: Duration = timedelta(minutes=10)
    # A pass running longer than this reads `failing` and applies no further item; None: ten
    # intervals, at least a minute.
    pass_timeout: Duration | None = None

    @property
    def overrun_after(self) -> timedelta:
        """How long a pass may run before it reads ``failing`` and stops at its next item."""
        return self.pass_timeout or max(10 * self.interval, timedelta(minutes=1))

    def converge_config(self) -> ConvergeConfig:
        """The pure core's view of these settings."""
        breaker = {}
        for direction in Direction:
            t = getattr(self.breaker, direction.value)
            if t is not None:
                breaker[direction] = Threshold(count=t.count, fraction=t.fraction)
        return ConvergeConfig(
            confirmation_ticks=self.confirmation_ticks,
            drift_cap=self.drift_cap,
            breaker=breaker,
            backoff=BackoffPolicy(self.backoff.base_passes, self.backoff.cap_passes),
            mode=self.mode,
            no_reap=self.no_reap,
            allow_empty=self.allow_empty,
        )


class ServerSettings(_Strict):
    """The ``[server]`` section: where ``datum serve`` listens and who may do what.

    ``tokens`` maps a principal to the SHA-256 hashes (``sha256:<hex>``) of its
    bearer tokens; ``datum token create`` stores hashes in the store instead.
    ``policy`` replaces the shipped Cedar policy file. ``refresh`` is how
    often the page reloads its data; ``report_ttl`` how long the server reuses
    a computed drift report. ``max_body_bytes`` bounds a request body (413
    beyond it), ``max_diff_bytes`` each stored resource diff (cut with a
    marker); ``header_timeout`` and ``body_timeout`` close a client that is
    slower than that to send its request line and headers, or its body;
    ``keep_alive`` is how long an idle connection stays open. ``tls``, ``tls_cert`` and ``tls_key``,
    ``tls_names``: HTTPS (``datum.fleet.tls``); without it, plain HTTP is served on loopback only,
    unless ``insecure_http`` (behind a proxy that speaks TLS).
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    policy: Path | None = None
    tokens: dict[str, list[str]] = Field(default_factory=dict)
    scheduler: bool = True
    refresh: Duration = timedelta(seconds=10)
    report_ttl: Duration = timedelta(seconds=1)
    access_log: bool = True
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_diff_bytes: int = Field(default=64 * 1024, ge=256)
    header_timeout: Duration = timedelta(seconds=10)
    body_timeout: Duration = timedelta(seconds=30)
    keep_alive: Duration = timedelta(seconds=5)
    # How long a reconciler's pass history (the page's strips, datum.store.history) is kept; older rows are
    # pruned by the pass that writes the next one.
    history: Duration = timedelta(days=14)
    # People's reads (the page, drift reports, the host listing, /metrics) served at once per process; one
    # that waits read_wait for a slot is answered 503 with Retry-After (datum.api.front.gate).
    read_slots: int = Field(default=8, ge=1, le=1000)
    read_wait: Duration = timedelta(seconds=5)
    # How long every host pass is kept (the pass archive, datum.store.passes: GET /v1/hosts/{host}/passes,
    # /v1/events, the host strips); older passes are dropped in bulk by datum serve, off the request path.
    retention: Duration = timedelta(days=14)
    # Refuse agent tokens that are not sessions of an enrolled host's key (datum token create --principal agent,
    # and [server.tokens] agent hashes): 401 saying so (datum.api.front.tokens).
    require_enrolled_agents: bool = False
    # How long the audit log's rows are kept (datum.store.audit: GET /v1/audit, datum audit); older ones are
    # dropped by datum serve, off the request path, the chain's anchor moved so datum audit verify still holds.
    audit_keep: Duration = timedelta(days=400)
    # Whether an admitted pass report leaves its audit row (fleet:ReportPass, written with the pass): the most
    # frequent act by far (a thousand hosts every 15 minutes: 96,000 rows a day). false leaves them out (the pass
    # archive keeps every report); refused reports are recorded either way.
    audit_reports: bool = True
    # HTTPS: "auto" (a CA of Datum's own and a certificate it issues, in $DATUM_HOME/tls), or the files given.
    tls: Literal["auto"] | None = None
    tls_cert: Path | None = Field(default=None, description="The server's certificate chain (PEM), its own first.")
    tls_key: Path | None = Field(default=None, description="The private key of tls_cert (PEM, no password).")
    tls_names: list[str] = Field(
        default_factory=list, max_length=100,
        description='With tls = "auto": the DNS names and IP addresses of the server certificate '
        "(default: this host's names, localhost, 127.0.0.1, ::1).",
    )
    insecure_http: bool = Field(
        default=False, description="Serve plain HTTP on an address other than loopback (behind a TLS proxy)."
    )

    @field_validator("tls_names")
    @classmethod
    def _tls_names(cls, value: list[str]) -> list[str]:
        import ipaddress

        for name in value:
            try:
                ipaddress.ip_address(name)
                continue
            except ValueError:
                pass
            if not _DNS_NAME.match(name):
                raise ValueError(f"{name[:80]!r} is neither a DNS name nor an IP address")
        return value

    @model_validator(mode="after")
    def _tls_files(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.tls == "auto" and self.tls_cert is not None:
            raise ValueError('tls = "auto" makes its own certificate: give it, or tls_cert and tls_key, not both')
        if self.tls_names and self.tls != "auto":
            raise ValueError('tls_names are the names of the certificate tls = "auto" makes')
        return self

    @property
    def https(self) -> bool:
        """Whether ``datum serve`` speaks TLS."""
        return self.tls == "auto" or self.tls_cert is not None

    @field_validator("tokens", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: [v] if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("tokens")
    @classmethod
    def _hashes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for hashes in value.values():
            for h in hashes:
                if not _TOKEN_HASH.match(h):
                    raise ValueError("token hashes are 'sha256:' and 64 hex digits")
        return value


_TOKEN_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_DNS_NAME = re.compile(r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


_WINDOW = re.compile(
    r"^\s*(?:(?P<days>[A-Za-z]{3}(?:-[A-Za-z]{3})?(?:,[A-Za-z]{3}(?:-[A-Za-z]{3})?)*|daily)\s+)?"
    r"(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})\s*$"
)
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def parse_window(text: str) -> tuple[frozenset[int], int, int]:
    """``"Sun 02:00-04:00"`` -> (weekdays, start minute, end minute); ``Mon-Fri``, ``Sat,Sun``, ``daily``.

    Weekdays count from Monday = 0 as ``datetime.weekday()`` does. A window whose
    end is before its start runs past midnight into the next day.
    """
    match = _WINDOW.match(text)
    if not match:
        raise ValueError("a window such as 'Sun 02:00-04:00', 'Mon-Fri 01:00-03:00' or 'daily 02:00-04:00'")
    days: set[int] = set()
    spec = (match.group("days") or "daily").lower()
    for part in ["mon-sun"] if spec == "daily" else spec.split(","):
        first, _, last = part.partition("-")
        if first not in _DAYS or (last and last not in _DAYS):
            raise ValueError(f"unknown weekday in {part!r}: use Mon, Tue, Wed, Thu, Fri, Sat, Sun")
        a, b = _DAYS.index(first), _DAYS.index(last or first)
        days.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    minutes = []
    for clock in (match.group("start"), match.group("end")):
        hh, mm = (int(x) for x in clock.split(":"))
        if hh > 24 or mm > 59 or (hh == 24 and mm):
            raise ValueError(f"{clock} is not a time of day")
        minutes.append(hh * 60 + mm)
    if minutes[0] == minutes[1]:
        raise ValueError("the window is empty")
    return frozenset(days), minutes[0], minutes[1]


def _http_url(value: str | None) -> str | None:
    """An http(s) URL (the health URL an agent fetches, the Prometheus a server asks), or None."""
    if value is not None and not re.match(r"^https?://[^/\s]+", value):
        raise ValueError("an http:// or https:// URL")
    return value


class HostSettings(_Strict):
    """The ``[host]`` section: how the host agent runs on this machine (never desired state)."""

    name: str | None = Field(default=None, min_length=1, max_length=253, description="Host name in reports (default: the hostname).")
    mode: Mode = Mode.ENFORCE
    reboot_policy: RebootPolicy = RebootPolicy.NEVER
    maintenance_window: str | None = None
    reboot_command: str = "systemctl reboot"
    state: str | None = Field(
        default=None,
        description="The host's local state file, a path (default: $DATUM_HOME/agent.db); never a store URL.",
    )
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    lock_wait: Duration = timedelta(seconds=30)
    # Accepted and unused: the host's pass lock is flock on its local state file, which dies
    # with its process and never expires under a live one (a store URL as state had a lease).
    lock_ttl: Duration = Field(default=timedelta(hours=1), description="Unused (kept so older files validate).")
    report_to: str | None = None
    token: str | None = None
    # Reboots across a fleet (datum agent, docs/fleet.md): hooks around a policy reboot and the health check that
    # must pass after it before the host frees its group's reboot lease. Commands are split as a shell would
    # (shlex) and run without one, unless hooks_shell says so; each within its timeout.
    pre_reboot: str | None = Field(default=None, min_length=1, description="Run after the lease is granted, before the reboot (drain); failing, no reboot.")
    post_reboot: str | None = Field(default=None, min_length=1, description="Run after the first pass from the new boot, once healthy (undrain).")
    health_check: str | None = Field(default=None, min_length=1, description="A command that exits 0 when the host is healthy after a reboot.")
    health_url: str | None = Field(default=None, description="An http(s) URL that answers 2xx when the host is healthy after a reboot.")
    health_timeout: Duration = timedelta(seconds=30)
    hook_timeout: Duration = timedelta(minutes=5)
    hooks_shell: bool = Field(default=False, description="Run pre_reboot, post_reboot and health_check through /bin/sh -c.")

    @field_validator("pre_reboot", "post_reboot", "health_check")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        import shlex

        if value is not None:
            try:
                if not shlex.split(value):
                    raise ValueError("an empty command")
            except ValueError as exc:
                raise ValueError(f"a command, split as a shell would (shlex): {exc}") from exc
        return value

    @field_validator("health_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @field_validator("state")
    @classmethod
    def _local_state(cls, value: str | None) -> str | None:
        if value is not None and (why := url_refused(value)):  # the rule --state follows too
            raise ValueError(why)
        return value

    @field_validator("maintenance_window")
    @classmethod
    def _window(cls, value: str | None) -> str | None:
        if value is not None:
            parse_window(value)
        return value

    @model_validator(mode="after")
    def _window_for_policy(self) -> HostSettings:
        if self.reboot_policy is RebootPolicy.MAINTENANCE and not self.maintenance_window:
            raise ValueError("reboot_policy 'maintenance' needs a maintenance_window")
        return self


_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_percent(value: Any) -> float:
    """``"10%"`` (or a number of percent) as a fraction in (0, 1]; ``"0%"`` only where the caller allows it."""
    if isinstance(value, bool):
        raise ValueError("a percentage such as '10%'")
    if isinstance(value, int | float):
        percent = float(value)
    else:
        match = _PERCENT.match(str(value))
        if not match:
            raise ValueError("a percentage such as '10%'")
        percent = float(match.group(1))
    if not 0 <= percent <= 100:
        raise ValueError("a percentage from 0% to 100%")
    return percent / 100


Percent = Annotated[float, BeforeValidator(parse_percent)]


class RolloutSettings(_Strict):
    """``[fleet.rollout]``: a new revision of the fleet's manifests goes to the canaries, then wave by wave
    (``datum.fleet.rollouts.plan``, ``docs/fleet.md`` "Staged rollouts"). Absent: every host gets the current revision."""

    canary: list[str] = Field(
        default_factory=list,
        description='The first wave: host names, or "group:NAME" for every host of a nodes.yaml group.',
    )
    waves: list[Percent] = Field(
        default_factory=lambda: [1.0], min_length=1, max_length=20,
        description='After the canaries, each group\'s hosts released in waves: ["10%", "50%", "100%"]; the last 100%.',
    )
    soak: MaybeNone = Field(
        default=timedelta(minutes=10),
        description="How long a wave whose hosts all converged on the new revision is watched before the next "
        '(0: released at once).',
    )
    max_failed: Percent = Field(
        default=0.0, description="More than this share of the released hosts failed on the new revision: halt.",
    )

    @field_validator("canary")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            bare = name.removeprefix("group:")
            if not bare or len(bare) > 253 or bare != bare.strip():
                raise ValueError(f"{name!r}: a host name or group:NAME")
        return value

    @field_validator("waves")
    @classmethod
    def _increasing(cls, value: list[float]) -> list[float]:
        if any(p <= 0 for p in value):
            raise ValueError("every wave releases more than 0%")
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise ValueError("each wave releases more than the one before")
        if value[-1] != 1.0:
            raise ValueError('the last wave is "100%"')
        return value


class FleetSettings(_Strict):
    """The ``[fleet]`` section: the server's manifests and node classification (``docs/fleet.md``)."""

    manifests: Path | None = Field(
        default=None, description="Directory of manifests with nodes.yaml; GET /v1/hosts/{host}/manifest serves from it."
    )
    stale_after: float = Field(
        default=3.0, gt=0, description="A host silent for this many of its agent's intervals reads unknown."
    )
    reboot_concurrency: int = Field(
        default=1, ge=1, le=10_000,
        description="Hosts of one group (nodes.yaml `group`) that may reboot at once (reboot_policy automatic, maintenance).",
    )
    reboot_timeout: Duration = Field(
        default=timedelta(hours=1),
        description="A reboot lease whose host has not reported from a new boot by then is overdue: its group's reboots halt.",
    )
    rollout: RolloutSettings | None = Field(
        default=None, description="Staged rollouts of new revisions ([fleet.rollout]); absent: none."
    )
    reboot_request_ttl: Duration | None = Field(
        default=None,
        description="How long a host's ask for a reboot lease holds its place in reboot_order; default two of its agent's intervals.",
    )
    reboot_block_query: str | None = Field(
        default=None, min_length=1, max_length=4000,
        description="A PromQL query: while it returns any series, no reboot lease is granted in any group (as kured).",
    )
    prometheus_url: str | None = Field(default=None, description="The Prometheus reboot_block_query asks (http or https).")
    prometheus_timeout: Duration = Field(default=timedelta(seconds=5), description="For one query; past it, reboots are blocked.")

    @field_validator("prometheus_url")
    @classmethod
    def _prometheus(cls, value: str | None) -> str | None:
        return _http_url(value)

    @model_validator(mode="after")
    def _block_needs_prometheus(self) -> FleetSettings:
        if self.reboot_block_query is not None and self.prometheus_url is None:
            raise ValueError("reboot_block_query needs prometheus_url")
        return self


class MetricsSettings(_Strict):
    """The ``[metrics]`` section: how many series ``/metrics`` carries per host (``docs/server.md``).

    ``per_host``: ``all`` (every host's series), ``problems`` (only the hosts that do not read
    ``converged``: what the shipped alerts need), ``none`` (fleet-wide series only), or ``auto``:
    ``all`` up to ``per_host_limit`` hosts, ``problems`` above. The fleet-wide series are always there.
    """

    per_host: Literal["auto", "all", "problems", "none"] = Field(
        default="auto", description="Per-host series: all, problems (hosts not converged), none, or auto."
    )
    per_host_limit: int = Field(
        default=1000, ge=0, description="With per_host = auto: every host's series up to this many hosts, problems above."
    )


class AgentSettings(_Strict):
    """The ``[agent]`` section: how long ``datum agent`` (and ``datum apply --report-to``) waits for a server's
    whole answer, and how large a manifest's answer it takes. A server that trickles its answer, or sends more,
    is given up on (the agent keeps its manifest and its reports, and says why); the defaults are
    ``datum.core.bounds``'."""

    answer_deadline: Duration = Field(
        default=timedelta(seconds=ANSWER_DEADLINE),
        description="The whole of each answer of the server (the request sent, its headers and body read), "
        "however slowly it comes: from 1s to 1h.",
    )
    max_answer_bytes: int = Field(
        default=MAX_ANSWER, ge=2**20, le=2**30,
        description="The largest manifest answer taken (files included), from 1 MiB to 1 GiB; past it the agent "
        "keeps the manifest it has. The server serves at most 16 MiB.",
    )

    @field_validator("answer_deadline")
    @classmethod
    def _deadline(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(hours=1):
            raise ValueError("from 1s to 1h")
        return value


class EnrollSettings(_Strict):
    """The ``[enroll]`` section: how hosts join the fleet with their own key (``docs/fleet.md``, ``datum.fleet.enroll``).

    ``url`` is the server's URL as hosts reach it, for the line ``datum enroll create`` prints. ``approve``
    is an executable asked about each request made with a pattern's join token, after the request was answered
    ``pending`` (``datum.fleet.approvals``: JSON on stdin; exit 0 approves, any other exit denies); one that does
    not answer within ``approve_timeout`` leaves the request pending for ``datum enroll approve``. ``session_ttl`` is how long a session from a host's key
    lasts (at most 24 h); the agent renews it between 50% and 80% of that.
    """

    url: str | None = None
    approve: Path | None = None
    approve_timeout: Duration = timedelta(seconds=10)
    session_ttl: Duration = timedelta(hours=1)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @field_validator("session_ttl")
    @classmethod
    def _session_ttl(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(hours=24):
            raise ValueError("a session lasts from 1s to 24h")
        return value


class Settings(_Strict):
    """The whole configuration file."""

    home: Path = Field(default_factory=lambda: Path(default_home()))
    store: str | None = None
    reconcilers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    host: HostSettings = HostSettings()
    agent: AgentSettings = AgentSettings()
    server: ServerSettings = ServerSettings()
    fleet: FleetSettings = FleetSettings()
    metrics: MetricsSettings = MetricsSettings()
    enroll: EnrollSettings = EnrollSettings()

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite:///{self.home / 'datum.db'}"

    def reconciler(self, name: str, model: type[ReconcilerSettings]) -> ReconcilerSettings:
        """One reconciler's section validated against its own settings model."""
        raw = dict(self.reconcilers.get(name, {}))
        try:
            # The whole configuration is the validation's context: a reconciler whose defaults follow
            # another section (``hosts``: on with the fleet) reads it there.
            return model.model_validate({**_defaults_for(model, self), **raw}, context={"settings": self})
        except ValidationError as exc:
            raise invalid(field_errors(exc, f"reconcilers.{name}"), "configuration is not valid") from exc


def _defaults_for(model: type[ReconcilerSettings], settings: Settings) -> dict[str, Any]:
    hook = getattr(model, "defaults", None)
    return dict(hook(settings.home)) if callable(hook) else {}


def config_path(path: str | os.PathLike[str] | None) -> Path | None:
    """The configuration file to read: the flag, else ``DATUM_CONFIG``, else none."""
    chosen = path or os.environ.get("DATUM_CONFIG")
    return Path(chosen) if chosen else None


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read and validate the configuration; every finding at once."""
    file = config_path(path)
    raw: dict[str, Any] = {}
    if file is not None:
        try:
            raw = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise Problem.one(ErrorCode.INVALID_INPUT, f"configuration file {file} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise Problem(
                [Finding(ErrorCode.INVALID_INPUT, f"configuration file {file} is not valid TOML: {exc}",
                         fields=(FieldError("", str(exc)),))]
            ) from exc
        except UnicodeDecodeError as exc:
            raise Problem.one(
                ErrorCode.INVALID_INPUT, f"configuration file {file} is not UTF-8 (byte {exc.start})"
            ) from exc
        except OSError as exc:
            raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read {file}: {exc.strerror}") from exc
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise invalid(field_errors(exc), f"configuration file {file} is not valid") from exc
