"""The embedded tiny default model: a few-million-parameter Llama built locally.

``tiny_model_path()`` / ``load_tiny()`` give the shipped checkpoint; ``build_tiny()``
regenerates it (``grae tiny build``).  Recipe and measurements: ``docs/tiny.md``.
"""

from __future__ import annotations

from pathlib import Path

from grae.presets import tiny_model_path, tiny_vlm_path  # the shipped checkpoints' directories

from .build import TinyRecipe, build_tiny, train_tokenizer
from .cli import main
from .evaluate import evaluate_passk
from .tasks import DEFAULT_TASK, DEFAULT_TASK_KWARGS, HELDOUT_SEED, TinyTask, format_prompt

__all__ = ["TinyRecipe", "build_tiny", "main", "train_tokenizer", "evaluate_passk",
           "tiny_model_path", "tiny_vlm_path", "load_tiny", "DEFAULT_TASK", "DEFAULT_TASK_KWARGS", "HELDOUT_SEED",
           "TinyTask", "format_prompt"]


def load_tiny(path: str | Path | None = None, *, dtype=None):
    """Return ``(model, tokenizer)`` for the shipped (or given) tiny checkpoint, in float32 by default."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path) if path is not None else tiny_model_path()
    tok = AutoTokenizer.from_pretrained(p)
    model = AutoModelForCausalLM.from_pretrained(p, dtype=dtype or torch.float32)
    model.eval()
    return model, tok
