"""The base model's temperature frontier, a reference for every trained arm.

Sampling the base at a lower temperature sharpens it: pass@1 rises, large-k coverage falls. Traced exactly over a
grid of temperatures (teacher-forced gold probability p_T per held-out problem, :func:`grae.eval.gold.gold_probs`;
default 0.2, 0.3, …, 1.2) the base gives points (pass@1(T), pass@k(T)), pass@k = mean over problems of
1 − (1 − p_T)^k. **F** is their upper-right envelope — the points no other temperature beats at both pass@1 and
pass@k (Pareto-efficient), ordered by pass@1, linear between them and flat beyond its ends — so F(x) is the largest
pass@k a temperature knob on the base reaches at pass@1 x (between grid points, linearly). Temperatures below the
one of best pass@1 lose at both and lie below F; they are printed, not used.

An arm's signed distance is Δ_F = pass@k(arm) − F(pass@1(arm)): "on or below F" says that what RL did at k is what
sharpening the base does (Karan & Du 2025 match RL at k = 1 by sampling the base's power distribution); "above F"
is coverage no temperature gives. Its interval is the checkpoint frontier's computation with F as the path
(:func:`grae.eval.frontier_distance.frontier_distance`: cells per seed × problem whose mean is exactly
Δ_F, the crossed seeds × problems interval; the base's points are one fixed policy, the same under every seed).

:func:`temperature_frontier` is the library call a study script makes (per-problem p of the base at each T and of
each arm, seeds × problems); :func:`base_temperature_p` traces the base's p, and :func:`temperature_record` /
:func:`read_temperature_p` are its file (``grae compare``'s ``base/temperature_frontier.json``). ``grae compare``
(:mod:`grae.compare.temperature_frontier`) and ``grae train``'s exact held-out report
(:mod:`grae.train.exact_heldout`) both build on this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grae.eval.frontier_distance import FrontierDistance, frontier_distance
from grae.eval.gold import gold_prob_parts_at
from grae.eval.stats import EXACT_K_MAX, ProblemCounts, per_problem_passk

#: the default temperature grid: 0.2, 0.3, …, 1.2
TEMPERATURES = tuple(round(0.2 + 0.1 * i, 1) for i in range(11))


@dataclass(frozen=True)
class TemperaturePoint:
    """The base at one temperature: pass@1 and pass@k (fractions), and whether the point is on F."""

    temperature: float
    pass1: float
    passk: float
    on_frontier: bool


@dataclass
class TemperatureFrontier:
    """Every traced temperature's point (in temperature order) at ``k``; F is the points ``on_frontier``."""

    k: int
    points: list[TemperaturePoint]

    @property
    def frontier(self) -> list[TemperaturePoint]:
        """F's points in increasing pass@1."""
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: p.pass1)

    def at(self, pass1: float) -> float:
        """F(pass1): linear between F's points, flat beyond its ends."""
        f = self.frontier
        return float(np.interp(pass1, [p.pass1 for p in f], [p.passk for p in f]))

    def best(self) -> TemperaturePoint:
        """The temperature of the best pass@1 (the sharpening reference)."""
        return max(self.points, key=lambda p: (p.pass1, p.passk))


def pareto_front(xy: Sequence[tuple[float, float]]) -> list[bool]:
    """Whether each point is Pareto-efficient: no other point is at least as high in both coordinates and higher in
    one. Of identical points the first is kept."""
    out = []
    for i, (x, y) in enumerate(xy):
        beaten = any((x2 >= x and y2 >= y and (x2 > x or y2 > y)) or ((x2, y2) == (x, y) and j < i)
                     for j, (x2, y2) in enumerate(xy) if j != i)
        out.append(not beaten)
    return out


def exact_counts(p: np.ndarray, question_ids: Sequence[str] | None = None, k_max: int = EXACT_K_MAX) -> ProblemCounts:
    """Exact counts (``p`` per problem) as :mod:`grae.eval.exact` writes them; ids ``"0"``, ``"1"``, … by default."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    ids = [str(i) for i in range(len(p))] if question_ids is None else [str(q) for q in question_ids]
    if len(ids) != len(p):
        raise ValueError(f"{len(ids)} question ids for {len(p)} probabilities")
    n = np.full(len(p), float(k_max))
    return ProblemCounts(ids, n, p * n, p=p, mass=np.ones_like(p))


def trace_frontier(base: Mapping[float, ProblemCounts], k: int) -> TemperatureFrontier:
    """The base's point at each temperature of ``base`` (exact counts on the same problems) and F (module docstring)."""
    if not base:
        raise ValueError("the temperature frontier needs the base's counts at one temperature at least")
    temperatures = sorted(base)
    means = [per_problem_passk(base[t], [1, k]).mean(axis=0) for t in temperatures]
    on = pareto_front([(float(m[0]), float(m[1])) for m in means])
    return TemperatureFrontier(k, [TemperaturePoint(t, float(m[0]), float(m[1]), o)
                                   for t, m, o in zip(temperatures, means, on)])


