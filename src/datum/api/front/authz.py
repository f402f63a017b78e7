"""Cedar authorization: the actions of the contract, decided by ``cedarpy``, deny by default.

The policies, the schema and the (static) entities are parsed once into
cedarpy's handles and reused for every decision. Entities are parsed *with*
the schema, which is what makes action groups (``action in Action::"read"``)
work. A decision other than ``Allow`` (``Deny``, or ``NoDecision`` when the
request does not fit the schema) is a deny. Decisions depend only on
(principal, action, resource) here, so they are memoised.

The memo also knows when a decision does not depend on the resource's id.
The only entity the store holds for a decision is a bound principal (its
``name`` and ``host`` attributes); a resource is not in it, so it has no
attributes and no parents, and Cedar can tell two resource ids of one type
apart only by comparing them with an entity some policy names or with the
principal's attributes (Cedar has no operator that reads an id as text).
Every id no policy and no attribute of the principal names (``_unnamed``)
therefore gets the same decision: one Cedar call decides them all, which is
what an unbound agent token reporting for 10,000 hosts needs. Every other id
is decided, and memoised, by itself. Policies are read once, when the
server starts, so nothing memoised outlives what it was decided under;
tokens resolve to principals before the memo is asked (``datum.api.front.tokens``),
so the memo holds no token.

A token scoped to host groups (``datum token create --group web``) speaks for
``operator@groups:web``, a ``Principal`` in ``Principal::"operator"`` with its
groups as an attribute; a decision of such a principal on a ``Host`` is told
the host's group (``Host::"web1" in HostGroup::"web"``), and is memoised by
that group instead of the host's id. ``decision`` is the one place a request's
answer is decided: whether it is allowed, and which policies decided
(their ``@id``), what ``datum authz explain`` and the audit log say.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path

import cedarpy

from datum.core.findings import ErrorCode, FieldError, Finding, Problem


class Action(StrEnum):
    """The Cedar actions of Datum's own endpoints; a plugin's are strings its schema fragment declares."""

    READ_SUBSTRATE = "observability:ReadSubstrate"
    READ_HOST = "fleet:ReadHost"
    READ_HISTORY = "fleet:ReadHistory"
    REPORT_PASS = "fleet:ReportPass"
    READ_MANIFEST = "fleet:ReadManifest"
    TAKE_REBOOT_LEASE = "fleet:TakeRebootLease"
    MANAGE_ROLLOUT = "fleet:ManageRollout"
    CLEAR_REBOOT_LEASE = "fleet:ClearRebootLease"
    READ_AUDIT = "fleet:ReadAudit"


Resource = tuple[str, str]
SERVER: Resource = ("Server", "datum")


# A token bound to one host speaks for ``<principal>@host:<host>``: a Cedar ``Principal`` whose
# ``host`` attribute is that ``Host`` (':' is not allowed in a principal's own name).
BOUND = "@host:"
# A token scoped to host groups speaks for ``<principal>@groups:<group>,<group>`` (sorted): a Cedar
# ``Principal`` in ``Principal::"<principal>"`` whose ``groups`` attribute is those ``HostGroup``s.
SCOPED = "@groups:"


def bound(principal: str, host: str) -> str:
    """The principal of a token bound to ``host``."""
    return f"{principal}{BOUND}{host}"


def scoped(principal: str, groups: Iterable[str]) -> str:
    """The principal of a token scoped to ``groups``."""
    return f"{principal}{SCOPED}{','.join(sorted(set(groups)))}"


@dataclass(frozen=True, slots=True)
class Who:
    """What a principal string says: its name, the host it is bound to, the host groups it is scoped to."""

    name: str
    host: str | None = None
    groups: frozenset[str] | None = None  # None: every group


def who(principal: str) -> Who:
    """``principal`` read: ``agent@host:web1``, ``operator@groups:db,web`` or a plain name."""
    if BOUND in principal:
        name, _, host = principal.partition(BOUND)
        return Who(name, host=host)
    if SCOPED in principal:
        name, _, groups = principal.partition(SCOPED)
        return Who(name, groups=frozenset(groups.split(",")))
    return Who(principal)


def scope_of(principal: str) -> frozenset[str] | None:
    """The host groups ``principal`` sees and acts on; None for every group (a token scoped to none)."""
    return who(principal).groups


def _entity(kind: str, eid: str) -> dict[str, str]:
    return {"type": kind, "id": eid}


def _entities(principal: str, resource: Resource, group: str | None) -> str:
    """The Cedar entities a decision needs: a bound or scoped principal with its attributes (a scoped one in its
    plain name), and a ``Host`` in its ``group`` when it is told."""
    found: list[dict[str, object]] = []
    said = who(principal)
    if said.host is not None:
        attrs: dict[str, object] = {"name": said.name, "host": {"__entity": _entity("Host", said.host)}}
        found.append({"uid": _entity("Principal", principal), "attrs": attrs, "parents": []})
    elif said.groups is not None:
        attrs = {"name": said.name, "groups": [{"__entity": _entity("HostGroup", g)} for g in sorted(said.groups)]}
        found.append({"uid": _entity("Principal", principal), "attrs": attrs, "parents": [_entity("Principal", said.name)]})
    if group is not None and resource[0] == "Host":
        found.append({"uid": _entity(*resource), "attrs": {}, "parents": [_entity("HostGroup", group)]})
    return json.dumps(found)


@dataclass(frozen=True, slots=True)
class Decision:
    """Cedar's answer: allowed or not, and the ``@id`` of each policy that decided (the permits that allowed, or
    the forbids that refused; none when nothing permitted: deny by default)."""

    allowed: bool
    policies: tuple[str, ...] = ()


def reconciler(name: str) -> Resource:
    return ("Reconciler", name)


def host(name: str) -> Resource:
    return ("Host", name)


def shipped(name: str) -> str:
    """A file shipped in ``datum/api/policies``."""
    return resources.files("datum.api").joinpath("policies", name).read_text(encoding="utf-8")


def shipped_schema(fragments: Iterable[str] = ()) -> str:
    """Datum's schema, with the plugins' fragments (their entities and actions) after it."""
    return "\n".join([shipped("datum.cedarschema"), *fragments])


def fragment_problem(fragment: str) -> str | None:
    """Why a plugin's schema fragment cannot be merged with Datum's (it does not parse, or redeclares), or None."""
    try:
        cedarpy.Schema.from_str(shipped_schema([fragment]))
    except Exception as exc:  # noqa: BLE001 - cedarpy raises its own kinds; reported, the plugin refused
        return f"its Cedar schema fragment does not merge: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    return None


def shipped_policies() -> str:
    return shipped("default.cedar")


def check_policies(policies: str, schema: cedarpy.Schema, origin: str) -> None:
    """Refuse policies that do not parse (``statement`` -1: the document) or do not validate against the schema
    (a finding per policy at fault, ``statement`` its index in the document); every error at once."""
    try:
        result = cedarpy.validate_policies(policies, schema)
    except ValueError as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"Cedar policies in {origin} do not parse: {exc}", statement=-1) from exc
    if not result.validation_passed:
        by_policy: dict[str, list[FieldError]] = {}
        for e in result.errors:
            by_policy.setdefault(e.policy_id, []).append(FieldError(e.policy_id or "policies", e.error))
        raise Problem(
            [
                Finding(
                    ErrorCode.INVALID_INPUT,
                    f"Cedar policies in {origin} do not validate against Datum's schema: {policy_id or 'the document'}",
                    statement=_index(policy_id),
                    fields=tuple(errors),
                )
                for policy_id, errors in by_policy.items()
            ]
        )


def _index(policy_id: str) -> int:
    """The statement a policy id names (cedarpy numbers them ``policy0``, ``policy1``, ... in the document); -1,
    the document, for an error of no one policy (it does not parse)."""
    number = policy_id.removeprefix("policy")
    return int(number) if number != policy_id and number.isdigit() else -1


MEMO_MAX = 200_000


def policy_ids(policies: str) -> dict[str, str]:
    """Each policy's ``@id`` by the id cedarpy gives it (``policy0``, ``policy1``, ... in the document); a policy
    without one keeps cedarpy's."""
    try:
        doc = json.loads(cedarpy.policies_to_json_str(policies))
        static = doc.get("staticPolicies") or {}
        return {k: str((v.get("annotations") or {}).get("id") or k) for k, v in static.items()}
    except Exception:  # noqa: BLE001 - named as cedarpy names them
        return {}


