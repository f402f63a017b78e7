"""``User`` and ``Group`` inside the container, checked with the real tools (getent, id, crypt)."""

from __future__ import annotations

import json

import pytest
from container import DATUM, by_id, summary

PLAIN = "datum-s3cret-pw"


@pytest.fixture(scope="module")
def hashed(host):
    """A SHA-512 crypt hash of PLAIN, made by the container's own libcrypt."""
    return host.run(
        "python3", "-W", "ignore", "-c",
        f"import crypt; print(crypt.crypt({PLAIN!r}, crypt.mksalt(crypt.METHOD_SHA512)))",
    ).stdout.strip()


def getent(host, db: str, key: str) -> list[str] | None:
    done = host.run("getent", db, key, check=False)
    return done.stdout.strip().split(":") if done.returncode == 0 else None


def verifies(host, password: str, hashed: str) -> bool:
    out = host.run(
        "python3", "-W", "ignore", "-c",
        "import crypt, sys; print(crypt.crypt(sys.argv[1], sys.argv[2]) == sys.argv[2])",
        password, hashed,
    ).stdout.strip()
    return out == "True"


def test_home_from_skel_password_hash_and_supplementary_groups(host, hashed):
    manifest = f"""
resources:
  - Group[devs]:
      gid: 2500
  - Group[ops]: {{}}
  - User[alice]:
      uid: 2501
      shell: /bin/bash
      manage_home: true
      password: {json.dumps(hashed)}
      groups: [devs, ops]
      requires: [Group[devs], Group[ops]]
"""
    code, report = host.apply(manifest)
    assert code == 2, summary(report)
    assert by_id(report)["User[alice]"]["action"] == "create"
    passwd = getent(host, "passwd", "alice")
    assert passwd is not None and passwd[2] == "2501" and passwd[5] == "/home/alice"
    assert passwd[6] == "/bin/bash"
    assert host.run("id", "-nG", "alice").stdout.split() == ["alice", "devs", "ops"]
    assert getent(host, "group", "devs")[2] == "2500"
    shadow = getent(host, "shadow", "alice")
    assert shadow[1] == hashed and verifies(host, PLAIN, shadow[1])
    # The home directory, from /etc/skel, owned by alice, with useradd's mode.
    ls = host.run("stat", "-c", "%U:%G %a", "/home/alice", "/home/alice/.bashrc").stdout.split("\n")
    assert ls[0].split()[0] == "alice:alice" and ls[1].split()[0] == "alice:alice"
    assert host.run("cmp", "/etc/skel/.profile", "/home/alice/.profile", check=False).returncode == 0
    code, report = host.apply(manifest)
    assert code == 0, summary(report)
    # The home is made once: a file alice adds is not touched by the next pass.
    host.run("touch", "/home/alice/mine")
    code, report = host.apply(manifest)
    assert code == 0 and host.run("test", "-f", "/home/alice/mine", check=False).returncode == 0


def test_lock_and_unlock_keep_the_hash(host, hashed):
    host.apply(f"resources:\n  - User[bob]:\n      password: {json.dumps(hashed)}\n")
    code, report = host.apply("resources:\n  - User[bob]:\n      locked: true\n")
    assert code == 2, summary(report)
    assert by_id(report)["User[bob]"]["action"] == "update"
    assert getent(host, "shadow", "bob")[1] == "!" + hashed
    assert host.run("passwd", "-S", "bob").stdout.split()[1] == "L"
    code, report = host.apply("resources:\n  - User[bob]:\n      locked: true\n", mode="observe")
    assert code == 0, summary(report)
    code, report = host.apply("resources:\n  - User[bob]:\n      locked: false\n")
    assert code == 2, summary(report)
    assert getent(host, "shadow", "bob")[1] == hashed
    assert host.run("passwd", "-S", "bob").stdout.split()[1] == "P"


def test_unlocking_an_account_without_a_password_is_refused(host):
    code, report = host.apply("resources:\n  - User[carol]:\n      locked: false\n")
    assert code == 4, summary(report)
    assert "has no password" in by_id(report)["User[carol]"]["reason"]
    assert getent(host, "passwd", "carol") is None  # refused before anything was written
    # An existing account without a password stays locked too.
    host.run("useradd", "carol")
    code, report = host.apply("resources:\n  - User[carol]:\n      locked: false\n")
    assert code == 4, summary(report)
    assert getent(host, "shadow", "carol")[1] == "!"  # never passwordless


def test_the_hash_appears_in_no_report(host, hashed):
    other = host.run(
        "python3", "-W", "ignore", "-c",
        "import crypt; print(crypt.crypt('another', crypt.mksalt(crypt.METHOD_SHA512)))",
    ).stdout.strip()
    host.apply(f"resources:\n  - User[dave]:\n      password: {json.dumps(hashed)}\n")
    manifest = f"resources:\n  - User[dave]:\n      password: {json.dumps(other)}\n"
    code, report = host.apply(manifest, mode="observe")
    assert code == 8, summary(report)
    assert by_id(report)["User[dave]"]["reason"] == "password differs"
    path = "/srv/work/dave.yaml"
    (host.work / "dave.yaml").write_text(manifest)
    env = {"DATUM_HOME": "/var/lib/datum"}
    outputs = [
        json.dumps(report),
        host.run(DATUM, "plan", path, "--root", "/", check=False, env=env).stdout,
        host.run(DATUM, "apply", path, "--root", "/", check=False, env=env).stdout,
        host.run(DATUM, "status", "--json", check=False, env=env).stdout,
        host.run(DATUM, "status", check=False, env=env).stdout,
    ]
    assert getent(host, "shadow", "dave")[1] == other
    for out in outputs:
        for secret in (hashed, other, hashed.split("$")[-1], other.split("$")[-1]):
            assert secret not in out
    assert "password differs" in outputs[1]


def test_a_password_in_plain_text_is_refused_without_repeating_it(host):
    (host.work / "plain.yaml").write_text(f"resources:\n  - User[eve]:\n      password: {PLAIN}\n")
    done = host.run(
        DATUM, "validate", "/srv/work/plain.yaml", "--json", check=False,
        env={"DATUM_HOME": "/var/lib/datum"},
    )
    assert done.returncode == 65, done
    assert "resources[0].User[eve].password" in done.stdout
    assert "plain text is refused" in done.stdout
    assert PLAIN not in done.stdout + done.stderr
    assert getent(host, "passwd", "eve") is None
