"""The controlled experiments that break GRPO's advantage symmetries (Yu et al. 2026, §4.1, Table 1).

Yu, Chen, Liu, Zhang, Qu, "Unveiling Implicit Advantage Symmetry: Why GRPO Struggles with
Exploration and Difficulty Adaptation", arXiv:2602.05548.

Experiment I breaks *group-level* symmetry (Σ_i Â_i = 0, Eq. 5) by rescaling positive advantages::

    Positive-Dominant:  A*_i = β · Â_i  if Â_i > 0,  else Â_i        (Σ A* > 0)
    Negative-Dominant:  A*_i = Â_i / β  if Â_i > 0,  else Â_i        (Σ A* < 0)      β = 10

Experiment II breaks *sample-level* symmetry (Σ_i |Â_i| = 2G√(p(1−p)), Theorem 2) with the group
success rate p = mean_g(r), for 0 < p < 1 (no rescaling at p ∈ {0, 1}, where Â = 0)::

    Hard-Focused:  A*_i = γ · Â_i / √p          (Σ|A*| = G√(1−p))
    Easy-Focused:  A*_i = γ · Â_i / √(1 − p)    (Σ|A*| = G√p)                      γ = 0.5

γ = 0.5 keeps the theoretical maximum of Σ|A*| equal to GRPO's. Â is the GRPO advantage
(:func:`grae.advantage.grpo.grpo_advantages`); ``scale="none"`` builds the variant on Dr. GRPO's
un-normalised Â = r − mean instead (the seeds' "Dr.GRPO + A-GRAE").
"""

from __future__ import annotations

from torch import Tensor

from grae.advantage.base import Estimator, check, register
from grae.advantage.grpo import SCALES, check_std_params, grpo_advantages


def scale_positive(advantages: Tensor, factor) -> Tensor:
    """``[N]``: multiply the positive advantages by ``factor`` (a float or a ``[N]`` tensor)."""
    return advantages.where(advantages <= 0, advantages * factor)


def difficulty_rescale(advantages: Tensor, p: Tensor, *, hard: float | Tensor, easy: float | Tensor) -> Tensor:
    """``[N]``: ``hard · Â/√p + easy · Â/√(1−p)`` where 0 < p < 1, and Â where p ∈ {0, 1}.

    ``p`` is each sample's group success rate, ``[N]``.
    """
    interior = (p > 0) & (p < 1)
    safe_p = p.where(interior, p.new_full((), 0.5))
    rescaled = hard * advantages / safe_p.sqrt() + easy * advantages / (1 - safe_p).sqrt()
    return rescaled.where(interior, advantages)


class _GRPOVariant(Estimator):
    """Shared constructor for the Table 1 variants: GRPO's std convention plus one knob."""

    def _init_std(self, eps: float, std_unbiased: bool, scale: str) -> None:
        check_std_params(eps, std_unbiased)
        check(scale in SCALES, "scale", f"must be one of {SCALES} ('none' = on top of Dr. GRPO), got {scale!r}")
        self.eps, self.std_unbiased, self.scale = eps, std_unbiased, scale

    def grpo(self, rewards, groups) -> Tensor:
        return grpo_advantages(rewards, groups, eps=self.eps, std_unbiased=self.std_unbiased, scale=self.scale)


class _Dominant(_GRPOVariant):
    """Experiment I: positive GRPO advantages × β^direction."""

    direction = 1

    def __init__(self, *, beta: float = 10.0, eps: float = 1e-6, std_unbiased: bool = True, scale: str = "group"):
        check(beta > 0, "beta", f"must be > 0 (paper: 10), got {beta}")
        self.beta = beta
        self._init_std(eps, std_unbiased, scale)

    def compute(self, rewards, groups):
        return scale_positive(self.grpo(rewards, groups), self.beta**self.direction), None, {}


@register("positive_dominant")
class PositiveDominant(_Dominant):
    """Positive-Dominant (Table 1, Exp. I): positive GRPO advantages × β."""

    direction = 1


@register("negative_dominant")
class NegativeDominant(_Dominant):
    """Negative-Dominant (Table 1, Exp. I): positive GRPO advantages ÷ β."""

    direction = -1


class _Focused(_GRPOVariant):
    """Experiment II: γ·Â/√p (hard) or γ·Â/√(1−p) (easy) for 0 < p < 1."""

    requires_unit_interval = True
    hard_weight, easy_weight = 0.0, 0.0

    def __init__(self, *, gamma: float = 0.5, eps: float = 1e-6, std_unbiased: bool = True, scale: str = "group"):
        check(gamma > 0, "gamma", f"must be > 0 (paper: 0.5), got {gamma}")
        self.gamma = gamma
        self._init_std(eps, std_unbiased, scale)

    def compute(self, rewards, groups):
        p = groups.expand(groups.mean(rewards))  # [N]
        advantages = difficulty_rescale(self.grpo(rewards, groups), p,
                                        hard=self.gamma * self.hard_weight, easy=self.gamma * self.easy_weight)
        return advantages, None, {}


@register("hard_focused")
class HardFocused(_Focused):
    """Hard-Focused (Table 1, Exp. II): γ · Â / √p for 0 < p < 1."""

    hard_weight = 1.0


@register("easy_focused")
class EasyFocused(_Focused):
    """Easy-Focused (Table 1, Exp. II): γ · Â / √(1 − p) for 0 < p < 1."""

    easy_weight = 1.0
