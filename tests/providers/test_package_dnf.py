"""``Package`` on an RPM root through the real rpm and dnf: tiny packages built once by rpmbuild, a
local repository made by createrepo_c, ``dnf --installroot`` into a temporary root."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from datum.core.vocab import Action, Mode, ResourceState
from datum.host.executor import run_pass
from datum.host.manifest import parse_manifest
from datum.providers import reads
from datum.providers.base import HostContext, run
from datum.providers.package.choose import PackageChooser
from datum.providers.package.spec import PackageSpec
from providers.debs import dpkg_root
from providers.rpms import (
    MISSING,
    WHY,
    Rpm,
    build,
    installed,
    macros,
    makecache,
    repository,
    rpm_root,
)

pytestmark = pytest.mark.skipif(bool(MISSING), reason=WHY)
PACKAGE = PackageChooser()

FIRST = [
    Rpm("datum-hello", "1.0-1"),
    Rpm("datum-lib", "1.0-1"),
    Rpm("datum-app", "1.0-1", requires=("datum-lib",)),
    Rpm("datum-needs", "1.0-1", requires=("datum-missing-lib",)),
    Rpm("systemd", "1-1", file=False),
    Rpm("datum-boot", "1.0-1", requires=("kernel-core",), file=False),
    Rpm("kernel-core", "1-1", file=False),
]
SECOND = [Rpm("datum-hello", "2.0-1"), Rpm("systemd", "2-1", file=False)]
LOCAL = [Rpm("datum-local", "1:1.5-3")]


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    """Every package the tests use, built once: ``first``, ``second`` (newer versions) and ``local``."""
    base = tmp_path_factory.mktemp("rpms")
    home = macros(base / "home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))  # rpmbuild's own database, if it makes one, is the test's
        return {
            "home": home,
            "first": build(base / "first", FIRST),
            "second": build(base / "second", SECOND),
            "local": build(base / "local", LOCAL),
        }


@pytest.fixture
def rpmctx(tmp_path, built, monkeypatch) -> HostContext:
    """A HostContext over an empty RPM root whose dnf knows the repository of ``FIRST`` alone."""
    monkeypatch.setenv("HOME", str(built["home"]))
    repo = repository(tmp_path / "repo", sorted(built["first"].glob("*.rpm")))
    root = tmp_path / "root"
    rpm_root(root, repo)
    makecache(root)
    return HostContext(root=root, manifest_dir=tmp_path)


def newer(ctx: HostContext, built: dict[str, Path]) -> None:
    """The repository gets ``SECOND``'s versions, and dnf's cache learns of them (dnf-makecache.timer)."""
    repository(ctx.manifest_dir / "repo", sorted(built["second"].glob("*.rpm")))
    makecache(ctx.root)


def step(spec: PackageSpec, ctx: HostContext):
    """One resource's pass, as the executor walks it (a new pass: nothing read before is kept)."""
    ctx.changed()
    want = PACKAGE.desired(spec.name, spec, ctx)
    change = PACKAGE.plan(want, PACKAGE.observe(want, ctx))
    reboot = None
    if change.action is not Action.NONE:
        reboot = PACKAGE.apply(want, PACKAGE.observe(want, ctx), change, ctx)
        ctx.changed()
    return change, reboot, PACKAGE.verify(want, change, ctx)


def spied(ctx: HostContext) -> list[list[str]]:
    """Every command the context runs from now on (each still run for real)."""
    ran: list[list[str]] = []

    def runner(argv, **kw):
        ran.append(list(argv))
        return run(argv, **kw)

    ctx.runner = runner
    return ran


def manifest(ctx: HostContext, text: str):
    return parse_manifest("resources:\n" + text, ctx.manifest_dir)


