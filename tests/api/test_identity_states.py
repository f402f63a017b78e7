"""An enrolled host's identity states are one vocabulary (``datum.core.vocab.IdentityState``) whose members carry
their consequences, and every surface takes them from there: the decisions the store allows (``entered_from``),
the sessions and tokens a decision ends (``sessions``, ``ends_bound_tokens``), the order ``datum enroll list``
shows them in, its ``--state`` choices, the API's enum and ``datum explain``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from datum.core.findings import ErrorCode, Problem
from datum.core.vocab import IdentityState
from datum.fleet import enroll as enrollment

from .story import Story, build_story
from .test_enroll_api import enroll, session

DECISIONS = {IdentityState.ACTIVE: enrollment.approve, IdentityState.DENIED: enrollment.deny,
             IdentityState.REVOKED: enrollment.revoke}


def _in_state(story: Story, host: str, state: IdentityState) -> Ed25519PrivateKey:
    """A host enrolled through a pattern's join token (pending), then decided into ``state`` by a person."""
    key = Ed25519PrivateKey.generate()
    join, _made = enrollment.create_join(story.store, story.clock.now, pattern=host, uses=1)
    answer = enroll(story, key, host, join)
    assert answer.status_code == 200 and answer.json()["state"] == IdentityState.PENDING, answer.text
    if state is not IdentityState.PENDING:
        DECISIONS[state](story.store, host, story.clock.now)
    assert enrollment.identity(story.store, host).state is state
    return key


def test_a_decision_moves_an_identity_only_from_the_states_its_target_is_entered_from(tmp_path: Path) -> None:
    from datum.api.front.tokens import create

    story = build_story(tmp_path)
    assert set(DECISIONS) | {IdentityState.PENDING} == set(IdentityState)  # pending: entered by a request only
    P, A, D, R = IdentityState  # what datum enroll approve, deny and datum host revoke --help promise
    assert {s: set(s.entered_from) for s in IdentityState} == {P: set(), A: {P, D}, D: {P, A}, R: {P, A, D}}
    for source in IdentityState:
        for target, decide in DECISIONS.items():
            host = f"{source}-{target}"
            key = _in_state(story, host, source)
            if source.sessions:
                assert session(story, key, host).status_code == 200
            create(story.store, "agent", host)  # a token bound to the host, as datum token create --host makes
            if source is not target and source not in target.entered_from:
                with pytest.raises(Problem) as refused:
                    decide(story.store, host, story.clock.now)
                assert refused.value.findings[0].code == ErrorCode.CONFLICT, (source, target)
                assert enrollment.identity(story.store, host).state is source
                continue
            done = decide(story.store, host, story.clock.now)
            after, ended = done if isinstance(done, tuple) else (done, 0)
            assert after.state is target, (source, target)
            sessions = 1 if source.sessions else 0
            expected = 0 if target.sessions else sessions + (1 if target.ends_bound_tokens else 0)
            assert ended == expected, (source, target)
            answer = session(story, key, host)
            assert answer.status_code == (200 if target.sessions else 403), (source, target, answer.text)


def test_the_listing_the_cli_s_choices_the_api_s_enum_and_explain_come_from_the_vocabulary(
        tmp_path: Path, datum_cli) -> None:
    from datum.cli.enroll import list_enrolled

    story = build_story(tmp_path)
    for state in reversed(IdentityState):
        _in_state(story, f"host-{state}", state)
    assert [i.state for i in enrollment.identities(story.store)] == list(IdentityState)  # pending first
    choices = next(p for p in list_enrolled.params if p.name == "states").type.choices  # type: ignore[attr-defined]
    assert list(choices) == [s.value for s in IdentityState]
    enrolled = story.app.openapi()["components"]["schemas"]["Enrolled"]["properties"]["state"]
    assert set(enrolled["enum"]) == {s.value for s in IdentityState} - {IdentityState.REVOKED}  # revoked: 403
    for state in IdentityState:
        code, out, err = datum_cli("explain", state.value, "--json")
        assert code == 0, err
        mine = [e for e in json.loads(out)["explanations"] if e["vocabulary"] == "identity state"]
        assert [e["act"] for e in mine] == [state.severity], state
