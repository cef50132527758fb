"""The simulated policy: per prompt a softmax over M whole trajectories, a known subset correct.

The behaviour-space model of ``grae.theory`` (Yu et al. 2026, §3, App. B) for many prompts at once:
prompt p chooses trajectory m with probability π_p(m) = softmax(h_p)_m, and K of the M trajectories
are correct for it. Two parameterisations of the logits h (``[P, M]``):

* ``tabular`` — h = h₀ + Δ, Δ ``[P, M]`` trained: prompts are independent (the theorems' setting).
* ``lowrank`` — h = h₀ + U Vᵀ, U ``[P, r]`` per prompt and V ``[M, r]`` **shared** by every prompt,
  both trained: trajectory m is "strategy m", the same strategy on every prompt, correct on some and
  wrong on others, so raising it where it is correct also raises it where it is wrong — the
  interference a network's shared weights cause. (Which strategies are correct is drawn per prompt.)

The base logits h₀ put a drawn base success probability p₀ on the correct set and 1 − p₀ on the
rest, spread unevenly inside each set (log-normal weights): some correct trajectories are rare, the
ones an update that only reinforces what was sampled never finds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Difficulty:
    """Base success probabilities p₀ over prompts: ``beta:a,b`` (Beta(a, b)), ``uniform:lo,hi`` or
    ``ladder:p1,p2,…`` (equal shares of fixed levels). Values are clipped to [1e-4, 1 − 1e-4]."""

    spec: str = "beta:1,3"

    def sample(self, prompts: int, generator: torch.Generator) -> Tensor:
        kind, _, args = self.spec.partition(":")
        try:
            values = [float(v) for v in args.split(",")] if args else []
        except ValueError:
            raise ValueError(f"difficulty: {self.spec!r}; numbers after the colon, e.g. beta:1,3") from None
        if kind == "beta" and len(values) == 2 and min(values) > 0:
            gamma_a = torch._standard_gamma(torch.full((prompts,), values[0], dtype=torch.float64), generator=generator)
            gamma_b = torch._standard_gamma(torch.full((prompts,), values[1], dtype=torch.float64), generator=generator)
            p0 = gamma_a / (gamma_a + gamma_b)
        elif kind == "uniform" and len(values) == 2 and 0 <= values[0] < values[1] <= 1:
            p0 = values[0] + (values[1] - values[0]) * torch.rand(prompts, generator=generator, dtype=torch.float64)
        elif kind == "ladder" and values and all(0 < v < 1 for v in values):
            p0 = torch.tensor(values, dtype=torch.float64).repeat(math.ceil(prompts / len(values)))[:prompts]
        else:
            raise ValueError(f"difficulty: {self.spec!r}; use beta:a,b (a, b > 0), uniform:lo,hi (0 <= lo < hi <= 1) "
                             "or ladder:p1,p2,... (each in (0, 1))")
        return p0.clamp(1e-4, 1 - 1e-4)


class SimPolicy(torch.nn.Module):
    """Logits ``[P, M]`` of the simulated policy (see the module docstring).

    Args:
        base_p: ``[P]`` base success probabilities p₀.
        trajectories: M; ``correct``: K correct trajectories per prompt (0 < K < M).
        parameterisation: ``"tabular"`` or ``"lowrank"``; ``rank``: r for ``lowrank``.
        spread: σ of the log-normal weights inside the correct and the wrong set.
    """

    def __init__(self, base_p: Tensor, trajectories: int, correct: int, generator: torch.Generator, *,
                 parameterisation: str = "tabular", rank: int = 8, spread: float = 1.0, init_scale: float = 0.1):
        super().__init__()
        prompts = base_p.numel()
        if not 0 < correct < trajectories:
            raise ValueError(f"correct: need 0 < correct < trajectories ({trajectories}), got {correct}")
        order = torch.rand(prompts, trajectories, generator=generator).argsort(dim=1)
        mask = torch.zeros(prompts, trajectories, dtype=torch.bool)
        mask.scatter_(1, order[:, :correct], True)
        self.register_buffer("correct", mask)  # [P, M]
        noise = spread * torch.randn(prompts, trajectories, generator=generator, dtype=torch.float64)  # [P, M]
        inside_correct = torch.log_softmax(noise.masked_fill(~mask, -math.inf), dim=1)
        inside_wrong = torch.log_softmax(noise.masked_fill(mask, -math.inf), dim=1)
        base = torch.where(mask, base_p.log().unsqueeze(1) + inside_correct, (1 - base_p).log().unsqueeze(1) + inside_wrong)
        self.register_buffer("base", base.float())  # [P, M]: exactly p₀ on the correct set
        self.parameterisation = parameterisation
        if parameterisation == "tabular":
            self.delta = torch.nn.Parameter(torch.zeros(prompts, trajectories))  # [P, M]
        elif parameterisation == "lowrank":
            self.u = torch.nn.Parameter(init_scale * torch.randn(prompts, rank, generator=generator))  # [P, r]
            self.v = torch.nn.Parameter(init_scale * torch.randn(trajectories, rank, generator=generator))  # [M, r]
        else:
            raise ValueError(f"parameterisation: {parameterisation!r}; tabular or lowrank")

    def logits(self) -> Tensor:
        if self.parameterisation == "tabular":
            return self.base + self.delta  # [P, M]
        return self.base + self.u @ self.v.T  # [P, M]

    @torch.no_grad()
    def success(self) -> Tensor:
        """``[P]`` probability mass on each prompt's correct trajectories."""
        return (torch.softmax(self.logits(), dim=1) * self.correct).sum(dim=1)


def exact_pass_at_k(success: Tensor, ks: list[int]) -> dict[int, float]:
    """Mean over prompts of 1 − (1 − p)^k: the exact pass@k of the policy, no sampling error."""
    p = success.double().clamp(0, 1)
    return {k: float((1 - (1 - p) ** k).mean()) for k in ks}