def test_the_root_names_dnf_and_install_pin_latest_remove_for_real(rpmctx, built):
    ctx = rpmctx
    assert PACKAGE.supported(ctx) is None
    hello = PackageSpec(name="datum-hello")
    change, reboot, unconfirmed = step(hello, ctx)
    assert (change.action, change.differences, reboot, unconfirmed) == (Action.CREATE, ("not installed",), None, None)
    assert (ctx.root / "usr/share/datum-hello/VERSION").read_text() == "1.0-1\n"
    assert step(hello, ctx)[0].action is Action.NONE

    latest = PackageSpec(name="datum-hello", ensure="latest")
    repository(ctx.manifest_dir / "repo", sorted(built["second"].glob("*.rpm")))
    assert step(latest, ctx)[0].action is Action.NONE  # the cache as it is: 2.0 not known yet
    makecache(ctx.root)
    change, _, unconfirmed = step(latest, ctx)
    assert change.differences == ("version 1.0-1, want latest 2.0-1",) and unconfirmed is None
    assert installed(ctx.root)["datum-hello"] == "2.0-1"

    pinned = PackageSpec(name="datum-hello", ensure="1.0")  # the release left out matches any
    change, _, unconfirmed = step(pinned, ctx)
    assert change.differences == ("version 2.0-1, want 1.0",) and unconfirmed is None  # a downgrade
    assert installed(ctx.root)["datum-hello"] == "1.0-1"
    assert step(PackageSpec(name="datum-hello", ensure="0:1.0-1"), ctx)[0].action is Action.NONE

    change, _, unconfirmed = step(PackageSpec(name="datum-hello", ensure="absent"), ctx)
    assert (change.action, change.differences, unconfirmed) == (Action.DELETE, ("1.0-1 installed, want absent",), None)
    assert "datum-hello" not in installed(ctx.root)
    assert not (ctx.root / "usr/share/datum-hello/VERSION").exists()


def test_the_packages_of_a_pass_are_one_dnf_transaction(rpmctx):
    ctx = rpmctx
    ran = spied(ctx)
    outcomes = run_pass(manifest(ctx, (
        "  - Package[datum-hello]: {}\n"
        "  - Package[datum-app]: {}\n"
        "  - Package[datum-lib]:\n      requires: [Package[datum-app]]\n"
    )), ctx)
    assert [(o.state, o.action) for o in outcomes] == [(ResourceState.CONVERGED, Action.CREATE)] * 3
    installs = [argv for argv in ran if argv[0] == "dnf" and "install" in argv]
    assert len(installs) == 1 and installs[0][-3:] == ["datum-hello", "datum-app", "datum-lib"], installs
    assert {"datum-hello", "datum-app", "datum-lib"} <= installed(ctx.root).keys()
    assert sum(o.duration_seconds for o in outcomes) > 0


def test_a_broken_dependency_fails_the_whole_transaction_with_dnfs_words_and_installs_nothing(rpmctx):
    ctx = rpmctx
    outcomes = run_pass(manifest(ctx, "  - Package[datum-hello]: {}\n  - Package[datum-needs]: {}\n"), ctx)
    assert [o.state for o in outcomes] == [ResourceState.FAILED] * 2
    for o in outcomes:
        assert o.error.startswith("dnf exited 1: "), o.error
        assert "nothing provides datum-missing-lib needed by datum-needs-1.0-1.noarch" in o.error
    assert installed(ctx.root) == {}  # nothing half-applied
    assert not (ctx.root / "usr/share/datum-hello").exists()


def test_a_removal_another_package_needs_is_refused_with_rpms_words_before_anything_changes(rpmctx):
    ctx = rpmctx
    assert [o.state for o in run_pass(manifest(ctx, "  - Package[datum-app]: {}\n"), ctx)] == [ResourceState.CONVERGED]
    outcomes = run_pass(manifest(ctx, "  - Package[datum-hello]: {}\n  - Package[datum-lib]: {ensure: absent}\n"), ctx)
    assert [o.state for o in outcomes] == [ResourceState.FAILED] * 2
    assert "datum-lib is needed by (installed) datum-app-1.0-1.noarch" in outcomes[1].error, outcomes[1].error
    assert outcomes[1].error.startswith("rpm exited 1: ")
    assert installed(ctx.root).keys() == {"datum-app", "datum-lib"}  # datum-hello not installed either


def test_a_package_removed_behind_datums_back_is_drift(rpmctx):
    ctx = rpmctx
    text = "  - Package[datum-hello]: {}\n"
    assert run_pass(manifest(ctx, text), ctx)[0].state is ResourceState.CONVERGED
    subprocess.run(["rpm", "--root", str(ctx.root), "-e", "datum-hello"], check=True)
    ctx.changed()
    observing = HostContext(root=ctx.root, manifest_dir=ctx.manifest_dir, mode=Mode.OBSERVE)
    (drifted,) = run_pass(manifest(ctx, text), observing)
    assert (drifted.state, drifted.action, drifted.reason) == (ResourceState.DRIFTED, Action.CREATE, "not installed")
    (repaired,) = run_pass(manifest(ctx, text), ctx)
    assert (repaired.state, repaired.changed) == (ResourceState.CONVERGED, True)


