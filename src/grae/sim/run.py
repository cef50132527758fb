"""Train the simulated policy with any registered estimator and ``grae.loss``; exact pass@k over training.

One step, for every prompt at once (``[P, …]``):

1. sample G trajectories per prompt from π (``torch.multinomial``, seeded);
2. reward 1 for a correct trajectory, 0 otherwise — flat ``[P·G]`` rewards with group ids;
3. the estimator, unchanged (``grae.advantage.get_estimator``) → advantages and weights;
4. ``grae.loss.policy_loss`` with each trajectory a one-token completion (on-policy: ratio 1, so the
   gradient is −Σ_i w_i A_i ∇log π(b_i)), summed over samples — Theorem 1's objective, so one SGD step
   on the tabular logits moves prompt p's logits by exactly η[Σ_{i: b_i=b} A_i − C π_b];
5. an optimizer step (SGD, or Adam for the shared low-rank factors).

pass@k is computed from the policy's probabilities (:func:`~grae.sim.model.exact_pass_at_k`).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from grae.advantage import check_context_supported, get_estimator
from grae.loss import policy_loss
from grae.metrics import powers_of_two
from grae.sim.model import Difficulty, SimPolicy, exact_pass_at_k

#: difficulty bins of the base success probability p₀ for Σ|A| and success by difficulty
DIFFICULTY_BINS = (0.0, 0.1, 0.3, 0.6, 1.0)


@dataclass
class SimConfig:
    """One simulated training run. Every field explains itself; defaults run in a few seconds."""

    #: registry name (``grae estimators``) and its keyword parameters. Default GRPO.
    estimator: str = "grpo"
    estimator_params: dict = field(default_factory=dict)
    #: P, the number of prompts (default 512, the bench's size)
    prompts: int = 512
    #: M, whole trajectories per prompt (default 64); K of them are correct (default 4, drawn per prompt)
    trajectories: int = 64
    correct: int = 4
    #: G, samples per prompt per step (default 8, the papers' rollout.n)
    group_size: int = 8
    #: distribution of the base success probability p₀ (:class:`~grae.sim.model.Difficulty`; default
    #: beta:1,3, mean 0.25, about the CPU testbed's base pass@1)
    difficulty: str = "beta:1,3"
    #: σ of the log-normal weights inside the correct and wrong sets (default 1; 0: uniform inside each set)
    spread: float = 1.0
    #: ``tabular`` (independent prompts: the theorems' setting) or ``lowrank`` (shared strategy factors V, rank r)
    parameterisation: str = "tabular"
    rank: int = 8
    steps: int = 300
    #: ``sgd`` (η = lr; with ``loss_agg="sum"`` exactly Theorem 1's step on tabular logits) or ``adam``
    optimizer: str = "sgd"
    lr: float = 0.1
    #: ``sum`` over samples (Theorem 1's objective; a shared factor's step then grows with P) or ``mean``
    #: (grae.loss's token-mean: the step of a shared factor does not depend on P)
    loss_agg: str = "sum"
    #: exact pass@k and diagnostics every this many steps (and at the end)
    eval_every: int = 50
    #: the base policy (prompts, difficulties, correct sets) and the samples
    seed: int = 0

    def check(self) -> None:
        rules = [("prompts", self.prompts >= 1, ">= 1"), ("trajectories", self.trajectories >= 2, ">= 2"),
                 ("correct", 0 < self.correct < self.trajectories, "in (0, trajectories)"),
                 ("group_size", self.group_size >= 2, ">= 2"), ("steps", self.steps >= 0, ">= 0"),
                 ("lr", self.lr > 0, "> 0"), ("rank", self.rank >= 1, ">= 1"), ("eval_every", self.eval_every >= 1, ">= 1"),
                 ("optimizer", self.optimizer in ("sgd", "adam"), "sgd or adam"),
                 ("loss_agg", self.loss_agg in ("sum", "mean"), "sum or mean"),
                 ("parameterisation", self.parameterisation in ("tabular", "lowrank"), "tabular or lowrank"),
                 ("spread", self.spread >= 0, ">= 0"),
                 ("prompts", self.prompts * self.trajectories <= MAX_CELLS,
                  f"at most {MAX_CELLS:,} / trajectories (each [P, M] tensor is held in memory)")]
        for name in ("lr", "spread"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: must be a finite number, got {getattr(self, name)!r}")
        for name, ok, rule in rules:
            if not ok:
                raise ValueError(f"{name}: must be {rule}, got {getattr(self, name)!r}")
        Difficulty(self.difficulty).sample(1, torch.Generator().manual_seed(0))
        check_context_supported(get_estimator(self.estimator, **self.estimator_params), SIM_CONTEXT,
                                "grae sim (its policy draws trajectory indices: no tokens, log-probs or parsed answers)")


#: estimator context the simulator supplies (grae.advantage.CONTEXT_FIELDS): none, rewards only
SIM_CONTEXT: frozenset[str] = frozenset()


#: most prompts × trajectories cells (2**26: 256 MB per float32 [P, M] tensor); refused before allocating
MAX_CELLS = 2**26


@dataclass
class SimResult:
    config: dict
    ks: list[int]
    base: dict[int, float]
    final: dict[int, float]
    #: one row per evaluation: step, pass@k, ω, estimator metrics, success and Σ|A| by difficulty bin
    history: list[dict[str, Any]]
    seconds: float
    steps_per_second: float


def build_policy(cfg: SimConfig) -> SimPolicy:
    """The base policy for ``cfg.seed``: the same prompts, difficulties and correct sets for every estimator."""
    generator = torch.Generator().manual_seed(cfg.seed)
    base_p = Difficulty(cfg.difficulty).sample(cfg.prompts, generator)
    return SimPolicy(base_p, cfg.trajectories, cfg.correct, generator, parameterisation=cfg.parameterisation,
                     rank=cfg.rank, spread=cfg.spread)


def simulate_step(policy: SimPolicy, estimator, optimizer: torch.optim.Optimizer, group_size: int,
                  generator: torch.Generator | None = None, sampled: torch.Tensor | None = None,
                  loss_agg: str = "sum") -> dict[str, Any]:
    """One training step (module docstring); returns the sample, rewards and the estimator's result.
    ``sampled`` (``[P, G]`` trajectory indices) replaces the draw: a step computed by hand."""
    prompts = policy.correct.size(0)
    log_probs = torch.log_softmax(policy.logits(), dim=1)  # [P, M]
    if sampled is None:
        sampled = torch.multinomial(log_probs.detach().exp(), group_size, replacement=True, generator=generator)  # [P, G]
    rewards = policy.correct.gather(1, sampled).float().reshape(-1)  # [P·G]
    group_ids = torch.arange(prompts).repeat_interleave(group_size)  # [P·G]
    result = estimator(rewards, group_ids)
    logp = log_probs.gather(1, sampled).reshape(-1, 1)  # [P·G, 1]: one-token completions
    loss, _ = policy_loss(logp, logp.detach(), result.advantages.float(), torch.ones_like(logp),
                          weights=result.weights.float(), agg="token-mean",
                          denominator=1.0 if loss_agg == "sum" else None)  # "sum": Σ_i, Theorem 1
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return {"sampled": sampled, "rewards": rewards, "result": result}


def run_sim(cfg: SimConfig, *, ks: list[int] | None = None) -> SimResult:
    """Train ``cfg.steps`` steps; exact pass@k at the start, every ``eval_every`` steps and at the end."""
    cfg.check()
    ks = ks or powers_of_two(256)
    policy = build_policy(cfg)
    estimator = get_estimator(cfg.estimator, **cfg.estimator_params)
    optimizer = (torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam)(policy.parameters(), lr=cfg.lr)
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    base_p = policy.success()
    bins = torch.bucketize(base_p, torch.tensor(DIFFICULTY_BINS[1:-1]))  # [P]
    history = [_evaluate(policy, 0, ks, bins, None)]
    started = time.perf_counter()
    for step in range(1, cfg.steps + 1):
        out = simulate_step(policy, estimator, optimizer, cfg.group_size, generator, loss_agg=cfg.loss_agg)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            history.append(_evaluate(policy, step, ks, bins, out))
    seconds = time.perf_counter() - started
    return SimResult(asdict(cfg), ks, history[0]["pass@k"], history[-1]["pass@k"], history, seconds,
                     cfg.steps / seconds if seconds > 0 else float("inf"))


def _evaluate(policy: SimPolicy, step: int, ks: list[int], bins: torch.Tensor, out: dict | None) -> dict[str, Any]:
    success = policy.success()
    row: dict[str, Any] = {"step": step, "pass@k": exact_pass_at_k(success, ks),
                           "success_by_difficulty": _by_bin(success, bins, "mean")}
    if out is not None:
        result = out["result"]
        abs_adv = (result.advantages.abs() * (result.weights > 0)).view(bins.numel(), -1).sum(dim=1)  # [P]
        row.update(omega=float(out["rewards"].mean()), abs_adv_by_difficulty=_by_bin(abs_adv, bins, "mean"),
                   metrics={k: float(v) for k, v in result.metrics.items()})
    return row


def _by_bin(values: torch.Tensor, bins: torch.Tensor, how: str) -> dict[str, float | None]:
    labels = [f"p0[{lo:.1f},{hi:.1f})" for lo, hi in zip(DIFFICULTY_BINS[:-1], DIFFICULTY_BINS[1:])]
    return {label: (float(values[bins == b].double().mean()) if bool((bins == b).any()) else None)
            for b, label in enumerate(labels)}
