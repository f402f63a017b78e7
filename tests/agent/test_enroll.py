"""Hosts enroll with their own key, with real ``datum serve``, ``datum enroll``, ``datum host`` and ``datum agent``
processes on loopback: a named join token once, a name another key holds refused until forgotten, the approval
hook's three answers, a revoke refused by two replicas within their 2 s re-check, and sessions renewed from the
key after the server was away longer than a session lives.

What needs the server's clock moved (a join token's life, a nonce's, a clock far off) is
tests/api/test_enroll_api.py's, with the clock injected.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from .conftest import DATUM, Fleet, Run, _fleet


@dataclass
class Host:
    """A host that enrolls: its root, state file (the key beside it), configuration (its name)."""

    fleet: Fleet
    name: str
    base: Path

    def __post_init__(self) -> None:
        (self.base / "root").mkdir(parents=True, exist_ok=True)
        (self.base / "boot_id").write_text("boot-1\n")
        (self.base / "agent.toml").write_text(f'[host]\nname = "{self.name}"\n')

    @property
    def state(self) -> Path:
        return self.base / "agent.db"

    @property
    def env(self) -> dict[str, str]:
        return {"DATUM_HOME": str(self.base / "home"), "DATUM_BOOT_ID_FILE": str(self.base / "boot_id")}

    def files(self) -> list[str]:
        return ["--state", str(self.state), "--config", str(self.base / "agent.toml")]

    def enrolling(self, join: str, *extra: str, replica: int = 0) -> list[str]:
        return ["agent", "enroll", "--server", self.fleet.url_of(replica), "--join", join, "--root",
                str(self.base / "root"), *self.files(), *extra]

    def enroll(self, join: str, *extra: str, replica: int = 0) -> Run:
        return self.fleet.datum(*self.enrolling(join, *extra, replica=replica), env=self.env)

    def once(self) -> Run:
        """``datum agent --once`` with no --server and no --token-file: the enrollment's server, the key's sessions."""
        return self.fleet.datum("agent", "--root", str(self.base / "root"), "--once", *self.files(), env=self.env)

    def start(self, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*DATUM, "agent", "--root", str(self.base / "root"), *self.files(), *extra],
                                stderr=subprocess.PIPE, text=True, env={**os.environ, **self.env})


def host(fleet: Fleet, name: str, where: str | None = None) -> Host:
    return Host(fleet, name, fleet.base / "hosts" / (where or name))


def join(fleet: Fleet, *args: str) -> str:
    """A join token by ``datum enroll create`` ARGS (the command itself in the first test; in the others made in
    this process by what it calls: a process start costs 1.5 s)."""
    from datum.fleet.enroll import create_join
    from datum.store import open_store

    given = dict(zip(args[::2], args[1::2], strict=True))
    store = open_store(fleet.store_url)
    try:
        token, _ = create_join(store, datetime.now(UTC), host=given.get("--host"), pattern=given.get("--pattern"),
                               uses=int(given.get("--uses", 1)))
    finally:
        store.dispose()
    return token


def admin(fleet: Fleet, *args: str) -> Run:
    return fleet.datum(*args, "--config", str(fleet.server_config))


def reported(fleet: Fleet, name: str) -> bool:
    operator = fleet.token("operator")
    return fleet.get(f"/v1/hosts/{name}", operator).status_code == 200


def test_a_named_join_token_enrolls_its_host_once_and_the_agent_needs_no_token_file(fleet: Fleet) -> None:
    made = admin(fleet, "enroll", "create", "--host", "web1", "--server", fleet.url)
    assert made.code == 0, made.err
    line = made.out.strip().splitlines()[-1].split()
    assert line[:4] == ["datum", "agent", "enroll", "--server"] and line[5] == "--join" and line[6].startswith("datum_j_")
    token = line[6]
    web1 = host(fleet, "web1")
    done = web1.enroll(token)
    assert done.code == 0 and "enrolled web1 with key sha256:" in done.out, done.err
    key = Path(f"{web1.state}.key")
    assert key.stat().st_mode & 0o777 == 0o600
    assert token not in key.read_text() and "PRIVATE KEY" in key.read_text()
    ran = web1.once()
    assert ran.code in (0, 2) and "manifest sha256:" in ran.err and "(server)" in ran.err and "delivered 1" in ran.err, ran.err
    assert reported(fleet, "web1")
    listed = json.loads(admin(fleet, "enroll", "list", "--json").out)
    [me] = listed["hosts"]
    assert (me["host"], me["state"], me["joinToken"]) == ("web1", "active", made.err.split("join token ")[1][:12])
    again = host(fleet, "web1", "web1-again").enroll(token)  # the same token, another key
    assert again.code == 65 and "has been used (1 of 1 uses)" in again.err, again.err


def test_a_name_another_key_holds_is_refused_until_it_is_forgotten(sqlite_fleet: Fleet) -> None:
    fleet = sqlite_fleet
    first = host(fleet, "web1")
    assert first.enroll(join(fleet, "--host", "web1")).code == 0
    assert first.once().code in (0, 2)
    rebuilt = host(fleet, "web1", "web1-rebuilt")  # the same name, a new key: a re-imaged host, or an impostor
    refused = rebuilt.enroll(join(fleet, "--host", "web1"))
    assert refused.code == 65 and "host web1 is enrolled with another key" in refused.err, refused.err
    assert "datum host forget web1" in refused.err
    assert "delivered" in first.once().err  # the first keeps its name
    forgot = admin(fleet, "host", "forget", "web1")
    assert forgot.code == 0 and "forgotten (it was active)" in forgot.out, forgot.err
    assert rebuilt.enroll(join(fleet, "--host", "web1")).code == 0
    assert "delivered 1" in rebuilt.once().err
    old = first.once()
    assert "no session from the host key" in old.err and "does not verify with the key host web1 enrolled with" in old.err


HOOK = """#!/bin/sh
input=$(cat)
printf '%s\\n' "$input" >> "{seen}"
echo $$ > "{seen}.pid"
case "$input" in
  *'"host": "web-ok"'*) while [ ! -e "{seen}.go" ]; do sleep 0.1; done; echo "found in the inventory"; exit 0 ;;
  *'"host": "web-slow"'*) sleep 60; exit 0 ;;
  *) echo "not in the inventory" >&2; exit 3 ;;
