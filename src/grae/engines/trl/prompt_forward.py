"""The policy's forward pass over a GRPO batch with each group's prompt computed once.

TRL's loss, and its old and reference log-probs, run the model over ``[B, P + T]`` (``_get_per_token_logps_and_
entropies``): each of a prompt's G copies recomputes the prompt, forward and backward. Here the prompt prefix
(every prompt token but the last) runs once per run of identical prompt rows (:func:`grae.eval.prefill.prompt_runs`),
its key/value cache — with its autograd graph — is copied to the run's rows (``Cache.batch_select_indices``, an
index whose backward sums the copies' gradients), and the model then runs over ``[B, 1 + T]`` (the last prompt
token and the completion) attending to that cache::

    full        [B, P + T]   → hidden states at P − 1 … P + T − 2 → log-probs of the T completion tokens
    shared      [U, P − 1]   → cache ─copy→ [B, P − 1] ; [B, 1 + T] → the same hidden states

The completion's log-probs are the same function of the same numbers: the same tokens, mask and positions (a
model given no position ids counts them from the cache's length, as the full pass counts them from 0), the same
LM head (TRL's fused one, called as TRL calls it). Only float rounding differs. With P ≈ 50 and T = 48 (the
smollm2 recipe, G = 8) the pass covers 2·49 + 16·49 tokens instead of 16·98, and its activations shrink alike.

It stands aside (TRL's pass runs) where it does not apply: no repeated prompt, multimodal inputs, a MoE auxiliary
loss, gradient checkpointing (no cache in training), PEFT or a wrapped (DDP/FSDP/DeepSpeed) model, sliding-window
or non-attention layers, or a model without TRL's fused head.
"""

from __future__ import annotations

from typing import Any


def _applies(model: Any, unwrapped: Any) -> bool:
    config = getattr(model, "config", None)
    if model is not unwrapped or config is None or getattr(model, "is_gradient_checkpointing", False):
        return False
    text = config.get_text_config(decoder=True)
    layers = getattr(text, "layer_types", None) or ["full_attention"]
    backbone = getattr(model, "base_model", model)
    code = getattr(getattr(model.forward, "__func__", model.forward), "__code__", None)
    fused = code is not None and "fused_lm_head" in code.co_varnames  # TRL's add_fused_lm_head patched the forward
    return (fused and backbone is not model and not getattr(config, "is_encoder_decoder", False)
            and set(layers) == {"full_attention"} and not getattr(text, "use_sliding_window", False))


def shared_prompt_logps(model: Any, unwrapped: Any, input_ids, attention_mask, logits_to_keep: int, *,
                        compute_entropy: bool, autocast: Any):
    """``(logps [B, T], entropies [B, T] or None)`` as TRL's ``_get_per_token_logps_and_entropies`` returns them
    (``T = logits_to_keep``), or None where the shared pass does not apply (module docstring). ``unwrapped``:
    the accelerator's unwrapped model (the pass runs only when ``model`` is it)."""
    from grae.eval.prefill import new_cache, prompt_runs

    width = input_ids.size(1) - logits_to_keep  # P, the padded prompt width
    if width < 2 or not _applies(model, unwrapped):
        return None
    first, owner = prompt_runs(input_ids[:, :width], attention_mask[:, :width])
    if first.numel() == input_ids.size(0):
        return None
    cache = new_cache(model)
    labels = input_ids[:, width - 1:].masked_fill(attention_mask[:, width - 1:] == 0, -100)  # [B, 1 + T]
    labels[:, 0] = -100  # the last prompt token is input only
    with autocast:
        model.base_model(input_ids=input_ids[first, :width - 1], attention_mask=attention_mask[first, :width - 1],
                         past_key_values=cache, use_cache=True)  # [U, P - 1] into the cache
        cache.batch_select_indices(owner)  # [U, ...] -> [B, ...], differentiable
        out = model(input_ids=input_ids[:, width - 1:], attention_mask=attention_mask, past_key_values=cache,
                    labels=labels, fused_lm_head=True)
    return out.log_probs[:, -logits_to_keep:], (out.entropy[:, -logits_to_keep:] if compute_entropy else None)
