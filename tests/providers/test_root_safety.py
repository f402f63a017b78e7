"""Root acts only on what it checked: no link an ordinary user planted or swapped in is followed.

Each provider that touches a path (File, Directory with recurse, Line, Symlink, set_meta,
User's home) meets the matrix on a root where the unprivileged ``app`` (uid 1001) owns
/srv/app and may write the sticky /tmp: a final link, a link on the way, a swap between
observe and apply (``Hostile.run``'s ``between``), a link in a sticky world-writable
directory, absolute and relative targets, and root's own links, still followed. Every
refusal names the path and leaves everything outside the resource's own path as it was.
All of them failed before the link rule (``datum.providers.links``) and the descriptor rule
(``datum.providers.held``): /etc chowned, /etc/shadow written, sudoers appended to.
"""

from __future__ import annotations

import os
import stat

import pytest

from datum.core.explain import lookup
from datum.core.vocab import Mode, ResourceState
from datum.providers import held
from datum.providers.links import RULE

from .hostile import APP, SHADOW, SUDOERS, Hostile

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, another uid)")

FAILED, CONVERGED = ResourceState.FAILED, ResourceState.CONVERGED


@pytest.fixture
def host(tmp_path):
    return Hostile(tmp_path)


def one(outcomes):
    (outcome,) = outcomes.values()
    return outcome


def refusal(reason):
    """The refusal ``datum explain`` reads in ``reason`` as a pass line shows it."""
    return [e.name for e in lookup(f"X[y] failed: {reason}") if e.vocabulary.value == "refusal"]


def when(resource_id, act):
    """A ``between`` that runs ``act`` before the apply of ``resource_id`` only."""

    def between(resource):
        if resource.id == resource_id:
            act()

    return between


# --- a link app planted: refused whoever's path it is on, nothing touched ----------------------


@pytest.mark.parametrize("target", ["/etc/shadow", "../../etc/shadow"])
def test_file_through_a_users_final_link_is_refused(host, target):
    host.write("/srv/app/config.yml", "old\n")
    host.link("/srv/app/config.yml", target)
    before = host.snapshot()
    out = one(host.run("resources:\n  - File[/srv/app/config.yml]: {owner: app, content: \"x\\n\"}\n"))
    assert out.state is FAILED
    assert "/srv/app/config.yml is a link owned by uid 1001 (app)" in out.reason
    assert RULE in out.reason
    assert refusal(out.reason) == ["link_rule"]
    assert host.snapshot() == before
    assert host.path("/etc/shadow").read_text() == SHADOW


@pytest.mark.parametrize("target", ["/etc", "../../etc"])
def test_directory_recurse_through_a_users_link_is_refused(host, target):
    host.link("/srv/app/data", target)
    before = host.snapshot()
    out = one(host.run("resources:\n  - Directory[/srv/app/data]: {owner: app, recurse: true}\n"))
    assert out.state is FAILED
    assert "/srv/app/data is a link owned by uid 1001 (app)" in out.reason
    assert host.snapshot() == before
    assert os.stat(host.path("/etc/shadow")).st_uid == 0


def test_a_link_on_the_way_is_refused_too(host):
    host.link("/srv/app/data", "/etc")
    before = host.snapshot()
    out = one(host.run("resources:\n  - File[/srv/app/data/x.conf]: {content: \"x\\n\"}\n"))
    assert out.state is FAILED
    assert "/srv/app/data is a link owned by uid 1001 (app)" in out.reason
    assert not host.path("/etc/x.conf").exists()
    assert host.snapshot() == before


def test_line_through_a_users_link_in_sticky_tmp_is_refused(host):
    """The kernel's fs.protected_symlinks would refuse root this open; Datum resolves links
    itself, so it refuses it itself."""
    host.link("/tmp/app.env", "/etc/sudoers")
    before = host.snapshot()
    out = one(host.run("resources:\n  - Line[app-env]: {path: /tmp/app.env, line: \"app ALL=(ALL) NOPASSWD: ALL\"}\n"))
    assert out.state is FAILED
    assert "/tmp/app.env is a link owned by uid 1001 (app)" in out.reason
    assert host.path("/etc/sudoers").read_text() == SUDOERS
    assert host.snapshot() == before


