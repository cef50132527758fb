"""Console lines printed literally: user-controlled text (paths, messages, ``file.jsonl:100:``) is never read as rich
markup (``[red]`` in a path), emoji (``:100:``) or highlighting, and a long line is never folded at the console's
width (a log file or ``grep`` gets each line whole).

Standard library only at import; ``console`` is any object with rich's ``Console.print`` signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: rich ``Console.print`` keywords that print text as it is
_LITERAL = {"markup": False, "emoji": False, "highlight": False, "soft_wrap": True}


def print_line(console: Any, text: object) -> None:
    """Print ``text`` on ``console`` as it is (see the module docstring); plain ``print`` without a console."""
    if console is None:
        print(text)
    else:
        console.print(str(text), **_LITERAL)


def line_printer(console: Any) -> Callable[[object], None]:
    """A ``log(text)`` callable for code that reports progress lines: :func:`print_line` on ``console``."""
    return lambda text: print_line(console, text)
