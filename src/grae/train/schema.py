"""The ``grae train`` config schema as a list of keys, for ``grae train --help``.

Generated, never written by hand: grae's keys are the fields of :class:`grae.train.config.TrainConfig`
and its nested dataclasses (help from a field's ``metadata["help"]`` or its ``#:`` comment, the
autodoc convention this package uses), and the ``trl.`` keys are ``trl.GRPOConfig``'s fields with
TRL's own ``metadata["help"]``. A field added to any of these dataclasses appears here by itself.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    """One config key: dotted name, type, default and help text."""

    name: str
    type: str
    default: Any
    help: str


def field_comments(cls: type) -> dict[str, str]:
    """``#:`` comments above each field of a dataclass, read from its source ({} if unavailable)."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            comments[match.group(1)] = " ".join(pending)
        pending = []
    return comments


def _type_name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("NoneType", "None")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def dataclass_keys(cls: type, prefix: str = "") -> list[Key]:
    """Every leaf key of dataclass ``cls`` (nested dataclasses expanded), in declaration order."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    keys: list[Key] = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name, f.type)
        if dataclasses.is_dataclass(hint):
            keys += dataclass_keys(hint, f"{prefix}{f.name}.")  # type: ignore[arg-type]
            continue
        help_text = f.metadata.get("help") or comments.get(f.name, "")
        keys.append(Key(f"{prefix}{f.name}", _type_name(hint), _default(f), " ".join(help_text.split())))
    return keys


def config_keys() -> list[Key]:
    """grae's keys, then the ``trl.`` keys (GRPOConfig's fields that grae does not set itself)."""
    from trl import GRPOConfig

    from grae.train.config import MANAGED_TRL_KEYS, TrainConfig

    grae_keys = [k for k in dataclass_keys(TrainConfig) if k.name != "trl"]
    trl_keys = [Key(f"trl.{k.name[len('trl.'):]}", k.type, k.default, k.help) for k in dataclass_keys(GRPOConfig, "trl.")
                if k.name[len("trl."):] not in MANAGED_TRL_KEYS]
    return grae_keys + trl_keys


def format_keys(width: int = 100) -> str:
    """Plain-text key listing: ``--key (type, default …)`` then the help, indented."""
    import textwrap

    def block(keys: list[Key]) -> list[str]:
        out = []
        for k in keys:
            out.append(f"  --{k.name}  ({k.type}, default {k.default!r})")
            if k.help:
                out += textwrap.wrap(k.help, width, initial_indent="      ", subsequent_indent="      ")
        return out

    keys = config_keys()
    grae_keys = [k for k in keys if not k.name.startswith("trl.")]
    trl_keys = [k for k in keys if k.name.startswith("trl.")]
    return "\n".join([
        "Config keys (YAML or --key value; a flag without a value is true):", *block(grae_keys), "",
        "TRL keys (trl.GRPOConfig; also accepted flat, --learning_rate = --trl.learning_rate; "
        "output_dir, max_steps, seed and save_steps are grae's keys above):", *block(trl_keys),
    ])
