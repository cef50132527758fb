"""AVSPO: adaptive virtual-sample policy optimisation against advantage collapse.

He, Sun, Cheng, Li, Ji, Lu, Huang, Hu, "Advantage Collapse in Group Relative Policy Optimization:
Diagnosis and Mitigation", arXiv:2605.21125 (ICML 2026), §4, Algorithm 1.

A group *collapses* when its rewards have zero std (all right or all wrong): GRPO gives it no
signal. The advantage collapse rate ACR_t is the fraction of collapsed groups at step t (Def. 3.1).
While ACR_t exceeds an adaptive threshold τ_t (Eq. 13), every collapsed group j of size G gets

    K_j = max(1, min(G, ⌈G · ACR_t^α⌉))                                         (Eq. 9)

stratified virtual rewards  v_k = r_max · (1 − (k − 1)/K_j),  k = 1..K_j          (Eq. 10)

which enter the group's mean and std only (they get no advantage, no gradient):

    A_i = (r_i − μ(R_j ∪ V_j)) / (σ(R_j ∪ V_j) + ε)                                (Eq. 14)

Non-collapsed groups keep the GRPO advantage. After the step, the threshold moves toward ACR_t
when the policy improved and away from it when it got worse (Eq. 12), with the batch mean reward
as J(θ):

    τ_{t+1} = clip(τ_t + η · sign(J_t − J_{t−1}) · (ACR_t − τ_t), τ_min, τ_max)

Defaults (paper): α = 0.5, τ_0 = 0.5, η = 0.01, [τ_min, τ_max] = [0.1, 0.9].

``r_max`` defaults to the maximum achievable reward, 1.0. The paper's text calls it "the highest
observed reward in the group"; in a collapsed all-wrong group that is 0, every virtual reward is 0,
and the group stays collapsed — the mechanism would only ever act on all-correct groups. The
paper also describes the virtual rewards as spanning "from the maximum achievable reward down to
zero", which is what r_max = 1 does. (The released code, hexixiang/ACR, implements none of this:
it appends one virtual 1.0/0.0 reward when the *whole batch* is all-0/all-1.)

State (``state_dict``): ``tau``, ``prev_reward_mean`` (None before the first step), ``step``.
"""

from __future__ import annotations

import math

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.grpo import check_std_params, grpo_advantages
from grae.groups import COLLAPSE_TOL, stats_with_virtual


@register("avspo")
class AVSPO(Estimator):
    """AVSPO: stratified virtual rewards in collapsed groups while ACR > adaptive τ (Eqs. 9–14)."""

    def __init__(
        self,
        *,
        alpha: float = 0.5,
        r_max: float = 1.0,
        tau_init: float = 0.5,
        eta: float = 0.01,
        tau_min: float = 0.1,
        tau_max: float = 0.9,
        collapse_tol: float = COLLAPSE_TOL,
        eps: float = 1e-6,
        std_unbiased: bool = True,
    ):
        check(0 < alpha <= 1, "alpha", f"must be in (0, 1] (paper: 0.5; K = ⌈G·ACR^α⌉ ≥ G·ACR only for α ≤ 1), got {alpha}")
        check(0 <= tau_min <= tau_max <= 1, "tau_min/tau_max", f"need 0 <= tau_min <= tau_max <= 1, got {tau_min}, {tau_max}")
        check(tau_min <= tau_init <= tau_max, "tau_init",
              f"must lie in [tau_min, tau_max] = [{tau_min}, {tau_max}], got {tau_init}")
        check(eta >= 0, "eta", f"must be >= 0 (paper: 0.01), got {eta}")
        check(collapse_tol > 0, "collapse_tol", f"must be > 0 (paper: 1e-6), got {collapse_tol}")
        check_std_params(eps, std_unbiased)
        self.alpha, self.r_max = alpha, r_max
        self.tau_init, self.eta, self.tau_min, self.tau_max = tau_init, eta, tau_min, tau_max
        self.collapse_tol, self.eps, self.std_unbiased = collapse_tol, eps, std_unbiased
        self.tau = tau_init
        self.prev_reward_mean: float | None = None
        self.step = 0

    def compute(self, rewards, groups):
        reward_mean = float(rewards[groups.valid].mean())  # J(θ_t)
        present = groups.count > 0  # [M]
        collapsed = groups.collapsed(rewards, tol=self.collapse_tol) & present  # [M]
        acr = float(collapsed.sum()) / max(int(present.sum()), 1)  # ACR_t
        active = acr > self.tau  # Eq. 13

        advantages = grpo_advantages(rewards, groups, eps=self.eps, std_unbiased=self.std_unbiased)
        if active:
            size = groups.count  # [M] G_j
            k = torch.clamp(torch.ceil(size * acr**self.alpha), min=1.0)
            k = torch.minimum(k, size.clamp(min=1)) * collapsed  # [M] K_j (0 for non-collapsed)
            # v_k = r_max (1 − (k−1)/K) = r_max · j/K for j = 1..K:  Σv = r_max (K+1)/2,
            # Σv² = r_max² (K+1)(2K+1)/(6K).
            k_safe = k.clamp(min=1)
            virtual_sum = self.r_max * (k + 1) / 2 * (k > 0)
            virtual_sumsq = self.r_max**2 * (k + 1) * (2 * k + 1) / (6 * k_safe) * (k > 0)
            mean, std = stats_with_virtual(groups, rewards, k, virtual_sum, virtual_sumsq, unbiased=self.std_unbiased)
            virtual_adv = (rewards - groups.expand(mean)) / (groups.expand(std) + self.eps)
            advantages = torch.where(groups.expand(collapsed), virtual_adv, advantages)
            mean_k = float(k[collapsed].mean()) if bool(collapsed.any()) else 0.0
        else:
            mean_k = 0.0

        metrics = {"acr": acr, "tau": self.tau, "active": float(active), "mean_virtual": mean_k}
        self._update_threshold(acr, reward_mean)
        return advantages, None, metrics

    def _update_threshold(self, acr: float, reward_mean: float) -> None:
        """Eq. 12, with the batch mean reward as the policy-improvement signal J. A batch with no valid
        reward (every one missing) says nothing about J: τ and the previous mean stay (never NaN)."""
        if not math.isfinite(reward_mean):
            self.step += 1
            return
        if self.prev_reward_mean is not None:
            delta = reward_mean - self.prev_reward_mean
            sign = (delta > 0) - (delta < 0)
            self.tau = min(max(self.tau + self.eta * sign * (acr - self.tau), self.tau_min), self.tau_max)
        self.prev_reward_mean = reward_mean
        self.step += 1

    def state_dict(self):
        return {"tau": self.tau, "prev_reward_mean": self.prev_reward_mean, "step": self.step}

    def load_state_dict(self, state):
        missing = {"tau", "prev_reward_mean", "step"} - set(state)
        check(not missing, "state_dict", f"AVSPO state is missing {sorted(missing)}")
        tau = float(state["tau"])
        check(math.isfinite(tau), "state_dict.tau", f"must be finite, got {tau}")
        self.tau = tau
        prev = state["prev_reward_mean"]
        check(prev is None or math.isfinite(float(prev)), "state_dict.prev_reward_mean", f"must be finite or None, got {prev}")
        self.prev_reward_mean = None if prev is None else float(prev)
        self.step = int(state["step"])
