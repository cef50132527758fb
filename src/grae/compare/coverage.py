"""Simulated studies with a known truth, to measure the coverage of ``grae.compare.stats``' intervals.

A study is S seeds × P held-out problems × n samples per problem, as ``grae compare`` runs it. Each
problem has a difficulty logit θ_p ~ N(μ, σ_problem); each seed a logit shift δ_s ~ N(0, σ_seed)
(which training seed was run); each (seed, problem) cell an interaction ε_sp ~ N(0, σ_interaction).
A seed solves a problem with probability q = sigmoid(θ_p + δ_s + ε_sp), and the evaluation draws
c ~ Binomial(n, q) correct samples, from which the unbiased per-problem pass@k is computed. The truth
is the population mean E[pass@k(q)] over seeds and problems. For paired differences two methods share
the problems and the seed index (same data order), the method adds ``shift`` to the logit and has its
own seed effects and interactions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from grae.compare.stats import crossed_interval
from grae.metrics import pass_at_k_many


@dataclass(frozen=True)
class Scenario:
    name: str
    seeds: int
    problems: int = 200
    samples: int = 256
    mu: float = -2.0
    sigma_problem: float = 2.0
    sigma_seed: float = 0.0
    sigma_interaction: float = 0.0
    shift: float = 0.3  # the method's logit gain over the baseline (paired studies)


SCENARIOS = (
    Scenario("seed-dominated, 3 seeds", seeds=3, sigma_seed=0.5, sigma_interaction=0.2),
    Scenario("seed-dominated, 5 seeds", seeds=5, sigma_seed=0.5, sigma_interaction=0.2),
    Scenario("moderate, 5 seeds", seeds=5, sigma_seed=0.1, sigma_interaction=0.3),
    Scenario("seed-free, 5 seeds", seeds=5),
    Scenario("seed-free, 3 seeds", seeds=3),
    Scenario("seeds strongly dominate, 3 seeds", seeds=3, sigma_seed=1.0, sigma_interaction=0.1),
)

#: studies below the 3 seeds a verdict needs (grae.compare.report_header's pilot banner quotes their coverage)
PILOT_SCENARIOS = (
    Scenario("seed-dominated, 2 seeds", seeds=2, sigma_seed=0.5, sigma_interaction=0.2),
    Scenario("seeds strongly dominate, 2 seeds", seeds=2, sigma_seed=1.0, sigma_interaction=0.1),
)

#: studies whose pass@k lies near 0 or 1 with few problems and seeds (a quick-start study: 20 problems × 16
#: samples): where a symmetric interval crosses the bounds, and :func:`grae.compare.stats.proportion_interval`
#: must still cover
BOUNDARY_SCENARIOS = (
    Scenario("easy, 20 problems, 2 seeds", seeds=2, problems=20, samples=16, mu=1.5, sigma_problem=1.5,
             sigma_seed=0.5, sigma_interaction=0.2),
    Scenario("easy, 20 problems, 3 seeds", seeds=3, problems=20, samples=16, mu=1.5, sigma_problem=1.5,
             sigma_seed=0.5, sigma_interaction=0.2),
    Scenario("hard, 20 problems, 3 seeds", seeds=3, problems=20, samples=16, mu=-3.0, sigma_problem=1.5,
             sigma_seed=0.5, sigma_interaction=0.2),
    Scenario("easy, 20 problems, 5 seeds, no seed effect", seeds=5, problems=20, samples=16, mu=1.5, sigma_problem=1.5),
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logits(sc: Scenario, rng: np.random.Generator, theta: np.ndarray, shift: float) -> np.ndarray:
    seed_effect = rng.normal(0.0, sc.sigma_seed, size=(sc.seeds, 1)) if sc.sigma_seed else 0.0
    interaction = rng.normal(0.0, sc.sigma_interaction, size=(sc.seeds, theta.size)) if sc.sigma_interaction else 0.0
    return np.broadcast_to(theta[None, :] + shift + seed_effect + interaction, (sc.seeds, theta.size))  # [S, P]


def _passk(sc: Scenario, rng: np.random.Generator, logits: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    correct = rng.binomial(sc.samples, _sigmoid(logits))  # [S, P]
    n = np.full(correct.size, sc.samples)
    return np.stack([pass_at_k_many(n, correct.ravel(), k).reshape(correct.shape) for k in ks], axis=-1)


def truth(sc: Scenario, ks: Sequence[int], *, paired: bool, draws: int = 400_000, seed: int = 12345) -> np.ndarray:
    """Population mean pass@k (or method − baseline), by Monte Carlo over the model's distributions."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(sc.mu, sc.sigma_problem, size=draws)

    def mean_passk(shift: float) -> np.ndarray:
        noise = rng.normal(0.0, np.hypot(sc.sigma_seed, sc.sigma_interaction), size=draws)
        q = _sigmoid(theta + shift + noise)
        return np.array([np.mean(1 - (1 - q) ** k) for k in ks])

    return mean_passk(sc.shift) - mean_passk(0.0) if paired else mean_passk(0.0)


def coverage(sc: Scenario, ks: Sequence[int], *, repetitions: int, paired: bool, level: float = 0.95,
             seed: int = 0, interval: Callable = crossed_interval) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of simulated studies whose interval covers the truth, and the mean interval width, per k;
    ``interval(values, level)`` is the interval measured (a method's mean: also
    :func:`grae.compare.stats.proportion_interval`)."""
    target = truth(sc, ks, paired=paired)
    rng = np.random.default_rng(seed)
    hits = np.zeros(len(ks))
    width = np.zeros(len(ks))
    for _ in range(repetitions):
        theta = rng.normal(sc.mu, sc.sigma_problem, size=sc.problems)
        values = _passk(sc, rng, _logits(sc, rng, theta, sc.shift if paired else 0.0), ks)
        if paired:
            values = values - _passk(sc, rng, _logits(sc, rng, theta, 0.0), ks)
        intervals = interval(values, level)
        hits += [iv.lo <= t <= iv.hi for iv, t in zip(intervals, target)]
        width += [iv.hi - iv.lo for iv in intervals]
    return hits / repetitions, width / repetitions
