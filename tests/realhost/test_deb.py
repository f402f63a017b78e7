"""Datum installed as an operator installs it: ``apt-get install ./datum_*.deb`` (scripts/build-deb)."""

from __future__ import annotations

import subprocess

from container import REPO, summary


def exists(host, path: str) -> bool:
    return host.run("test", "-e", path, check=False).returncode == 0


def test_install_run_remove_keeps_configuration_and_state_purge_removes_them(host):
    built = subprocess.run(
        [str(REPO / "scripts" / "build-deb"), str(host.work)],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]
    deb = "/srv/work/" + built.rsplit("/", 1)[-1]  # built into the directory bound there
    host.run("apt-get", "install", "-y", "-q", deb, timeout=300)
    assert host.run("dpkg-query", "-W", "-f=${Status}", "datum").stdout == "install ok installed"
    assert host.run("readlink", "-f", "/opt/datum/bin/python").stdout.strip().startswith("/usr/bin/python3")

    # It runs as installed: /usr/bin/datum, /etc/datum/datum.toml, state in /var/lib/datum.
    (host.work / "motd.yaml").write_text(
        "resources:\n  - File[/etc/motd]:\n      content: \"from the package\\n\"\n"
    )
    done = host.run("datum", "apply", "/srv/work/motd.yaml", check=False)
    assert done.returncode == 2, done
    assert host.run("cat", "/etc/motd").stdout == "from the package\n"
    assert "host state: converged" in host.run("datum", "status").stdout
    state = host.sh("ls /var/lib/datum/*.db").stdout.split()  # the pass reports, persisted
    assert state
    assert exists(host, "/etc/datum/policies/default.cedar")
    assert exists(host, "/lib/systemd/system/datum-agent.service") or not (
        REPO / "contrib/systemd/datum-agent.service"
    ).exists()
    # Its documentation is where the unit's Documentation= points.
    unit = host.run("cat", "/lib/systemd/system/datum-agent.service").stdout
    docs = [d for line in unit.splitlines() if line.startswith("Documentation=") for d in line.split("=", 1)[1].split()]
    assert docs and all(d.startswith("file:///usr/share/doc/datum/") for d in docs), docs
    assert all(exists(host, d.removeprefix("file://")) for d in docs), docs
    assert exists(host, "/usr/share/doc/datum/README.md") and exists(host, "/usr/share/doc/datum/copyright")
    # The state is root's alone: the directory, and the state file of the pass above.
    assert host.run("stat", "-c", "%a", "/var/lib/datum").stdout.strip() == "700"
    assert {host.run("stat", "-c", "%a", p).stdout.strip() for p in state} == {"600"}
    host.sh("echo '# edited by the operator' >> /etc/datum/datum.toml")

    host.run("dpkg", "-r", "datum")
    assert not exists(host, "/usr/bin/datum") and not exists(host, "/opt/datum")
    assert "edited by the operator" in host.run("cat", "/etc/datum/datum.toml").stdout
    assert all(exists(host, path) for path in state)
    assert host.run("dpkg-query", "-W", "-f=${Status}", "datum").stdout == "deinstall ok config-files"

    host.run("dpkg", "-P", "datum")
    assert not exists(host, "/etc/datum") and not exists(host, "/var/lib/datum")
    assert host.run("dpkg-query", "-W", "datum", check=False).returncode != 0


def test_datum_from_the_deb_converges_with_the_wheel_installed_one_too(host):
    """The package and the test virtualenv are the same Datum: the smoke manifest works in both."""
    code, report = host.apply("resources:\n  - File[/etc/datum-both]:\n      content: \"x\\n\"\n")
    assert code == 2, summary(report)
