"""Per-problem counts from sample rows, pass@k with bootstrap confidence intervals, paired differences.

The pass@k values themselves come from :mod:`grae.metrics` (``pass_at_k_many``); this module only
groups rows into problems and resamples problems for the intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grae.metrics import pass_at_k_many, powers_of_two

from .records import RecordsError, as_label


@dataclass
class ProblemCounts:
    """Samples ``n`` and correct samples ``c`` per problem, in first-seen order of ``question_ids``."""

    question_ids: list[str]
    n: np.ndarray
    c: np.ndarray
    #: question ids that had fewer than the requested ``n`` samples and were left out
    dropped: list[str] = field(default_factory=list)
    #: exact rows (:mod:`grae.eval.exact`): p(correct) per problem; pass@k = 1 − (1 − p)^k with no
    #: sampling variance. ``n`` is then the largest k reported and ``c`` = p·n (expected correct samples).
    p: np.ndarray | None = None
    #: exact rows: the probability mass of the enumerated answer set per problem
    mass: np.ndarray | None = None

    @property
    def exact(self) -> bool:
        return self.p is not None

    @property
    def num_problems(self) -> int:
        return len(self.question_ids)

    def subset(self, question_ids: Sequence[str]) -> ProblemCounts:
        """The counts of ``question_ids`` (each must be present), in that order."""
        index = {q: i for i, q in enumerate(self.question_ids)}
        rows = [index[q] for q in question_ids]
        return ProblemCounts(list(question_ids), self.n[rows], self.c[rows],
                             p=None if self.p is None else self.p[rows],
                             mass=None if self.mass is None else self.mass[rows])


def count_problems(rows: Iterable[dict[str, Any]], n: int | None = None, *,
                   question_ids: Sequence[str] | None = None) -> ProblemCounts:
    """Group rows by ``question_id`` and count correct labels among the first ``n`` of each.

    * Rows with a ``generation_id`` are de-duplicated on ``(question_id, generation_id)`` and taken in
      ``generation_id`` order; rows without one are taken in file order.
    * ``n=None`` uses every problem's own sample count capped at the smallest one (the seeds'
      ``calculate_metrics.py`` convention: a common n for all problems). With ``n`` given, problems
      with fewer samples are left out and listed in ``dropped``.
    * ``question_ids`` restricts (and orders) the problems; missing ones count as dropped.
    """
    samples: dict[str, list[tuple[float, bool]]] = {}
    seen: dict[tuple[str, Any], bool] = {}
    exact: dict[str, dict[str, Any]] = {}
    for position, row in enumerate(rows):
        if row.get("exact") is True:
            if samples:
                raise RecordsError(f"row {position + 1}: exact rows mixed with sampled rows in one file")
            exact[str(row.get("question_id"))] = row
            continue
        if exact:
            raise RecordsError(f"row {position + 1}: sampled rows mixed with exact rows in one file")
        if "question_id" not in row or "label" not in row:
            raise RecordsError(f"row {position + 1} lacks 'question_id' or 'label': keys {sorted(row)}")
        if not isinstance(row["question_id"], (str, int)) or isinstance(row["question_id"], bool):
            raise RecordsError(f"row {position + 1}: question_id must be a string or an integer, "
                               f"got {row['question_id']!r}")
        qid = str(row["question_id"])
        gid = row.get("generation_id")
        try:
            label = as_label(row["label"])
        except RecordsError as err:
            raise RecordsError(f"row {position + 1} (question {qid}): {err}") from None
        if gid is not None and (isinstance(gid, bool) or not isinstance(gid, (int, float)) or gid < 0
                                or (isinstance(gid, float) and not gid.is_integer())):
            raise RecordsError(f"row {position + 1} (question {qid}): generation_id must be an integer >= 0 (the "
                               f"sample's index), got {gid!r}; fix the row or drop the field")
        if gid is not None:
            if (qid, gid) in seen:  # a resumed writer's duplicate: the same sample twice
                if seen[qid, gid] != label:
                    raise RecordsError(f"row {position + 1}: question {qid} generation {gid} appears twice with "
                                       "different labels; the file mixes two evaluations")
                continue
            seen[qid, gid] = label
        order = float(gid) if isinstance(gid, (int, float)) and not isinstance(gid, bool) else float("inf")
        samples.setdefault(qid, []).append((order, label))
    if exact:
        return _exact_counts(exact, n, question_ids)
    if question_ids is not None:
        wanted = [str(q) for q in question_ids]
        missing = [q for q in wanted if q not in samples]
        samples = {q: samples[q] for q in wanted if q in samples}
    else:
        missing = []
    for items in samples.values():
        items.sort(key=lambda item: item[0])  # stable: file order among equal / missing ids
    if not samples:
        raise RecordsError("no samples to count")
    sizes = {qid: len(items) for qid, items in samples.items()}
    if n is None:
        n = min(sizes.values())
    kept = [qid for qid in samples if sizes[qid] >= n]
    dropped = missing + [qid for qid in samples if sizes[qid] < n]
    if not kept:
        raise RecordsError(f"no problem has {n} samples (most has {max(sizes.values())})")
    c = [sum(label for _, label in samples[qid][:n]) for qid in kept]
    return ProblemCounts(kept, np.full(len(kept), n, dtype=np.int64), np.asarray(c, dtype=np.int64), dropped)


#: The largest k an exact file reports by default (pass@k = 1 − (1 − p)^k is defined for every k).
EXACT_K_MAX = 256


def _exact_counts(rows: dict[str, dict[str, Any]], n: int | None,
                  question_ids: Sequence[str] | None) -> ProblemCounts:
    """:class:`ProblemCounts` of exact rows ``{"question_id", "exact": true, "p", "mass", "k_max"?}``."""
    wanted = [str(q) for q in question_ids] if question_ids is not None else list(rows)
    kept = [q for q in wanted if q in rows]
    if not kept:
        raise RecordsError("no exact row for the requested problems")
    p, mass = [], []
    for q in kept:
        try:
            p.append(float(rows[q]["p"]))
            mass.append(float(rows[q].get("mass", float("nan"))))
        except (KeyError, TypeError, ValueError):
            raise RecordsError(f"exact row of question {q} lacks a numeric 'p'") from None
    p_arr = np.asarray(p)
    if np.any(~np.isfinite(p_arr)) or np.any(p_arr < 0) or np.any(p_arr > 1 + 1e-9):
        raise RecordsError("exact rows: 'p' must lie in [0, 1]")
    k_max = int(n if n is not None else rows[kept[0]].get("k_max", EXACT_K_MAX))
    p_arr = p_arr.clip(0.0, 1.0)
    return ProblemCounts(kept, np.full(len(kept), k_max, dtype=np.int64), p_arr * k_max,
                         [q for q in wanted if q not in rows], p=p_arr, mass=np.asarray(mass))


def shared_problems(counts: Sequence[ProblemCounts]) -> list[str]:
    """The question ids every one of ``counts`` has, in the first one's order (what a comparison of them
    may be computed on)."""
    if not counts:
        return []
    common = set(counts[0].question_ids).intersection(*(c.question_ids for c in counts[1:]))
    return [q for q in counts[0].question_ids if q in common]


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its percentile bootstrap interval (``lo``/``hi`` are NaN without bootstrap).
    ``n_eff``: set where the interval is the binomial one at that n (:func:`bounds_at_n`) because the values
    left no spread to resample (every problem at 0 %, at 100 %, or all equal)."""

    value: float
    lo: float = float("nan")
    hi: float = float("nan")
    n_eff: int | None = None

    def as_dict(self) -> dict[str, float]:
        out = {"value": self.value}
        if not np.isnan(self.lo):
            out.update(lo=self.lo, hi=self.hi)
        if self.n_eff is not None:
            out["n_eff"] = self.n_eff
        return out


