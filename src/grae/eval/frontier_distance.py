"""The distance of an arm above a frontier at equal pass@1, per seed × problem, so that it gets the crossed seeds ×
problems interval: ``grae compare``'s baseline checkpoint frontier, and the base's temperature frontier
(:mod:`grae.eval.temperature_frontier`) of ``grae compare`` and ``grae train``.

The frontier is a path in the (pass@1, pass@k) plane — the baseline's: the base model (0 %), then each checkpoint;
or the base's temperatures on F — ordered by pass@1 (the means over seeds and problems), linear between them and
flat beyond its ends, as :func:`grae.compare.frontier_report.above_frontier` reads it with ``extend``.
An arm's point (X_a, Y_a) lies Y_a − F(X_a) above it. Near X_a the frontier is the line through its segment's two
points i, i+1, at weight w = (X_a − X_i)/(X_{i+1} − X_i) and slope β = (Y_{i+1} − Y_i)/(X_{i+1} − X_i) (β = 0 beyond an end), so
per seed s and problem p, with x = pass@1 and y = pass@k of each model on that problem (the arm's seed s paired
with the baseline's seed s; the base is the same under every seed):

    d[s, p] = y_a[s, p] − ((1 − w)·y_i[s, p] + w·y_{i+1}[s, p]) − β·(x_a[s, p] − ((1 − w)·x_i[s, p] + w·x_{i+1}[s, p])).

Its mean over seeds and problems is exactly Y_a − F(X_a) (the last term's mean is X_a − X_a = 0), and its
cells carry the arm's and the checkpoints' seed and problem variation at pass@k *and* pass@1 (through β: an arm
whose pass@1 is high in a seed is compared with the frontier further along in that seed), so the crossed
interval of d (grae.eval.crossed.crossed_interval: t with Satterthwaite ν) is the distance's interval, w and β
held at their estimates (a linearisation: the delta method's first order). "Above the frontier" is then its
lower bound > the rule's ``frontier_margin``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grae.eval.crossed import Interval, crossed_interval
from grae.eval.stats import ProblemCounts, per_problem_passk


@dataclass
class FrontierDistance:
    """An arm's distance above the frontier (fractions): the crossed interval at the rule's level, the
    leave-one-seed-out points (seed → distance without it) and each seed's own (its point above its own path)."""

    interval: Interval
    values: np.ndarray  # d[seeds, problems]
    seeds: list[int]
    leave_one_out: dict[int, float]
    per_seed: dict[int, float]

    @property
    def loso_range(self) -> tuple[float, float]:
        return min(self.leave_one_out.values()), max(self.leave_one_out.values())


def distance_cells(arm_x: np.ndarray, arm_y: np.ndarray, path_x: np.ndarray, path_y: np.ndarray) -> np.ndarray:
    """``d[seeds, problems]`` (module docstring) from the arm's pass@1 and pass@k ``[S, P]`` and the path's
    ``[points, S, P]`` (any order: the points are sorted by their mean pass@1)."""
    means = path_x.mean(axis=(1, 2))
    order = np.argsort(means, kind="stable")
    xs, ys, px, py = means[order], path_y.mean(axis=(1, 2))[order], path_x[order], path_y[order]
    x_arm = float(arm_x.mean())
    if x_arm <= xs[0] or x_arm >= xs[-1]:  # beyond an end: its nearest end point, flat
        end = 0 if x_arm <= xs[0] else len(xs) - 1
        return arm_y - py[end]
    i = next(j for j in range(len(xs) - 1) if xs[j] <= x_arm <= xs[j + 1] and xs[j + 1] > xs[j])
    w = (x_arm - xs[i]) / (xs[i + 1] - xs[i])
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    return arm_y - ((1 - w) * py[i] + w * py[i + 1]) - slope * (arm_x - ((1 - w) * px[i] + w * px[i + 1]))


def frontier_distance(arm: dict[int, ProblemCounts], checkpoints: Sequence[dict[int, ProblemCounts]],
                      base: ProblemCounts | None, k: int, level: float) -> FrontierDistance:
    """The arm's final counts per seed against the baseline's checkpoints' counts per seed (and the base, the
    path's 0 % point): the distance's cells on the seeds and problems all of them share, its crossed interval at
    ``level``, and its leave-one-seed-out and per-seed points."""
    seeds = sorted(set(arm).intersection(*(set(c) for c in checkpoints)))
    if not seeds:
        raise ValueError("no seed shared by the arm and every checkpoint of the frontier")
    models = [arm] + list(checkpoints) + ([dict.fromkeys(seeds, base)] if base is not None else [])
    shared = set.intersection(*(set(m[s].question_ids) for m in models for s in seeds))
    problems = [q for q in arm[seeds[0]].question_ids if q in shared]
    # [models, seeds, problems, (pass@1, pass@k)] on the shared problems, in one order
    stacked = np.stack([np.stack([per_problem_passk(m[s].subset(problems), [1, k]) for s in seeds]) for m in models])
    arm_xy, path = stacked[0], stacked[1:]
    cells = distance_cells(arm_xy[..., 0], arm_xy[..., 1], path[..., 0], path[..., 1])
    (interval,) = crossed_interval(cells[:, :, None], level)

    def point(rows: list[int]) -> float:
        arm_rows, path_rows = arm_xy[rows], path[:, rows]
        return float(distance_cells(arm_rows[..., 0], arm_rows[..., 1], path_rows[..., 0], path_rows[..., 1]).mean())

    every = list(range(len(seeds)))
    leave_one_out = {s: point([j for j in every if j != i]) for i, s in enumerate(seeds)} if len(seeds) > 1 else {}
    return FrontierDistance(interval, cells, seeds, leave_one_out, {s: point([i]) for i, s in enumerate(seeds)})
