"""``Line``: one line in a file, found by exact text or by a regular expression.

With ``match``, the last matching line is replaced (as Ansible's lineinfile
does; the first with ``first_match``); without a match the line is appended,
or inserted ``after`` / ``before`` the last (first) line matching a regex
(``BOF`` puts it first; no line matching appends). ``absent`` removes every
line equal to ``line`` or matching ``match``.

Everything else in the file stays as it was, byte for byte: lines are split on
``\\n`` only (not on ``\\x0c``, ``\\u2028`` and the rest ``str.splitlines``
knows), a CRLF file stays CRLF, bytes that are not UTF-8 pass through
untouched (``surrogateescape``), a missing final newline stays missing unless
a line is appended, and the file keeps its mode and owner (setuid included).
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path

from datum.core.vocab import Action
from datum.providers import fs
from datum.providers.base import Attributes, Change, HostContext, Provider, ProviderError

_CODEC = ("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class LineWant:
    host_path: str
    real: Path
    spec: Attributes
    hidden: str | None = None  # the marker a resource at this path asks for (``ctx.hidden``)


@dataclass(frozen=True, slots=True)
class LineHave:
    content: bytes | None
    mode: int | None = None


def _body(line: str) -> str:
    """A line without its ending: what ``line`` and ``match`` compare against."""
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def edit(text: str, spec: Attributes) -> str:
    """Pure: ``text`` with the line made present or absent; every other line as it was."""
    lines = fs.split_lines(text)
    pattern = re.compile(spec.match) if spec.match else None

    def hit(candidate: str) -> bool:
        return candidate == spec.line or bool(pattern and pattern.search(candidate))

    if spec.ensure == "absent":
        return "".join(x for x in lines if not hit(_body(x)))
    assert spec.line is not None
    bodies = [_body(x) for x in lines]
    matches = [i for i, b in enumerate(bodies) if pattern and pattern.search(b)]
    first = bool(getattr(spec, "first_match", False))
    if matches:
        i = matches[0] if first else matches[-1]
        if bodies[i] != spec.line:
            lines[i] = spec.line + lines[i][len(bodies[i]) :]  # keeps that line's ending
    elif spec.line not in bodies:
        # The file's own line ending: the one of its last terminated line.
        pairs = zip(reversed(lines), reversed(bodies), strict=True)
        ending = next((x[len(b) :] for x, b in pairs if x.endswith("\n")), "\n")
        at = insert_at(bodies, spec, first)
        if at < len(lines):
            lines.insert(at, spec.line + ending)
            return "".join(lines)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += ending
        lines.append(spec.line + ending)
    return "".join(lines)


def insert_at(bodies: list[str], spec: Attributes, first: bool) -> int:
    """Pure: the index a new line goes to (``len(bodies)``: appended)."""
    after, before = getattr(spec, "after", None), getattr(spec, "before", None)
    if before == "BOF":
        return 0
    anchor = after if after not in (None, "EOF") else before
    if anchor is None:
        return len(bodies)
    pattern = re.compile(anchor)
    hits = [i for i, b in enumerate(bodies) if pattern.search(b)]
    if not hits:
        return len(bodies)
    i = hits[0] if first else hits[-1]
    return i + 1 if after is not None else i


class LineProvider(Provider[Attributes, LineWant, LineHave]):
    type = "Line"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.line.spec:LineSpec"

    def touches(self, spec: Attributes) -> list[str]:
        return [spec.path]  # not owned (many Lines and a File may share it), but kept by a purge

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> LineWant:
        real = ctx.real(spec.path)
        return LineWant(spec.path, Path(real), spec, ctx.hidden(spec.path, real))

    def observe(self, want: LineWant, ctx: HostContext) -> LineHave:
        st = fs.lstat(want.real)
        what = fs.kind(st)
        if what not in ("absent", "file"):
            raise ProviderError(f"{want.host_path} is a {what}; a Line edits a regular file only")
        content = fs.read_bytes(want.real)
        if content is None and not want.spec.create and want.spec.ensure == "present":
            raise ProviderError(
                f"{want.host_path} does not exist (set create: true, or require its File)"
            )
        return LineHave(content, stat.S_IMODE(st.st_mode) if st is not None else None)

    def plan(self, want: LineWant, have: LineHave) -> Change:
        marker = want.hidden or fs.redaction(False, have.mode)
        if have.content is None:
            marker = want.hidden or fs.redaction(False, getattr(want.spec, "mode", None))  # the file it makes
            if want.spec.ensure == "absent":
                return Change()
            after = edit("", want.spec).encode(*_CODEC)
            diff = marker or fs.unified(want.host_path, None, after)
            return Change(Action.CREATE, ("file absent",), diff, marker is not None)
        before = have.content.decode(*_CODEC)
        after_text = edit(before, want.spec)
        if after_text == before:
            return Change()
        what = "line absent" if want.spec.ensure == "present" else "line present"
        diff = marker or fs.unified(want.host_path, have.content, after_text.encode(*_CODEC))
        return Change(Action.UPDATE, (what,), diff, marker is not None)

    def apply(self, want: LineWant, have: LineHave, change: Change, ctx: HostContext) -> str | None:
        # Read again: the edit applies to the file as it is now, so a line another
        # writer added since observe is kept (the write itself is atomic).
        have = self.observe(want, ctx)
        before = (have.content or b"").decode(*_CODEC)
        if have.content is not None and edit(before, want.spec) == before:
            return None
        # Mode and owner: write_atomic keeps the existing file's (owner first, then mode);
        # a file create: true makes gets the Line's, when given.
        mode, uid, gid = None, -1, -1
        if have.content is None:
            from datum.providers.accounts import owner_ids

            mode = getattr(want.spec, "mode", None)
            owner, group = owner_ids(
                ctx, getattr(want.spec, "owner", None), getattr(want.spec, "group", None)
            )
            uid, gid = -1 if owner is None else owner, -1 if group is None else group
        data = edit(before, want.spec).encode(*_CODEC)
        with ctx.parent(str(want.real), want.host_path, make=have.content is None) as (fd, name):
            fs.write_at(
                fd, name, data, mode=mode, uid=uid, gid=gid,
                replace=have.content is not None, host_path=want.host_path,
            )
        return None


PROVIDER = LineProvider()