def edge_bound(n_eff: int, level: float = 0.95) -> float:
    """How far from 0 the mean of a quantity in [0, 1] can lie, at one-sided ``level``, when ``n_eff`` independent
    draws of it were all 0: 1 − (1 − level)^(1/n_eff) (Clopper–Pearson at x = 0; ≈ 3/n_eff at 95 %, the rule of
    three). It holds for any quantity in [0, 1], not only a 0/1 one: P(X = 0) ≤ 1 − E[X], so n_eff zeros have
    probability at most (1 − E[X])^n_eff. By symmetry the same distance bounds a mean below 1 when all were 1."""
    return 1.0 - (1.0 - level) ** (1.0 / max(int(n_eff), 1))


def bounds_at_n(mean: float, n_eff: int, level: float = 0.95, *, difference: bool = False) -> tuple[float, float]:
    """The interval of a mean whose values left no spread to estimate one from (every value equal), from the n it
    rests on alone, instead of a zero-width [mean, mean]:

    * a proportion at 0 (at 1): the one-sided bound :func:`edge_bound` at ``level`` above 0 (below 1);
    * a proportion inside (0, 1): Wilson's score interval at ``n_eff``;
    * ``difference`` (values in [−1, 1], all 0): ± :func:`edge_bound` at the two-sided level, since
      P(D = 0) ≤ 1 − |E[D]| for D in [−1, 1] as for a proportion; all +1 (−1): (D + 1)/2 is a proportion at 1
      (at 0), so the mean lies within 2 · :func:`edge_bound` of it.

    A difference that is constant elsewhere in (−1, 1) is returned as [mean, mean]: nothing bounds it from n alone."""
    from scipy.stats import norm

    if difference:
        two_sided = edge_bound(n_eff, 1 - (1 - level) / 2)
        if mean == 0:
            return -two_sided, two_sided
        if abs(mean) >= 1:
            return (1 - 2 * two_sided, 1.0) if mean > 0 else (-1.0, -1 + 2 * two_sided)
        return mean, mean
    if mean <= 0.0:
        return 0.0, edge_bound(n_eff, level)
    if mean >= 1.0:
        return 1.0 - edge_bound(n_eff, level), 1.0
    z = float(norm.ppf(0.5 + level / 2))
    n = max(int(n_eff), 1)
    centre = (mean + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n))
    return float(centre - half), float(centre + half)


