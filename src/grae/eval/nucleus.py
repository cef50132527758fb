"""Nucleus (top-p) filtering without sorting the whole vocabulary at every decoding step.

Top-p sampling (Holtzman et al., "The Curious Case of Neural Text Degeneration", ICLR 2020) keeps the
most probable tokens until their mass reaches ``top_p``: a token is kept iff the mass of the tokens
more probable than it is below ``top_p`` (the most probable token is always kept). This is the rule of
transformers' ``TopPLogitsWarper``, which sorts all ``V`` logits in ascending order and drops the
tokens whose ascending cumulative probability is ≤ 1 − top_p.

Sorting ``V`` = 49,152 logits per sequence per step cost about 14 % of a decoding step of
SmolLM2-135M on a 2-core CPU (``bench/bench_top_p.py``: 218 → 187 ms per step without it).
The nucleus of a trained model is almost always a few dozen tokens, so the
fast path takes the ``candidates`` most probable tokens (``topk``) and decides there; when their mass
does not reach ``top_p`` for some row, the whole call falls back to the full sort. Both paths give the
same kept set except where float rounding decides the boundary token (the two sum the probabilities in
opposite orders) or where tied probabilities straddle the boundary.
"""

from __future__ import annotations

#: tokens examined before falling back to the full sort
NUCLEUS_CANDIDATES = 256


def _sorted_keep(scores, top_p: float):
    """transformers' ``TopPLogitsWarper`` rule over the full ascending sort. ``scores``: ``[..., V]``."""
    import torch

    sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
    ascending_mass = sorted_scores.softmax(dim=-1).cumsum(dim=-1)  # [..., V]
    remove_sorted = ascending_mass <= (1 - top_p)
    remove_sorted[..., -1] = False  # the most probable token is always kept
    return ~remove_sorted.scatter(-1, order, remove_sorted)


def nucleus_keep(scores, top_p: float, candidates: int = NUCLEUS_CANDIDATES):
    """Boolean mask ``[..., V]`` of the tokens top-p sampling keeps from ``scores`` (logits already
    divided by the temperature). ``top_p`` in (0, 1]; 1 keeps every token."""
    import torch

    if top_p >= 1.0:
        return torch.ones_like(scores, dtype=torch.bool)
    k = min(candidates, scores.shape[-1])
    probs = scores.softmax(dim=-1)  # [..., V]
    top_probs, top_ids = probs.topk(k, dim=-1)  # [..., k], most probable first
    cumulative = top_probs.cumsum(dim=-1)  # [..., k]
    if k < scores.shape[-1] and bool((cumulative[..., -1] < top_p).any()):
        return _sorted_keep(scores, top_p)  # some nucleus reaches past the candidates
    mass_above = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)  # [..., k]
    keep_top = mass_above < top_p
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top_ids, keep_top)


def nucleus_filter(scores, top_p: float, candidates: int = NUCLEUS_CANDIDATES):
    """``scores`` with the tokens outside the nucleus set to −inf (what a logits warper returns)."""
    if top_p >= 1.0:
        return scores
    return scores.masked_fill(~nucleus_keep(scores, top_p, candidates), float("-inf"))


def temperature_nucleus_warper(temperature: float, top_p: float, candidates: int = NUCLEUS_CANDIDATES):
    """A transformers ``LogitsProcessor`` doing what ``generate(temperature=T, top_p=p)`` does (divide the
    logits by T, then top-p), with the fast top-p. Pass it as ``logits_processor=[...]`` together with
    ``temperature=1.0, top_p=1.0`` so that ``generate`` adds neither warper itself: custom processors
    run before ``generate``'s own warpers, so the temperature has to be applied here, first."""
    from transformers import LogitsProcessor

    class TemperatureNucleusWarper(LogitsProcessor):
        def __call__(self, input_ids, scores):  # scores: [B, V]
            return nucleus_filter(scores / temperature, top_p, candidates)

    return TemperatureNucleusWarper()
