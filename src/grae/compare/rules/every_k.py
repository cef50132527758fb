"""The rule ``non_inferior_every_k`` (study key ``rule:``): is one arm at least as good as the
baseline at every k? A pure function of the study's table, beside :mod:`grae.compare.rules.keeps_passk`.

``rule: {non_inferior_every_k: {arm: agrae, margin_vs_baseline: -1, baseline_pass1_margin_vs_base: 3,
min_seeds: 5}}`` (margins in points) reads, for every trained arm other than the baseline and at every k of
the report (1, 2, 4, … up to the rows' smallest n), d_k = pass@k(arm) − pass@k(baseline), paired by seed on
the same problems, with the report's crossed seeds × problems intervals (grae.compare.stats):

* per k, each arm's non-inferiority p = min(1, 2·P(T_ν ≥ (mean − m)/se)) against the margin m
  (:func:`grae.compare.rules.common.margin_p`), and Holm's step-down over the arms at α = 0.05, one family per k
  (:func:`grae.compare.stats.holm_levels`); each arm's interval at k is at its Holm step's level 1 − a, so
  its lower bound clears m exactly where Holm rejects;
* at k an arm **holds** when d_k's lower bound > m (non-inferior within |m| points), **fails** when its
  upper bound < 0 (below the baseline), and is otherwise **undecided**, with the seeds or problems that
  would move the first bound to reach its threshold (the lower bound to m when the mean is at or above
  m/2, else the upper bound to 0) if the mean and the variance components stayed as measured
  (:func:`grae.compare.rules.common.needed`). With m < 0 an interval inside (m, 0) both holds and fails: it counts
  as fails (marked in the table), which is how the arm's reading below resolves it;
* an arm is **supported** ("arm ≥ baseline at every k") only if it holds at every k, **refuted** if it
  fails at any k, otherwise **inconclusive**. Holm adjusts over the arms within each k, not over the k's:
  a refuted call reads every k's upper bound, so its chance of erring is not bounded by 0.05 across them.

The report's first line (:func:`answer_line`) states the reading of the claim's arm (key ``arm``); the other
arms are read the same way in the table (not criteria). Before that: with fewer than ``min_seeds`` seeds
per arm it says pilot, no verdict; a baseline whose pass@1 − base 95 % lower bound is at or below
``baseline_pass1_margin_vs_base`` did not learn, and the line says the regime cannot test the claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from grae.compare.rules.common import ALPHA, RuleError, cell, margin_p, needed, pilot_line
from grae.compare.stats import Interval, crossed_interval, holm, holm_levels, paired_differences

if TYPE_CHECKING:
    from grae.compare.results import StudyResults

NAME = "non_inferior_every_k"


@dataclass
class AtK:
    """One arm at one k (differences in fractions, not points)."""

    k: int
    interval: Interval  # d_k = pass@k(arm) − pass@k(baseline), at ``level``
    level: float  # the arm's Holm step level 1 − a at this k
    p: float  # non-inferiority p of the margin
    p_holm: float  # Holm's adjusted p over the arms at this k
    decision: str  # "holds", "fails" or "undecided"
    resolve: str  # undecided: what would decide it ("" otherwise)


@dataclass
class ArmReading:
    """One arm at every k, and its reading of "arm ≥ baseline at every k"."""

    arm: str
    by_k: list[AtK]

    def ks(self, decision: str) -> list[int]:
        return [a.k for a in self.by_k if a.decision == decision]

    @property
    def reading(self) -> str:
        """"refuted" if it fails at any k, else "supported" if it holds at every k, else "inconclusive"."""
        return "refuted" if self.ks("fails") else "inconclusive" if self.ks("undecided") else "supported"


@dataclass
class EveryKOutcome:
    arm: str  # the claim's arm
    margin: float  # m, a fraction
    ks: list[int]
    seeds: int
    min_seeds: int
    arms: list[ArmReading]  # the claim's arm first, then the others in the study's order
    baseline_vs_base: Interval  # the baseline's pass@1 − base (95 %)
    baseline_margin: float  # the baseline learned when baseline_vs_base's lower bound is above it (a fraction)

    @property
    def baseline_learned(self) -> bool:
        return self.baseline_vs_base.lo > self.baseline_margin

    @property
    def claim(self) -> ArmReading:
        return self.arms[0]


def judge(k: int, values: np.ndarray, interval: Interval, level: float, p: float, p_holm: float,
          margin: float) -> AtK:
    """One arm at k (module docstring): fails (upper bound < 0) before holds (lower bound > ``margin``), else
    undecided with what would move its first bound to reach its threshold."""
    if interval.hi < 0:
        return AtK(k, interval, level, p, p_holm, "fails", "")
    if interval.lo > margin:
        return AtK(k, interval, level, p, p_holm, "holds", "")
    lower_first = interval.mean - margin >= -interval.mean  # the lower bound reaches the margin first
    threshold, bound = (margin, f"lower bound past {100 * margin:+.1f}") if lower_first else (0.0, "upper bound below 0")
    return AtK(k, interval, level, p, p_holm, "undecided", f"{bound}: {needed(values, threshold, level)}")


def decide(results: StudyResults) -> EveryKOutcome:
    """The rule (module docstring) on every trained arm other than the baseline, at every k of the report."""
    study = results.study
    spec = study.rule[NAME]
    margin = spec["margin_vs_baseline"] / 100
    base, baseline = results.base, study.baseline
    if base is None:
        raise RuleError(f"rule.{NAME}: the study has no base model rows (base/…jsonl) to tell whether {baseline} "
                        "learned; give the study eval: {…} so that compare evaluates the base")
    arms = [m for m in results.jobs if m != baseline]
    if spec["arm"] not in arms:
        raise RuleError(f"rule.{NAME}.arm = {spec['arm']!r}: not a trained arm of these rows other than {baseline} "
                        f"({arms})")
    arms = [spec["arm"]] + [a for a in arms if a != spec["arm"]]
    ks = results.ks()
    finals = {m: results.finals(m) for m in results.jobs}
    differences = {a: paired_differences(finals[a], finals[baseline], ks) for a in arms}
    by_k: dict[str, list[AtK]] = {a: [] for a in arms}
    for index, k in enumerate(ks):
        values = {a: differences[a][:, :, index] for a in arms}
        p = [margin_p(values[a], margin) for a in arms]
        for a, p_a, step_alpha, p_adjusted in zip(arms, p, holm_levels(p, ALPHA), holm(p)):
            (interval,) = crossed_interval(values[a][:, :, None], 1 - step_alpha)
            by_k[a].append(judge(k, values[a], interval, 1 - step_alpha, p_a, p_adjusted, margin))
    (baseline_vs_base,) = crossed_interval(paired_differences(finals[baseline], dict.fromkeys(finals[baseline], base), [1]))
    seeds = min(len(by_seed) for by_seed in results.jobs.values())
    return EveryKOutcome(spec["arm"], margin, ks, seeds, int(spec["min_seeds"]), [ArmReading(a, by_k[a]) for a in arms],
                         baseline_vs_base, spec["baseline_pass1_margin_vs_base"] / 100)


def _ks(ks: list[int]) -> str:
    return ", ".join(map(str, ks)) if ks else "–"


def answer_line(outcome: EveryKOutcome, baseline: str) -> str:
    """The report's first line: the claim's arm supported, refuted (naming the k's it fails at) or
    inconclusive (naming the undecided k's), or why there is no verdict."""
    claim, n_arms = outcome.claim, len(outcome.arms)
    rule = (f"rule `{NAME}`: {outcome.arm} − {baseline} at k = 1 … {outcome.ks[-1]}, margin {100 * outcome.margin:+.1f}, "
            f"Holm over {n_arms} arm{'s' * (n_arms != 1)} per k, {outcome.seeds} seed{'s' * (outcome.seeds != 1)}")
    if outcome.seeds < outcome.min_seeds:
        return pilot_line(rule, outcome.min_seeds)
    if not outcome.baseline_learned:
        return (f"**No verdict: this regime cannot test the claim** ({rule}): {baseline} − base at pass@1 is "
                f"{cell(outcome.baseline_vs_base)} (95 %), lower bound not above {100 * outcome.baseline_margin:+.1f}, "
                f"so {baseline} did not learn.")
    claim_text = f"{outcome.arm} ≥ {baseline} at every k"
    if claim.reading == "supported":
        return (f"**Answer: supported** — {claim_text}: non-inferior within {abs(100 * outcome.margin):.1f} points at "
                f"every k ({rule}).")
    if claim.reading == "refuted":
        return (f"**Answer: refuted** — {claim_text}: {outcome.arm} falls below {baseline} (upper bound < 0) at "
                f"k = {_ks(claim.ks('fails'))} ({rule}).")
    holds = claim.ks("holds")
    return (f"**Answer: inconclusive** — {claim_text}: undecided at k = {_ks(claim.ks('undecided'))}, holds at "
            + (f"k = {_ks(holds)}" if holds else "no k") + f" ({rule}).")


def rule_lines(outcome: EveryKOutcome, baseline: str) -> list[str]:
    """The report's rule section: the procedure, each arm's reading, one row per arm and k at its Holm
    level, what would decide each undecided k, and the baseline's pass@1 − base."""
    m = 100 * outcome.margin
    lines = ["", f"## Decision rule: is {outcome.arm} ≥ {baseline} at every k? (points; intervals at each arm's Holm "
             "level per k)", "",
             f"Per arm other than {baseline} (grae.compare.rules.every_k): d_k = pass@k − {baseline}, paired by seed on "
             f"the same problems, crossed seeds × problems intervals, at k = {_ks(outcome.ks)}. Per k, Holm (α = "
             f"{ALPHA}) runs over the {len(outcome.arms)} arms on the non-inferiority p of the margin {m:+.1f} (the "
             "two-sided-equivalent t probability); every interval at k is at its arm's Holm step level, so its lower "
             f"bound clears {m:+.1f} exactly where p_holm < {ALPHA}. At k an arm **holds** when d_k's lower bound > "
             f"{m:+.1f}, **fails** when its upper bound < 0 (fails even when its lower bound also clears the margin), "
             f"otherwise is **undecided**. An arm is **supported** when it holds at every k, **refuted** when it fails "
             f"at any k, otherwise **inconclusive**. The claim is {outcome.arm}'s reading; the other arms are read the "
             "same way (not criteria).", "",
             "| arm | reading | holds at k | fails at k | undecided at k |", "|---|---|---|---|---|"]
    lines += [f"| {a.arm}{' (the claim)' if a is outcome.claim else ''} | **{a.reading}** | {_ks(a.ks('holds'))} | "
              f"{_ks(a.ks('fails'))} | {_ks(a.ks('undecided'))} |" for a in outcome.arms]
    lines += ["", f"| arm | k | d_k = pass@k − {baseline} | level | p | p_holm | at k |", "|---|" + "---|" * 6]
    lines += [f"| {a.arm} | {at.k} | {cell(at.interval)} | {100 * at.level:.2f}% | {at.p:.3g} | {at.p_holm:.3g} | "
              f"**{at.decision}**" + (f" (also lower bound > {m:+.1f})" if at.decision == "fails" and
                                      at.interval.lo > outcome.margin else "") + " |"
              for a in outcome.arms for at in a.by_k]
    undecided = [(a.arm, at) for a in outcome.arms for at in a.by_k if at.resolve]
    if undecided:
        lines += ["", "What would decide the undecided k (if each mean and variance component stayed as measured; at "
                  "its level, with the t quantile that design would have):", ""]
        lines += [f"- {arm} at k = {at.k}, {cell(at.interval)}: {at.resolve}" for arm, at in undecided]
    learned = "learned" if outcome.baseline_learned else "did not learn: no verdict"
    lines += ["", f"{baseline} − base at pass@1: {cell(outcome.baseline_vs_base)} (95 %): {baseline} {learned} (lower "
              f"bound {'above' if outcome.baseline_learned else 'not above'} {100 * outcome.baseline_margin:+.1f}).", ""]
    return lines


def outcome_json(outcome: EveryKOutcome, answer: str) -> dict[str, Any]:
    """``summary.json`` → ``rule``."""
    return {"answer": answer, "rule": NAME, "arm": outcome.arm, "claim": outcome.claim.reading,
            "margin": 100 * outcome.margin, "ks": outcome.ks, "seeds": outcome.seeds, "min_seeds": outcome.min_seeds,
            "baseline_vs_base": vars(outcome.baseline_vs_base), "baseline_margin": 100 * outcome.baseline_margin,
            "baseline_learned": outcome.baseline_learned,
            "arms": {a.arm: {"reading": a.reading, "holds": a.ks("holds"), "fails": a.ks("fails"),
                             "undecided": a.ks("undecided"),
                             "by_k": {str(at.k): {"decision": at.decision, "level": at.level, "p": at.p,
                                                  "p_holm": at.p_holm, "interval": vars(at.interval),
                                                  "resolve": at.resolve} for at in a.by_k}}
                     for a in outcome.arms}}

