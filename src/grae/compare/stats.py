"""Multi-seed statistics for compare: a crossed seeds × problems interval.

RL results vary more between seeds than between evaluation problems, and papers in this field
report 1–3 seeds. A method's pass@k is the mean over its S seeds of the mean over P held-out
problems of the per-problem pass@k (``grae.metrics``, or exact pass@k from ``grae eval --exact``).
Its uncertainty has three sources in a crossed design — which seeds were run, which problems were
drawn, and their interaction (plus sampling noise) — and every seed answers the same problems.

The interval is the two-way random-effects one of :mod:`grae.eval.crossed` (``Interval``, ``mean_squares``,
``crossed_variance``, ``variance_from_mean_squares``, ``crossed_interval``; importable from here too): V from the
seed, problem and interaction mean squares, floored at the smaller one-way part, mean ± t_ν·√V with Satterthwaite's ν.

Differences against the baseline are **paired**: seed s of a method is compared with seed s of the
baseline (same data order and sampling seed) on the same problems, and the interval is the same
crossed interval applied to the ``[seeds, problems]`` array of per-problem differences.

Why not the bootstrap this module had before: a percentile bootstrap of S = 5 seed means covers ≈ 84%
at nominal 95% when seeds dominate (≈ 75% at S = 3; it uses z, not t, and the (S−1)/S plug-in
variance), and resampling seeds and problems separately counts the sampling noise twice, so it
covers ≈ 100% when there is no seed effect. Coverage of this interval, measured on simulated studies
with a known truth: ``python bench/bench_interval_coverage.py`` (docs/compare.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import t as student_t

from grae.eval.crossed import (  # noqa: F401  (variance_from_mean_squares: imported from here by compare's rules)
    Interval,
    crossed_interval,
    crossed_variance,
    mean_squares,
    variance_from_mean_squares,
)
from grae.eval.stats import ProblemCounts, bounds_at_n, per_problem_passk


def stack_passk(per_seed: Sequence[ProblemCounts], ks: Sequence[int]) -> tuple[np.ndarray, list[str]]:
    """``[seeds, problems, ks]`` per-problem pass@k on the problems every seed has."""
    shared = [q for q in per_seed[0].question_ids if all(q in set(c.question_ids) for c in per_seed[1:])]
    return np.stack([per_problem_passk(c.subset(shared), ks) for c in per_seed]), shared


def variance_components(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``values[seeds, problems, ks]`` → the seed, problem and interaction variances (σ²_a, σ²_b, σ²_e) of
    x[s, p] = μ + a_s + b_p + e_sp per k, each floored at 0: E[MS_seed] = σ²_e + P·σ²_a,
    E[MS_problem] = σ²_e + S·σ²_b, E[MS_resid] = σ²_e, so the grand mean's variance at S seeds and P
    problems is σ²_a/S + σ²_b/P + σ²_e/(S·P). One seed (or one problem) puts the whole one-way variance
    in the problem (seed) part."""
    n_seeds, n_problems, n_ks = values.shape
    if n_seeds == 1 or n_problems == 1:
        zero = np.zeros(n_ks)
        means, n = (values.mean(axis=0), n_problems) if n_seeds == 1 else (values.mean(axis=1), n_seeds)
        part = means.var(axis=0, ddof=1) if n > 1 else zero
        return (zero, part, zero) if n_seeds == 1 else (part, zero, zero)
    ms_seed, ms_problem, ms_resid = mean_squares(values)
    return (np.maximum(ms_seed - ms_resid, 0) / n_problems, np.maximum(ms_problem - ms_resid, 0) / n_seeds,
            np.maximum(ms_resid, 0))


def proportion_interval(values: np.ndarray, level: float = 0.95, *, outcomes: int = 1) -> list[Interval]:
    """``values[seeds, problems, ks]`` of proportions (pass@k in [0, 1]) → one interval per k for their grand
    mean that stays inside [0, 1]: the crossed interval built on the logit scale.

    :func:`crossed_interval` is mean ± t_ν·√V; at 2–3 seeds t_ν is 4–13 and a mean near 0 or 1 gets bounds
    beyond them (``73.8 [-37.4, 184.9]``). Here V and Satterthwaite's ν are the same (:func:`crossed_variance`),
    carried to the logit scale by the delta method, where the mean's distribution is closer to symmetric:

        expit(logit(p) ± t_ν·√V / (p·(1 − p))),

    inside (0, 1) for every V, ≈ mean ± t_ν·√V where √V is small against p(1 − p), and longer on the side away
    from the nearer bound. The mean is unchanged. V = 0 (every cell equal: p at 0 or 1, or seeds that agree
    exactly on one column; or both one-way parts estimated at 0) would give [p, p]; there the interval is the
    binomial one at the n the mean rests on (:func:`grae.eval.stats.bounds_at_n`: one-sided at 0 or 1, Wilson's
    inside), n = the problems P, or with one problem (a column of training-batch fractions) the seeds × the 0/1
    ``outcomes`` behind each seed's value.
    Coverage on simulated studies, beside the symmetric interval's and Wilson's at the same V: docs/compare.md
    (``python bench/bench_interval_coverage.py --bounded``). Only the shown intervals of a method's own pass@k
    use it: paired differences and every decision rule keep :func:`crossed_interval`."""
    point = values.mean(axis=(0, 1))
    variance, dof = crossed_variance(values)
    lo, hi = logit_bounds(point, variance, student_t.ppf(0.5 + level / 2, dof))
    n_eff = effective_n(values, outcomes)
    return [Interval(float(m), float(a), float(b)) if v > 0 else
            Interval(float(m), *bounds_at_n(float(m), n_eff, level), n_eff=n_eff)
            for m, a, b, v in zip(point, lo, hi, variance)]


