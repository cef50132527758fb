"""grae.eval.nucleus: top-p by ``topk`` with a sort fallback keeps the tokens transformers' warper keeps, ties and
float rounding at the boundary included (bf16-rounded logits tie often)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from transformers import TopKLogitsWarper, TopPLogitsWarper

from grae.eval import nucleus
from grae.eval.decode import Sampling
from grae.eval.nucleus import nucleus_filter, nucleus_keep
from test_gqa import _llama


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A causal LM whose ``_get_logits_processor`` builds :meth:`Sampling.processors` (its weights are unused)."""
    return _llama(tmp_path_factory.mktemp("m"), 2)[0]


def processors(model, sampling: Sampling, rows: int, fast_nucleus: bool = True):
    return sampling.processors(model, torch.ones((rows, 1), dtype=torch.long), fast_nucleus=fast_nucleus)


def definition_keep(scores: torch.Tensor, top_p: float) -> tuple[torch.Tensor, float]:
    """Holtzman's rule in float64 from the definition: keep a token iff the mass of the tokens more
    probable than it is < top_p. Also returns how close any token's mass-above comes to top_p."""
    probs = scores.double().softmax(-1)
    above = (probs.unsqueeze(-1) < probs.unsqueeze(-2)).double()  # [B, V, V]: row token j beats token i
    mass_above = (above * probs.unsqueeze(-2)).sum(-1)  # [B, V]
    return mass_above < top_p, float((mass_above - top_p).abs().min())


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 4), vocab=st.sampled_from([2, 7, 40, 300]),
       spread=st.floats(0.1, 12.0), top_p=st.floats(0.05, 0.999), candidates=st.sampled_from([1, 4, 16, 256]))
@example(seed=0, rows=2, vocab=300, spread=0.2, top_p=0.95, candidates=16)  # flat: the nucleus passes the candidates
@example(seed=1, rows=3, vocab=300, spread=10.0, top_p=0.9, candidates=16)  # peaked: decided within them
def test_the_kept_tokens_are_the_nucleus_and_what_transformers_keeps(seed, rows, vocab, spread, top_p, candidates):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, vocab, generator=generator) * spread
    kept = nucleus_keep(scores, top_p, candidates)
    transformers_kept = TopPLogitsWarper(top_p)(None, scores.clone()) > float("-inf")
    assert torch.equal(kept, transformers_kept)
    expected, margin = definition_keep(scores, top_p)
    # the definition is the rule up to float rounding of a token whose mass-above is top_p itself, and up to
    # which member of a tie the sort keeps: where neither arises it is the kept set too
    assume(margin > 1e-5 and scores.unique().numel() == scores.numel())
    assert torch.equal(kept, expected)
    filtered = nucleus_filter(scores, top_p, candidates)
    assert torch.equal(filtered[kept], scores[kept]) and bool((filtered[~kept] == float("-inf")).all())
    assert bool(kept.any(-1).all())  # the most probable token is always kept


def _count_sorts(monkeypatch) -> list[int]:
    sorts: list[int] = []
    original = nucleus._sorted_keep

    def counting(scores, top_p):
        sorts.append(1)
        return original(scores, top_p)

    monkeypatch.setattr(nucleus, "_sorted_keep", counting)
    return sorts


def test_a_peaked_distribution_is_decided_without_sorting_and_a_flat_one_falls_back(monkeypatch):
    sorts = _count_sorts(monkeypatch)
    peaked = torch.full((2, 1000), -20.0)
    peaked[0, :3] = torch.tensor([5.0, 4.0, 1.0])
    peaked[1, 10:12] = 3.0 + torch.tensor([0.0, 0.5])
    kept = nucleus_keep(peaked, 0.9, candidates=8)
    assert sorts == []
    assert kept[0].nonzero().flatten().tolist() == [0, 1] and kept[1].nonzero().flatten().tolist() == [10, 11]
    flat = torch.linspace(0.0, 0.05, 1000).unsqueeze(0)  # the nucleus holds about half the vocabulary
    kept = nucleus_keep(flat, 0.5, candidates=8)
    assert torch.equal(kept, definition_keep(flat, 0.5)[0]) and 400 < int(kept.sum()) < 600
    assert sorts == [1]


