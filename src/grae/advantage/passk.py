"""Pass@k Training: the analytic group advantage for the pass@k objective.

Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large
Reasoning Models", arXiv:2508.10751, §3 (the analytic derivation of the bootstrap-sampled advantage).
A group of n samples with c correct (binary rewards) is viewed through its k-subsets, each rewarded
with the max of its members (did any of the k pass?). With the subsets' mean and std

    R̄ = 1 − C(n−c, k) / C(n, k)                 (the unbiased pass@k of the group)
    σ = √(R̄ (1 − R̄)),

a sample's advantage is the mean normalised advantage of the subsets that contain it:

    correct:  A_pos = (1 − R̄) / σ
    wrong:    A_neg = (1 − R̄ − C(n−c−1, k−1) / C(n−1, k−1)) / σ

k = 1 is GRPO with the population std (ε = 0). Wrong samples in a group that usually succeeds get
little or no penalty, so the update no longer concentrates all mass on one correct answer.
A group with σ = 0 (all correct, or too few wrong samples for any k-subset to fail) gets advantage 0.
"""

from __future__ import annotations

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.subsets import binom


@register("passk")
class PassAtK(Estimator):
    """Pass@k Training (Chen et al. 2025, arXiv:2508.10751): the analytic pass@k group advantage.

    Args:
        k: the k of pass@k, ≥ 1 (the paper trains with k = 4 of n = 8 … 32). A group with fewer valid
            samples than k uses k = n (counted in ``passk/groups_k_clipped``).
    """

    requires_binary = True

    def __init__(self, *, k: int = 4):
        check(isinstance(k, int) and not isinstance(k, bool) and k >= 1, "k", f"must be an integer ≥ 1, got {k!r}")
        self.k = k

    def compute(self, rewards, groups):
        n = groups.count  # [M]
        c = groups.sum(rewards)  # [M] correct per group
        k = n.clamp(max=self.k).clamp(min=1)  # [M]
        group_passk = 1 - binom(n - c, k) / binom(n, k).clamp(min=1e-300)  # [M] R̄
        sigma = (group_passk * (1 - group_passk)).clamp(min=0).sqrt()  # [M]
        wrong_in_failing = binom(n - c - 1, k - 1) / binom(n - 1, k - 1).clamp(min=1e-300)  # [M]
        safe = sigma > 1e-12
        a_pos = torch.where(safe, (1 - group_passk) / sigma.clamp(min=1e-12), torch.zeros_like(sigma))
        a_neg = torch.where(safe, (1 - group_passk - wrong_in_failing) / sigma.clamp(min=1e-12), torch.zeros_like(sigma))
        correct = rewards > 0.5
        advantages = torch.where(correct, groups.expand(a_pos), groups.expand(a_neg))  # [N]
        return advantages, None, {"groups_k_clipped": float((n < self.k).sum()), "group_passk_mean": float(group_passk.mean())}