def test_roots_link_in_a_users_directory_is_refused(host):
    """Root owns the link, but app may replace it: the directory is app's."""
    os.symlink("/etc", host.path("/srv/app/data"))
    out = one(host.run("resources:\n  - Directory[/srv/app/data]: {owner: app, recurse: true}\n"))
    assert out.state is FAILED
    assert "in a directory owned by uid 1001 (app)" in out.reason
    assert os.stat(host.path("/etc")).st_uid == 0


def test_symlink_in_a_users_directory_manages_the_link_itself(host):
    """A Symlink's own path is never followed, so app's link there is replaced, not refused."""
    host.link("/srv/app/current", "/etc")
    out = one(host.run("resources:\n  - Symlink[/srv/app/current]: {target: /srv/app/releases/2}\n"))
    assert out.state is CONVERGED
    assert os.readlink(host.path("/srv/app/current")) == "/srv/app/releases/2"


# --- root's own links are still followed ----------------------------------------------------------


def test_roots_resolv_conf_link_is_written_through(host):
    (host.path("/run/systemd/resolve")).mkdir(parents=True)
    os.symlink("../run/systemd/resolve/stub-resolv.conf", host.path("/etc/resolv.conf"))
    out = one(host.run("resources:\n  - File[/etc/resolv.conf]: {content: \"nameserver 127.0.0.53\\n\"}\n"))
    assert out.state is CONVERGED
    assert host.path("/run/systemd/resolve/stub-resolv.conf").read_text() == "nameserver 127.0.0.53\n"
    assert os.path.islink(host.path("/etc/resolv.conf"))


def test_roots_link_in_sticky_tmp_is_followed(host):
    """In a sticky directory only the link's owner (root) may replace it."""
    (host.path("/var/lib/x")).mkdir(parents=True)
    os.symlink("/var/lib/x/state", host.path("/tmp/state"))
    out = one(host.run("resources:\n  - File[/tmp/state]: {content: \"s\\n\"}\n"))
    assert out.state is CONVERGED
    assert host.path("/var/lib/x/state").read_text() == "s\n"


# --- swapped between observe and apply: the change lands on what was checked, or nowhere ---------


def test_directory_swapped_for_a_link_after_observe_changes_nothing_outside(host):
    data = host.path("/srv/app/data")
    data.mkdir()
    os.chown(data, APP, APP)
    os.chmod(data, 0o700)
    before = host.snapshot(leave=("/srv/app",))
    out = one(host.run(
        "resources:\n  - Directory[/srv/app/data]: {owner: root, mode: '0755'}\n",
        when("Directory[/srv/app/data]", lambda: host.link("/srv/app/data", "/etc")),
    ))
    assert out.state is FAILED
    assert "changed since it was observed" in out.reason
    assert refusal(out.reason) == ["changed_since_observed"]
    assert host.snapshot(leave=("/srv/app",)) == before
    assert stat.S_IMODE(os.stat(host.path("/etc")).st_mode) == 0o755
    assert os.lstat(data).st_uid == APP  # the link app made is app's still


def test_file_meta_on_a_file_swapped_for_a_link_changes_nothing_outside(host):
    host.write("/srv/app/config.yml", "x\n")
    before = host.snapshot(leave=("/srv/app",))
    out = one(host.run(
        "resources:\n  - File[/srv/app/config.yml]: {owner: app, mode: '0600'}\n",
        when("File[/srv/app/config.yml]", lambda: host.link("/srv/app/config.yml", "/etc/shadow")),
    ))
    assert out.state is FAILED
    assert "changed since it was observed" in out.reason
    assert host.snapshot(leave=("/srv/app",)) == before


def test_file_content_over_a_swapped_in_link_replaces_the_link_never_its_target(host):
    host.write("/srv/app/config.yml", "old\n")
    before = host.snapshot(leave=("/srv/app",))
    out = one(host.run(
        "resources:\n  - File[/srv/app/config.yml]: {owner: app, content: \"new\\n\"}\n",
        when("File[/srv/app/config.yml]", lambda: host.link("/srv/app/config.yml", "/etc/shadow")),
    ))
    assert out.state is CONVERGED
    assert host.snapshot(leave=("/srv/app",)) == before
    config = host.path("/srv/app/config.yml")
    assert not config.is_symlink() and config.read_text() == "new\n"


