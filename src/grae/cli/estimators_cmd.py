"""``grae estimators``: list the registered advantage estimators and their parameters."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("estimators")
    def estimators() -> None:
        """List registered advantage estimators with their default parameters."""
        from rich.table import Column, Table
        from rich.text import Text

        from grae.advantage import describe, names
        from grae.cli.output import console as make_console

        console = make_console()
        # at a terminal, its width: long cells wrap, a word longer than its column folds; in a pipe, one row a line
        table = Table(Column("name", no_wrap=True), Column("parameters (defaults)", overflow="fold", ratio=3),
                      Column("context", overflow="fold", ratio=1, min_width=7),
                      Column("what it is", overflow="fold", ratio=4), expand=console.is_terminal)
        for name in names():
            d = describe(name)
            # as text, not markup: a summary's formula (E[k(1 − p)^(k−1)]) holds brackets rich would read as a tag
            table.add_row(*map(Text, (name, d["signature"], ", ".join(d["requires"]) or "-", d["summary"])))
        console.print(table)
