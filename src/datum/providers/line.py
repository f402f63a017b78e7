"""``Line``: one line in a file, found by exact text or by a regular expression.

With ``match``, the last matching line is replaced (as Ansible's lineinfile
does); without a match the line is appended. ``absent`` removes every line
equal to ``line`` or matching ``match``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers import fs
from datum.providers.base import Change, HostContext, Provider, ProviderError

if TYPE_CHECKING:
    from datum.providers.specs import LineSpec


@dataclass(frozen=True)
class LineWant:
    host_path: str
    real: Path
    spec: LineSpec


@dataclass(frozen=True)
class LineHave:
    content: bytes | None


def edit(text: str, spec: LineSpec) -> str:
    """Pure: ``text`` with the line made present or absent."""
    lines = text.splitlines()
    pattern = re.compile(spec.match) if spec.match else None

    def hit(candidate: str) -> bool:
        return candidate == spec.line or bool(pattern and pattern.search(candidate))

    if spec.ensure == "absent":
        lines = [x for x in lines if not hit(x)]
    else:
        assert spec.line is not None
        matches = [i for i, x in enumerate(lines) if pattern and pattern.search(x)]
        if matches:
            lines[matches[-1]] = spec.line
        elif spec.line not in lines:
            lines.append(spec.line)
    return "".join(x + "\n" for x in lines)


class LineProvider(Provider["LineSpec", LineWant, LineHave]):
    type = "Line"

    def desired(self, name: str, spec: LineSpec, ctx: HostContext) -> LineWant:
        return LineWant(spec.path, ctx.path(spec.path), spec)

    def observe(self, want: LineWant, ctx: HostContext) -> LineHave:
        content = fs.read_bytes(want.real)
        if content is None and not want.spec.create and want.spec.ensure == "present":
            raise ProviderError(
                f"{want.host_path} does not exist (set create: true, or require its File)"
            )
        return LineHave(content)

    def plan(self, want: LineWant, have: LineHave) -> Change:
        if have.content is None:
            if want.spec.ensure == "absent":
                return Change()
            return Change(
                Action.CREATE,
                ("file absent",),
                fs.unified(want.host_path, None, edit("", want.spec).encode()),
            )
        before = have.content.decode("utf-8", "replace")
        after = edit(before, want.spec)
        if after.splitlines() == before.splitlines():
            return Change()  # a missing final newline alone is not drift
        what = "line absent" if want.spec.ensure == "present" else "line present"
        return Change(
            Action.UPDATE, (what,), fs.unified(want.host_path, have.content, after.encode())
        )

    def apply(self, want: LineWant, have: LineHave, change: Change, ctx: HostContext) -> str | None:
        before = (have.content or b"").decode("utf-8", "replace")
        fs.write_atomic(want.real, edit(before, want.spec).encode())
        return None


PROVIDER = LineProvider()