def test_an_unchanged_root_replays_the_rpm_databases_signature_without_running_rpm_or_dnf(rpmctx):
    """The engine's pass over a converged root records the rpm database's files (not rpm -qa's run);
    the record replays while the database is unchanged, and not once rpm removed a package."""
    ctx = rpmctx
    text = "  - Package[datum-hello]: {}\n  - Package[datum-lib]: {ensure: absent}\n"
    assert [o.state for o in run_pass(manifest(ctx, text), ctx)] == [ResourceState.CONVERGED] * 2
    time.sleep(reads.RACY_NS / 1e9)  # the database's last change is older than a pass's racy window
    ctx.changed()
    ran = spied(ctx)
    record = reads.start()
    try:
        outcomes = run_pass(manifest(ctx, text), ctx)
    finally:
        reads.stop()
    assert [(o.state, o.changed) for o in outcomes] == [(ResourceState.CONVERGED, False)] * 2
    assert [argv[0] for argv in ran] == ["rpm"]  # one rpm -qa for both, and no dnf
    assert not record.opaque, record.opaque
    recorded = {path for kind, path, _value in record.reads() if kind == "data"}
    assert str(ctx.root / "var/lib/rpm/rpmdb.sqlite") in recorded
    assert reads.unchanged(record.reads(), record.started)
    subprocess.run(["rpm", "--root", str(ctx.root), "-e", "datum-hello"], check=True)
    assert not reads.unchanged(record.reads(), record.started)


def test_a_database_changed_as_the_pass_began_leaves_the_record_standing_for_nothing(rpmctx):
    ctx = rpmctx
    assert run_pass(manifest(ctx, "  - Package[datum-hello]: {}\n"), ctx)[0].state is ResourceState.CONVERGED
    ctx.changed()
    record = reads.start()
    try:
        run_pass(manifest(ctx, "  - Package[datum-hello]: {}\n"), ctx)
    finally:
        reads.stop()
    assert any("rpmdb.sqlite changed as the pass began" in why for why in record.opaque), record.opaque


def test_a_local_rpm_is_installed_with_its_epoch_and_must_be_the_package_named(rpmctx, built):
    ctx = rpmctx
    shutil.copy2(built["local"] / "datum-local-1.5-3.noarch.rpm", ctx.manifest_dir)
    spec = PackageSpec(name="datum-local", source="datum-local-1.5-3.noarch.rpm", ensure="latest")
    change, _, unconfirmed = step(spec, ctx)
    assert change.differences == ("not installed, want 1:1.5-3",) and unconfirmed is None
    assert installed(ctx.root)["datum-local"] == "1.5-3"
    assert step(spec, ctx)[0].action is Action.NONE
    with pytest.raises(Exception, match="is package 'datum-local', not 'datum-hello'"):
        PACKAGE.desired("x", PackageSpec(name="datum-hello", source="datum-local-1.5-3.noarch.rpm"), ctx)
    with pytest.raises(Exception, match="is version 1:1.5-3, not 2.0"):
        PACKAGE.desired("x", PackageSpec(name="datum-local", source="datum-local-1.5-3.noarch.rpm", ensure="2.0"), ctx)


def test_systemd_and_a_kernel_pulled_in_say_a_reboot_is_needed_naming_the_package(rpmctx, built):
    ctx = rpmctx
    assert step(PackageSpec(name="systemd"), ctx)[1] == "systemd 1-1 runs after a reboot"
    newer(ctx, built)
    assert step(PackageSpec(name="systemd", ensure="latest"), ctx)[1] == "systemd 2-1 runs after a reboot"
    assert step(PackageSpec(name="systemd", ensure="latest", reboot=False), ctx)[1] is None  # converged
    outcomes = run_pass(manifest(ctx, "  - Package[datum-hello]: {}\n  - Package[datum-boot]: {}\n"), ctx)
    assert [o.reboot_required for o in outcomes] == ["with it kernel-core 1-1, which run after a reboot", None]
    assert step(PackageSpec(name="datum-lib", reboot=True), ctx)[1] == "reboot: true"


def test_needs_restarting_names_what_changed_since_boot_when_dnf_has_it(rpmctx):
    ctx = rpmctx
    real = ctx.runner

    def runner(argv, **kw):
        if "needs-restarting" in argv:
            out = "Core libraries or services have been updated since boot-up:\n  * dbus-broker\n  * glibc\n\n" \
                  "Reboot is required to fully utilize these updates.\n"
            return type(real(["true"]))(tuple(argv), 1, out, "")
        return real(argv, **kw)

    ctx.runner = runner
    assert step(PackageSpec(name="datum-hello"), ctx)[1] == "needs-restarting -r: dbus-broker, glibc"


