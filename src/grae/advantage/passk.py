"""Pass@k Training: the analytic group advantage for the pass@k objective.

Chen, Z. et al., "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large
Reasoning Models", arXiv:2508.10751, §3 (analytic derivation of the bootstrap-sampled Pass@k advantage).

A group of n binary-reward samples with c correct is treated as the C(n, k) k-subsets it contains,
each rewarded max(r) (did any of its k samples succeed). Over all subsets::

    R̄ = 1 − C(n − c, k) / C(n, k)                  mean subset reward = unbiased pass@k of the group
    σ = √(R̄ (1 − R̄))                                population std of the subset rewards

A sample's advantage is the mean, over the subsets that contain it, of (max(r) − R̄)/σ::

    A_correct = (1 − R̄) / σ
    A_wrong   = (1 − R̄ − C(n − c − 1, k − 1) / C(n − 1, k − 1)) / σ

so a wrong sample is penalised only by the share of its subsets that fail. σ = 0 (every subset
succeeds or every one fails: c = 0, or n − c < k) gives advantage 0, like GRPO on a collapsed group.
k = 1 is GRPO with the population std. Rewards must be binary (0/1); every group needs n ≥ k valid samples.

Context: none. Default k = 4 (the paper's main setting with n = 8 rollouts per prompt is k ∈ {4, 8}).
"""

from __future__ import annotations

import torch
from torch import Tensor

from grae.advantage.base import Estimator, check, register
from grae.groups import Groups


def comb(n: Tensor, k: Tensor | int) -> Tensor:
    """Binomial coefficient C(n, k) elementwise in float64; 0 where k < 0 or k > n."""
    k = torch.as_tensor(k, dtype=torch.float64)
    n = n.to(torch.float64)
    ok = (k >= 0) & (k <= n)
    n_, k_ = torch.where(ok, n, 0.0), torch.where(ok, k, 0.0)
    log_c = torch.lgamma(n_ + 1) - torch.lgamma(k_ + 1) - torch.lgamma(n_ - k_ + 1)
    return torch.where(ok, torch.exp(log_c).round(), 0.0)


def binary_counts(rewards: Tensor, groups: Groups, k: int, who: str) -> tuple[Tensor, Tensor]:
    """``[M]`` group sizes n and correct counts c (rewards are binary: the base checks), after checking n ≥ k."""
    n, c = groups.count, groups.sum(rewards)  # [M], [M]
    small = (n > 0) & (n < k)
    if bool(small.any()):
        raise ValueError(f"k: estimator {who!r}: k = {k} exceeds the size of a group with {int(n[small][0])} "
                         "valid samples; use k <= the number of generations per prompt.")
    return n, c


@register("passk")
class PassK(Estimator):
    """Pass@k Training (Chen et al. 2025): analytic k-subset advantage; correct (1 − R̄)/σ, wrong (1 − R̄ − q)/σ.

    Args:
        k: subset size, 1 ≤ k ≤ group size (k = 1 is GRPO with the population std).
    """

    requires_binary = True

    def __init__(self, *, k: int = 4):
        check(isinstance(k, int) and not isinstance(k, bool) and k >= 1, "k", f"must be an integer >= 1, got {k!r}")
        self.k = k

    def compute(self, rewards, groups):
        n, c = binary_counts(rewards, groups, self.k, self.name)  # [M], [M]
        total = comb(n, self.k)
        mean = torch.where(total > 0, 1 - comb(n - c, self.k) / total.clamp(min=1), 0.0)  # [M] R̄
        sigma = (mean * (1 - mean)).clamp(min=0).sqrt()  # [M]
        fail_share = comb(n - c - 1, self.k - 1) / comb(n - 1, self.k - 1).clamp(min=1)  # [M]
        correct = (1 - mean) / sigma.clamp(min=1e-300)
        wrong = (1 - mean - fail_share) / sigma.clamp(min=1e-300)
        per_sample = torch.where(rewards > 0.5, groups.expand(correct), groups.expand(wrong))  # [N]
        advantages = torch.where(groups.expand(sigma) > 0, per_sample, 0.0)
        present = n > 0
        return advantages, None, {"passk_mean": float(mean[present].mean()) if bool(present.any()) else 0.0}
