"""PKPO: Pass-at-k Policy Optimization, the unbiased pass@k reward transform (binary rewards).

Walder, C. & Karkhanis, D., "Pass@k Policy Optimization: Solving Harder Reinforcement Learning
Problems", arXiv:2505.15201, §3–4.

The unbiased estimator of pass@k from n samples is the mean over all C(n, k) k-subsets S of max_{j∈S} r_j.
Its score-function gradient is Σ_i s_i ∇log π(y_i), with the per-sample transformed reward::

    s_i = (1 / C(n, k)) Σ_{S ∋ i} max_{j∈S} r_j
        = k/n                                              if r_i = 1
        = (C(n − 1, k − 1) − C(n − c − 1, k − 1)) / C(n, k)   if r_i = 0

and, with the leave-one-out baseline inside each subset (the paper's variance-reduced form, written
s^(loo−1) there: subtract max of the other k − 1 members, which does not depend on y_i, so the
estimate stays unbiased)::

    s_i^(loo−1) = (1 / C(n, k)) Σ_{S ∋ i} (max_{j∈S} r_j − max_{j∈S∖i} r_j)
                = C(n − c, k − 1) / C(n, k)     if r_i = 1,    0 if r_i = 0

(for k = 1 the empty max is taken as 0, i.e. no baseline). The transformed rewards are the
advantages, broadcast over tokens; ``baseline="none"`` gives s_i.

k annealing (paper §5: optimise pass@k with a large k first, then lower it to lift pass@1): with
``k_end`` and ``anneal_steps`` set, the k used at call t (0-based) is
round(k + (k_end − k) · min(t, anneal_steps) / anneal_steps); the call count is the estimator's
state and is carried in checkpoints. Rewards must be binary; every group needs n ≥ k valid samples.

Context: none. Defaults: k = 4, baseline ``"loo_minus_one"``, no annealing.
"""

from __future__ import annotations

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.passk import binary_counts, comb

BASELINES = ("loo_minus_one", "none")


@register("pkpo")
class PKPO(Estimator):
    """PKPO (Walder & Karkhanis 2025): unbiased pass@k per-sample reward, loo−1 baseline, optional k annealing.

    Args:
        k: subset size at the start, 1 ≤ k ≤ group size.
        baseline: ``"loo_minus_one"`` (paper's s^(loo−1), default) or ``"none"`` (plain s_i).
        k_end: k after annealing (None: constant k).
        anneal_steps: estimator calls over which k moves linearly from ``k`` to ``k_end``.
    """

    requires_binary = True

    def __init__(self, *, k: int = 4, baseline: str = "loo_minus_one", k_end: int | None = None,
                 anneal_steps: int = 0):
        check(isinstance(k, int) and not isinstance(k, bool) and k >= 1, "k", f"must be an integer >= 1, got {k!r}")
        check(baseline in BASELINES, "baseline", f"must be one of {', '.join(BASELINES)}, got {baseline!r}")
        check(k_end is None or (isinstance(k_end, int) and k_end >= 1), "k_end",
              f"must be None or an integer >= 1, got {k_end!r}")
        check(isinstance(anneal_steps, int) and anneal_steps >= 0, "anneal_steps",
              f"must be an integer >= 0, got {anneal_steps!r}")
        check((k_end is None) == (anneal_steps == 0), "k_end/anneal_steps",
              "set both (anneal k to k_end over anneal_steps calls) or neither")
        self.k, self.baseline, self.k_end, self.anneal_steps = k, baseline, k_end, anneal_steps
        self.step = 0

    def current_k(self) -> int:
        if self.k_end is None:
            return self.k
        frac = min(self.step, self.anneal_steps) / self.anneal_steps
        return int(round(self.k + (self.k_end - self.k) * frac))

    def compute(self, rewards, groups):
        k = self.current_k()
        n, c = binary_counts(rewards, groups, k, self.name)  # [M], [M]
        total = comb(n, k).clamp(min=1)  # [M]
        if self.baseline == "none":
            correct = comb(n - 1, k - 1) / total
            wrong = (comb(n - 1, k - 1) - comb(n - c - 1, k - 1)) / total
        else:
            correct = comb(n - c, k - 1) / total  # k = 1: C(n − c, 0)/n = 1/n, no baseline
            wrong = torch.zeros_like(correct)
        advantages = torch.where(rewards > 0.5, groups.expand(correct), groups.expand(wrong))  # [N]
        self.step += 1
        return advantages, None, {"k": float(k)}

    def state_dict(self):
        return {"step": self.step} if self.k_end is not None else {}

    def load_state_dict(self, state):
        if self.k_end is None:
            super().load_state_dict(state)
            return
        check("step" in state, "state_dict", "PKPO (annealed) state is missing 'step'")
        self.step = int(state["step"])
