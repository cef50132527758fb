"""``grae estimators``: list the registered advantage estimators and their parameters."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("estimators")
    def estimators() -> None:
        """List registered advantage estimators with their default parameters."""
        from rich.table import Table

        from grae.advantage import describe, names
        from grae.cli.output import console

        table = Table("name", "parameters (defaults)", "context", "what it is")
        for name in names():
            d = describe(name)
            table.add_row(name, d["signature"], ", ".join(d["requires"]) or "-", d["summary"])
        console().print(table)