def _no_spread(values: np.ndarray) -> np.ndarray:
    """Per column of ``values[problems, ks]``: whether every problem has the same value (nothing to resample)."""
    return np.all(values == values[:1], axis=0)


def default_ks(counts: ProblemCounts) -> list[int]:
    """k = 1, 2, 4, … up to the smallest per-problem n (and that n itself)."""
    return powers_of_two(int(counts.n.min()))


def per_problem_passk(counts: ProblemCounts, ks: Sequence[int]) -> np.ndarray:
    """Matrix ``[problems, len(ks)]`` of unbiased per-problem pass@k (from :func:`grae.metrics.pass_at_k_many`);
    for exact counts, 1 − (1 − p)^k."""
    if counts.p is not None:
        return 1.0 - (1.0 - counts.p[:, None]) ** np.asarray(ks, dtype=np.float64)[None, :]
    return np.stack([pass_at_k_many(counts.n, counts.c, int(k)) for k in ks], axis=1)


def bootstrap_weights(num_problems: int, draws: int, seed: int) -> np.ndarray:
    """``[draws, problems]`` multiplicities of a resample of problems with replacement (rows sum to P)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(num_problems, np.full(num_problems, 1.0 / num_problems), size=draws)


def _interval(values: np.ndarray, draws: int, seed: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    weights = bootstrap_weights(values.shape[0], draws, seed)
    means = weights @ values / values.shape[0]  # [draws, K]
    tail = (1.0 - level) / 2.0 * 100.0
    return np.percentile(means, tail, axis=0), np.percentile(means, 100.0 - tail, axis=0)


def passk_estimates(counts: ProblemCounts, ks: Sequence[int] | None = None, *, bootstrap: int = 1000,
                    seed: int = 0, level: float = 0.95) -> dict[int, Estimate]:
    """Mean pass@k over problems for each k, with a percentile bootstrap interval over problems.

    ``bootstrap=0`` gives point estimates only.
    """
    ks = list(ks) if ks is not None else default_ks(counts)
    _check_ks(ks, counts)
    values = per_problem_passk(counts, ks)
    point = values.mean(axis=0)
    if bootstrap <= 0:
        return {int(k): Estimate(float(v)) for k, v in zip(ks, point)}
    lo, hi = _interval(values, bootstrap, seed, level)
    return {int(k): _estimate(v, a, b, flat, values.shape[0], level)
            for k, v, a, b, flat in zip(ks, point, lo, hi, _no_spread(values))}


def _estimate(value: float, lo: float, hi: float, flat: bool, n_eff: int, level: float,
              difference: bool = False) -> Estimate:
    """An :class:`Estimate`; where the values had no spread (``flat``) its interval is :func:`bounds_at_n`'s."""
    if not flat:
        return Estimate(float(value), float(lo), float(hi))
    lo, hi = bounds_at_n(float(value), n_eff, level, difference=difference)
    return Estimate(float(value), lo, hi, n_eff if (lo, hi) != (value, value) else None)


def paired_difference(base: ProblemCounts, other: ProblemCounts, ks: Sequence[int] | None = None, *,
                      bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[dict[int, Estimate], list[str]]:
    """pass@k of ``other`` minus ``base`` on the problems both contain, with a paired bootstrap interval.

    Both are resampled with the same problem draws, so the interval reflects the per-problem
    difference rather than two independent spreads. Returns ``(estimates, shared_question_ids)``.
    """
    in_other = set(other.question_ids)
    shared = [q for q in base.question_ids if q in in_other]
    if not shared:
        raise RecordsError("the files share no question_id: nothing to compare")
    a, b = base.subset(shared), other.subset(shared)
    ks = list(ks) if ks is not None else powers_of_two(int(min(a.n.min(), b.n.min())))
    _check_ks(ks, a)
    _check_ks(ks, b)
    diff = per_problem_passk(b, ks) - per_problem_passk(a, ks)
    point = diff.mean(axis=0)
    if bootstrap <= 0:
        return {int(k): Estimate(float(v)) for k, v in zip(ks, point)}, shared
    lo, hi = _interval(diff, bootstrap, seed, level)
    return {int(k): _estimate(v, x, y, flat, diff.shape[0], level, difference=True)
            for k, v, x, y, flat in zip(ks, point, lo, hi, _no_spread(diff))}, shared


def _check_ks(ks: Sequence[int], counts: ProblemCounts) -> None:
    n_min = int(counts.n.min())
    bad = [k for k in ks if not 1 <= int(k) <= n_min]
    if bad:
        raise RecordsError(f"k={bad} outside 1..{n_min} (samples per problem)")
