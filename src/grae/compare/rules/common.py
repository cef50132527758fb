"""What the decision rules share: their error, Holm's family level, the margin's p-value, what would decide an
undecided interval (:func:`needed`), and the report's interval cell and pilot line."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.stats import t as student_t

from grae.compare.stats import Interval, crossed_variance, variance_components, variance_from_mean_squares


class RuleError(ValueError):
    """The study's rows cannot be read under its rule (no base rows, a k beyond them): one line."""


#: family-wise level of the rule's Holm step-down
ALPHA = 0.05


def margin_p(values: np.ndarray, margin: float) -> float:
    """Two-sided-equivalent t probability of ``values``' crossed mean lying above ``margin``:
    min(1, 2·P(T_ν ≥ (mean − margin)/se)); below a exactly when the 1 − a interval's lower bound clears it."""
    mean = float(values.mean())
    variance, dof = crossed_variance(values[:, :, None])
    se = math.sqrt(max(float(variance[0]), 0.0))
    if se == 0:
        return 0.0 if mean > margin else 1.0
    return min(1.0, 2 * float(student_t.sf((mean - margin) / se, float(dof[0]))))


#: how far :func:`needed` looks: seeds, problems, and the problem multiples it tries when neither alone decides
MAX_SEEDS, MAX_PROBLEMS, PROBLEM_FACTORS = 10 ** 6, 10 ** 9, (2, 4, 8, 16)


def projected_half_width(values: np.ndarray, level: float) -> Callable[[int, int], float]:
    """``values[seeds, problems]`` → the ``level`` interval's half-width at S′ seeds and P′ problems, if the
    variance components stayed as measured (grae.compare.stats.variance_components: σ²_a, σ²_b, σ²_e).

    The crossed mean's variance at (S′, P′) is σ²_a/S′ + σ²_b/P′ + σ²_e/(S′P′), scaled so that at today's
    (S, P) it is today's (grae.compare.stats.crossed_variance, with its floor); its Satterthwaite ν comes from
    the expected mean squares E[MS_seed] = σ²_e + P′σ²_a, E[MS_problem] = σ²_e + S′σ²_b, E[MS_resid] = σ²_e, so
    the t quantile grows with the design as the report's own interval would (not today's quantile)."""
    n_seeds, n_problems = values.shape
    variance_now = float(crossed_variance(values[:, :, None])[0][0])
    a, b, e = (float(x[0]) for x in variance_components(values[:, :, None]))
    if a / n_seeds + b / n_problems + e / (n_seeds * n_problems) <= 0:
        # every component estimated at 0 (the variance is its floor): count all of it as seed-level
        a, b, e = variance_now * n_seeds, 0.0, 0.0

    def variance(seeds: int, problems: int) -> float:
        return a / seeds + b / problems + e / (seeds * problems)

    scale = variance_now / variance(n_seeds, n_problems) if variance_now > 0 else 0.0

    def half_width(seeds: int, problems: int) -> float:
        expected = np.array([e + problems * a]), np.array([e + seeds * b]), np.array([e])
        projected, dof = variance_from_mean_squares(*expected, seeds, problems)
        return float(student_t.ppf(0.5 + level / 2, float(dof[0]))) * math.sqrt(scale * float(projected[0]))

    return half_width


def smallest(decides: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] with ``decides(n)``, or None. The projected half-width need not fall
    monotonically (more problems at 2 seeds lower the Satterthwaite ν towards 1), so the range is walked in
    steps of about 25 % and the first step that decides is bisected."""
    previous, n = low - 1, low
    while not decides(n):
        if n == high:
            return None
        previous, n = n, min(high, max(n + 1, n + n // 4))
    while n - previous > 1:  # decides(n), not decides(previous)
        middle = (previous + n) // 2
        previous, n = (previous, middle) if decides(middle) else (middle, n)
    return n


def needed(values: np.ndarray, margin: float, level: float) -> str:
    """What would move the undecided ``level`` interval of ``values[seeds, problems]`` past ``margin`` if the
    mean and the variance components stayed as measured: the half-width must shrink below |mean − margin|
    (:func:`projected_half_width`). Seeds alone (at the study's problems), problems alone (at its seeds), and
    when neither alone can, seeds at 2, 4, 8 or 16 times the problems."""
    n_seeds, n_problems = values.shape
    mean = float(values.mean())
    if mean == margin:
        return "its mean lies on the margin: no sample size decides it"
    gap = abs(mean - margin)
    half_width = projected_half_width(values, level)

    def seeds_at(problems: int) -> int | None:
        return smallest(lambda s: half_width(s, problems) < gap, max(n_seeds + 1, 2), MAX_SEEDS)

    seeds = seeds_at(n_problems)
    problems = smallest(lambda p: half_width(max(n_seeds, 2), p) < gap, max(n_problems + 1, 2), MAX_PROBLEMS)
    parts = [f"≈ {seeds:,} seeds at {n_problems:,} problems" if seeds else
             f"more seeds alone cannot (the problem part alone is wider at {n_problems:,} problems)",
             f"≈ {problems:,} problems at {n_seeds} seeds" if problems else
             f"more problems alone cannot (the seed part alone is wider at {n_seeds} seeds)"]
    if seeds is None and problems is None:
        for factor in PROBLEM_FACTORS:
            more = seeds_at(factor * n_problems)
            if more:
                parts.append(f"both: ≈ {more:,} seeds at {factor * n_problems:,} problems")
                break
        else:
            parts.append(f"nor both with up to {PROBLEM_FACTORS[-1]}× the problems (its mean lies "
                         f"{100 * gap:.2f} points from the margin)")
    return " or ".join(parts[:2]) + (f"; {parts[2]}" if len(parts) > 2 else "")


def cell(iv: Interval) -> str:
    """An interval in points: ``mean [lo, hi]``."""
    return f"{100 * iv.mean:+.1f} [{100 * iv.lo:+.1f}, {100 * iv.hi:+.1f}]"


def pilot_line(rule: str, min_seeds: int) -> str:
    """A rule's first line when the study has fewer seeds per arm than the rule needs."""
    return (f"**Pilot: no verdict** ({rule}): fewer than the {min_seeds} seeds per arm the rule needs; "
            "the rule's table below is a pilot's reading.")
