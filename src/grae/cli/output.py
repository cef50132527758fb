"""Printing user-controlled text (paths, messages, line numbers) through rich: literally, never as
markup (``[red]`` in a path) or emoji (``:100:`` in ``file.jsonl:100:``)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

#: console width when stdout is not a terminal: wider than any table grae prints, so a table in a pipe or a log
#: file (``grae sim | tee``, ``grae estimators | grep``) keeps every column and every value on one line (a table
#: prints at its natural width, a line as it is)
PIPE_WIDTH = 10_000


def console(**kwargs: Any) -> Any:
    """A rich Console for a command's output: at a terminal as wide as it is (or ``COLUMNS``), where a table wider
    than that wraps its cells' text onto more lines; in a pipe or a file :data:`PIPE_WIDTH`, so every table prints
    whole, one row a line, for ``grep``, ``cut`` and ``diff``. ``COLUMNS`` is not read there: it is a terminal's
    width, and a process writing to a pipe often inherits one it did not ask for (a Python that imports readline,
    as pdb and so pytest do, gets ``COLUMNS=80`` from GNU readline, and so does every process it starts), which
    would cut a table at 80 columns."""
    if "width" not in kwargs and not sys.stdout.isatty():
        kwargs["width"] = PIPE_WIDTH
    return Console(**kwargs)


def error(console: Any, label: str, message: Any) -> None:
    """One red ``label`` and the message, verbatim; under a launcher, also where it reports a rank's failure."""
    console.print(f"[red]{escape(label)}[/red] {escape(str(message))}", emoji=False, highlight=False, soft_wrap=True)
    tell_launcher(f"{label} {message}")


def refuse(console: Any, message: Any, exit_code: int = 2) -> NoReturn:
    """One ``error:`` line (:func:`error`) and exit with ``exit_code`` (2: a refusal before anything runs)."""
    error(console, "error:", message)
    raise typer.Exit(exit_code)


def tell_launcher(line: str) -> None:
    """Under ``torchrun``/``accelerate launch`` (``TORCHELASTIC_ERROR_FILE`` set): write ``line`` to the
    file the launcher reads when this rank fails, so its failure summary names the cause. Every rank but
    the main one prints nothing, so a refusal on one rank alone (a package missing on one node) would
    otherwise show only as "exitcode: 2". The launcher ignores the file of a rank that exits 0."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        Path(path).write_text(json.dumps({"message": line, "timestamp": str(int(time.time()))}))
    except OSError:
        pass


def unwritable(path: str | os.PathLike, *, is_file: bool = False) -> str | None:
    """Why ``path`` (a directory, or a file's directory with ``is_file``) cannot be written, or None.
    Probes by creating what is missing and a temporary file, then removes what it created."""
    target = Path(path).parent if is_file else Path(path)
    created = []
    try:
        missing = [target, *target.parents]
        for d in reversed(missing):
            if not d.exists():
                try:
                    d.mkdir()
                    created.append(d)
                except FileExistsError:  # another process (another rank of this launch) made it meanwhile
                    pass
            if not d.is_dir():
                return f"{d} is not a directory"
        with tempfile.NamedTemporaryFile(dir=target, prefix=".grae-probe-"):
            pass
    except OSError as err:
        return f"{err.strerror or err}"
    finally:
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                pass
    return None


def check_writable(console: Any, path: str | os.PathLike, option: str, *, is_file: bool = False) -> None:
    """One line and exit 2 when ``path`` cannot be written (before any model or data loads)."""
    why = unwritable(path, is_file=is_file)
    if why is not None:
        error(console, "error:", f"{option} {path}: cannot write there ({why}); choose another {option}")
        raise typer.Exit(2)