def interval_text(iv: Interval, scale: float = 100.0) -> str:
    """``81.2 [57.2, 93.4]`` as the report tables show a proportion; ``100.0 [68.8, 100.0] (n=8)`` where the interval
    rests on its effective n alone (:attr:`Interval.n_eff`)."""
    return f"{scale * iv.mean:.1f} [{scale * iv.lo:.1f}, {scale * iv.hi:.1f}]" + n_note(iv.n_eff)


def n_note(n_eff: int | None) -> str:
    """`` (n=8)`` after an interval that rests on its effective n alone; "" otherwise."""
    return "" if n_eff is None else f" (n={n_eff})"


def p_text(p: float, name: str = "p") -> str:
    """``p=0.03``, ``p<0.005`` below what two decimals show (never ``p=0.00``), ``p=nan`` where there is none."""
    return f"{name}<0.005" if p < 0.005 else f"{name}={p:.2f}"


def effective_n(values: np.ndarray, outcomes: int = 1) -> int:
    """The n a mean of ``values[seeds, problems, ks]`` rests on where its spread cannot be estimated: the
    problems (every seed answers the same ones), or with one problem the seeds × ``outcomes`` each."""
    n_seeds, n_problems, _ = values.shape
    return n_problems if n_problems > 1 else n_seeds * max(int(outcomes), 1)


def difference_interval(values: np.ndarray, level: float = 0.95) -> list[Interval]:
    """:func:`crossed_interval` of ``[seeds, problems, ks]`` paired differences as the reports show them: where
    every cell is equal (0: the two agree on every problem) the interval is the binomial one at the effective n
    (:func:`grae.eval.stats.bounds_at_n`), not [0, 0]. Decision rules keep :func:`crossed_interval`."""
    out = crossed_interval(values, level)
    n_eff = effective_n(values)
    for iv, variance in zip(out, crossed_variance(values)[0]):
        if variance <= 0:
            lo, hi = bounds_at_n(iv.mean, n_eff, level, difference=True)
            if (lo, hi) != (iv.mean, iv.mean):
                iv.lo, iv.hi, iv.n_eff = lo, hi, n_eff
    return out