def test_a_directory_on_the_way_swapped_after_observe_fails_and_writes_nothing(host):
    sub = host.path("/srv/app/sub")
    sub.mkdir()
    os.chown(sub, APP, APP)
    before = host.snapshot(leave=("/srv/app",))
    out = one(host.run(
        "resources:\n  - File[/srv/app/sub/c.conf]: {content: \"c\\n\"}\n",
        when("File[/srv/app/sub/c.conf]", lambda: host.link("/srv/app/sub", "/etc")),
    ))
    assert out.state is FAILED
    assert "/srv/app/sub changed since it was observed" in out.reason
    assert not host.path("/etc/c.conf").exists()
    assert host.snapshot(leave=("/srv/app",)) == before


def test_line_file_swapped_for_a_link_after_observe_is_refused(host):
    host.write("/srv/app/env", "A=1\n")
    out = one(host.run(
        "resources:\n  - Line[env]: {path: /srv/app/env, line: \"B=2\"}\n",
        when("Line[env]", lambda: host.link("/srv/app/env", "/etc/sudoers")),
    ))
    assert out.state is FAILED
    assert host.path("/etc/sudoers").read_text() == SUDOERS


def test_recurse_below_swapped_for_a_link_changes_the_link_only(host):
    data = host.path("/srv/app/data")
    (data / "sub").mkdir(parents=True)
    for p in (data, data / "sub"):
        os.chown(p, APP, APP)
    before = host.snapshot(leave=("/srv/app",))
    host.run(
        "resources:\n  - Directory[/srv/app/data]: {owner: root, mode: '0750', recurse: true}\n",
        when("Directory[/srv/app/data]", lambda: host.link("/srv/app/data/sub", "/etc")),
    )
    assert host.snapshot(leave=("/srv/app",)) == before
    assert os.stat(host.path("/etc")).st_uid == 0


# --- what appeared since observe is never overwritten --------------------------------------------


@pytest.mark.parametrize(
    ("resource", "body"),
    [
        ("File[/srv/app/seed]", "{content: \"datum\\n\", replace: false}"),  # replace: false
        ("File[/srv/app/seed]", "{content: \"datum\\n\"}"),  # any file created
        ("Symlink[/srv/app/seed]", "{target: /srv/app/releases/1}"),  # a link, without force
    ],
)
def test_what_appeared_since_observe_is_never_overwritten(host, resource, body):
    out = one(host.run(
        f"resources:\n  - {resource}: {body}\n",
        when(resource, lambda: host.write("/srv/app/seed", "mine\n")),
    ))
    assert out.state is FAILED
    assert "/srv/app/seed: a file appeared since it was observed" in out.reason
    assert refusal(out.reason) == ["appeared_since_observed"]
    assert host.path("/srv/app/seed").read_text() == "mine\n"