def _named(policies: str) -> frozenset[str] | None:
    """Every string the policies hold (entity ids among them), or None when that cannot be told (templates).

    A superset of the entity ids they name (a string literal or an annotation counts too): that only costs
    a decision of its own for that id.
    """
    try:
        doc = json.loads(cedarpy.policies_to_json_str(policies))
    except Exception:  # noqa: BLE001 - not told: every id decided by itself
        return None
    # Anything but the shape this reads (templates, or a cedarpy that names its parts
    # otherwise) decides every id by itself: the memo fails closed, never shared.
    if not isinstance(doc, dict) or doc.get("templates") or not isinstance(doc.get("staticPolicies"), dict):
        return None
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(doc["staticPolicies"])
    return frozenset(found)


class Authorizer:
    """Decides whether a principal may take an action on a resource, and which policies said so."""

    def __init__(self, policies: str, schema: str, origin: str = "the policy file") -> None:
        self.schema = cedarpy.Schema.from_str(schema)
        check_policies(policies, self.schema, origin)
        self.policies = cedarpy.PolicySet.from_str(policies)
        self.entities = cedarpy.Entities.from_json_str("[]", self.schema)
        self._memo: dict[tuple[str, str, str, str | None, str | None], Decision] = {}
        self._named = _named(policies)
        self._ids = policy_ids(policies)
        # Whether a policy could ask a host's group of a principal not scoped to groups (it names HostGroup).
        self._grouped = self._named is None or "HostGroup" in self._named

    @classmethod
    def from_settings(cls, policy: Path | None, fragments: Iterable[str] = ()) -> Authorizer:
        """The shipped schema (with the plugins' ``fragments``) and the configured policy file, else the shipped default policies."""
        schema = shipped_schema(fragments)
        if policy is None:
            return cls(shipped_policies(), schema, "the shipped default policies")
        try:
            text = Path(policy).read_text(encoding="utf-8")
        except OSError as exc:
            raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read the policy file {policy}: {exc.strerror}") from exc
        return cls(text, schema, str(policy))

    def needs_group(self, principal: str, resource: Resource) -> bool:
        """Whether deciding for ``principal`` on ``resource`` asks the host's group: a ``Host``, and a principal
        scoped to groups or policies that name ``HostGroup``."""
        return resource[0] == "Host" and (SCOPED in principal or self._grouped)

    def _key(
        self, principal: str, action: str, resource: Resource, group: str | None
    ) -> tuple[str, str, str, str | None, str | None]:
        """What a decision is memoised by: the resource's id left out when it is ``_unnamed`` (its group kept)."""
        kind, eid = resource
        named = self._named
        if named is None or eid in named or eid == principal:
            return (principal, action, kind, eid, group)
        if BOUND in principal:
            name, _, bound_host = principal.partition(BOUND)
            if eid in (name, bound_host):
                return (principal, action, kind, eid, group)
        return (principal, action, kind, None, group)

    def decision(self, principal: str, action: Action | str, resource: Resource, group: str | None = None) -> Decision:
        """Cedar's decision, memoised; ``group`` is the ``HostGroup`` of a ``Host`` resource, when told."""
        key = self._key(principal, str(action), resource, group)
        known = self._memo.get(key)
        if known is not None:
            return known
        special = BOUND in principal or SCOPED in principal or (group is not None and resource[0] == "Host")
        result = cedarpy.is_authorized(
            {
                "principal": {"type": "Principal", "id": principal},
                "action": {"type": "Action", "id": str(action)},
                "resource": {"type": resource[0], "id": resource[1]},
                "context": {},
            },
            self.policies,
            cedarpy.Entities.from_json_str(_entities(principal, resource, group), self.schema) if special else self.entities,
            self.schema,
        )
        decided = Decision(
            result.decision == cedarpy.Decision.Allow,
            tuple(self._ids.get(r, r) for r in result.diagnostics.reasons),
        )
        # Keys are per principal (a token's) and per named id: a fleet of bound agents needs one per host and
        # action; resource ids from requests that nothing names share one key, so the bound is generous.
        if len(self._memo) > MEMO_MAX:
            self._memo.clear()
        self._memo[key] = decided
        return decided

    def allowed(self, principal: str, action: Action | str, resource: Resource, group: str | None = None) -> bool:
        return self.decision(principal, action, resource, group).allowed
