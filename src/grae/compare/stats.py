"""Multi-seed statistics for compare: a two-level bootstrap over seeds and problems.

RL results vary more between seeds than between evaluation problems, and papers in this field
report 1–3 seeds. A method's pass@k is the mean over its S seeds of the mean over P held-out
problems of the unbiased per-problem pass@k (``grae.metrics``). Its uncertainty has two sources —
which seeds were run and which problems were drawn — so every bootstrap draw resamples **both**:
S seeds with replacement and P problems with replacement (one problem draw shared by all seeds and
methods, since they answer the same problems).

Differences against the baseline are **paired**: seed s of a method is compared with seed s of the
baseline (same data order and sampling seed) on the same problems, and the bootstrap resamples
(seed, problem) pairs of per-problem differences. We report the mean difference, its 95 % percentile
interval and the fraction of draws on the other side of zero. We chose a fixed-budget bootstrap over
a sequential test (AdaStop) because the studies run a fixed grid of seeds on a CPU and need one
interval per k; with fewer than 5 seeds the seed-level bootstrap underestimates the spread, and
the report says so.
"""

from __future__ import annotations

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


def _draws(num_seeds: int, num_problems: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    seed_idx = rng.integers(0, num_seeds, size=(draws, num_seeds))
    problem_w = rng.multinomial(num_problems, np.full(num_problems, 1.0 / num_problems), size=draws)
    return seed_idx, problem_w


def two_level_bootstrap(values: np.ndarray, draws: int = 2000, seed: int = 0, level: float = 0.95) -> list[Interval]:
    """``values[seeds, problems, ks]`` → one interval per k for the mean over seeds and problems."""
    n_seeds, n_problems, _ = values.shape
    point = values.mean(axis=(0, 1))
    seed_idx, problem_w = _draws(n_seeds, n_problems, draws, seed)
    per_seed_means = np.einsum("dp,spk->dsk", problem_w, values) / n_problems  # [draws, seeds, ks]
    stats = np.take_along_axis(per_seed_means, seed_idx[:, :, None], axis=1).mean(axis=1)  # [draws, ks]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(stats, tail, axis=0), np.percentile(stats, 100 - tail, axis=0)
    opposite = np.where(point >= 0, (stats <= 0).mean(axis=0), (stats >= 0).mean(axis=0))
    return [Interval(float(m), float(a), float(b), float(o)) for m, a, b, o in zip(point, lo, hi, opposite)]


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
    """Per-step mean and a normal-approximation band over seeds for training curves ``[seeds][steps]``."""
    length = min(len(s) for s in series)
    arr = np.array([[np.nan if v is None else v for v in s[:length]] for s in series], dtype=float)
    mean = np.nanmean(arr, axis=0)
    n = np.sum(~np.isnan(arr), axis=0).clip(min=1)
    half = 1.96 * np.nanstd(arr, axis=0, ddof=1 if arr.shape[0] > 1 else 0) / np.sqrt(n)
    return mean, mean - half, mean + half
