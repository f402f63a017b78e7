"""The agent under systemd: the host enrolls with the one line the server printed (over TLS, the server pinned),
then the shipped unit starts, runs passes on its interval, stops cleanly."""

from __future__ import annotations

import socket
import time

import pytest
from container import DATUM, REPO

UNIT = REPO / "contrib" / "systemd" / "datum-agent.service"


def free_port() -> int:
    """A port free on the host's loopback, which the container shares (never 5432, 8080, ...)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.skipif(not UNIT.exists(), reason="no contrib/systemd/datum-agent.service")
def test_the_shipped_unit_runs_passes_on_its_interval_and_stops_cleanly(host):
    port = free_port()
    host.write("/srv/fleet/nodes.yaml", 'nodes:\n  - match: {name: "*"}\n    manifests: [agent.yaml]\n')
    host.write(
        "/srv/fleet/agent.yaml",
        "resources:\n  - Exec[count]:\n      command: \"date +%s.%N >> /var/tmp/agent-passes\"\n"
        "  - File[/etc/datum-test/htpasswd]:\n      content: \"deploy:SECRET-HASH-4711\\n\"\n"
        "      mode: \"0600\"\n      sensitive: true\n",
    )
    host.write(
        "/etc/datum-test/server.toml",
        'store = "sqlite:////var/lib/datum-server/datum.db"\n'
        '[server]\nscheduler = false\ntls = "auto"\ntls_names = ["127.0.0.1"]\n[fleet]\nmanifests = "/srv/fleet"\n',
    )
    host.run("mkdir", "-p", "/var/lib/datum-server")
    host.run(
        "systemd-run", "--unit=datum-test-serve", "--property=Environment=DATUM_HOME=/var/lib/datum-server",
        DATUM, "serve", "--config", "/etc/datum-test/server.toml", "--port", str(port),
    )

    def serving() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    wait_for(serving, 60, f"datum serve on 127.0.0.1:{port}")
    name = host.run("hostname").stdout.strip()
    host.run("mkdir", "-p", "/var/lib/datum")
    host.run("chmod", "0755", "/var/lib/datum")  # as the package before, or StateDirectory= alone, left it
    host.run("ln", "-sf", DATUM, "/usr/bin/datum")
    # The host enrolls with the one line the server prints (its key made in the unit's DATUM_HOME): no token
    # file, no server to configure, no CA file to copy: the line pins the server's own CA (tls = "auto").
    line = host.run(
        DATUM, "enroll", "create", "--host", name, "--server", f"https://127.0.0.1:{port}",
        "--config", "/etc/datum-test/server.toml", env={"DATUM_HOME": "/var/lib/datum-server"},
    ).stdout.strip().splitlines()[-1]
    assert line.startswith("datum agent enroll --server https://127.0.0.1:") and " --join datum_j_" in line, line
    assert " --pin sha256:" in line, line
    enrolled = host.sh(f"DATUM_HOME=/var/lib/datum {line}")
    assert f"enrolled {name} with key sha256:" in enrolled.stdout, enrolled
    # The shipped unit as it is, configured as an operator would: its environment file, and a
    # drop-in (here: a umask that would leave everything readable; the state stays private).
    host.write("/etc/systemd/system/datum-agent.service", UNIT.read_text())
    host.write("/etc/datum/agent.env", "DATUM_INTERVAL=1s\nDATUM_SPLAY=0s\n")
    host.write("/etc/systemd/system/datum-agent.service.d/test.conf", "[Service]\nUMask=0000\n")
    host.run("systemctl", "daemon-reload")
    host.run("systemctl", "start", "datum-agent")

    def passes() -> int:
        out = host.run("cat", "/var/tmp/agent-passes", check=False).stdout
        return len(out.splitlines())

    wait_for(lambda: passes() >= 3, 60, "three passes of the agent")
    assert host.run("systemctl", "is-active", "datum-agent").stdout.strip() == "active"
    stamps = [float(x) for x in host.run("cat", "/var/tmp/agent-passes").stdout.split()]
    assert all(b - a >= 0.9 for a, b in zip(stamps, stamps[1:], strict=False)), stamps  # its interval

    # Private by default: nothing under the state directory is readable by another user, and the
    # sensitive file's content is found by root only (it was, with grep, out of agent.db).
    modes = host.sh("find /var/lib/datum -printf '%m %y %p\\n'").stdout.splitlines()
    assert modes[0].startswith("700 d "), modes
    assert [m for m in modes if m.split()[0] != ("700" if m.split()[1] == "d" else "600")] == []
    assert any("agent.db.manifest/" in m and m.endswith("/manifest.json") for m in modes), modes
    assert host.sh("grep -rl SECRET-HASH-4711 /var/lib/datum", check=False).stdout.strip()
    nobody = host.sh(
        "setpriv --reuid=nobody --regid=nogroup --clear-groups grep -rl SECRET-HASH-4711 /var/lib/datum /etc/datum-test",
        check=False,
    )
    assert nobody.returncode == 2 and not nobody.stdout.strip(), nobody
    assert "Permission denied" in nobody.stderr, nobody

    started = time.monotonic()
    host.run("systemctl", "stop", "datum-agent")
    assert time.monotonic() - started < 20
    assert host.run("systemctl", "show", "-P", "Result", "datum-agent").stdout.strip() == "success"
    journal = host.run("journalctl", "-u", "datum-agent", "--no-pager", "-o", "cat").stdout
    assert "datum agent: pass" in journal, journal[-2000:]
    assert "Traceback" not in journal, journal[-2000:]
    host.run("systemctl", "stop", "datum-test-serve", check=False)
