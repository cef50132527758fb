"""Nucleus (top-p) filtering without sorting the whole vocabulary at every decoding step.

Top-p sampling (Holtzman et al., "The Curious Case of Neural Text Degeneration", ICLR 2020) keeps the
most probable tokens until their mass reaches ``top_p``: a token is kept iff the mass of the tokens
more probable than it is below ``top_p`` (the most probable token is always kept). This is the rule of
transformers' ``TopPLogitsWarper``, which sorts all ``V`` logits in ascending order and drops the
tokens whose ascending cumulative probability is ≤ 1 − top_p.

Sorting ``V`` = 49,152 logits per sequence per step cost about 14 % of a decoding step of
SmolLM2-135M on a 2-core CPU (``bench/bench_top_p.py``: 218 → 187 ms per step without it).
The nucleus of a trained model is almost always a few dozen tokens, so the
fast path takes the ``candidates`` most probable tokens (``topk`` of the logits) and decides there.

**The same kept set as the warper, ties included.** The two rules are one rule in exact arithmetic (the
warper removes a token iff the ascending mass up to and including it is ≤ 1 − top_p, i.e. iff the mass above
it is ≥ top_p), but they differ in two places, and a row where either could matter is handed to
``TopPLogitsWarper`` itself (:func:`_sorted_keep`; every other row keeps the fast decision):

* **Tied logits at the boundary.** bf16 logits tie often. The warper orders equal logits as ``torch.sort``
  leaves them (not by index: the CPU sort is not stable on a 49,152-token row), ``topk`` orders them its own
  way, so when the last kept token and the first dropped one have the same logit the two keep different
  members of the tie. Example: ``z = [3, 2, 2, 2, 1, 1, 0, 0, 0, 0, −5, −5]``, top_p = 0.5: the warper keeps
  {0, 3}, the ``topk`` order alone would keep {0, 1}.
* **Float rounding at the boundary.** The two sum the probabilities in opposite orders, so a token whose
  mass above lies within :data:`BOUNDARY_MARGIN` of top_p is decided by the warper's own sums.

A row whose candidates' mass does not reach ``top_p`` + margin, or whose nucleus takes every candidate (the
nucleus may reach past them, or tie with the first token past them), also goes to the warper. The tie order
of ``torch.sort`` depends on the row alone, not on the other rows of the batch
(checked on 64 bf16-rounded rows of 49,152 logits at 1 and 2 threads), so sorting only the handed-over rows
keeps what the warper keeps on the whole batch. ``tests/test_nucleus.py`` checks the kept sets against the
warper on thousands of bf16-rounded rows.
"""

from __future__ import annotations

#: tokens examined before falling back to the full sort
NUCLEUS_CANDIDATES = 256

#: a token whose probability mass above it lies within this of top_p is decided by the warper's own sums: far
#: above the float32 rounding of a sum of probabilities that add to 1 (~1e-6), far below a token's usual mass
BOUNDARY_MARGIN = 1e-4


def _sorted_keep(scores, top_p: float):
    """The tokens transformers' ``TopPLogitsWarper`` keeps (the warper itself: full ascending sort).
    ``scores``: ``[R, V]``."""
    from transformers import TopPLogitsWarper

    return TopPLogitsWarper(top_p)(None, scores) != float("-inf")


def nucleus_keep(scores, top_p: float, candidates: int = NUCLEUS_CANDIDATES):
    """Boolean mask ``[..., V]`` of the tokens top-p sampling keeps from ``scores`` (logits already
    divided by the temperature): exactly ``TopPLogitsWarper``'s (module docstring). ``top_p`` in (0, 1];
    1 keeps every token."""
    import torch

    if top_p >= 1.0:
        return torch.ones_like(scores, dtype=torch.bool)
    vocab = scores.shape[-1]
    rows = scores.reshape(-1, vocab)  # [R, V]
    k = min(candidates, vocab)
    top_scores, top_ids = rows.topk(k, dim=-1)  # [R, k], most probable first
    top_probs = rows.softmax(dim=-1).gather(-1, top_ids)  # [R, k]
    cumulative = top_probs.cumsum(dim=-1)  # [R, k]
    mass_above = torch.cat([torch.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], dim=-1)  # [R, k]
    keep_top = mass_above < top_p  # [R, k], a prefix of each row (the first is always kept)
    kept = keep_top.sum(dim=-1, keepdim=True)  # [R, 1], ≥ 1
    first_dropped = kept.clamp(max=k - 1)
    tie = (kept < k) & (top_scores.gather(-1, kept - 1) == top_scores.gather(-1, first_dropped))  # [R, 1]
    close = ((mass_above - top_p).abs() <= BOUNDARY_MARGIN).any(dim=-1, keepdim=True)  # [R, 1]
    # the nucleus may reach past the candidates, or end at the last one (whose tie with the next is not seen)
    beyond = ((cumulative[:, -1:] < top_p + BOUNDARY_MARGIN) | (kept == k)) if k < vocab else torch.zeros_like(tie)
    keep = torch.zeros_like(rows, dtype=torch.bool).scatter(-1, top_ids, keep_top)  # [R, V]
    warper_rows = (tie | close | beyond).squeeze(-1).nonzero().squeeze(-1)  # [W]
    if warper_rows.numel():
        keep[warper_rows] = _sorted_keep(rows[warper_rows], top_p)
    return keep.reshape(scores.shape)


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


def nucleus_logprobs(logits, temperature: float, top_p: float):
    """Log-probabilities of the sampling distribution: ``logits / T``, then top-p exactly as
    :class:`grae.eval.backends.HFSampler` applies it (:func:`nucleus_filter`),
    renormalised. ``logits``: ``[..., V]``; dropped tokens get −inf."""
    import torch

    scores = nucleus_filter(logits.float() / temperature, top_p)
    return torch.log_softmax(scores, dim=-1)
