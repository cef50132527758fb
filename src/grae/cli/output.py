"""Printing user-controlled text (paths, messages, line numbers) through rich: literally, never as
markup (``[red]`` in a path) or emoji (``:100:`` in ``file.jsonl:100:``)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape


def error(console: Any, label: str, message: Any) -> None:
    """One red ``label`` and the message, verbatim."""
    console.print(f"[red]{escape(label)}[/red] {escape(str(message))}", emoji=False, highlight=False, soft_wrap=True)