def test_symlink_replacing_a_link_never_replaces_a_file_swapped_in(host):
    os.symlink("/srv/app/releases/1", host.path("/srv/app/current"))
    os.lchown(host.path("/srv/app/current"), APP, APP)

    def swap():
        def act(fd):
            os.unlink("current", dir_fd=fd)
            out = os.open("current", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(out, b"mine\n")
            os.close(out)

        host.as_app("/srv/app", act)

    out = one(host.run(
        "resources:\n  - Symlink[/srv/app/current]: {target: /srv/app/releases/2}\n",
        when("Symlink[/srv/app/current]", swap),
    ))
    assert out.state is FAILED and "a file appeared since it was observed" in out.reason
    assert host.path("/srv/app/current").read_text() == "mine\n"


def test_a_directory_that_became_a_link_before_its_creation_is_refused(host):
    before = host.snapshot(leave=("/srv/app",))
    out = one(host.run(
        "resources:\n  - Directory[/srv/app/cache]: {owner: app, mode: '0700'}\n",
        when("Directory[/srv/app/cache]", lambda: host.link("/srv/app/cache", "/etc")),
    ))
    assert out.state is FAILED and "changed since it was observed" in out.reason
    assert host.snapshot(leave=("/srv/app",)) == before


# --- hard links: another name of the file may be /etc/shadow -------------------------------------


def test_owner_of_a_hard_linked_file_is_not_changed_when_users_may_hard_link(host, monkeypatch):
    """``fs.protected_hardlinks`` off (a fake of the sysctl: this machine's is on, as Debian's)."""
    os.link(host.path("/etc/shadow"), host.path("/srv/app/config.yml"))
    monkeypatch.setattr(held, "protected_hardlinks", lambda: False)
    out = one(host.run("resources:\n  - File[/srv/app/config.yml]: {owner: app}\n"))
    assert out.state is FAILED and "has 2 hard links" in out.reason
    assert refusal(out.reason) == ["hard_links"]
    assert os.stat(host.path("/etc/shadow")).st_uid == 0


# --- sensitivity belongs to a path ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("marks", "marker"),
    [
        ("sensitive: true", "(diff redacted: sensitive: true)\n"),
        ("mode: '0600'", "(diff redacted: file is not world-readable)\n"),
    ],
)
def test_a_line_on_a_sensitive_files_path_shows_no_content(host, marks, marker):
    host.path("/etc/app.secret").write_text("token=hunter2\n")
    os.chmod(host.path("/etc/app.secret"), 0o644)
    text = (
        "resources:\n"
        f"  - File[/etc/app.secret]: {{{marks}}}\n"
        "  - Line[extra]: {path: /etc/app.secret, line: \"other=1\"}\n"
    )
    line = host.run(text, mode=Mode.OBSERVE)["Line[extra]"]  # the file still 0644, as before apply
    assert line.state is ResourceState.DRIFTED
    assert line.sensitive and line.diff == marker


# --- a user's home ---------------------------------------------------------------------------------


def test_a_home_app_planted_as_a_link_is_refused(host):
    home = host.path("/home")
    home.mkdir()
    os.chown(home, APP, APP)
    host.link("/home/bob", "/etc")
    out = one(host.run("resources:\n  - User[bob]: {manage_home: true}\n"))
    assert out.state is FAILED and "/home/bob is a link owned by uid 1001 (app)" in out.reason
    assert os.stat(host.path("/etc")).st_uid == 0


def test_a_home_copies_skels_links_as_links(host):
    skel = host.path("/etc/skel")
    skel.mkdir()
    (skel / ".profile").write_text("p\n")
    os.symlink("/etc/shadow", skel / "shadow-link")
    out = one(host.run("resources:\n  - User[bob]: {manage_home: true}\n"))
    assert out.state is CONVERGED, out.reason
    home = host.path("/home/bob")
    uid = os.stat(home).st_uid
    assert uid != 0 and os.lstat(home / "shadow-link").st_uid == uid
    assert os.readlink(home / "shadow-link") == "/etc/shadow"
    assert os.stat(host.path("/etc/shadow")).st_uid == 0
    assert [n for n in os.listdir(host.path("/home")) if n.startswith(".datum-tmp")] == []


def test_a_home_left_half_built_by_a_killed_pass_is_swept(host):
    home = host.path("/home")
    (home / ".datum-tmp-0123456789ab" / "sub").mkdir(parents=True)  # a killed pass's copy: unlocked
    (home / ".datum-tmp-0123456789ab" / "sub" / "f").write_text("x")
    old = home / ".datum-tmp-home-4242"  # as versions before named it
    old.mkdir()
    os.utime(old, (0, 0))
    out = one(host.run("resources:\n  - User[bob]: {manage_home: true}\n"))
    assert out.state is CONVERGED, out.reason
    assert sorted(os.listdir(home)) == ["bob"]


# --- every provider, a link on the way and a directory on the way swapped --------------------------

# Each resource's path is below /srv/app/data (a directory of app's).
BELOW = [
    "File[/srv/app/data/x.conf]: {content: \"x\\n\"}",
    "Directory[/srv/app/data/sub]: {mode: '0755'}",
    "Line[l]: {path: /srv/app/data/passwd, line: \"evil::0:0::/:/bin/sh\", create: true}",
    "Symlink[/srv/app/data/l]: {target: /x}",
    "User[bob]: {manage_home: true, home: /srv/app/data/bob}",
]
# What a User writes of its own (its rows, the locks) beside what the test watches.
ACCOUNTS = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow", "/etc/.pwd.lock", "/srv/app")