def test_the_package_database_chooses_the_provider_and_a_named_one_must_work_here(rpmctx):
    (rpmctx.manifest_dir / "other").mkdir()
    ctx = HostContext(root=rpmctx.manifest_dir / "other", manifest_dir=rpmctx.manifest_dir)
    assert PACKAGE.supported(ctx).startswith("no package database under the root")
    dpkg_root(ctx.root)
    assert PACKAGE.desired("x", PackageSpec(name="datum-hello"), ctx).provider == "apt"
    with pytest.raises(Exception, match="provider dnf: no rpm database at /var/lib/rpm or /usr/lib/sysimage/rpm"):
        PACKAGE.desired("x", PackageSpec(name="datum-hello", provider="dnf"), ctx)
    with pytest.raises(Exception, match="'NetworkManager' is not a Debian package name"):
        PACKAGE.desired("x", PackageSpec(name="NetworkManager"), ctx)
    assert PACKAGE.desired("x", PackageSpec(name="NetworkManager"), rpmctx).provider == "dnf"
    with pytest.raises(Exception, match="provider apt: no dpkg database"):
        PACKAGE.desired("x", PackageSpec(name="datum-hello", provider="apt"), rpmctx)


@pytest.mark.parametrize("name", ["@core", "nginx:1.20", "@nginx:1.20/common", "-x"])
def test_groups_and_modules_are_not_package_names(name):
    with pytest.raises(ValueError):
        PackageSpec(name=name)


def test_rpm_versions_are_valid_ensures():
    assert PackageSpec(name="kernel-core", ensure="5.14.0-362.8.1.el9_3").ensure.endswith("el9_3")
    assert PackageSpec(name="x", ensure="1:2.0^git3~pre-1").provider is None


def test_dnf_would_write_another_database_than_observe_read_is_refused(rpmctx, tmp_path, monkeypatch):
    """Debian's rpm keeps its database at ~/.rpmdb: without an RPM host's %_dbpath, dnf would install
    into a database nobody reads; the transaction is refused, saying so, and nothing is installed."""
    monkeypatch.setenv("HOME", str(tmp_path / "plain-home"))
    said = subprocess.run(["rpm", "--eval", "%{_dbpath}"], capture_output=True, text=True, check=True).stdout.strip()
    if said == "/var/lib/rpm":
        pytest.skip("this rpm's %_dbpath is /var/lib/rpm already")
    with pytest.raises(Exception, match=r"dnf would use the rpm database at .* \(rpm's %_dbpath\), not the root's /var/lib/rpm"):
        step(PackageSpec(name="datum-hello"), rpmctx)
    assert installed(rpmctx.root) == {}


def test_datum_apply_on_an_unchanged_rpm_root_is_the_idle_pass_and_a_removal_behind_its_back_is_not(rpmctx):
    """``datum apply`` for real: the engine installs, the next unchanged pass remembers what it read,
    the one after replays it without the engine (no rpm, no dnf); ``rpm -e`` behind its back is
    seen, and repaired by the engine."""
    from host.conftest import Host
    from host.test_idle import _idle, _run

    host = Host(rpmctx.manifest_dir)
    host.reboot("boot-1")
    manifest = host.manifest("resources:\n  - Package[datum-hello]: {}\n  - Package[datum-app]: {}\n")
    code, imported, out = _run(host, manifest)
    assert code == 2 and "Package[datum-hello]" in out and not _idle(imported), out
    time.sleep(reads.RACY_NS / 1e9)
    code, imported, out = _run(host, manifest)
    assert code == 0 and not _idle(imported), out
    code, imported, out = _run(host, manifest)
    assert code == 0 and _idle(imported) and "host state: converged" in out, out
    subprocess.run(["rpm", "--root", str(host.root), "-e", "datum-hello"], check=True)
    code, imported, out = _run(host, manifest)
    assert code == 2 and not _idle(imported) and "created" in out, out
    assert "datum-hello" in installed(host.root)


def test_datum_explain_says_what_each_provider_does_and_reads_a_failure_back_into_its_provider():
    from datum.core.explain import lookup

    (dnf,) = lookup("dnf")
    assert "one transaction" in dnf.means and "Groups (@core) and modules (nginx:1.20) are not supported" in dnf.means
    (apt,) = lookup("apt")
    assert "dpkg" in apt.means
    words = [(e.vocabulary.value, e.name) for e in lookup(
        "Package[datum-needs] failed: dnf exited 1: Error: | Problem: nothing provides datum-missing-lib")]
    assert words == [("host state", "failed"), ("resource state", "failed"), ("package provider", "dnf")]
    assert ("package provider", "dnf") in [(e.vocabulary.value, e.name) for e in lookup(
        "Package[datum-lib] failed: rpm exited 1: error: Failed dependencies: | datum-lib is needed by ...")]
    assert ("package provider", "apt") in [(e.vocabulary.value, e.name) for e in lookup(
        "Package[x] failed: apt-get exited 100: E: Unable to locate package x")]