esac
"""


@pytest.fixture
def hooked(tmp_path: Path) -> Iterator[Fleet]:
    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}") as fleet:
        hook = tmp_path / "approve.sh"
        hook.write_text(HOOK.format(seen=tmp_path / "seen.jsonl"))
        hook.chmod(0o755)
        with fleet.server_config.open("a") as f:
            f.write(f'[enroll]\napprove = "{hook}"\napprove_timeout = "15s"\n')
        fleet.start()
        yield fleet


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def test_the_approval_hook_is_asked_after_the_answer_and_the_agent_waits_for_its_decision(hooked: Fleet, tmp_path: Path) -> None:
    from datum.agent.identity import enroll as ask
    from datum.agent.identity import key_here, key_path

    token = join(hooked, "--pattern", "web-*", "--uses", "3")
    ok, no, slow = (host(hooked, name) for name in ("web-ok", "web-no", "web-slow"))
    began = time.monotonic()  # the hook answers for web-ok once the test says so: the request does not wait for it
    first = ask(hooked.url, "web-ok", token, key_here(key_path(str(ok.state))), {"os": "testos"})
    assert time.monotonic() - began < 2 and first["state"] == "pending", first
    assert "waiting for the approval hook ([enroll] approve), else datum enroll approve web-ok" in first["reason"]
    # the same key and token: the agent asks again until the hook has answered, saying what it waits for
    waits = subprocess.Popen([*DATUM, *ok.enrolling(token)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, **ok.env})
    assert waits.stderr is not None
    said = waits.stderr.readline()
    assert said.startswith("web-ok is pending: through the join token") and "(--wait)" in said, said
    (tmp_path / "seen.jsonl.go").touch()  # the hook approves now
    out, err = waits.communicate(timeout=60)
    assert waits.returncode == 0 and "approved by the approval hook" in out and "found in the inventory" in out, err
    assert "delivered 1" in ok.once().err
    denied = no.enroll(token)
    assert denied.code == 65 and "denied (exit 3) by the approval hook" in denied.err and "not in the inventory" in denied.err
    waiting = slow.enroll(token, "--wait", "22s")  # the hook is killed at its 15 s; the request stays for a person
    assert waiting.code == 0 and "not decided within --wait 22 s" in waiting.out, waiting.err
    assert "did not answer within 15 s: waiting for datum enroll approve web-slow" in waiting.out, waiting.out
    assert not _alive(int((tmp_path / "seen.jsonl.pid").read_text()))
    assert "is pending" in slow.once().err  # no session yet: the cached manifest (none), the report kept
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert [s["host"] for s in seen] == ["web-ok", "web-no", "web-slow"]  # asked once each, however often polled
    assert seen[0]["fingerprint"].startswith("sha256:") and seen[0]["source"] == "127.0.0.1"
    assert seen[0]["facts"] == {"os": "testos"} and len(seen[0]["joinToken"]) == 12
    listed = json.loads(admin(hooked, "enroll", "list", "--json").out)["hosts"]
    assert [(h["host"], h["state"]) for h in listed] == [("web-slow", "pending"), ("web-ok", "active"), ("web-no", "denied")]
    assert admin(hooked, "enroll", "approve", "web-slow").code == 0
    assert "delivered 2" in slow.once().err  # the report kept while pending, and this one


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_revoke_is_refused_by_every_replica_within_the_recheck(tmp_path: Path, store_url: str) -> None:
    from datum.agent.identity import Session, key_path, load_key

    with _fleet(tmp_path, store_url, replicas=2) as fleet:
        fleet.start()
        web1 = host(fleet, "web1")
        assert web1.enroll(join(fleet, "--host", "web1")).code == 0
        assert web1.once().code in (0, 2)
        token = Session(fleet.url, "web1", load_key(key_path(str(web1.state)))).bearer()
        for replica in (0, 1):  # each replica remembers it: refused only once its re-check drops it
            assert fleet.get("/v1/hosts/web1/manifest", token, replica).status_code == 200
        revoked = admin(fleet, "host", "revoke", "web1")
        assert revoked.code == 0 and "refuse them within 2 s" in revoked.out, revoked.err
        began = time.monotonic()
        refused: dict[int, float] = {}
        while len(refused) < 2 and time.monotonic() - began < 10:
            for replica in {0, 1} - set(refused):
                if fleet.get("/v1/hosts/web1/manifest", token, replica).status_code == 401:
                    refused[replica] = time.monotonic() - began
            time.sleep(0.1)
        assert set(refused) == {0, 1} and max(refused.values()) < 2.5, refused
        again = web1.once()
        assert "no session from the host key" in again.err and "host web1 is revoked" in again.err


def test_sessions_are_renewed_from_the_key_after_the_server_was_away_longer_than_one_lives(tmp_path: Path) -> None:
    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}") as fleet:
        with fleet.server_config.open("a") as f:
            f.write('[enroll]\nsession_ttl = "2s"\n')
        fleet.start()
        web1 = host(fleet, "web1")
        assert web1.enroll(join(fleet, "--host", "web1")).code == 0
        agent = web1.start("--interval", "1s", "--splay", "0")
        try:
            time.sleep(4)
            fleet.stop()  # away for longer than a session lives
            time.sleep(4)
            fleet.start()
            time.sleep(6)
        finally:
            agent.terminate()
            _, err = agent.communicate(timeout=30)
        lines = [line for line in err.splitlines() if line.startswith("datum agent: pass")]
        assert any("cannot reach" in line for line in lines), err[-3000:]
        after = lines[[i for i, line in enumerate(lines) if "cannot reach" in line][-1] + 1:]
        assert after and all("(server)" in line and "delivered" in line and "kept for later" not in line
                             for line in after[1:]), err[-3000:]
        assert not any("has ended" in line or "401" in line for line in after[1:]), err[-3000:]


def test_a_session_is_renewed_between_half_and_four_fifths_of_its_life(sqlite_fleet: Fleet) -> None:
    from datum.agent.identity import Session, key_path, load_key

    web1 = host(sqlite_fleet, "web1")
    assert web1.enroll(join(sqlite_fleet, "--host", "web1")).code == 0
    now = [0.0]
    shares: list[tuple[float, float]] = []

    def share(low: float, high: float) -> float:
        shares.append((low, high))
        return 0.65

    session = Session(sqlite_fleet.url, "web1", load_key(key_path(str(web1.state))), clock=lambda: now[0], share=share)
    first = session.bearer()
    now[0] = 3600 * 0.64
    assert session.bearer() == first and session.renewals == 1
    now[0] = 3600 * 0.66
    assert session.bearer() != first and session.renewals == 2
    assert shares == [(0.5, 0.8), (0.5, 0.8)]


def test_over_tls_the_printed_line_pins_the_server_and_the_agent_keeps_trusting_it(tmp_path: Path) -> None:
    from .test_agent_tls import AUTO, TlsFleet

    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", kind=TlsFleet, server=AUTO) as fleet:
        fleet.start()
        made = admin(fleet, "enroll", "create", "--host", "web1", "--server", fleet.url)
        assert made.code == 0, made.err
        line = made.out.strip().splitlines()[-1].split()
        pin = fleet.datum("tls", "show", "--json", "--config", str(fleet.server_config)).out
        assert line[-2] == "--pin" and line[-1] == json.loads(pin)["pin"] and line[4] == fleet.url
        web1 = host(fleet, "web1")
        unpinned = web1.fleet.datum(*line[1:-2], "--root", str(web1.base / "root"), *web1.files(), env=web1.env)
        assert unpinned.code == 69 and "certificate" in unpinned.err, unpinned.err  # no trust given: refused
        done = web1.fleet.datum(*line[1:], "--root", str(web1.base / "root"), *web1.files(), env=web1.env)
        assert done.code == 0, done.err
        ran = web1.once()  # no --server, no --pin: as it enrolled
        assert "(server)" in ran.err and "delivered 1" in ran.err, ran.err


def test_labels_set_at_enrollment_classify_the_host_as_nodes_yaml_labels_do_and_facts_never(tmp_path: Path) -> None:
    """``datum enroll create --label role=db``: the hosts enrolled with that token get the db role's manifests,
    vars, sensitive file and group, as nodes.yaml's own labels give them; a host enrolled without the label,
    claiming role=db every way it can (facts, the request's header, the lease body), gets none of it."""
    import httpx

    from datum.agent.identity import Session, key_path, load_key
    from datum.fleet.labels import FRESH

    from .test_agent_serve import DB, ROLES, _fleet_hosts

    with _fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}") as fleet:
        (fleet.manifests / "nodes.yaml").write_text(ROLES.replace("  db1: {role: db}\n", "  nobody: {role: db}\n"))
        (fleet.manifests / "db.yaml").write_text(DB)
        fleet.start()
        made = admin(fleet, "enroll", "create", "--pattern", "node-*", "--uses", "2", "--label", "role=db", "--server", fleet.url)
        assert made.code == 0 and "labelled role=db" in made.err, made.err
        node1 = host(fleet, "node-1")
        pending = node1.enroll(made.out.split()[6], "--wait", "0")
        assert pending.code == 0 and "pending" in pending.out, pending.err
        assert admin(fleet, "enroll", "approve", "node-1").code == 0
        time.sleep(FRESH + 0.5)  # each server reads the identities changed lately every FRESH seconds
        ran = node1.once()
        assert ran.code in (0, 2) and "delivered" in ran.err, ran.err
        assert (node1.base / "root" / "etc" / "db.key").read_text() == "the db key\n"
        assert (node1.base / "root" / "srv" / "db.txt").read_text().startswith("db-only-greeting")
        listed = json.loads(admin(fleet, "enroll", "list", "--json").out)
        assert listed["hosts"][0]["labels"] == {"role": "db"} and listed["joinTokens"][0]["labels"] == {"role": "db"}

        node2 = host(fleet, "node-2")  # its own token, no label: it claims the role instead
        assert node2.enroll(join(fleet, "--host", "node-2")).code == 0
        token = Session(fleet.url, "node-2", load_key(key_path(str(node2.state)))).bearer()
        claims = json.dumps({"role": "db", "labels": {"role": "db"}, "group": "db"})
        bearer = {"Authorization": f"Bearer {token}"}
        served = httpx.get(fleet.url + "/v1/hosts/node-2/manifest", headers=bearer | {"X-Datum-Facts": claims}, timeout=10)
        assert served.status_code == 404 and "db-only-greeting" not in served.text, served.text
        lease = httpx.post(fleet.url + "/v1/hosts/node-2/reboot-lease", json={"bootId": "b1", "facts": json.loads(claims)},
                           headers=bearer, timeout=10)
        assert lease.status_code == 200 and lease.json()["group"] == "default", lease.text
        httpx.delete(fleet.url + "/v1/hosts/node-2/reboot-lease", headers=bearer, timeout=10)
        token1 = Session(fleet.url, "node-1", load_key(key_path(str(node1.state)))).bearer()
        lease1 = httpx.post(fleet.url + "/v1/hosts/node-1/reboot-lease", json={"bootId": "b1"},
                            headers={"Authorization": f"Bearer {token1}"}, timeout=10)
        assert lease1.status_code == 200 and lease1.json()["group"] == "db", lease1.text
        assert _fleet_hosts(fleet)["db"] == 1  # the group its intake recorded: its label's
