"""The crossed seeds × problems interval of a mean: an RL result's uncertainty over which seeds were run and which
held-out problems were drawn.

A method's pass@k is the mean over its S seeds of the mean over P held-out problems of the per-problem pass@k
(``grae.metrics``, or exact pass@k). Its uncertainty has three sources in a crossed design — which seeds were run,
which problems were drawn, and their interaction (plus sampling noise) — and every seed answers the same problems.

Two-way random-effects model without replication, x[s, p] = μ + a_s + b_p + e_sp. With the mean
squares MS_seed = P·Var(seed means), MS_problem = S·Var(problem means) and MS_resid (the interaction),
the variance of the grand mean is estimated without bias by

    V = s²_seed / S + s²_problem / P − s²_resid / (S·P) = (MS_seed + MS_problem − MS_resid) / (S·P),

(s²_seed, s²_problem: sample variances of the seed and problem means; s²_resid = MS_resid). It can go
negative, so it is floored at the **smaller** of its two one-way parts, min(MS_seed, MS_problem)/(S·P).
Why the smaller: unfloored, V is unbiased, and any floor biases it up wherever it binds. The larger part
binds whenever the smaller is below MS_resid, which without a seed effect is half of all studies
(E[MS_seed] = σ²_e = E[MS_resid]), so it inflates V there: in 1,500 simulated studies per row, 5 seeds
and no seed effect, paired pass@1/16/256 covered 0.961 / 0.969 / 0.981 with the larger floor against
0.946 / 0.955 / 0.969 with the smaller (bench/bench_interval_coverage.py). The smaller part binds only
where both variance components are estimated negative, and then keeps V positive at the scale of a
one-way estimate.
The interval is mean ± t_ν·√V with
Satterthwaite's degrees of freedom ν: ≈ S − 1 when seeds dominate, ≈ P − 1 when they do not, so it
is neither the too-narrow normal interval at 3–5 seeds nor the too-wide t_{S−1} when seeds agree.
t_ν's quantiles and tail probabilities are ``scipy.stats.t``'s (non-integer ν included).

With one seed (one trained model) it is the t interval over the problems (ν = P − 1). ``grae compare``'s statistics
(:mod:`grae.compare.stats`) and the temperature frontier's distance (:mod:`grae.eval.frontier_distance`) build on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t


@dataclass
class Interval:
    """A mean (a fraction, or a difference of fractions) and its interval's bounds."""

    mean: float
    lo: float
    hi: float
    #: for differences: the one-sided t probability of the opposite sign of ``mean`` (≈ one-sided p)
    p_opposite: float = float("nan")
    #: for differences in a family of several arms (:func:`grae.compare.stats.holm_intervals`): Holm's adjusted two-sided p
    p_holm: float = float("nan")
    #: set where the values left no spread to estimate from (every cell equal: seeds that agree exactly, every
    #: problem at 0 or 100 %): the interval is the binomial one at this n (grae.eval.stats.bounds_at_n)
    n_eff: int | None = None


def mean_squares(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``values[seeds, problems, ks]`` (S, P ≥ 2) → (MS_seed, MS_problem, MS_resid) per k: P·Var(seed
    means), S·Var(problem means) and the interaction mean square (module docstring)."""
    n_seeds, n_problems, _ = values.shape
    seed_means = values.mean(axis=1)  # [S, K]
    problem_means = values.mean(axis=0)  # [P, K]
    grand = values.mean(axis=(0, 1))
    resid = values - seed_means[:, None, :] - problem_means[None, :, :] + grand  # [S, P, K]
    ms_seed = n_problems * seed_means.var(axis=0, ddof=1)
    ms_problem = n_seeds * problem_means.var(axis=0, ddof=1)
    return ms_seed, ms_problem, (resid ** 2).sum(axis=(0, 1)) / ((n_seeds - 1) * (n_problems - 1))


def crossed_variance(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values[seeds, problems, ks]`` → (V, Satterthwaite ν) per k for the grand mean (module docstring)."""
    n_seeds, n_problems, _ = values.shape
    if n_seeds == 1 or n_problems == 1:  # one-way: only one source can be estimated
        means, n = (values.mean(axis=0), n_problems) if n_seeds == 1 else (values.mean(axis=1), n_seeds)
        if n == 1:
            return np.zeros(values.shape[2]), np.full(values.shape[2], np.inf)
        return means.var(axis=0, ddof=1) / n, np.full(values.shape[2], n - 1.0)
    return variance_from_mean_squares(*mean_squares(values), n_seeds, n_problems)


def variance_from_mean_squares(ms_seed: np.ndarray, ms_problem: np.ndarray, ms_resid: np.ndarray, n_seeds: int,
                               n_problems: int) -> tuple[np.ndarray, np.ndarray]:
    """(MS_seed, MS_problem, MS_resid) of an S × P design → (V, Satterthwaite ν) of its grand mean, V floored at
    min(MS_seed, MS_problem)/(S·P) (module docstring); also for projected designs (grae.compare.rules.common)."""
    df_resid = (n_seeds - 1) * (n_problems - 1)
    cells = n_seeds * n_problems
    unbiased = (ms_seed + ms_problem - ms_resid) / cells
    variance = np.maximum(unbiased, np.minimum(ms_seed, ms_problem) / cells)  # floor: module docstring
    numerator = (variance * cells) ** 2
    denominator = ms_seed ** 2 / (n_seeds - 1) + ms_problem ** 2 / (n_problems - 1) + ms_resid ** 2 / df_resid
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = np.where(denominator > 0, numerator / denominator, np.inf)
    return variance, np.clip(dof, 1.0, None)


def crossed_interval(values: np.ndarray, level: float = 0.95) -> list[Interval]:
    """``values[seeds, problems, ks]`` → one interval per k for the mean over seeds and problems.

    ``p_opposite`` is the one-sided t probability of the other sign (≈ a one-sided p-value).
    """
    point = values.mean(axis=(0, 1))
    variance, dof = crossed_variance(values)
    out = []
    for m, v, nu in zip(point, variance, dof):
        se = math.sqrt(max(float(v), 0.0))
        half = float(student_t.ppf(0.5 + level / 2, float(nu))) * se
        opposite = (0.0 if m != 0 else 0.5) if se == 0 else float(student_t.sf(abs(float(m)) / se, float(nu)))
        out.append(Interval(float(m), float(m) - half, float(m) + half, opposite))
    return out