def test_top_p_one_keeps_every_token_and_returns_the_scores_unchanged():
    scores = torch.randn(3, 50)
    assert bool(nucleus_keep(scores, 1.0).all()) and nucleus_filter(scores, 1.0) is scores


def warper_keep(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    return TopPLogitsWarper(top_p)(None, scores.clone()) != float("-inf")


def test_tied_logits_at_the_boundary_keep_the_warpers_member_of_the_tie():
    """A tie at the boundary: the warper keeps {0, 3} (the sort's order of the three 2s), the topk order {0, 1}."""
    z = torch.tensor([[3.0, 2, 2, 2, 1, 1, 0, 0, 0, 0, -5, -5]])
    assert warper_keep(z, 0.5)[0].nonzero().flatten().tolist() == [0, 3]
    for candidates in (4, 256):
        assert torch.equal(nucleus_keep(z, 0.5, candidates), warper_keep(z, 0.5))


def bf16_logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Logits as a bf16 model emits them, upcast to float32 (as ``generate`` does): a centre around 15 where bf16
    steps by 1/16, a spread that varies by row (peaked to flat), a few strong tokens per row; many exact ties."""
    generator = torch.Generator().manual_seed(seed)
    spread = torch.rand(rows, 1, generator=generator) * 3 + 0.5  # [R, 1]
    logits = 15 + torch.randn(rows, vocab, generator=generator) * spread  # [R, V]
    strong = torch.randint(0, vocab, (rows, 4), generator=generator)
    logits.scatter_add_(1, strong, torch.rand(rows, 4, generator=generator) * 8)
    return logits.bfloat16().float()


def straddling_ties(scores: torch.Tensor, kept: torch.Tensor) -> int:
    """Rows where a logit is both kept and dropped: the boundary cuts a tie, so the member kept is the sort's."""
    lowest_kept = scores.masked_fill(~kept, float("inf")).min(-1).values  # [R]
    highest_dropped = scores.masked_fill(kept, float("-inf")).max(-1).values  # [R]
    return int((lowest_kept == highest_dropped).sum())


@pytest.mark.parametrize("vocab, rows", [(1024, 2048), (49152, 48)], ids=["2048x1024", "48x49152"])
def test_bf16_rounded_logits_keep_exactly_the_warpers_tokens(model, vocab, rows):
    """Thousands of bf16-rounded rows, several top-p, top-k and temperatures, top-k and top-p combined in
    transformers' order: grae's processors (top-k warper, fast nucleus) keep exactly what transformers' warpers
    keep, on rows where the boundary cuts a tie too."""
    scores = bf16_logits(rows, vocab, seed=vocab)
    ties = 0
    for top_p in (0.5, 0.8, 0.95):
        for top_k in (0, 10, 50):
            for temperature in (1.0, 0.7):
                sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k)
                fast, stock = scores.clone(), scores.clone()
                for step in processors(model, sampling, rows, fast_nucleus=True):
                    fast = step(None, fast)
                for step in processors(model, sampling, rows, fast_nucleus=False):
                    stock = step(None, stock)
                assert torch.equal(fast, stock), (top_p, top_k, temperature)
                ties += straddling_ties(scores, stock != float("-inf"))
            assert torch.equal(nucleus_keep(scores, top_p), warper_keep(scores, top_p)), top_p
    assert ties > rows // 10  # the boundary cut a tie on many rows: the case the fast order alone got wrong


def test_top_k_ties_keep_every_token_tied_with_the_kth(model):
    """The top-k warper (grae's processors use transformers' own) keeps every token tied with the k-th logit."""
    scores = torch.tensor([[4.0, 3, 3, 3, 1, 0]])
    (top_k,) = processors(model, Sampling(top_k=2), 1)
    kept = top_k(None, scores.clone()) != float("-inf")
    assert kept[0].nonzero().flatten().tolist() == [0, 1, 2, 3]
    assert isinstance(top_k, TopKLogitsWarper)
