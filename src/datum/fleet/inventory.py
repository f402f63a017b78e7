"""The fleet's inventory: the hosts an operator declared, and where each one was declared.

Two sources, merged (the first place a host is declared is the one named):

- ``nodes.yaml`` rules with ``expected: true``, each naming one host (``datum.fleet.nodes``);
- an inventory file (``[reconcilers.hosts] inventory``), YAML::

      hosts: [web1, web2, db1]

What cannot be read, or is not valid, is a ``Problem`` with every finding: never an empty
inventory, which would read every host that reports as a stray and every declared one as gone.
``None`` means nothing declares hosts at all (no inventory file, no ``expected`` rule): then
missing and stray cannot be told apart, which is not the same as "none missing".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datum.core.findings import FieldError, invalid

MAX_NAME = 253  # as a report's host name


@dataclass(frozen=True, slots=True)
class Declared:
    """One declared host and where it was declared (``nodes.yaml rule 3``, ``inventory.yaml``)."""

    host: str
    where: str


def declared(fleet: Path | None, inventory: Path | None) -> dict[str, Declared] | None:
    """Every declared host by name; None when neither source declares any (see the module)."""
    found: dict[str, Declared] = {}
    if fleet is not None:
        from datum.fleet.nodes import NODES, expected_hosts, load_rules

        for host, index in expected_hosts(load_rules(fleet)).items():
            found[host] = Declared(host, f"{NODES} rule {index}")
    if inventory is not None:
        for host in read_inventory(inventory if inventory.is_absolute() or fleet is None else fleet / inventory):
            found.setdefault(host, Declared(host, inventory.name))
    elif not found:
        return None
    return found


def read_inventory(path: Path) -> list[str]:
    """The host names of an inventory file, in file order; a Problem with every finding when it is not valid."""
    from datum.fleet.nodes import read_list

    hosts, problems = read_list(path, "hosts", "a list of host names, as their agents report them")
    where = path.name
    names: list[str] = []
    for i, name in enumerate(hosts):
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME or "\x00" in name:
            problems.append(FieldError(f"{where}: hosts[{i}]", f"a host name: 1 to {MAX_NAME} characters"))
        elif name in names:
            problems.append(FieldError(f"{where}: hosts[{i}]", f"{name} is listed twice"))
        else:
            names.append(name)
    if problems:
        raise invalid(problems, f"the inventory {path} is not valid: {len(problems)} finding{'s' if len(problems) > 1 else ''}")
    return names