@pytest.mark.parametrize("resource", BELOW)
def test_a_users_link_on_the_way_is_refused_by_every_provider(host, resource):
    host.link("/srv/app/data", "/etc")
    before = host.snapshot()
    out = one(host.run(f"resources:\n  - {resource}\n"))
    assert out.state is FAILED
    assert "/srv/app/data is a link owned by uid 1001 (app)" in out.reason
    assert host.snapshot() == before


@pytest.mark.parametrize("resource", BELOW)
def test_a_directory_on_the_way_swapped_after_observe_is_refused_by_every_provider(host, resource):
    data = host.path("/srv/app/data")
    data.mkdir()
    os.chown(data, APP, APP)
    before = host.snapshot(leave=ACCOUNTS)
    out = one(host.run(
        f"resources:\n  - {resource}\n",
        lambda _resource: host.link("/srv/app/data", "/etc"),
    ))
    assert out.state is FAILED
    # Found at the descriptor walk, or (a home, resolved when it is made) by the link rule.
    assert refusal(out.reason) in (["changed_since_observed"], ["link_rule"])
    assert "/srv/app/data" in out.reason
    assert host.snapshot(leave=ACCOUNTS) == before


# --- a filesystem without hard links (vfat: /boot/efi) --------------------------------------------


def test_rename_noreplace_never_replaces(tmp_path):
    (tmp_path / "a").write_text("a")
    (tmp_path / "taken").write_text("mine")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            held.rename_noreplace(fd, "a", "taken")
        held.rename_noreplace(fd, "a", "free")
    finally:
        os.close(fd)
    assert (tmp_path / "taken").read_text() == "mine" and (tmp_path / "free").read_text() == "a"


def test_creation_without_hard_links_still_never_overwrites(host, monkeypatch):
    """``link(2)`` refused as vfat refuses it (a fake of that filesystem: this machine has no
    mkfs.vfat): the no-replace rename takes over, and still refuses what appeared."""
    from datum.providers import fs

    def no_links(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(fs.os, "link", no_links)
    out = one(host.run(
        "resources:\n  - File[/srv/app/seed]: {content: \"datum\\n\"}\n",
        when("File[/srv/app/seed]", lambda: host.write("/srv/app/seed", "mine\n")),
    ))
    assert out.state is FAILED and "a file appeared since it was observed" in out.reason
    assert host.path("/srv/app/seed").read_text() == "mine\n"
    out = one(host.run("resources:\n  - File[/srv/app/other]: {content: \"datum\\n\"}\n"))
    assert out.state is CONVERGED and host.path("/srv/app/other").read_text() == "datum\n"


def test_account_databases_behind_a_users_link_are_refused(host):
    """etc/group a link app owns (to a file of app's): Group neither reads nor writes through it."""
    host.write("/srv/app/group", "root:x:0:\n")
    os.rename(host.path("/etc/group"), host.path("/etc/group.real"))
    os.symlink("/srv/app/group", host.path("/etc/group"))
    os.lchown(host.path("/etc/group"), APP, APP)
    before = host.snapshot()
    out = one(host.run("resources:\n  - Group[staff]: {gid: 1500}\n"))
    assert out.state is FAILED and "/etc/group is a link owned by uid 1001 (app)" in out.reason
    assert host.snapshot() == before


def test_a_users_directory_named_like_a_temporary_is_never_swept(host):
    """The sweep removes a whole tree only when Datum could have made it (a trusted uid owns it): app's
    own directory named ``.datum-tmp-<12 hex>`` in app's directory stays, with what it holds."""
    def act(fd):
        os.mkdir(".datum-tmp-0123456789ab", 0o755, dir_fd=fd)
        out = os.open(".datum-tmp-0123456789ab/mine", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.close(out)

    host.as_app("/srv/app", act)
    out = one(host.run("resources:\n  - File[/srv/app/config.yml]: {content: \"x\\n\"}\n"))
    assert out.state is CONVERGED
    assert host.path("/srv/app/.datum-tmp-0123456789ab/mine").exists()
