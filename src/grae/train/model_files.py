"""What ``grae train`` reads of a model before its weights: the config and the tokenizer.

:func:`tokenizer_problem` loads both from the local directory or the hub cache (never the network) and says in
one line why training would stop on them: no loadable tokenizer, or chat prompts for a tokenizer without a
chat template (TRL applies it to every conversational prompt). ``grae train`` stops on it before the run
directory is claimed, and ``--dry-run`` reports the same line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _local_files(model: str) -> str | None:
    """A directory ``from_pretrained`` reads without the network: the preset's, a local one, or the hub cache's
    snapshot of a hub id; None when the files are not here (the hub checks say so)."""
    from grae.presets import PRESETS, resolve_model

    if model in PRESETS:
        if model == "smollm2":
            from grae.presets import preset_problem

            if preset_problem(model):
                return None
        return resolve_model(model)
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser())
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - not a hub id
        return None
    return str(Path(found).parent) if isinstance(found, str) else None


def tokenizer_problem(model: str, chat_prompts: bool, load_kwargs: dict[str, Any] | None = None) -> str | None:
    """Why ``model``'s config or tokenizer cannot serve training (one line naming the key), or None; a model whose
    files are not here, or a vision-language model (its processor), is left to the other checks."""
    path = _local_files(model)
    if path is None:
        return None
    from transformers import AutoConfig, AutoTokenizer

    from grae.eval.backends import is_vision_language

    kwargs = dict(load_kwargs or {})
    try:
        if is_vision_language(AutoConfig.from_pretrained(path, **kwargs)):
            return None
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    except Exception as err:  # noqa: BLE001 - any loader failure is the line
        reason = " ".join(str(err).split())[:300]
        return f"model: {model!r} has no loadable config or tokenizer ({type(err).__name__}: {reason}); check the directory"
    if chat_prompts and not getattr(tokenizer, "chat_template", None):
        return (f"task.params.prompt_style: chat prompts need a chat template, and the tokenizer of {model!r} has none; "
                "set --task.params.prompt_style plain, or use a model with a chat template")
    return None
