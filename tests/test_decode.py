"""grae's sampling loop (grae.eval.decode, grae.eval.prefill) draws what transformers' generate draws: with each
run of identical prompts prefilled once or not, finished rows leaving the batch or not, on a grouped-query model
(grae's grouped decoding) and an ungrouped one, top-p through the top-k nucleus or transformers' sort."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from grae.eval import decode as dec
from grae.eval import gqa, prefill
from test_gqa import _llama
from tolerances import assert_close_scaled  # noqa: E402

EOS = [1, 2, 3, 4]  # several end tokens: rows end at different steps, so rows leave mid-call
PROMPTS = ["abc", "abc", "abc", "hello world how are you", "hello world how are you", "xyz q", "xyz q", "xyz q"]


def _encode(tokenizer, prompts):
    tokenizer.padding_side = "left"
    return tokenizer(prompts, return_tensors="pt", padding=True)


def _generate(model, enc, seed, **kwargs):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(**enc, pad_token_id=0, eos_token_id=EOS, **kwargs)


def _decode(model, enc, seed, sampling, max_new_tokens, eos=EOS, **kwargs):
    torch.manual_seed(seed)
    with torch.no_grad():
        return dec.decode(model, enc["input_ids"], enc["attention_mask"], sampling, max_new_tokens=max_new_tokens,
                          eos_token_ids=eos, pad_token_id=0, **kwargs)


def _ends(sequences, width):
    """``[B]`` the number of tokens each row drew up to and including its end (the whole budget if none)."""
    new = sequences[:, width:]  # [B, T]
    ended = torch.isin(new, torch.tensor(EOS))
    return torch.where(ended.any(1), ended.int().argmax(1) + 1, new.shape[1])


@pytest.fixture(scope="module", params=[2, 6], ids=["grouped", "ungrouped"])
def llama(request, tmp_path_factory):
    return (*_llama(tmp_path_factory.mktemp("m"), request.param), request.param)


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_same_tokens_as_generate_with_sharing_and_leaving_on_and_off(llama, monkeypatch, top_p):
    model, tokenizer, kv_heads = llama
    enc = _encode(tokenizer, PROMPTS)
    width = enc["input_ids"].shape[1]
    grouped, selects = [], []
    attention = gqa.gqa_decode_attention
    monkeypatch.setattr(gqa, "gqa_decode_attention", lambda *a, **k: grouped.append(1) or attention(*a, **k))
    for seed in range(3):
        theirs = _generate(model, enc, seed, max_new_tokens=12, do_sample=True, temperature=0.9, top_p=top_p, top_k=0)
        ends = _ends(theirs, width)
        assert len(set(ends.tolist())) > 2  # rows end at different steps
        for share, leave in itertools.product([True, False], repeat=2):
            chosen = DynamicCache.batch_select_indices
            monkeypatch.setattr(DynamicCache, "batch_select_indices",
                                lambda self, idx, chosen=chosen: selects.append(idx.numel()) or chosen(self, idx))
            selects.clear()
            ours = _decode(model, enc, seed, dec.Sampling(temperature=0.9, top_p=top_p), 12, share_prefill=share,
                           rows_leave=leave)
            assert torch.equal(ours.sequences, theirs), (seed, share, leave)
            # sharing expands 3 prompts to 8 rows once; leaving narrows the batch below 8 rows
            assert (8 in selects) == share and any(n < 8 for n in selects) == leave
    assert bool(grouped) == (kv_heads < 6)


def test_transformers_paths_and_other_warpers_draw_the_same(llama):
    """``fast=False`` (SDPA with copied heads, transformers' top-p sort), and top-k, min-p, a repetition penalty
    and greedy decoding, each planned from the GenerationConfig generate would merge."""
    from transformers import GenerationConfig

    model, tokenizer, _ = llama
    enc = _encode(tokenizer, PROMPTS)
    cases = [dict(do_sample=True, temperature=0.7, top_p=0.8, top_k=0),
             dict(do_sample=True, temperature=1.3, top_k=5, min_p=0.05, repetition_penalty=1.3),
             dict(do_sample=False, repetition_penalty=1.2)]
    for case, fast in itertools.product(cases, [True, False]):
        plan = dec.plan_of(model, GenerationConfig(max_new_tokens=10, pad_token_id=0, eos_token_id=EOS, **case))
        assert plan is not None and plan.max_new_tokens == 10 and plan.eos_token_ids == tuple(EOS)
        theirs = _generate(model, enc, 5, max_new_tokens=10, **case)
        ours = _decode(model, enc, 5, plan.sampling, 10, fast=fast)
        assert torch.equal(ours.sequences, theirs), (case, fast)


def test_plan_refuses_what_the_loop_does_not_do_and_merges_the_model_config(llama):
    from transformers import GenerationConfig

    model, _, _ = llama
    base = dict(max_new_tokens=8, pad_token_id=0, eos_token_id=1, do_sample=True)
    for other in [dict(num_beams=2), dict(min_new_tokens=3), dict(no_repeat_ngram_size=2), dict(typical_p=0.5),
                  dict(cache_implementation="static"), dict(bad_words_ids=[[5]]), dict(num_return_sequences=2)]:
        assert dec.plan_of(model, GenerationConfig(**base, **other)) is None, other
    saved = model.generation_config.repetition_penalty
    model.generation_config.repetition_penalty = 1.5  # unset in the call: generate takes the model's
    try:
        plan = dec.plan_of(model, GenerationConfig(**base))
    finally:
        model.generation_config.repetition_penalty = saved
    assert plan.sampling.repetition_penalty == 1.5 and plan.sampling.top_k == 50  # transformers' default top-k
    assert plan.pad_token_id == 0


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=6))
def test_prompt_runs_find_consecutive_identical_rows(runs):
    rows = [prompt for prompt, count in runs for _ in range(count)]
    ids = torch.tensor([[p, p + 1, 7] for p in rows])  # [B, 3]
    mask = torch.ones_like(ids)
    first, owner = prefill.prompt_runs(ids, mask)
    starts = [i for i in range(len(rows)) if i == 0 or rows[i] != rows[i - 1]]
    assert first.tolist() == starts
    assert torch.equal(ids[first][owner], ids)
    mask[0, 0] = 0  # the same tokens under another mask are another prompt
    if len(rows) > 1 and rows[1] == rows[0]:
        assert prefill.prompt_runs(ids, mask)[0].tolist()[:2] == [0, 1]


def test_shared_prefill_gives_each_row_its_own_prefill(llama):
    model, tokenizer, _ = llama
    enc = _encode(tokenizer, PROMPTS)
    with torch.no_grad():
        shared = prefill.prefill(model, enc["input_ids"], enc["attention_mask"], share=True)
        plain = prefill.prefill(model, enc["input_ids"], enc["attention_mask"], share=False)
    assert_close_scaled(shared[0], plain[0], rel=1e-5)  # [B, V] last-position logits
    for a, b in zip(shared[1].layers, plain[1].layers, strict=True):
        assert_close_scaled(a.keys, b.keys, rel=1e-5)
        assert_close_scaled(a.values, b.values, rel=1e-5)
    assert torch.equal(shared[2][3], torch.arange(enc["input_ids"].shape[1]))  # the longest prompt: no pad
    assert shared[2][0].tolist()[-3:] == [0, 1, 2] and shared[2][0, 0] == 0  # "abc": left padded, pads at 0


def test_finished_rows_keep_their_tokens_when_rows_leave(llama):
    """Every row's tokens up to its end are the same with rows leaving as without, over many seeds."""
    model, tokenizer, _ = llama
    enc = _encode(tokenizer, PROMPTS * 4)  # 32 rows
    width = enc["input_ids"].shape[1]
    sampling = dec.Sampling(temperature=1.0, top_p=0.95)
    for seed in range(20):
        stay = _decode(model, enc, seed, sampling, 16, rows_leave=False).sequences
        leave = _decode(model, enc, seed, sampling, 16, rows_leave=True).sequences
        ends = _ends(stay, width)
        for row, end in enumerate(ends.tolist()):
            assert torch.equal(leave[row, :width + end], stay[row, :width + end]), (seed, row)
            assert (leave[row, width + end:] == 0).all()


def _next_probs(model, rows):
    """``[N, V]`` float64 next-token probabilities after each row of token ids (all of one length)."""
    with torch.no_grad():
        return torch.softmax(model(input_ids=torch.tensor(rows)).logits[:, -1].double(), dim=-1)


def _exact_probabilities(model, prompt_ids, ends, steps):
    """``{completion: probability}`` of every completion of up to ``steps`` tokens (stopping at a token of
    ``ends`` or at the budget), by enumeration with teacher-forced forward passes at temperature 1."""
    out, frontier = {}, {(): 1.0}
    for _ in range(steps):
        grown = {}
        prefixes = list(frontier)
        for prefix, row in zip(prefixes, _next_probs(model, [prompt_ids + list(p) for p in prefixes]), strict=True):
            for token, p in enumerate(row.tolist()):
                seq, mass = prefix + (token,), frontier[prefix] * p
                (out if token in ends else grown)[seq] = mass
        frontier = grown
    out.update(frontier)
    return out


def _chi_square_p(counts: dict, probs: dict, min_expected: float = 5.0) -> float:
    """Pearson χ² p-value of ``counts`` against ``probs``; categories expected fewer than ``min_expected``
    times are pooled into one."""
    from scipy.stats import chi2

    total = sum(counts.values())
    big = [key for key, p in probs.items() if p * total >= min_expected]
    observed = [counts.get(key, 0) for key in big] + [total - sum(counts.get(key, 0) for key in big)]
    expected = [probs[key] * total for key in big] + [total * (1 - sum(probs[key] for key in big))]
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True) if e > 0)
    return float(chi2.sf(stat, len(observed) - 1))


