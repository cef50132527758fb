"""Bayesian Boundary Gating (BBG) as a third-party reading gives it.

Yuan et al. 2026, "Understanding Diversity Collapse in RLVR via the Lens of Overtraining", arXiv:2606.15455, name
BBG as their method: weight each problem by an estimate of its marginal contribution to the reasoning boundary
(pass@k at large k). The paper's method section was not reachable (only its abstract and introduction: see
docs/estimators.md, "Zero-success gating"), so this module implements the reading recorded in grae's research notes
(``passk.md`` §0000, the last paragraphs), **checked against that reading and the closed form below, not against
the paper**.

With a Beta(1, 1) prior on a problem's success rate p, a group of n valid samples with m successes has the
posterior Beta(m + 1, n − m + 1). The problem's utility at the reference k is the posterior expectation of the
pass@k gradient's magnitude, d/dp [1 − (1 − p)^k] = k (1 − p)^(k−1)::

    u(m; n, k) = E_{p ~ Beta(m+1, n−m+1)}[k (1 − p)^(k−1)] = k · ∏_{j=1}^{k−1} (n − m + j) / (n + 1 + j)

(E[(1 − p)^(k−1)] = B(m + 1, n − m + k) / B(m + 1, n − m + 1), a ratio of Gamma functions). Group g's weight is
relative to a group with one success, and zero below the threshold τ(n + 1)::

    w_g = u(m_g; n_g, k_ref) / u(1; n_g, k_ref),    w_g = 0 where u(m_g; n_g, k_ref) < τ (n_g + 1)

u falls with m, so the gate keeps the groups with few successes (n = 8, k_ref = 16, τ = 0.01: m ≤ 3 kept, m ≥ 4
gated off; w = 2.875, 1, 0.3182, 0.0909 for m = 0..3). Then for a sample i of group g::

    m_g ≥ 1:  A_i = w_g · Â_i^base          (base: GRPO by default)
    m_g = 0:  A_i = w_g · (−1)              (signed REINFORCE: NSR's A = −1 on a wrong sample)

A group with no success has zero reward variance, so GRPO's advantage there is 0; the reading says the m = 0 groups
learn "through a signed REINFORCE term", which grae takes as NSR's −1 per (wrong) sample (Zhu et al. 2025,
arXiv:2506.01347; ``nsr``), the same term ``zero_success_gate`` gives its kept groups, scaled by that group's w_0.
A gated group's samples get weight 0 (out of the loss and its token normaliser, as ``zero_success_gate`` drops);
a kept group's samples keep the base's weights, so the loss weights stay 0/1 and w_g scales the advantage only.
"""

from __future__ import annotations

import math

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.zero_success import rewards_only_base


def boundary_utility(m: torch.Tensor, n: torch.Tensor, k: int) -> torch.Tensor:
    """u(m; n, k) = k · ∏_{j=1}^{k−1} (n − m + j)/(n + 1 + j), elementwise over ``[M]`` float64 counts (module
    docstring), through log-Gamma: ∏ (n − m + j) = Γ(n − m + k)/Γ(n − m + 1), ∏ (n + 1 + j) = Γ(n + 1 + k)/Γ(n + 2)."""
    log_u = (math.log(k) + torch.lgamma(n - m + k) - torch.lgamma(n - m + 1)
             - torch.lgamma(n + 1 + k) + torch.lgamma(n + 2))
    return torch.exp(log_u)


def boundary_weight(m: torch.Tensor, n: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """w = u(m; n, k)/u(1; n, k), 0 where u(m; n, k) < τ(n + 1) (module docstring); ``[M]`` float64."""
    u = boundary_utility(m, n, k)
    return torch.where(u < tau * (n + 1), torch.zeros_like(u), u / boundary_utility(torch.ones_like(n), n, k))


@register("bbg")
class BayesianBoundaryGating(Estimator):
    """Bayesian Boundary Gating as a third-party reading of Yuan et al. 2026 (arXiv:2606.15455) gives it (checked
    against that reading and its closed form, not the paper): group weight w = u(m)/u(1) with
    u(m; n, k) = E_{p~Beta(m+1, n−m+1)}[k(1 − p)^(k−1)], 0 where u(m) < τ(n + 1); A = w·Â^base for m ≥ 1 and
    w·(−1) (signed REINFORCE) for m = 0 successes.

    Args:
        k_ref: the reference k of the pass@k whose boundary the utility measures (16).
        tau: the gate's threshold: a group is dropped where u(m; n, k_ref) < tau·(n + 1) (0.01).
        base: registry name of the estimator whose advantages the groups with a success get (``"grpo"``); it may
            not need estimator context. Its input policy applies.
        correct_threshold: a sample succeeds when its reward exceeds this (0.5 for 0/1 rewards); passed to the base
            too when it has the same parameter.
    """

    def __init__(self, *, k_ref: int = 16, tau: float = 0.01, base: str = "grpo", correct_threshold: float = 0.5):
        check(isinstance(k_ref, int) and not isinstance(k_ref, bool) and k_ref >= 1, "k_ref",
              f"must be an integer >= 1 (the reading's default 16), got {k_ref!r}")
        check(isinstance(tau, (int, float)) and not isinstance(tau, bool) and tau >= 0, "tau",
              f"must be a number >= 0 (the reading's default 0.01; 0 gates nothing), got {tau!r}")
        check(isinstance(base, str) and base != self.name, "base",
              f"must be another estimator's registry name (default 'grpo'), got {base!r}")
        self.k_ref, self.tau, self.base, self.correct_threshold = k_ref, tau, base, correct_threshold
        self._base = rewards_only_base(base, correct_threshold)
        self.requires_binary = self._base.requires_binary  # type: ignore[misc]
        self.requires_unit_interval = self._base.requires_unit_interval  # type: ignore[misc]

    def compute(self, rewards, groups):
        advantages, weights, own = self._base.compute(rewards, groups)
        weights = torch.ones_like(rewards) if weights is None else weights
        n = groups.count.to(torch.float64)  # [M] valid samples
        m = groups.sum((rewards > self.correct_threshold).to(torch.float64))  # [M] successes
        present = n > 0
        w = torch.where(present, boundary_weight(m, n.clamp(min=1), self.k_ref, self.tau), torch.zeros_like(n))  # [M]
        zero_success = groups.expand(m == 0)  # [N]
        signed = torch.where(zero_success, -torch.ones_like(advantages), advantages)  # NSR's −1 where m = 0
        w_i = groups.expand(w)  # [N]
        kept = w_i > 0
        metrics = {f"{self.base}/{k}": v for k, v in own.items()}
        n_present = max(1, int(present.sum()))
        metrics.update({"frac_groups_gated": float(((w == 0) & present).sum()) / n_present,
                        "frac_groups_zero_success": float(((m == 0) & present).sum()) / n_present,
                        "mean_weight_kept": float(w[w > 0].mean()) if bool((w > 0).any()) else 0.0})
        zero = torch.zeros_like(weights)
        return torch.where(kept, w_i * signed, zero), torch.where(kept, weights, zero), metrics

    def state_dict(self):
        return self._base.state_dict()

    def load_state_dict(self, state):
        self._base.load_state_dict(state)