def logit_bounds(mean: np.ndarray, variance: np.ndarray, t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``expit(logit(mean) ± t·√variance / (mean·(1 − mean)))`` for proportions ``mean`` whose estimate has
    ``variance`` (:func:`proportion_interval`), elementwise; [mean, mean] where the variance is 0 or the mean is
    at 0 or 1."""
    from scipy.special import expit

    mean = np.clip(np.asarray(mean, dtype=float), 0.0, 1.0)
    variance = np.broadcast_to(np.maximum(np.asarray(variance, dtype=float), 0.0), mean.shape)
    inside = (mean > 0) & (mean < 1) & (variance > 0)
    p = np.where(inside, mean, 0.5)
    centre = np.log(p / (1 - p))
    half = np.asarray(t, dtype=float) * np.sqrt(variance) / (p * (1 - p))
    return np.where(inside, expit(centre - half), mean), np.where(inside, expit(centre + half), mean)


def two_level_bootstrap(values: np.ndarray, draws: int = 2000, seed: int = 0, level: float = 0.95) -> list[Interval]:
    """Kept name (studies and tests call it): the crossed seeds × problems interval, ``draws``/``seed`` unused."""
    del draws, seed
    return crossed_interval(values, level)


def method_passk(per_seed: Sequence[ProblemCounts], ks: Sequence[int], *, draws: int = 2000,
                 seed: int = 0) -> dict[int, Interval]:
    """Per k: a method's pass@k over its seeds and the problems they share, with its interval inside [0, 1]
    (:func:`proportion_interval`; ``draws``/``seed`` unused)."""
    del draws, seed
    values, _ = stack_passk(per_seed, ks)
    return dict(zip((int(k) for k in ks), proportion_interval(values)))


def paired_vs_baseline(method: dict[int, ProblemCounts], baseline: dict[int, ProblemCounts], ks: Sequence[int], *,
                       draws: int = 2000, seed: int = 0) -> dict[int, Interval]:
    """Paired difference (method − baseline) over the seeds both have, keyed by seed value."""
    return dict(zip((int(k) for k in ks), two_level_bootstrap(paired_differences(method, baseline, ks), draws, seed)))


def paired_differences(method: dict[int, ProblemCounts], baseline: dict[int, ProblemCounts],
                       ks: Sequence[int]) -> np.ndarray:
    """``[seeds, problems, ks]`` per-problem pass@k of method − baseline, on the seeds (keyed by seed value)
    and problems both have; a fixed reference (the base, an oracle) is the same counts under every seed."""
    seeds = sorted(set(method) & set(baseline))
    if not seeds:
        raise ValueError("no seed in common with the baseline: cannot pair")
    m, shared = stack_passk([method[s] for s in seeds], ks)
    b, shared_b = stack_passk([baseline[s] for s in seeds], ks)
    common = [q for q in shared if q in set(shared_b)]
    m_idx = [shared.index(q) for q in common]
    b_idx = [shared_b.index(q) for q in common]
    return m[:, m_idx] - b[:, b_idx]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the input order: with p_(1) ≤ … ≤ p_(m),
    p̃_(j) = max over i ≤ j of min(1, (m − i + 1)·p_(i)). Rejecting where p̃ < α controls the
    family-wise error rate at α for any dependence between the tests."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted


def holm_levels(p_values: Sequence[float], alpha: float = 0.05) -> list[float]:
    """Per test, in the input order, the α of its Holm step: α/(m − j) for the test ranked j (0-based, by
    p) while Holm rejects (p below it), and from the first test it does not reject on, that test's α for
    every later one. So a test is rejected exactly when its p is below its step's α."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    levels = [alpha] * m
    step_alpha, stopped = alpha, False
    for rank, i in enumerate(order):
        if not stopped:
            step_alpha = alpha / (m - rank)
            stopped = p_values[i] >= step_alpha
        levels[i] = step_alpha
    return levels


def holm_intervals(differences: dict[str, np.ndarray], ks: Sequence[int], level: float = 0.95,
                   ) -> dict[str, dict[int, Interval]]:
    """Per arm and k: the crossed interval of the arm's ``[seeds, problems, ks]`` differences at its Holm
    step's level, and Holm's adjusted two-sided p over the arms (one family per k).

    Two-sided p = 2 × the one-sided t probability of the other sign. The arm of rank j (by p) gets level
    1 − α/(m − j + 1) while Holm still rejects; from the first arm it does not reject on, every arm gets
    that arm's level (:func:`holm_levels`). So an interval excludes 0 exactly when its adjusted p is below
    α = 1 − level."""
    arms = list(differences)
    out: dict[str, dict[int, Interval]] = {a: {} for a in arms}
    for index, k in enumerate(int(k) for k in ks):
        plain = {a: crossed_interval(differences[a][:, :, index:index + 1], level)[0] for a in arms}
        p_two = [min(1.0, 2 * plain[a].p_opposite) for a in arms]
        for a, step_alpha, adjusted in zip(arms, holm_levels(p_two, 1 - level), holm(p_two)):
            (iv,) = crossed_interval(differences[a][:, :, index:index + 1], 1 - step_alpha)
            iv.p_holm = adjusted
            out[a][k] = iv
    return out


def curve_bands(series: Sequence[Sequence[float | None]], level: float = 0.95, *, proportion: bool = False,
                lower: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step mean and a t_{S−1} band over seeds for training curves ``[seeds][steps]`` (the same seed-level fix).
    ``proportion``: the curves are fractions (ACR, a share of groups, a 0/1 reward's batch mean) and the band is
    built on the logit scale at the same variance and t (:func:`logit_bounds`), inside [0, 1]. ``lower``: the
    curves cannot go below it (entropy, an advantage mass: 0) and the band is built on the log scale of
    x − lower by the same delta method, above it."""
    length = min(len(s) for s in series)
    arr = np.array([[np.nan if v is None else v for v in s[:length]] for s in series], dtype=float)
    mean = np.nanmean(arr, axis=0)
    n = np.sum(~np.isnan(arr), axis=0).clip(min=1)
    t = student_t.ppf(0.5 + level / 2, np.maximum(n - 1, 1).astype(float))  # [steps]
    sd = np.nanstd(arr, axis=0, ddof=1 if arr.shape[0] > 1 else 0)
    if proportion:
        return (mean, *logit_bounds(mean, sd ** 2 / n, t))
    half = t * sd / np.sqrt(n)
    if lower is not None:
        above = mean - lower
        inside = (above > 0) & (half > 0)
        scale = np.where(inside, above, 1.0)
        factor = np.exp(np.where(inside, half / scale, 0.0))
        return mean, np.where(inside, lower + scale / factor, mean), np.where(inside, lower + scale * factor, mean)
    return mean, mean - half, mean + half
