"""GRPO and Dr. GRPO: group-relative advantage estimation (GRAE).

GRPO (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300, §4.1.2), for sample i of group g::

    Â_i = (r_i − mean_g) / (std_g + ε)

with the unbiased (N−1) group std and ε = 1e-6 by default, as verl's
``compute_grpo_outcome_advantage`` (TRL uses ε = 1e-4). ``scale`` follows TRL's ``scale_rewards``:
``"group"`` divides by the group std, ``"batch"`` by the std of all rewards in the batch
(PPO-Lite), ``"none"`` does not divide (Dr. GRPO).

Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783, §3.1)::

    Â_i = r_i − mean_g

Its other half — no per-response length normalisation — is a loss choice:
``grae.loss.agg_loss(..., mode="seq-mean-token-sum-norm")``.
"""

from __future__ import annotations

import math

from torch import Tensor

from grae.advantage.base import Estimator, check, register
from grae.groups import Groups

SCALES = ("group", "batch", "none")


def grpo_advantages(rewards: Tensor, groups: Groups, *, eps: float, std_unbiased: bool, scale: str = "group") -> Tensor:
    """``[N]`` GRPO advantages Â — the building block the asymmetric estimators rescale."""
    mean = groups.mean(rewards)  # [M]
    centred = rewards - groups.expand(mean)  # [N]
    if scale == "none":
        return centred
    if scale == "batch":
        valid = rewards[groups.valid]
        std = valid.std(unbiased=std_unbiased) if valid.numel() > 1 else valid.new_zeros(())
        return centred / (std + eps)
    std = groups.std(rewards, unbiased=std_unbiased, mean=mean)  # [M]
    return centred / (groups.expand(std) + eps)


def check_std_params(eps: float, std_unbiased: bool) -> None:
    check(eps > 0 and math.isfinite(eps), "eps",
          f"must be > 0 and finite (verl uses 1e-6, TRL 1e-4; 0 divides a collapsed group's 0 by 0), got {eps}")
    check(isinstance(std_unbiased, bool), "std_unbiased", f"must be True or False, got {std_unbiased!r}")


@register("grpo")
class GRPO(Estimator):
    """GRPO: Â_i = (r_i − mean_g) / (std_g + ε).

    Args:
        eps: ε added to the std (verl 1e-6; TRL 1e-4). Inside ``GraeTrainer`` (``grae train`` with the
            TRL engine) ``grpo`` without an explicit ``eps`` gets TRL's 1e-4, to reproduce stock GRPOTrainer.
        std_unbiased: Bessel-corrected std (N−1), as ``torch.std`` in verl and TRL. The paper
            theorems use the population std (False).
        scale: ``"group"`` (default), ``"batch"`` or ``"none"`` — TRL's ``scale_rewards``.
    """

    def __init__(self, *, eps: float = 1e-6, std_unbiased: bool = True, scale: str = "group"):
        check_std_params(eps, std_unbiased)
        check(scale in SCALES, "scale", f"must be one of {SCALES}, got {scale!r}")
        self.eps, self.std_unbiased, self.scale = eps, std_unbiased, scale

    def compute(self, rewards, groups):
        return grpo_advantages(rewards, groups, eps=self.eps, std_unbiased=self.std_unbiased, scale=self.scale), None, {}


@register("dr_grpo")
class DrGRPO(Estimator):
    """Dr. GRPO: Â_i = r_i − mean_g (no std division; pair with the constant-normaliser loss)."""

    def __init__(self):
        pass

    def compute(self, rewards, groups):
        return grpo_advantages(rewards, groups, eps=0.0, std_unbiased=True, scale="none"), None, {}
