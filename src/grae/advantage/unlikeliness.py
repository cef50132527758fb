"""Unlikeliness reward: GRPO on rewards that fall with a sample's likelihood within its group.

He, A. W., Fried, D. & Welleck, S., "Rewarding the Unlikely: Lifting GRPO Beyond Distribution
Sharpening", arXiv:2506.02355, §4 (the unlikeliness reward); released code
AndreHe02/rewarding-unlikely-release (verl fork).

GRPO's update on a correct sample is ∝ π(y)·A: the likeliest correct proofs win (sharpening). The
unlikeliness reward ranks a group's samples by likelihood under the rollout policy and lowers the
reward of the likelier ones, then takes GRPO's advantage (Eq. 1's group normalisation, unbiased std,
ε = 1e-6) of the shaped rewards r̃.

``rank_over="group"`` (default) — **the authors' release**. Every sample of the group is ranked by its
length-normalised log-prob, least likely first (the release's ``argsort(argsort(logp)) / G``), and
every sample's score is multiplied::

    r̃_i = r_i · (1 − β · ρ_i / G),      ρ_i ∈ {0, …, G − 1}, least likely = 0, likeliest = G − 1

with G the group size and β = 0.25 (the release's scripts). With binary rewards only the correct
samples change, but their factor depends on where the *wrong* samples fall in the likelihood order.
Worked example: r = [0, 1, 1, 0], logp = [−0.1, −0.5, −1, −2] → ρ = [3, 2, 1, 0],
factors [0.8125, 0.875, 0.9375, 1], r̃ = [0, 0.875, 0.9375, 0], A = [−0.8650, 0.8053, 0.9247, −0.8650]
(``tests/test_estimator_context.py`` checks these digits against a loop written from this procedure).

``rank_over="correct"`` — **an alternative reading** of §4, kept for comparison with runs made with it
(not the authors' code). Only the correct samples (r_i > 0) are ranked, among themselves, likeliest
first, and only they are shaped::

    r̃_i = r_i · (1 − β · (G − k_i) / G)     for correct i (k_i ∈ {0, …, c − 1}, likeliest = 0), r̃_i = r_i otherwise

so the likeliest correct sample gets 1 − β and the least likely 1 − β (G − c + 1)/G. On the example
above it gives [−0.8646, 0.7955, 0.9338, −0.8646]. The two readings
give the same advantages when every sample of a group is correct (their r̃ then differ by the constant
β/G, which GRPO removes) and differ in mixed groups (by up to 0.355 in an advantage, median 0.056).

Where grae departs from the release in both readings: samples with equal log-probs get the mean of the
ranks they span (the release's ``argsort`` orders ties by position, so its result depends on the
order of samples in the batch); a missing reward (NaN) is left out and G counts the group's valid
samples (the release has no missing rewards); and a group with one valid sample (a group of one, or NaN
rewards leaving one) gets advantage 0 — no group-relative baseline, grae's rule for every mean-centred
estimator — where the release, as verl's GRPO, takes such a group's mean as 0 and its std as 1, so r = 1
gives (1 − 0)/(1 + 1e-6) = 0.999999 (``tests/test_advantage_properties.py::
test_unlikeliness_gives_a_one_sample_group_zero_where_the_release_gives_r``).

Context: ``logprob_mean`` (length-normalised sequence log-prob under the rollout policy; which
log-probs each engine supplies: docs/estimators.md, "Estimator context").
"""

from __future__ import annotations

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.grpo import check_std_params, grpo_advantages

RANK_OVER = ("group", "correct")


def likelihood_ranks(logprob: torch.Tensor, member: torch.Tensor, index: torch.Tensor, *,
                     likeliest_first: bool) -> torch.Tensor:
    """``[N]`` rank of each member sample among its group's members by ``logprob`` (0 = likeliest when
    ``likeliest_first``, else 0 = least likely), ties averaged; 0 for non-members. O(N²) pairwise
    comparison — N is one batch of rollouts."""
    same = (index[:, None] == index[None, :]) & member[None, :] & member[:, None]  # [N, N]
    ahead = logprob[None, :] > logprob[:, None] if likeliest_first else logprob[None, :] < logprob[:, None]  # [N, N]
    before = (same & ahead).sum(1).to(torch.float64)  # members ranked strictly before i
    tied = (same & (logprob[None, :] == logprob[:, None])).sum(1).to(torch.float64)  # incl. itself
    return torch.where(member, before + (tied - 1) / 2, 0.0)


@register("unlikeliness")
class Unlikeliness(Estimator):
    """Unlikeliness reward (He, Fried & Welleck 2025), as the authors' release: r_i × (1 − β·ρ_i/G), ρ_i =
    rank in the group by log-prob (least likely 0); then GRPO.

    Args:
        beta: β_rank (the release's scripts: 0.25); 0 is plain GRPO.
        rank_over: ``"group"`` (default, the authors' release: every sample ranked, least likely = 0,
            factor 1 − βρ/G) or ``"correct"`` (grae's earlier reading: correct samples ranked among
            themselves, likeliest = 0, factor 1 − β(G − k)/G).
        eps, std_unbiased: GRPO's std convention (release: unbiased std + 1e-6).
    """

    requires = frozenset({"logprob_mean"})

    def __init__(self, *, beta: float = 0.25, rank_over: str = "group", eps: float = 1e-6, std_unbiased: bool = True):
        check(0 <= beta <= 1, "beta", f"must be in [0, 1] (the release: 0.25), got {beta}")
        check(rank_over in RANK_OVER, "rank_over",
              f"must be one of {RANK_OVER} ('group' = the authors' release, 'correct' = grae's earlier reading), "
              f"got {rank_over!r}")
        check_std_params(eps, std_unbiased)
        self.beta, self.rank_over, self.eps, self.std_unbiased = beta, rank_over, eps, std_unbiased

    def compute(self, rewards, groups, *, logprob_mean):  # type: ignore[override]  # declared in `requires`
        correct = groups.valid & (rewards > 0)  # [N]
        size = groups.expand(groups.count)  # [N] G (valid samples of the group)
        if self.rank_over == "group":
            rank = likelihood_ranks(logprob_mean, groups.valid, groups.index, likeliest_first=False)  # [N] ρ
            shaped = torch.where(groups.valid, rewards * (1 - self.beta * rank / size.clamp(min=1)), rewards)  # [N] r̃
        else:
            rank = likelihood_ranks(logprob_mean, correct, groups.index, likeliest_first=True)  # [N] k
            shaped = torch.where(correct, rewards * (1 - self.beta * (size - rank) / size), rewards)  # [N] r̃
        advantages = grpo_advantages(shaped, groups, eps=self.eps, std_unbiased=self.std_unbiased)
        return advantages, None, {"mean_shaped_correct": float(shaped[correct].mean()) if bool(correct.any()) else 0.0}
