"""grae's grouped decoding attention (grae.eval.gqa) computes what transformers' SDPA computes with its
repeated key/value heads, and the HF sampler draws the same tokens with it."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from grae.eval import gqa
from tolerances import assert_close_scaled  # noqa: E402


def _module(groups: int, training: bool = False) -> types.SimpleNamespace:
    return types.SimpleNamespace(num_key_value_groups=groups, training=training, is_causal=True)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), kv_heads=st.integers(1, 3), groups=st.integers(2, 4), keys=st.integers(1, 9),
       head_dim=st.sampled_from([4, 8]), masked=st.booleans(), seed=st.integers(0, 10_000), training=st.booleans())
def test_one_query_token_equals_sdpa_with_repeated_heads(batch, kv_heads, groups, keys, head_dim, masked, seed,
                                                         training):
    """Also in training mode (TRL generates rollouts so) when the attention has no dropout."""
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, kv_heads * groups, 1, head_dim, generator=gen)  # [B, H, 1, D]
    key = torch.randn(batch, kv_heads, keys, head_dim, generator=gen)  # [B, H_kv, S, D]
    value = torch.randn(batch, kv_heads, keys, head_dim, generator=gen)
    mask = None
    if masked:  # left padding: each row attends to a suffix of at least one key
        first = torch.randint(0, keys, (batch,), generator=gen)
        mask = (torch.arange(keys)[None, :] >= first[:, None])[:, None, None, :]  # [B, 1, 1, S]
    scale = head_dim ** -0.5
    ours, _ = gqa.gqa_decode_attention(_module(groups, training), query, key, value, mask, scaling=scale)
    theirs, _ = sdpa_attention_forward(_module(groups, training), query, key, value, mask, scaling=scale)
    assert ours.shape == theirs.shape == (batch, 1, kv_heads * groups, head_dim)
    assert_close_scaled(ours, theirs, rel=1e-5)  # a weighted sum of values: rounding scales with them


def test_prefill_and_ungrouped_heads_go_through_transformers_sdpa():
    query, key = torch.randn(2, 6, 5, 8), torch.randn(2, 3, 5, 8)
    ours, _ = gqa.gqa_decode_attention(_module(2), query, key, key, None, scaling=0.3)
    theirs, _ = sdpa_attention_forward(_module(2), query, key, key, None, scaling=0.3)
    assert torch.equal(ours, theirs)


def _llama(tmp_path, kv_heads: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {chr(ord("a") + i): i + 2 for i in range(26)} | {"<pad>": 0, "<eos>": 1, " ": 28}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=29, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
                         num_key_value_heads=kv_heads, max_position_embeddings=128, pad_token_id=0, eos_token_id=1,
                         bos_token_id=None, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval()
    model.lm_head.weight.data *= 8  # peaked enough that a wrong attention changes the draws
    return model, tokenizer


@pytest.mark.parametrize("kv_heads", [2, 6])
def test_hf_sampler_draws_what_generate_draws_on_a_grouped_query_model(tmp_path, monkeypatch, kv_heads):
    from grae.eval import HFSampler, SamplingSettings

    model, tokenizer = _llama(tmp_path, kv_heads)
    calls = []
    attention = gqa.gqa_decode_attention
    monkeypatch.setattr(gqa, "gqa_decode_attention", lambda *a, **k: calls.append(1) or attention(*a, **k))
    prompts = ["abc", "hello world how are you"]  # different lengths: left padding, so a mask
    ours = HFSampler(model, tokenizer, SamplingSettings(temperature=1.0, top_p=0.95, max_tokens=10)).generate(
        prompts, 3, seed=4)
    assert model.config._attn_implementation == "sdpa"  # restored
    tokenizer.padding_side = "left"
    enc = tokenizer([p for p in prompts for _ in range(3)], return_tensors="pt", padding=True)
    torch.manual_seed(4)
    out = model.generate(**enc, max_new_tokens=10, do_sample=True, temperature=1.0, top_p=0.95, top_k=0,
                         pad_token_id=0, eos_token_id=1)
    theirs = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert [text for group in ours for text in group] == theirs
    assert len(set(theirs)) > 1
    assert (len(calls) > 0) == (kv_heads < 6)  # grouped heads switch, ungrouped ones stay on SDPA
