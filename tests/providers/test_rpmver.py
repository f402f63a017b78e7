"""RPM's version ordering (``datum.providers.package.rpmver``) held against ``rpm`` itself.

Every pair is compared both ways by rpm's own ``rpm.vercmp`` (rpm's Lua, ``rpmverCmp``) in one
``rpm --eval``, and by ours; they must agree on every pair.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from datum.providers.package.rpmver import compare, matches, parse, rpmvercmp

VERSIONS = [
    "1.0", "1.0.0", "1.00", "1.0a", "1.0~rc1", "1.0~rc2", "1.0~~", "1.0^git1", "1.0^git1~pre", "1.0^", "1.0.1",
    "1.1", "1.10", "1.9", "1.001", "2", "2.0", "2a", "2.a", "a", "b", "A", "1_0", "1+0", "1..0", "001", "0",
    "1.0-1", "1.0-2", "1.0-10", "1.0-1.el9", "1.0-1.fc40", "1.0-", "1:1.0", "0:1.0", "1:0.9-9", "2:0.1", ":1.0",
    "1.0-1~rc", "1.0-1^p", "10:1", "5.14.0-362.8.1.el9_3", "5.14.0-362.13.1.el9_3", "abc:1", "1.0.x", "1.0x",
]


def rpm_says(pairs: list[tuple[str, str]], home: Path) -> list[int]:
    body = " ".join(f'print(rpm.vercmp("{a}", "{b}") .. " ")' for a, b in pairs)
    done = subprocess.run(["rpm", "--eval", "%{lua: " + body + "}"], capture_output=True, text=True, check=True,
                          env={**os.environ, "HOME": str(home)})  # Debian's rpm makes ~/.rpmdb: the test's
    return [int(x) for x in done.stdout.split()]


@pytest.mark.skipif(shutil.which("rpm") is None, reason="rpm is not installed (scripts/setup-rpm installs it)")
def test_the_ordering_is_rpms_on_every_pair(tmp_path):
    pairs = list(itertools.product(VERSIONS, repeat=2))
    theirs = rpm_says(pairs, tmp_path)
    assert len(theirs) == len(pairs)
    differ = [(a, b, ours, rpm) for (a, b), rpm in zip(pairs, theirs, strict=True) if (ours := compare(a, b)) != rpm]
    assert differ == [], differ[:10]


def test_rpmvercmp_cases_from_rpms_own_test_suite():
    """A few of rpm's tests/rpmvercmp.at, which also hold without rpm installed."""
    for a, b, want in [
        ("1.0", "1.0", 0), ("1.0", "2.0", -1), ("2.0.1", "2.0.1a", -1), ("5.5p1", "5.5p10", -1),
        ("10xyz", "10.1xyz", -1), ("xyz10", "xyz10.1", -1), ("1.0aa", "1.0a", 1), ("6.0.rc1", "6.0", 1),
        ("10b2", "10a1", 1), ("1.0~rc1", "1.0", -1), ("1.0~rc1~git123", "1.0~rc1", -1), ("1.0^", "1.0", 1),
        ("1.0^git1", "1.01", -1), ("1.0^git1~pre", "1.0^git1", -1), ("1.0~rc1^git1", "1.0~rc1", 1),
        ("20101121", "20101121.0", -1), ("2_0", "2.0", 0), ("a+", "a_", 0),
    ]:
        assert rpmvercmp(a, b) == want, (a, b)
        assert rpmvercmp(b, a) == -want, (b, a)


def test_a_pin_matches_as_dnf_matches_name_version():
    assert matches("1.0", "1.0-3") and matches("1.0", "2:1.0-3") and matches("1.0-3", "1.0-3")
    assert matches("2:1.0", "2:1.0-1") and not matches("2:1.0", "1.0-1") and not matches("0:1.0", "1:1.0-1")
    assert not matches("1.0-3", "1.0-4") and not matches("1.0", "1.0.1-1") and matches("1.0", "1.00-1")
    assert parse("1:2.0-3.el9") == ("1", "2.0", "3.el9") and str(parse("1:2.0-3.el9")) == "1:2.0-3.el9"
    assert parse("2.0") == (None, "2.0", None) and parse(":1.0").epoch == "0"
