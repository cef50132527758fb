"""Multi-seed statistics for compare: intervals over seeds × problems (a crossed design).

RL results vary more between seeds than between evaluation problems, and papers in this field
report 1–3 seeds. A method's pass@k is the mean over its S seeds of the mean over P held-out
problems of the per-problem pass@k (``grae.metrics``, or exact 1 − (1 − p)^k). Its uncertainty has
two sources — which seeds were run and which problems were drawn — and both are random effects of
one crossed design (every seed answers the same problems). The interval is mean ± t_df·√V with
V = (MS_seed + MS_problem − MS_resid)/(SP) (:func:`crossed_variance`) and Satterthwaite df, which is
≈ S − 1 when seeds dominate; rates get it on the logit scale. In simulated studies with a known
truth it covers 93–97% (bench/bench_interval_coverage.py) where the two-level percentile bootstrap
it replaced (the name :func:`two_level_bootstrap` is kept) covered ≈ 75% at 3 seeds, ≈ 84% at 5 and
≈ 100% with no seed effect.

Differences against the baseline are **paired**: seed s of a method is compared with seed s of the
baseline (same data order and sampling seed) on the same problems, and the interval is computed on
the array of per-(seed, problem) differences. We report the mean difference, its 95 % interval and
the one-sided t p-value of its sign (``p_opposite``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grae.eval.stats import ProblemCounts, per_problem_passk


@dataclass
class Interval:
    mean: float
    lo: float
    hi: float
    #: for differences: fraction of bootstrap draws with the opposite sign of ``mean`` (≈ one-sided p)
    p_opposite: float = float("nan")


def stack_passk(per_seed: Sequence[ProblemCounts], ks: Sequence[int]) -> tuple[np.ndarray, list[str]]:
    """``[seeds, problems, ks]`` per-problem pass@k on the problems every seed has."""
    shared = [q for q in per_seed[0].question_ids if all(q in set(c.question_ids) for c in per_seed[1:])]
    return np.stack([per_problem_passk(c.subset(shared), ks) for c in per_seed]), shared


def t_cdf(x: float, df: float) -> float:
    """Student-t CDF by Simpson integration of the density (no scipy); ``df = inf`` is the normal."""
    if not math.isfinite(df):
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
    grid = np.linspace(0.0, abs(x), 4001)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    dens = np.exp(log_norm - (df + 1) / 2 * np.log1p(grid**2 / df))
    h = grid[1] - grid[0] if len(grid) > 1 else 0.0
    area = h / 3 * (dens[0] + dens[-1] + 4 * dens[1:-1:2].sum() + 2 * dens[2:-1:2].sum())
    return 0.5 + math.copysign(min(area, 0.5), x)


def t_quantile(q: float, df: float) -> float:
    """Student-t quantile (bisection on :func:`t_cdf`); ``df`` is rounded to 0.05 below 30, to 1 below
    1,000 and treated as infinite above (the quantile moves < 0.1% within those steps)."""
    df = round(df * 20) / 20 if df < 30 else (float(round(df)) if df < 1000 else math.inf)
    return _t_quantile(round(q, 12), df)


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    lo, hi = -1e3, 1e3
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return (lo + hi) / 2


def crossed_variance(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Variance of the grand mean of ``values[seeds, problems, ks]`` under a crossed random-effects design
    (seed, problem and residual components), and its Satterthwaite degrees of freedom, per k.

    Two-way ANOVA with one observation per cell: MS_seed = P·Σ(m_s − m)²/(S−1), MS_problem =
    S·Σ(m_p − m)²/(P−1), MS_resid = Σ(x − m_s − m_p + m)²/((S−1)(P−1)). Then
    V = σ²_seed/S + σ²_problem/P + σ²_resid/(SP) = (MS_seed + MS_problem − MS_resid)/(SP), unbiased.
    Components are not truncated at 0 (that inflates V ~1.3× when neither seeds nor problems matter);
    V ≤ 0, possible only then, falls back to max(MS_seed, MS_problem)/(SP).
    df = V²/Σ(term²/df_term): ≈ S−1 when seeds dominate, ≈ P−1 or more when they do not. With one
    seed (or one problem) it is the plain variance of the mean over the other axis, df = P−1 (S−1).
    """
    n_seeds, n_problems, _ = values.shape
    m = values.mean(axis=(0, 1))
    if n_seeds == 1 or n_problems == 1:
        flat = values.reshape(n_seeds * n_problems, -1)
        count = flat.shape[0]
        if count < 2:
            return np.full(m.shape, np.nan), np.full(m.shape, np.nan)
        return flat.var(axis=0, ddof=1) / count, np.full(m.shape, float(count - 1))
    seed_means = values.mean(axis=1)  # [S, K]
    problem_means = values.mean(axis=0)  # [P, K]
    ms_seed = n_problems * ((seed_means - m) ** 2).sum(axis=0) / (n_seeds - 1)
    ms_problem = n_seeds * ((problem_means - m) ** 2).sum(axis=0) / (n_problems - 1)
    resid = values - seed_means[:, None] - problem_means[None] + m
    df_resid = (n_seeds - 1) * (n_problems - 1)
    ms_resid = (resid**2).sum(axis=(0, 1)) / df_resid
    scale = n_seeds * n_problems
    variance = (ms_seed + ms_problem - ms_resid) / scale
    # V < 0 only by chance with no seed and no problem effect: fall back to the larger one-way term
    variance = np.where(variance > 0, variance, np.maximum(ms_seed, ms_problem) / scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = ms_seed**2 / (n_seeds - 1) + ms_problem**2 / (n_problems - 1) + ms_resid**2 / df_resid
        df = np.where(denom > 0, (ms_seed + ms_problem - ms_resid) ** 2 / denom, np.inf)
    return variance, np.maximum(df, 1.0)


def two_level_bootstrap(values: np.ndarray, draws: int = 2000, seed: int = 0, level: float = 0.95) -> list[Interval]:
    """``values[seeds, problems, ks]`` → one interval per k for the mean over seeds and problems.

    Kept under its old name: the interval is no longer a bootstrap but mean ± t_df·√V with the crossed
    design's variance and Satterthwaite df (:func:`crossed_variance`). The two-level percentile bootstrap
    it replaces covered ≈ 84% at 5 seeds and ≈ 75% at 3 when seeds dominated, ≈ 100% (1.5× too wide)
    with no seed effect (research note passk.md §1.4); this covers 93–97% in all those cases
    (bench/bench_interval_coverage.py). ``draws`` and ``seed`` are accepted and ignored. For a paired
    difference pass the difference array. ``p_opposite`` is the one-sided t p-value of the sign.
    Values all in [0, 1] (a method's pass@k, not a difference) get the interval on the logit scale
    (delta method, se/(m(1−m))): near 0 or 1 — pass@256 ≈ 0.9 — the symmetric interval covered only
    85–88% (the Wald interval's known failure), the logit one covers 93–97%.
    """
    point = values.mean(axis=(0, 1))
    variance, df = crossed_variance(values)
    bounded = bool(np.all((values >= 0) & (values <= 1)))  # rates (pass@k), not differences
    out = []
    for k in range(point.shape[0]):
        mean, var, dof = float(point[k]), float(variance[k]), float(df[k])
        if not np.isfinite(var):
            out.append(Interval(mean, float("nan"), float("nan")))
            continue
        se = math.sqrt(max(var, 0.0))
        if se == 0.0:
            out.append(Interval(mean, mean, mean, 0.0 if mean != 0 else 0.5))
            continue
        quantile = t_quantile(1 - (1 - level) / 2, dof)
        opposite = t_cdf(-abs(mean) / se, dof)
        if bounded and 0.0 < mean < 1.0:  # a rate: the interval on the logit scale (delta method)
            centre, spread = math.log(mean / (1 - mean)), quantile * se / (mean * (1 - mean))
            lo, hi = 1 / (1 + math.exp(-(centre - spread))), 1 / (1 + math.exp(-(centre + spread)))
        else:
            lo, hi = mean - quantile * se, mean + quantile * se
        out.append(Interval(mean, lo, hi, float(opposite)))
    return out


def method_passk(per_seed: Sequence[ProblemCounts], ks: Sequence[int], *, draws: int = 2000,
                 seed: int = 0) -> dict[int, Interval]:
    values, _ = stack_passk(per_seed, ks)
    return dict(zip((int(k) for k in ks), two_level_bootstrap(values, draws, seed)))


def paired_vs_baseline(method: dict[int, ProblemCounts], baseline: dict[int, ProblemCounts], ks: Sequence[int], *,
                       draws: int = 2000, seed: int = 0) -> dict[int, Interval]:
    """Paired difference (method − baseline) over the seeds both have, keyed by seed value."""
    seeds = sorted(set(method) & set(baseline))
    if not seeds:
        raise ValueError("no seed in common with the baseline: cannot pair")
    m, shared = stack_passk([method[s] for s in seeds], ks)
    b, shared_b = stack_passk([baseline[s] for s in seeds], ks)
    common = [q for q in shared if q in set(shared_b)]
    m_idx = [shared.index(q) for q in common]
    b_idx = [shared_b.index(q) for q in common]
    diff = m[:, m_idx] - b[:, b_idx]
    return dict(zip((int(k) for k in ks), two_level_bootstrap(diff, draws, seed)))


def curve_bands(series: Sequence[Sequence[float | None]], level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step mean and a t band over seeds for training curves ``[seeds][steps]``: mean ± t_{S−1}·sd/√S
    (the normal 1.96 it replaces was too narrow at 3–5 seeds: t_2 = 4.30, t_4 = 2.78)."""
    length = min(len(s) for s in series)
    arr = np.array([[np.nan if v is None else v for v in s[:length]] for s in series], dtype=float)
    mean = np.nanmean(arr, axis=0)
    n = np.sum(~np.isnan(arr), axis=0).clip(min=1)
    quantiles = np.array([t_quantile(1 - (1 - level) / 2, float(c - 1)) if c > 1 else 0.0 for c in n])
    half = quantiles * np.nanstd(arr, axis=0, ddof=1 if arr.shape[0] > 1 else 0) / np.sqrt(n)
    return mean, mean - half, mean + half