def test_rows_leaving_draws_from_the_model_distribution(llama, monkeypatch):
    """Completions of up to 3 tokens drawn with rows leaving against the exact distribution by enumeration:
    Pearson χ² over the completions (p > 0.001). The end tokens are the most probable first tokens (over both
    prompts) holding about half the mass, so many rows leave after one step and the rest decode on a narrowed
    cache. The same check rejects draws compared with the other prompt's distribution."""
    model, tokenizer, _ = llama
    prompt, other = "hello world", "xyz q"
    ids, other_ids = tokenizer(prompt)["input_ids"], tokenizer(other)["input_ids"]
    first = _next_probs(model, [ids])[0] + _next_probs(model, [other_ids])[0]  # [V], mass 2
    order = [t for t in first.argsort(descending=True).tolist() if t != 0]
    ends = order[:1 + int((first[order].cumsum(0) < 0.9).sum())]
    probs = _exact_probabilities(model, ids, ends, 3)
    assert 0.3 < sum(p for seq, p in probs.items() if len(seq) == 1) < 0.8
    enc = _encode(tokenizer, [prompt] * 256 + [other] * 256)
    width = enc["input_ids"].shape[1]
    narrowed: list[int] = []  # cache length at each narrowing: the prompt's width = after the first token
    chosen = DynamicCache.batch_select_indices
    monkeypatch.setattr(DynamicCache, "batch_select_indices",
                        lambda self, idx: narrowed.append(self.get_seq_length()) or chosen(self, idx))
    counts: dict = {}
    for seed in range(40):
        seqs = _decode(model, enc, seed, dec.Sampling(), 3, eos=ends, rows_leave=True).sequences
        for row in seqs[:256, width:].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in ends), len(row))
            counts[tuple(row[:end])] = counts.get(tuple(row[:end]), 0) + 1
    assert narrowed.count(width) >= 30  # nearly every call narrowed its batch after the first token
    # (a mutant that hands the narrowed rows each other's cache rows, keep.flip(0), fails the next line at p < 1e-11)
    assert _chi_square_p(counts, probs) > 1e-3
    assert _chi_square_p(counts, _exact_probabilities(model, other_ids, ends, 3)) < 1e-6


