"""``datum explain NAME``: what a word the surfaces print means, and what to do.

Drift reasons (the contract's and the plugins'), host, resource and item states, reconciler health,
``stranded``, ``disabled``, advice labels, modes and policies, and a host reason pasted as
``datum status``, ``datum hosts`` or the page show it. The text is ``datum.core.explain``'s, the same
the web page shows in place.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import click

from datum.cli.common import json_option
from datum.core.findings import ErrorCode, Finding, Problem


@click.command()
@click.argument("name", required=False)
@json_option
def explain(name: str | None, as_json: bool) -> None:
    """What NAME means, and whether to wait or go and look: a drift reason (a plugin's too, with or
    without its namespace), a host, resource or item state, a reconciler's health or state (disabled),
    stranded, an advice label, a mode or policy, an API error code, a line's severity, an audit outcome, an
    alert's name (DatumHostNeverReported), or a line a surface printed, pasted as shown.

    Without NAME, every name that can be explained, with its one-line summary.
    An unknown NAME exits 64 and names the nearest three known ones.
    """
    from datum.core.explain import EXPLANATIONS, known, lookup, plugin_explanations
    from datum.plugins import load

    load()  # a plugin's reasons (``pg_roles.membership_outside_prefix``) are known once it is loaded
    if name is None:
        every = [*EXPLANATIONS, *plugin_explanations()]
        if as_json:
            click.echo(json.dumps({"explanations": [e.to_json() for e in every]}, indent=2))
            return
        width = min(shutil.get_terminal_size().columns, 100)
        for vocabulary in dict.fromkeys(e.vocabulary for e in every):
            click.echo(f"{vocabulary.value}:")
            for e in (e for e in every if e.vocabulary is vocabulary):
                if len(e.name) > 23:  # a long name on a line of its own, its summary under it
                    click.echo(f"  {e.name}")
                first = " " * 26 if len(e.name) > 23 else f"  {e.name:<24}"
                click.echo(textwrap.fill(e.summary, width, initial_indent=first, subsequent_indent=" " * 26))
        return
    found = lookup(name)
    if not found:
        import difflib

        from datum.core.explain import normalise

        names = known()
        near = difflib.get_close_matches(normalise(name), names, n=3, cutoff=0.5)
        hint = f"try {', '.join(near)}" if near else "datum explain lists every word it knows"
        raise Problem(
            [
                Finding(
                    ErrorCode.NOT_FOUND,
                    f"{name!r}: not a word Datum knows; {hint}",
                    details={"known": names, "nearest": near},
                )
            ]
        )
    if as_json:
        from datum.core.explain import normalise

        said = found[0].name if normalise(found[0].name) == normalise(name) else name
        click.echo(json.dumps({"name": said, "explanations": [e.to_json() for e in found]}, indent=2))
        return
    width = min(shutil.get_terminal_size().columns, 100)
    click.echo("\n".join(e.text(width) for e in found), nl=False)
