"""A routine upgrade of a package whose configuration file Datum manages, through apt, on a
booted Debian: never a prompt, never a wedged host (issue 21, item 2).

The package is built inside with dpkg-deb, in three versions whose conffile changes, and
served from a local flat repository (``file:``); apt sees it beside the mirror.
"""

from __future__ import annotations

from container import by_id, summary

REPO = "/srv/work/repo"
LIST = "/etc/apt/sources.list.d/datum-test.list"
CONF = "/etc/datum-conf.conf"

MANIFEST = f"""
resources:
  - Package[datum-conf]:
      ensure: latest
  - File[{CONF}]:
      content: "managed by Datum\\n"
      requires: [Package[datum-conf]]
"""


def publish(host, version: str) -> None:
    """``datum-conf`` VERSION built and added to the repository, then apt's lists of it refreshed."""
    host.sh(
        f"d=/srv/work/build-{version}; mkdir -p $d/DEBIAN $d/etc {REPO}; "
        f"printf 'Package: datum-conf\\nVersion: {version}\\nArchitecture: all\\n"
        "Maintainer: datum <datum@example.org>\\nDescription: a conffile for tests\\n' > $d/DEBIAN/control; "
        f"echo {CONF} > $d/DEBIAN/conffiles; echo 'packaged {version}' > $d{CONF}; "
        f"dpkg-deb --root-owner-group -b $d {REPO}/datum-conf_{version}_all.deb >/dev/null; "
        f"cd {REPO}; : > Packages; for f in *.deb; do "
        "dpkg-deb -f $f >> Packages; "
        "printf 'Filename: ./%s\\nSize: %s\\nSHA256: %s\\n\\n' $f $(stat -c %s $f) $(sha256sum $f | cut -d' ' -f1) >> Packages; "
        "done"
    )
    host.write(LIST, f"deb [trusted=yes] file:{REPO} ./\n")
    host.run(
        "apt-get", "update", "-q", "-o", f"Dir::Etc::sourcelist={LIST}", "-o", "Dir::Etc::sourceparts=-",
        "-o", "APT::Get::List-Cleanup=0", timeout=120,
    )


def status(host) -> str:
    return host.run("dpkg-query", "-W", "-f=${Status} ${Version}", "datum-conf", check=False).stdout


def test_an_upgrade_over_a_managed_conffile_never_prompts_and_a_wedge_is_repaired(host):
    publish(host, "1.0")
    code, report = host.apply(MANIFEST)
    assert code == 2, summary(report)
    assert host.run("cat", CONF).stdout == "managed by Datum\n"

    # The everyday upgrade: the package's conffile changed, Datum's copy is local. No prompt:
    # the local version stays (confold), the package is configured.
    publish(host, "2.0")
    code, report = host.apply(MANIFEST)
    assert code == 2, summary(report)
    assert by_id(report)["Package[datum-conf]"]["state"] == "converged", summary(report)
    assert status(host) == "install ok installed 2.0"
    assert by_id(report)[f"File[{CONF}]"]["changed"] is False
    assert host.run("cat", CONF).stdout == "managed by Datum\n"

    # The wedge of issue 21 made real: apt with no policy and no input stops at dpkg's prompt.
    publish(host, "3.0")
    wedged = host.sh("apt-get install -y -q datum-conf </dev/null", check=False)
    assert wedged.returncode != 0 and "end of file on stdin at conffile prompt" in wedged.stdout + wedged.stderr
    assert status(host).startswith(("install ok unpacked", "install ok half-configured")), status(host)
    observed, report = host.apply(MANIFEST, mode="observe")
    why = by_id(report)["Package[datum-conf]"]["reason"]
    assert why.startswith(("unpacked (", "half-configured (")) and "configure" in why, summary(report)
    code, report = host.apply(MANIFEST)
    assert code == 2, summary(report)
    assert status(host) == "install ok installed 3.0"
    assert host.run("cat", CONF).stdout == "managed by Datum\n"
    code, report = host.apply(MANIFEST)
    assert code == 0, summary(report)
