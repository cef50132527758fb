"""The report's section on the base's temperature frontier (``paired_against: temperature_frontier``): F's points,
then every method's Δ_F with its crossed seeds × problems interval and leave-one-seed-out range, beside its distance
above the baseline's checkpoint frontier (grae.eval.temperature_frontier, grae.eval.frontier_distance)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from grae.compare.rules.keeps_passk import distance_json
from grae.compare.temperature_frontier import base_temperatures
from grae.eval.frontier_distance import FrontierDistance, frontier_distance
from grae.eval.stats import per_problem_passk
from grae.eval.temperature_frontier import distance_above, frontier_table, trace_frontier

if TYPE_CHECKING:
    from grae.compare.results import StudyResults


def deciding_k(results: StudyResults) -> int:
    """The rule's k when the study has a keeps_passk rule, else the largest k every final model reaches."""
    rule = (results.study.rule or {}).get("keeps_passk")
    return int(rule["k"]) if rule else results.ks()[-1]


def checkpoint_distances(results: StudyResults, k: int) -> dict[str, FrontierDistance]:
    """Every arm's distance above the baseline's checkpoint frontier, where the table has its checkpoints' counts."""
    baseline = results.study.baseline
    by_f = results.frontier.get(baseline, {})
    if not by_f or any(cp.counts is None or min(cp.n_min.values()) < k for cp in by_f.values()):
        return {}
    checkpoints = [by_f[f].counts for f in sorted(by_f)]
    base = results.base if results.base is not None and int(results.base.n.min()) >= k else None
    return {m: frontier_distance(results.finals(m), checkpoints, base, k, 0.95) for m in results.jobs if m != baseline}


def temperature_section(results: StudyResults) -> tuple[list[str], dict[str, Any] | None]:
    """``(lines, summary)``; nothing for a study that traced no temperature frontier."""
    base = base_temperatures(results.base_files)
    if not base:
        return [], None
    k = deciding_k(results)
    frontier = trace_frontier(base, k)
    distances = {m: distance_above(results.finals(m), base, k, 0.95, frontier) for m in results.jobs}
    early = checkpoint_distances(results, k)
    baseline = results.study.baseline
    best = frontier.best()

    def cell(d: FrontierDistance | None) -> str:
        return "–" if d is None else f"{100 * d.interval.mean:+.2f} [{100 * d.interval.lo:+.2f}, {100 * d.interval.hi:+.2f}]"

    lines = ["", f"## The base's temperature frontier F (pass@1 → pass@{k}; exact, teacher-forced; %)", "",
             "The base model sampled at each temperature of the grid; **F** is the points no other temperature beats at "
             f"both pass@1 and pass@{k}, linear between them and flat beyond its ends: the most pass@{k} a temperature "
             f"knob gives at each pass@1. Its best pass@1 is at T = {best.temperature:g} ({100 * best.pass1:.1f}). "
             f"Δ_F = pass@{k}(arm) − F(pass@1(arm)): on or below F (≤ 0), what the arm did at k is what sharpening the "
             "base does; above F, coverage no temperature gives (grae.compare.temperature_frontier; crossed seeds × "
             "problems intervals, 95 %).", ""]
    lines += frontier_table(frontier)
    lines += ["", f"| method | pass@1 | pass@{k} | Δ_F (above F) | leaving one seed out | above {baseline}'s checkpoint "
              "frontier |", "|---|---|---|---|---|---|"]
    for m, d in distances.items():
        x, y = np.mean([per_problem_passk(c, [1, k]).mean(axis=0) for c in results.finals(m).values()], axis=0)
        lo, hi = d.loso_range if d.leave_one_out else (d.interval.mean, d.interval.mean)
        lines.append(f"| {m} | {100 * x:.1f} | {100 * y:.1f} | {cell(d)} | {100 * lo:+.2f} to {100 * hi:+.2f} | "
                     + ("(the frontier's own path)" if m == baseline else cell(early.get(m))) + " |")
    summary = {"k": k, "points": [vars(p) for p in frontier.points],
               "distances": {m: distance_json(d) for m, d in distances.items()},
               "checkpoint_distances": {m: vars(d.interval) for m, d in early.items()}}
    return lines + [""], summary
