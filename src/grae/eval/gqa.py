"""Decoding attention for grouped-query models without expanding the KV cache (``grae eval``'s HF backend).

A grouped-query model (SmolLM2: 9 query heads, 3 key/value heads) shares each key/value head among
``G = num_attention_heads / num_key_value_heads`` query heads. transformers' SDPA attention copies every
key and value head ``G`` times (``repeat_kv``) whenever it is given an attention mask, and a left-padded
batch always gives one: each decoding step writes and reads the whole KV cache ``G``-fold, which on a CPU
costs more than the attention itself.

For a single query token the ``G`` query heads of a group can instead be passed to SDPA as ``G`` query
positions of their shared head, none of them causal::

    query [B, H, 1, D] -> [B, H_kv, G, D]    (head h = kv·G + g, the order repeat_kv uses)
    out = softmax(query · keyᵀ · scale + mask) · value    # [B, H_kv, G, D]
    out [B, H_kv, G, D] -> [B, 1, H, D]

the same numbers without the copy. Prefill and training (more than one query token), attention dropout
and models without grouped heads go through transformers' own SDPA function unchanged. A model in
training mode without attention dropout (TRL generates rollouts in training mode) decodes grouped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: the name under which the attention is registered with transformers
ATTENTION_NAME = "grae_gqa_decode"


def gqa_decode_attention(module: Any, query, key, value, attention_mask, dropout: float = 0.0,
                         scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any):
    """transformers' attention-function signature. query: [B, H, T, D]; key, value: [B, H_kv, S, D];
    attention_mask: [B, 1, T, S] boolean (True: attend) or None. Returns ([B, T, H, D], None)."""
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, head_dim = query.shape
    if groups == 1 or q_len != 1 or dropout:  # a module in training mode passes its dropout; 0 decodes alike
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    grouped = query.reshape(batch, key.shape[1], groups, head_dim)  # [B, H_kv, G, D]
    out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)  # [B, H_kv, G, D]
    return out.reshape(batch, heads, 1, head_dim).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, gqa_decode_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)  # the same masks as SDPA


def uses_grouped_sdpa(model: Any) -> bool:
    """A text-only model on transformers' SDPA attention with fewer key/value heads than query heads."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or hasattr(config, "vision_config"):
        return False
    heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    return bool(heads and kv_heads and kv_heads < heads) and hasattr(model, "set_attn_implementation")


@contextmanager
def gqa_decoding(model: Any) -> Iterator[bool]:
    """Within the block a grouped-query model on SDPA decodes with :func:`gqa_decode_attention`; any
    other model is left as it is. Yields whether it switched; SDPA is restored on the way out."""
    if not uses_grouped_sdpa(model):
        yield False
        return
    try:
        _register()
        model.set_attn_implementation(ATTENTION_NAME)
    except (ImportError, AttributeError, TypeError, ValueError):  # a transformers or a model without custom attention
        yield False
        return
    try:
        yield True
    finally:
        model.set_attn_implementation("sdpa")
