"""grae.eval.nucleus: top-p by ``topk`` with a sort fallback keeps the tokens transformers' warper keeps."""

from __future__ import annotations

import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from transformers import TopPLogitsWarper

from grae.eval import nucleus
from grae.eval.nucleus import nucleus_filter, nucleus_keep


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
    expected, margin = definition_keep(scores, top_p)
    assume(margin > 1e-5)  # float rounding may decide a token whose mass-above is top_p itself
    assume(scores.unique().numel() == scores.numel())  # tied probabilities at the boundary: either may stay
    kept = nucleus_keep(scores, top_p, candidates)
    assert torch.equal(kept, expected)
    transformers_kept = TopPLogitsWarper(top_p)(None, scores.clone()) > float("-inf")
    assert torch.equal(kept, transformers_kept)
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
