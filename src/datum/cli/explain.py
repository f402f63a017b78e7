"""``datum explain NAME``: what a drift reason, host state, resource state, health or host reason means, and what to do.

The text is ``datum.core.explain``'s, the same the web page shows in place.
"""

from __future__ import annotations

import json

import click

from datum.cli.common import json_option
from datum.core.findings import Finding, Problem


@click.command()
@click.argument("name", required=False)
@json_option
def explain(name: str | None, as_json: bool) -> None:
    """What NAME (a drift reason, host or resource state, health, or a host reason as shown) means, and whether to wait or go and look.

    Without NAME, every name that can be explained, with its one-line summary.
    An unknown NAME exits 64 and lists the known ones.
    """
    from datum.core.explain import EXPLANATIONS, known, lookup

    if name is not None and "." in name:
        from datum.plugins import load

        load()  # a plugin's reason (``pg_roles.membership_outside_prefix``) is known once it is loaded
    if name is None:
        if as_json:
            click.echo(json.dumps({"explanations": [e.to_json() for e in EXPLANATIONS]}, indent=2))
        else:
            for e in EXPLANATIONS:
                click.echo(f"{e.name:<24} {e.vocabulary.value:<18} {e.summary}")
        return
    found = lookup(name)
    if not found:
        names = known()
        raise Problem(
            [
                Finding(
                    "NOT_FOUND",
                    f"{name!r} is not a drift reason, host state, resource state, health or host reason; known: {', '.join(names)}",
                    details={"known": names},
                )
            ]
        )
    if as_json:
        click.echo(json.dumps({"name": found[0].name, "explanations": [e.to_json() for e in found]}, indent=2))
        return
    click.echo("\n".join(e.text() for e in found), nl=False)
