"""Command lines made of a helper's default flags and one test's own: ``grae train`` refuses a key given twice on
the command line (``grae.cli.train_cmd.refuse_given_twice``), so a flag the test gives replaces the default that
names the same key, in any spelling ``grae train`` reads as that key (``--max-steps`` and ``--max_steps``,
``--trl.learning_rate 1e-4`` and ``--trl.learning_rate=1e-4``)."""

from __future__ import annotations

from collections.abc import Sequence


def flag_key(token: str) -> str | None:
    """The config key ``token`` gives as ``grae train`` reads it; None for a token that is not a flag."""
    if not token.startswith("--") or len(token) == 2:
        return None
    head, dot, rest = token[2:].split("=", 1)[0].partition(".")
    return head.replace("-", "_") + dot + rest


def _flags(args: Sequence[str]) -> list[tuple[str | None, list[str]]]:
    """``args`` cut into (key, tokens): a flag with its value (the next token unless it is a flag itself, as
    ``grae train`` reads it), a flag alone, or a token that is not a flag (key None)."""
    out, i = [], 0
    while i < len(args):
        key = flag_key(args[i])
        if key is not None and "=" not in args[i] and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((key, list(args[i:i + 2])))
            i += 2
        else:
            out.append((key, [args[i]]))
            i += 1
    return out


def with_flags(defaults: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``defaults`` without each flag (and its value) whose key ``extra`` gives too, then ``extra``: every key once."""
    given = {key for key, _ in _flags(extra) if key is not None}
    kept = [token for key, tokens in _flags(defaults) if key not in given for token in tokens]
    return [*kept, *extra]
