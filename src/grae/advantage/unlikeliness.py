"""Unlikeliness reward: GRPO on rewards that fall with a correct sample's likelihood.

He, A. W., Fried, D. & Welleck, S., "Rewarding the Unlikely: Lifting GRPO Beyond Distribution
Sharpening", arXiv:2506.02355, §4 (the unlikeliness reward).

GRPO's update on a correct sample is ∝ π(y)·A: the likeliest correct proofs win (sharpening). The
unlikeliness reward ranks a group's correct samples by likelihood under the rollout policy and
lowers the reward of the likelier ones::

    r̃_i = r_i · (1 − β · (G − rank_i) / G)       for correct samples (r_i > 0), r̃_i = r_i otherwise

with G the group size and rank_i ∈ {0, …, c − 1} the position of sample i among the group's c correct
samples sorted by length-normalised log-prob, **most likely first** (rank 0 gets 1 − β, the least
likely 1 − β (G − c + 1)/G). The advantages are GRPO's on r̃ (Eq. 1's group normalisation).

Ties (equal log-probs) get the mean of the ranks they span, so the transform does not depend on the
order of samples in the batch. "Correct" means r_i > 0 (binary verifier reward); the paper's release
setting is β = 0.25.

Context: ``logprob_mean`` (length-normalised sequence log-prob under the rollout policy).
"""

from __future__ import annotations

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.grpo import check_std_params, grpo_advantages


def correct_ranks(logprob: torch.Tensor, correct: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``[N]`` rank of each correct sample among its group's correct samples, most likely = 0, ties
    averaged; 0 for the others. O(N²) pairwise comparison — N is one batch of rollouts."""
    same = (index[:, None] == index[None, :]) & correct[None, :] & correct[:, None]  # [N, N]
    above = (same & (logprob[None, :] > logprob[:, None])).sum(1).to(torch.float64)  # strictly likelier
    tied = (same & (logprob[None, :] == logprob[:, None])).sum(1).to(torch.float64)  # incl. itself
    return torch.where(correct, above + (tied - 1) / 2, 0.0)


@register("unlikeliness")
class Unlikeliness(Estimator):
    """Unlikeliness reward (He, Fried & Welleck 2025): correct r_i × (1 − β(G − rank_i)/G), rank 0 = likeliest correct; then GRPO.

    Args:
        beta: β_rank (paper release: 0.25); 0 is plain GRPO.
        eps, std_unbiased: GRPO's std convention.
    """

    requires = frozenset({"logprob_mean"})

    def __init__(self, *, beta: float = 0.25, eps: float = 1e-6, std_unbiased: bool = True):
        check(0 <= beta <= 1, "beta", f"must be in [0, 1] (paper: 0.25), got {beta}")
        check_std_params(eps, std_unbiased)
        self.beta, self.eps, self.std_unbiased = beta, eps, std_unbiased

    def compute(self, rewards, groups, *, logprob_mean):  # type: ignore[override]  # declared in `requires`
        correct = groups.valid & (rewards > 0)  # [N]
        rank = correct_ranks(logprob_mean, correct, groups.index)  # [N]
        size = groups.expand(groups.count)  # [N] G
        shaped = torch.where(correct, rewards * (1 - self.beta * (size - rank) / size), rewards)  # [N] r̃
        advantages = grpo_advantages(shaped, groups, eps=self.eps, std_unbiased=self.std_unbiased)
        return advantages, None, {"mean_shaped_correct": float(shaped[correct].mean()) if bool(correct.any()) else 0.0}
