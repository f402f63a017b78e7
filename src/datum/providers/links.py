"""The link rule: the one place that decides whether root may follow a symbolic link.

Datum runs as root, and a link is a way for whoever can write beside it to send root's
next open, write or chown wherever they like (CVE-2017-18925: opentmpfiles' chown through
a user's link; CVE-2018-6954: systemd-tmpfiles' "unsafe path transition"). The kernel's
``fs.protected_symlinks`` refuses root a link in a sticky world-writable directory unless
root or the directory's owner owns it; Datum resolves links itself (a path under
``--root`` is resolved as a chroot would), so it asks the same question itself, and a
stricter one, of every link on the way, the last one included:

- the link is owned by a trusted uid (root, or the uid Datum runs as), and
- no untrusted user can replace it: the directory that holds it is owned by a trusted uid
  and writable by nobody else (no write for others, none for a group other than root's),
  or it is sticky (``/tmp``), where only the link's owner or the directory's owner may
  rename or remove the link.

Anything else is refused before anything is touched: the resource fails naming the link,
its owner and this rule (``Untrusted``). ``/etc/resolv.conf ->
../run/systemd/resolve/stub-resolv.conf`` (root's, in root's ``/etc``) is still followed.

Pure: two owners and modes in, the reason out; ``datum.providers.reads`` makes the reads.
"""

from __future__ import annotations

import os
from typing import Protocol

from datum.core import hostreasons


class Owned(Protocol):
    """What the rule reads of a path: an ``os.stat_result``, or the recorder's ``reads.Owner``."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_uid(self) -> int: ...
    @property
    def st_gid(self) -> int: ...

RULE = f"root follows a link only when root owns it and only root can replace it {hostreasons.LINK_RULE}"
_S_ISVTX, _S_IWGRP, _S_IWOTH = 0o1000, 0o020, 0o002


def trusted() -> frozenset[int]:
    """The uids whose links and directories Datum trusts: root's, and its own when it is not root."""
    return frozenset({0, os.geteuid()})


def refusal(link: Owned, directory: Owned) -> str | None:
    """Why the link whose owner and mode are ``link``, in the directory whose owner and mode are
    ``directory``, may not be followed; None when it may."""
    ok = trusted()
    if link.st_uid not in ok:
        return f"owned by uid {link.st_uid}"
    if directory.st_uid not in ok:
        return f"in a directory owned by uid {directory.st_uid}"
    if directory.st_mode & _S_ISVTX:
        return None  # sticky: only its owner or the directory's (both trusted) may replace it
    if directory.st_mode & _S_IWOTH:
        return "in a directory everyone may write"
    if directory.st_mode & _S_IWGRP and directory.st_gid not in (0, os.getegid()):
        return f"in a directory group {directory.st_gid} may write"
    return None
