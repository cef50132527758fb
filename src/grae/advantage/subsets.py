"""Statistics over the k-subsets of each group, in closed form (shared by ``passk`` and ``pkpo``).

Within a group of n valid samples sorted by reward (rank r = 1..n, ties in any order), the maximum of
a k-subset is its highest-ranked member. Counting the subsets in which each sample is that member
gives every quantity below without enumerating subsets; ``tests/test_passk_estimators.py`` checks them
against a brute-force enumeration.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grae.groups import Groups


def binom(a: Tensor, b: Tensor | int) -> Tensor:
    """Elementwise C(a, b) in float64; 0 where b < 0 or b > a."""
    b = torch.as_tensor(b, dtype=torch.float64, device=a.device).expand_as(a)
    ok = (b >= 0) & (a >= b)
    a_, b_ = torch.where(ok, a, b.new_ones(())), torch.where(ok, b, b.new_zeros(()))
    value = torch.exp(torch.lgamma(a_ + 1) - torch.lgamma(b_ + 1) - torch.lgamma(a_ - b_ + 1))
    return torch.where(ok, value, torch.zeros_like(value))


class SortedGroups:
    """Ranks of the valid samples within their groups, and prefix / suffix sums in that order."""

    def __init__(self, rewards: Tensor, groups: Groups):
        self.groups = groups
        key = torch.where(groups.valid, rewards, torch.full_like(rewards, torch.inf))
        by_reward = torch.argsort(key, stable=True)
        self.order = by_reward[torch.argsort(groups.index[by_reward], stable=True)]  # [N] group-major, reward-minor
        index_sorted = groups.index[self.order]
        new_group = torch.ones_like(index_sorted, dtype=torch.bool)
        new_group[1:] = index_sorted[1:] != index_sorted[:-1]
        position = torch.arange(rewards.numel(), dtype=torch.float64, device=rewards.device)
        start = torch.cummax(torch.where(new_group, position, torch.zeros_like(position)), dim=0).values
        rank_sorted = position - start + 1  # [N] 1-based position within the group, in sorted order
        self.start = start.long()  # [N] sorted position of each sorted sample's group start
        self.rank = torch.empty_like(rank_sorted).scatter_(0, self.order, rank_sorted)  # [N]
        self.size = groups.expand(groups.count)  # [N] n of the sample's group

    def prefix_excl(self, x: Tensor) -> Tensor:
        """``[N]``: Σ of ``x`` over the lower-ranked valid samples of the same group."""
        x = torch.where(self.groups.valid, x, torch.zeros_like(x))
        xs = x[self.order]
        exclusive = torch.cumsum(xs, 0) - xs  # [N] Σ before each sample, across groups
        out_sorted = exclusive - exclusive[self.start]
        return torch.empty_like(out_sorted).scatter_(0, self.order, out_sorted)

    def suffix_excl(self, x: Tensor) -> Tensor:
        """``[N]``: Σ of ``x`` over the higher-ranked valid samples of the same group."""
        x = torch.where(self.groups.valid, x, torch.zeros_like(x))
        return self.groups.expand(self.groups.sum(x)) - self.prefix_excl(x) - x

    def subset_max_share(self, rewards: Tensor, k: Tensor) -> Tensor:
        """``[N]`` s_i = (1/C(n,k)) Σ_{k-subsets S ∋ i} max(r_S) (PKPO Eq. 19), per-sample k."""
        n, r = self.size, self.rank
        own = binom(r - 1, k - 1) * rewards  # i is the subset's maximum
        above = self.suffix_excl(binom(r - 2, k - 2) * rewards)  # a higher-ranked j is the maximum
        return (own + above) / binom(n, k).clamp(min=1e-300)

    def leave_one_out_max(self, rewards: Tensor, m: Tensor) -> Tensor:
        """``[N]`` mean over the m-subsets of the *other* samples of their maximum (unbiased max@m of n−1)."""
        n, r = self.size, self.rank
        below = self.prefix_excl(binom(r - 1, m - 1) * rewards)  # ranks below i keep their rank
        above = self.suffix_excl(binom(r - 2, m - 1) * rewards)  # ranks above i drop by one
        return (below + above) / binom(n - 1, m).clamp(min=1e-300)