def test_recorded_log_probs_are_the_teacher_forced_ones(llama):
    model, tokenizer, _ = llama
    enc = _encode(tokenizer, PROMPTS)
    width = enc["input_ids"].shape[1]
    out = _decode(model, enc, 2, dec.Sampling(temperature=0.8, top_p=0.9), 10, record_temperature=0.8)
    seqs, logps = out.sequences, out.logps  # [B, P + T], [B, T]
    mask = torch.cat([enc["attention_mask"], torch.ones_like(seqs[:, width:])], dim=1)  # [B, P + T]
    with torch.no_grad():
        logits = model(input_ids=seqs, attention_mask=mask, position_ids=prefill.prompt_position_ids(mask)).logits
    expected = torch.log_softmax(logits[:, width - 1:-1].float() / 0.8, dim=-1).gather(2, seqs[:, width:, None])[..., 0]
    ends = _ends(seqs, width)
    within = torch.arange(seqs.shape[1] - width)[None, :] < ends[:, None]  # [B, T] up to and including the end
    assert_close_scaled(logps[within], expected[within], rel=1e-4)
    assert (logps[~within] == 0).all() and math.isfinite(float(logps.sum()))


# every logits processor a TRL config reaches (GRPOConfig: temperature, top_p, top_k, min_p, repetition_penalty)
TRL_CASES = [dict(temperature=1.2, top_p=0.9, top_k=0, repetition_penalty=1.4),
             dict(temperature=0.8, top_k=6, top_p=0.95, min_p=0.02, repetition_penalty=0.8),
             dict(temperature=1.0, top_k=0, min_p=0.1, repetition_penalty=2.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_every_trl_processor_draws_what_generate_draws_as_rows_leave(llama, monkeypatch, dtype):
    """TRL's sampling settings with a repetition penalty, min-p, top-k and top-p, in fp32 and bf16, rows leaving
    and prompts shared: the same tokens as ``generate`` on the installed transformers. The prompts are left padded
    with the pad token (which is also a token the model draws), so the repetition penalty sees the padding: 5.23
    leaves it out (``prompt_ignore_length``), 5.10 to 5.22 penalise it, and the loop follows the installed one, its
    per-row state narrowed as rows leave (:func:`grae.eval.decode._narrowed`)."""
    from transformers import GenerationConfig

    model, tokenizer, _ = llama
    model = copy.deepcopy(model).to(dtype)  # the module's model stays float32
    enc = _encode(tokenizer, PROMPTS * 2)
    narrowings = []
    narrowed = dec._narrowed
    monkeypatch.setattr(dec, "_narrowed", lambda step, keep: narrowings.append(keep.numel()) or narrowed(step, keep))
    for case, seed in itertools.product(TRL_CASES, range(3)):
        plan = dec.plan_of(model, GenerationConfig(max_new_tokens=12, pad_token_id=0, eos_token_id=EOS,
                                                   do_sample=True, **case))
        assert plan is not None
        theirs = _generate(model, enc, seed, max_new_tokens=12, do_sample=True, **case)
        ours = _decode(model, enc, seed, plan.sampling, 12)
        assert torch.equal(ours.sequences, theirs), (case, seed, dtype)
    assert len(narrowings) > 10  # rows left the batch with the penalty on


def test_repetition_penalty_treats_the_left_padding_as_the_installed_transformers_does(llama):
    """What changed in 5.23 (``GenerationMixin._get_logits_processor`` passes each row's left-padding length to
    ``RepetitionPenaltyLogitsProcessor``): the loop's processors, built by transformers, penalise a pad token that
    is only in a row's padding before 5.23 and leave it alone from 5.23 on."""
    import transformers
    from packaging.version import Version

    model, tokenizer, _ = llama
    enc = _encode(tokenizer, ["abc", "hello world"])  # "abc" is left padded with the pad token 0
    (penalty,) = dec.Sampling(temperature=0.0, repetition_penalty=2.0).processors(model, enc["attention_mask"])
    scores = penalty(enc["input_ids"], torch.full((2, 29), 3.0))  # [2, V]
    assert scores[0, 2] == 1.5 and scores[0, 5] == 3.0  # "a" (2) is in the prompt, "d" (5) is not
    ignores_padding = Version(transformers.__version__) >= Version("5.23")
    assert float(scores[0, 0]) == (3.0 if ignores_padding else 1.5)


def test_outside_the_verified_transformers_generate_samples_and_it_is_said_once(llama, monkeypatch, caplog):
    import transformers
    from transformers import GenerationConfig

    model, _, _ = llama
    config = GenerationConfig(max_new_tokens=8, pad_token_id=0, eos_token_id=1, do_sample=True)
    assert dec.plan_of(model, config) is not None
    monkeypatch.setattr(dec, "_said", set())
    for version in ["5.24.0", "5.9.0", "5.24.0.dev0"]:
        monkeypatch.setattr(transformers, "__version__", version)
        with caplog.at_level("WARNING", logger="grae.eval.decode"):
            assert dec.plan_of(model, config) is None and dec.plan_of(model, config) is None
        said = [r.getMessage() for r in caplog.records if version in r.getMessage()]
        assert len(said) == 1 and "sampling with transformers' generate" in said[0], said
        caplog.clear()


def test_a_processor_the_loop_does_not_know_sends_the_call_to_generate(llama, monkeypatch, caplog):
    """A transformers that adds a processor for the loop's own settings (here: simulated by appending one) keeps
    the caller on ``generate``, said once."""
    from transformers import GenerationConfig, TypicalLogitsWarper

    model, _, _ = llama
    built = model._get_logits_processor
    monkeypatch.setattr(model, "_get_logits_processor",
                        lambda *a, **k: built(*a, **k) + [TypicalLogitsWarper(mass=0.9)], raising=False)
    monkeypatch.setattr(dec, "_said", set())
    with caplog.at_level("WARNING", logger="grae.eval.decode"):
        for _ in range(2):
            assert dec.plan_of(model, GenerationConfig(max_new_tokens=8, pad_token_id=0, eos_token_id=1,
                                                       do_sample=True)) is None
    assert [r.getMessage() for r in caplog.records if "TypicalLogitsWarper" in r.getMessage()] != []
    assert len(caplog.records) == 1


def test_the_verified_range_is_the_train_extras_transformers_bound():
    """pyproject.toml's ``train`` extra admits exactly the transformers releases the loop is verified on (its one
    transformers requirement; the ``verl`` extra bounds it through verl's own)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    first, end = dec.VERIFIED_TRANSFORMERS
    assert re.findall(r'"(transformers[^"]*)"', text) == [f"transformers>={first},<{end}"]
