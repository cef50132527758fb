"""PKPO: Pass@k Policy Optimization, the unbiased pass@k (max@k) gradient as a reward transform.

Walder & Karkhanis 2025, "Pass@K Policy Optimization: Solving Harder Reinforcement Learning
Problems", arXiv:2505.15201. For a group of n samples with rewards g (any real rewards; pass@k for
0/1 rewards), the objective is max_g@k = E[max of k independent samples]. Averaging over all
k-subsets of the n samples, the policy gradient is unbiased when sample i's reward is replaced by

    s_i = (1/C(n,k)) Σ_{k-subsets S ∋ i} max(g_S)                                  (Eq. 19)

and stays unbiased after subtracting any baseline that does not depend on sample i:

    "loo_minus_one" (Eq. 33, the paper's recommendation, lowest variance):
        A_i = s_i − (k/n) · mean over (k−1)-subsets T of the others of max(g_T)
    "loo" (Eq. 29):
        A_i = s_i − (k/(n−1)) · mean over k-subsets T of the others of max(g_T)
    "none": A_i = s_i

In closed form with the group sorted by reward (rank ρ_i = 1..n; ties in any order give the same
values): s_i = [C(ρ_i−1, k−1) g_i + Σ_{ρ_j > ρ_i} C(ρ_j−2, k−2) g_j] / C(n, k), O(n log n) per group.
k = 1 with "loo_minus_one" has no (k−1)-subset; grae then uses the k = 1 leave-one-out baseline,
A_i = (g_i − mean_{j≠i} g_j)/n, i.e. RLOO / n (the authors' release returns g unchanged there).

**k annealing** (the paper's §5: optimise pass@k early for exploration, then lower k to lift pass@1):
with ``k_final`` set, step t uses k_t = round(k + (k_final − k) · min(1, t / anneal_steps)). The step
counter is the estimator's state (``state_dict``), so it resumes with checkpoints. A group with fewer
valid samples than k_t uses k = n − 1 for "loo" and k = n otherwise (``pkpo/groups_k_clipped``).
"""

from __future__ import annotations

import math

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.subsets import SortedGroups

BASELINES = ("loo_minus_one", "loo", "none")


def _check_k(value, name: str) -> None:
    check(isinstance(value, int) and not isinstance(value, bool) and value >= 1, name,
          f"must be an integer ≥ 1, got {value!r}")


@register("pkpo")
class PKPO(Estimator):
    """PKPO (Walder & Karkhanis 2025, arXiv:2505.15201): unbiased max@k gradient weights, optional k annealing.

    Args:
        k: the k of pass@k (max@k) at step 0; ≤ the group size (larger is clipped per group).
        baseline: ``"loo_minus_one"`` (Eq. 33, default), ``"loo"`` (Eq. 29) or ``"none"`` (Eq. 19).
        k_final: anneal k linearly to this value over ``anneal_steps`` estimator calls (None = constant k).
        anneal_steps: length of the annealing in steps (estimator calls); ≥ 1.
    """

    def __init__(self, *, k: int = 4, baseline: str = "loo_minus_one", k_final: int | None = None,
                 anneal_steps: int = 100):
        _check_k(k, "k")
        check(baseline in BASELINES, "baseline", f"must be one of {BASELINES}, got {baseline!r}")
        if k_final is not None:
            _check_k(k_final, "k_final")
        check(isinstance(anneal_steps, int) and not isinstance(anneal_steps, bool) and anneal_steps >= 1,
              "anneal_steps", f"must be an integer ≥ 1, got {anneal_steps!r}")
        self.k, self.baseline, self.k_final, self.anneal_steps = k, baseline, k_final, anneal_steps
        self.step = 0

    def current_k(self) -> int:
        if self.k_final is None:
            return self.k
        frac = min(1.0, self.step / self.anneal_steps)
        return int(math.floor(self.k + (self.k_final - self.k) * frac + 0.5))

    def compute(self, rewards, groups):
        k_now = self.current_k()
        self.step += 1
        ranked = SortedGroups(rewards, groups)
        n = ranked.size  # [N]
        limit = n - 1 if self.baseline == "loo" else n
        k = limit.clamp(max=k_now).clamp(min=1)  # [N] per-sample (per-group) k
        share = ranked.subset_max_share(rewards, k)  # [N] s_i
        if self.baseline == "loo_minus_one":
            m = (k - 1).clamp(min=1)
            baseline = k / n * ranked.leave_one_out_max(rewards, m)
            baseline = torch.where(k > 1, baseline, ranked.leave_one_out_max(rewards, m) / n)
        elif self.baseline == "loo":
            baseline = k / (n - 1).clamp(min=1) * ranked.leave_one_out_max(rewards, k)
        else:
            baseline = torch.zeros_like(share)
        advantages = (share - baseline) * (n > 1)
        advantages = torch.where(advantages.abs() < 1e-12, torch.zeros_like(advantages), advantages)  # rounding of exact 0s
        clipped = groups.count < k_now + (self.baseline == "loo")  # [M]
        return advantages, None, {"k": float(k_now), "groups_k_clipped": float(clipped.sum())}

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        check(set(state) == {"step"}, "state_dict", f"PKPO state has exactly the key 'step', got {sorted(state)}")
        step = state["step"]
        check(isinstance(step, int) and step >= 0, "state_dict.step", f"must be an integer ≥ 0, got {step!r}")
        self.step = step
