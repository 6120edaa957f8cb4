"""`rota policies`: list the scheduling policies."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from planner.cli.common import out
from planner.policies import describe_policies


def policies(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """List the scheduling policies.

    Example: rota policies
    """

    described = describe_policies()
    if as_json:
        out.print_json(json.dumps(described))
        return
    grid = Table(title="policies")
    grid.add_column("name", no_wrap=True)
    grid.add_column("what it optimises")
    grid.add_column("needs")
    for name, info in described.items():
        grid.add_row(name, info["description"], info["needs"])
    out.print(grid)