def distance_above(arm: Mapping[int, ProblemCounts], base: Mapping[float, ProblemCounts], k: int,
                   level: float = 0.95, frontier: TemperatureFrontier | None = None) -> FrontierDistance:
    """Δ_F of an arm's final counts per seed (module docstring), on the problems the arm and the base share."""
    frontier = frontier or trace_frontier(base, k)
    seeds = sorted(arm)
    path = [dict.fromkeys(seeds, base[p.temperature]) for p in frontier.frontier]
    return frontier_distance(dict(arm), path, None, k, level)


def temperature_frontier(base_p: Mapping[float, Any], arms: Mapping[str, Any], k: int, level: float = 0.95,
                         question_ids: Sequence[str] | None = None,
                         ) -> tuple[TemperatureFrontier, dict[str, FrontierDistance]]:
    """F of the base and each arm's Δ_F with its crossed interval at ``level``.

    ``base_p``: temperature → the base's exact p per problem (``[P]``, or :class:`ProblemCounts`); ``arms``: name →
    the arm's exact p per seed and problem (``[S, P]`` in the same problem order, or ``{seed: [P] or counts}``);
    ``question_ids``: the problems' ids (default: positions)."""
    base = {float(t): v if isinstance(v, ProblemCounts) else exact_counts(v, question_ids) for t, v in base_p.items()}
    frontier = trace_frontier(base, k)
    distances = {name: distance_above(_per_seed(value, question_ids), base, k, level, frontier)
                 for name, value in arms.items()}
    return frontier, distances


def _per_seed(value: Any, question_ids: Sequence[str] | None) -> dict[int, ProblemCounts]:
    if isinstance(value, Mapping):
        return {int(s): v if isinstance(v, ProblemCounts) else exact_counts(v, question_ids) for s, v in value.items()}
    rows = np.atleast_2d(np.asarray(value, dtype=np.float64))
    return {s: exact_counts(row, question_ids) for s, row in enumerate(rows)}


def base_temperature_p(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any,
                       temperatures: Sequence[float] = TEMPERATURES, *, top_p: float = 1.0,
                       max_tokens: int | None = None) -> dict[float, np.ndarray]:
    """The base's exact p per problem at each temperature (:func:`grae.eval.gold.gold_probs`, every temperature
    from one forward pass: :func:`grae.eval.gold.gold_prob_parts_at`)."""
    parts = gold_prob_parts_at(model, tokenizer, examples, task, [float(t) for t in temperatures], top_p=top_p,
                               max_tokens=max_tokens)
    return {t: p.sum(axis=1) for t, p in parts.items()}


def temperature_record(question_ids: Sequence[str], p: Mapping[float, Any],
                       settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON record of the base's exact p per problem at each temperature: ``{"settings", "question_ids",
    "p": {repr(T): [P]}}`` (what :func:`read_temperature_p` reads)."""
    return {"settings": dict(settings or {}), "question_ids": [str(q) for q in question_ids],
            "p": {repr(float(t)): np.asarray(v, dtype=np.float64).tolist() for t, v in p.items()}}


def read_temperature_p(path: Path) -> dict[float, ProblemCounts]:
    """Temperature → the base's exact counts of the file :func:`temperature_record` describes (FileNotFoundError
    where it is missing)."""
    data = json.loads(Path(path).read_text())
    return {float(t): exact_counts(np.array(p), data["question_ids"]) for t, p in data["p"].items()}


def frontier_table(frontier: TemperatureFrontier) -> list[str]:
    """Markdown rows of every traced temperature: pass@1, pass@k, on F or below it."""
    k = frontier.k
    lines = [f"| T | pass@1 | pass@{k} | |", "|---|---|---|---|"]
    for p in frontier.points:
        where = "on F" if p.on_frontier else f"below F by {100 * (frontier.at(p.pass1) - p.passk):.1f}"
        lines.append(f"| {p.temperature:g} | {100 * p.pass1:.1f} | {100 * p.passk:.1f} | {where} |")
    return lines
