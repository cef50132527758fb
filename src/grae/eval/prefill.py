"""The prompt prefill of a decoding call, computed once per group of identical prompts.

GRPO rollouts (TRL repeats each prompt ``G`` times in a row) and ``grae eval`` calls (``n`` samples of
each problem) hold every prompt several times. The prefill of a prompt is a pure function of its tokens
(no random numbers), so it is computed for the first copy of each run of identical rows only and its
key/value cache and last-position logits are copied to the other rows::

    rows       [B, P]   a a a b b c c c        (left padded; a run = consecutive equal rows, mask included)
    first      [U]      0     3   5            the row that is prefilled for each run
    owner      [B]      0 0 0 1 1 2 2 2        the run each row copies

The copy is ``Cache.batch_select_indices(owner)`` (``cache.keys[owner]``), which transformers' own
contrastive search uses. Position ids are the ones ``generate`` derives from the mask (left padding:
``cumsum(mask) − 1``, 0 on pads: ``GenerationMixin._prepare_position_ids_for_generation``), taken for
the ``U`` rows, so a copied row has exactly the keys and values its own prefill would have.
"""

from __future__ import annotations

import inspect
from typing import Any


def prompt_runs(input_ids, attention_mask):
    """``(first [U], owner [B])`` of the runs of consecutive identical rows of ``input_ids`` / ``attention_mask``
    (both ``[B, P]``); ``U == B`` when no two neighbouring rows are equal."""
    import torch

    same = (input_ids[1:] == input_ids[:-1]).all(dim=1) & (attention_mask[1:] == attention_mask[:-1]).all(dim=1)  # [B-1]
    starts = torch.cat([same.new_ones(1), ~same])  # [B] True where a run begins
    return starts.nonzero().squeeze(1), starts.long().cumsum(0) - 1


def prompt_position_ids(attention_mask):
    """``[B, P]`` the positions ``generate`` gives a left-padded prompt: ``cumsum(mask) − 1``, 0 on pads."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def new_cache(model: Any):
    """An empty ``DynamicCache`` laid out as ``generate`` lays it out for ``model`` (its layer types)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config.get_text_config(decoder=True))


def forward_kwargs(model: Any) -> dict[str, Any]:
    """What ``generate`` passes to every forward besides the inputs: ``use_cache`` and, where the model
    takes it, ``logits_to_keep=1`` (only the last position's logits)."""
    keep = "logits_to_keep" in inspect.signature(model.forward).parameters
    return {"use_cache": True, "return_dict": True, **({"logits_to_keep": 1} if keep else {})}


def prefill(model: Any, input_ids, attention_mask, *, share: bool = True):
    """``(logits [B, V] fp32, cache, position_ids [B, P])`` of the prompt, each run of identical rows
    prefilled once when ``share``. The cache holds ``B`` rows either way."""
    import torch

    positions = prompt_position_ids(attention_mask)  # [B, P]
    first, owner = prompt_runs(input_ids, attention_mask) if share else (None, None)
    shared = first is not None and first.numel() < input_ids.shape[0]
    rows = first if shared else slice(None)
    cache = new_cache(model)
    out = model(input_ids=input_ids[rows].contiguous(), attention_mask=attention_mask[rows],
                position_ids=positions[rows].contiguous(), past_key_values=cache, **forward_kwargs(model))
    logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)  # [U or B, V]
    if shared:
        out.past_key_values.batch_select_indices(owner)  # [U, ...] -> [B, ...]
        logits = logits[owner]  # [B, V]
    return logits, out.past_key_values, positions
