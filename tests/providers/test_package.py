"""Package through real dpkg under a temporary root, with a tiny .deb built by the test."""

from __future__ import annotations

import pytest

from datum.core.vocab import Action
from datum.providers.base import ProviderError
from datum.providers.package import PROVIDER as PACKAGE
from datum.providers.package.spec import PackageSpec
from providers.debs import build_deb, dpkg_root


def step(spec, ctx):
    want = PACKAGE.desired(spec.name, spec, ctx)
    have = PACKAGE.observe(want, ctx)
    change = PACKAGE.plan(want, have)
    reboot = None
    if change.action is not Action.NONE:
        reboot = PACKAGE.apply(want, have, change, ctx)
    return change, reboot, PACKAGE.verify(want, change, ctx)


def test_install_upgrade_remove_for_real(ctx):
    dpkg_root(ctx.root)
    build_deb(ctx.manifest_dir / "v1", "datum-hello", "1.0")
    build_deb(ctx.manifest_dir / "v2", "datum-hello", "2.0")
    v1 = PackageSpec(name="datum-hello", source="v1/datum-hello_1.0_all.deb")
    v2 = PackageSpec(name="datum-hello", source="v2/datum-hello_2.0_all.deb", ensure="2.0")
    gone = PackageSpec(name="datum-hello", ensure="absent")
    assert PACKAGE.supported(ctx) is None

    change, reboot, unconfirmed = step(v1, ctx)
    assert (change.action, change.differences, reboot, unconfirmed) == (
        Action.CREATE, ("not installed",), None, None
    )
    assert (ctx.root / "usr/share/datum-hello/VERSION").read_text() == "1.0\n"
    assert step(v1, ctx)[0].action is Action.NONE
    change, _, unconfirmed = step(v2, ctx)
    assert change.differences == ("version 1.0, want 2.0",) and unconfirmed is None
    assert (ctx.root / "usr/share/datum-hello/VERSION").read_text() == "2.0\n"
    change, _, unconfirmed = step(gone, ctx)
    assert change.action is Action.DELETE and unconfirmed is None
    assert not (ctx.root / "usr/share/datum-hello/VERSION").exists()


def test_kernel_packages_signal_a_reboot(ctx):
    dpkg_root(ctx.root)
    build_deb(ctx.manifest_dir, "linux-image-datum", "1.0")
    spec = PackageSpec(name="linux-image-datum", source="linux-image-datum_1.0_all.deb")
    assert step(spec, ctx)[1] == "running kernel differs"


def test_a_source_of_another_package_is_refused(ctx):
    dpkg_root(ctx.root)
    build_deb(ctx.manifest_dir, "other", "1.0")
    with pytest.raises(ProviderError, match="is package 'other'"):
        PACKAGE.desired("x", PackageSpec(name="datum-hello", source="other_1.0_all.deb"), ctx)


def test_a_source_that_is_no_deb_fails_with_dpkg_debs_words_which_datum_explain_reads_as_apt(ctx):
    from datum.core.phrases import PACKAGE_PROVIDER, words

    dpkg_root(ctx.root)
    (ctx.manifest_dir / "broken.deb").write_text("not an archive\n")
    with pytest.raises(ProviderError, match="dpkg-deb exited") as refused:
        PACKAGE.desired("x", PackageSpec(name="datum-hello", source="broken.deb"), ctx)
    assert (PACKAGE_PROVIDER, "apt") in words(f"Package[datum-hello] failed: {refused.value}")


def test_no_dpkg_database_is_unsupported(ctx):
    assert PACKAGE.supported(ctx) == "no dpkg database at /var/lib/dpkg"


def test_dpkg_command_lines_under_a_root(ctx):
    from datum.providers.package import dpkg

    assert dpkg(ctx, "--install", "x.deb") == [
        "dpkg", f"--root={ctx.root}", "--log=/dev/null", "--force-confdef", "--force-confold", "--install", "x.deb"
    ]


@pytest.mark.parametrize("ensure", ["installed", "latest", "absent", "purged", "1.24.0-1", "2:1.0~rc1"])
def test_ensure_values(ensure):
    assert PackageSpec(name="nginx", ensure=ensure).ensure == ensure


@pytest.mark.parametrize("ensure", ["yes", "", "running", "-1"])
def test_bad_ensure_values(ensure):
    with pytest.raises(ValueError):
        PackageSpec(name="nginx", ensure=ensure)


def _want(ensure: str):
    from datum.providers.package import PkgWant

    return PkgWant("tzdata", ensure, None, None, False)


def test_plan_latest_purged_and_config_files():
    """Pure plans: latest against apt's candidate; purged against files a removal left."""
    from datum.providers.package import PkgHave

    assert PACKAGE.plan(_want("latest"), PkgHave("1", candidate="2")).action is Action.UPDATE
    assert PACKAGE.plan(_want("latest"), PkgHave("2", candidate="2")).action is Action.NONE
    assert PACKAGE.plan(_want("latest"), PkgHave("2", candidate=None)).action is Action.NONE
    assert PACKAGE.plan(_want("latest"), PkgHave(None, candidate="2")).action is Action.CREATE
    left = PkgHave(None, config_files=True)
    assert PACKAGE.plan(_want("absent"), left).action is Action.NONE
    change = PACKAGE.plan(_want("purged"), left)
    assert change.action is Action.DELETE
    assert change.summary == "configuration files left, want purged"


def test_a_package_dpkg_left_half_configured_is_reported_with_dpkgs_words_and_repaired(ctx):
    """The wedge of a prompt nobody answered, made real: dpkg upgrading over a locally changed
    configuration file with no policy and no input stops at the prompt and leaves the package
    unpacked. The next pass says so in dpkg's words and finishes it, keeping the local file."""
    import subprocess

    dpkg_root(ctx.root)
    conf = {"/etc/datum-hello.conf": "packaged 1\n"}
    build_deb(ctx.manifest_dir / "v1", "datum-hello", "1.0", conf, conffiles=("/etc/datum-hello.conf",))
    v2 = build_deb(
        ctx.manifest_dir / "v2", "datum-hello", "2.0", {"/etc/datum-hello.conf": "packaged 2\n"},
        conffiles=("/etc/datum-hello.conf",),
    )
    assert step(PackageSpec(name="datum-hello", source="v1/datum-hello_1.0_all.deb"), ctx)[2] is None
    (ctx.root / "etc/datum-hello.conf").write_text("managed by a File\n")
    wedged = subprocess.run(
        ["dpkg", f"--root={ctx.root}", "--log=/dev/null", "--install", str(v2)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
    )
    assert wedged.returncode != 0 and "end of file on stdin at conffile prompt" in wedged.stderr

    spec = PackageSpec(name="datum-hello", source="v2/datum-hello_2.0_all.deb", ensure="2.0")
    want = PACKAGE.desired(spec.name, spec, ctx)
    have = PACKAGE.observe(want, ctx)
    change = PACKAGE.plan(want, have)
    assert change.action is Action.UPDATE
    (why,) = change.differences
    assert why.startswith(("unpacked (", "half-configured (")) and "configure" in why, why
    PACKAGE.apply(want, have, change, ctx)
    assert PACKAGE.verify(want, change, ctx) is None
    assert (ctx.root / "etc/datum-hello.conf").read_text() == "managed by a File\n"
    assert step(spec, ctx)[0].action is Action.NONE


def test_apt_is_told_the_configuration_file_policy_and_never_reads_input(ctx):
    """What apt-get is run with (recorded: no repository here); its stdin is /dev/null (``run``)."""
    from datum.providers.base import Completed

    seen = []

    def runner(argv, **kw):
        seen.append((list(argv), kw))
        if argv[0] == "dpkg-query":
            return Completed(tuple(argv), 1, "", "")
        return Completed(tuple(argv), 0, "", "")

    from pathlib import Path

    from datum.providers.base import HostContext

    real = HostContext(Path("/"), runner=runner)
    want = PACKAGE.desired("hello", PackageSpec(name="hello"), real)
    have = PACKAGE.observe(want, real)
    PACKAGE.apply(want, have, PACKAGE.plan(want, have), real)
    (apt, kw), *_ = [(a, k) for a, k in seen if a[:2] == ["apt-get", "install"]]
    assert apt[apt.index("-o") : apt.index("-o") + 4] == [
        "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"
    ]
    assert kw["env"]["DEBIAN_FRONTEND"] == "noninteractive" and "input" not in kw
