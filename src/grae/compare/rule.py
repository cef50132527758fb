"""A study's per-arm decision rule (study key ``rule:``; issue 37 §3), a pure function of its table.

``rule: {keeps_passk: {k: 16, pass1_margin_vs_baseline: -2, passk_margin_vs_base: -1}}`` decides, for every
trained arm other than the baseline, whether it **keeps pass@k** at the deciding k while staying near the
baseline's pass@1 (margins in points):

* d₁ = pass@1(arm) − pass@1(baseline), paired by seed on the same problems;
* d₂ = pass@k(arm) − pass@k(base), each seed against the base model's pass@k on the same problem;
* both are the report's crossed seeds × problems intervals (grae.compare.stats), at each arm's Holm level.

Per arm an intersection-union test (Berger 1982): "keeps" claims d₁ > m₁ *and* d₂ > m₂, so its p-value
is p_arm = max(p₁, p₂), each p the two-sided-equivalent t probability of its margin,
p = min(1, 2·P(T_ν ≥ (mean − m)/se)), so that p < a exactly when the 1 − a interval's lower bound clears m.
Holm's step-down (Holm 1979) runs over the arms on p_arm at family level α = 0.05
(:func:`grae.compare.stats.holm_levels`); each arm's two intervals (and d₀ = pass@1(arm) − pass@1(base))
are printed at its step's level 1 − a, so:

* **keeps** ⇔ both lower bounds clear their margins (⇔ Holm rejects the arm's null) **and** the arm's final
  point (pass@1, pass@k) lies above the baseline's checkpoint frontier at equal pass@1 (linear between the
  frontier's points, the base model its 0 % point; an arm beyond the frontier's pass@1 range is compared
  with its nearest end point);
* **refuted** ⇔ an upper bound at the same level falls short (d₁'s below m₁ or d₂'s below m₂). An arm
  Holm does not call "keeps" has level 1 − α/m′ (m′ = the arms left when Holm stops), so its two upper
  bounds err together with probability ≤ α/m′, and the refuted calls together ≤ α given m′. A lower bound
  above a margin and an upper bound below it cannot hold at once, so keeps and refuted exclude each other;
* otherwise **inconclusive**, with the seeds (at the study's problems) or problems (at its seeds) that
  would move the undecided bound past its margin if the mean and the variance components stayed as
  measured (:func:`needed`).

The report's first line (:func:`answer_line`) names the arms that keep pass@k while *raising* pass@1
(d₀'s lower bound > 0), or says that none does; with fewer than the rule's ``min_seeds`` it says pilot,
no verdict; with ``baseline_pass1_margin_vs_oracle`` set, a baseline whose pass@1 − format-only oracle
95 % lower bound is at or below it did not learn, and the line says the testbed failed instead.

Every rule a study can name has a spec (:data:`grae.compare.rule_spec.RULE_SPECS`: its keys and checks, read by
``grae.compare.grid.check_rule``) and four pure functions of the table (:data:`grae.compare.rules.RULES`), so
the study's loader and the report treat every rule alike; the
second rule, ``non_inferior_every_k``, lives in :mod:`grae.compare.rule_every_k` and shares
:func:`margin_p` and :func:`needed`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import t as student_t

from grae.compare.stats import (
    Interval,
    crossed_interval,
    crossed_variance,
    holm,
    holm_levels,
    method_passk,
    paired_differences,
    variance_components,
    variance_from_mean_squares,
)

if TYPE_CHECKING:
    from grae.compare.results import StudyResults

class RuleError(ValueError):
    """The study's rows cannot be read under its rule (no base rows, a k beyond them): one line."""


#: family-wise level of the rule's Holm step-down
ALPHA = 0.05
@dataclass
class ArmDecision:
    """One arm under the rule (differences in fractions, not points)."""

    arm: str
    level: float  # the arm's Holm step level 1 − a of its intervals
    p_arm: float  # intersection-union p: max(p₁, p₂)
    p_holm: float  # Holm's adjusted p_arm over the arms
    pass1_vs_baseline: Interval  # d₁
    passk_vs_base: Interval  # d₂
    pass1_vs_base: Interval  # d₀
    point: tuple[float, float]  # the arm's final (pass@1, pass@k), means over seeds and problems
    above: float | None  # pass@k above the baseline's frontier at the arm's pass@1; None: no frontier at k
    decision: str  # "keeps", "refuted" or "inconclusive"
    resolve: list[str] = field(default_factory=list)  # inconclusive: what would decide it

    @property
    def raises_pass1(self) -> bool:
        return self.pass1_vs_base.lo > 0


@dataclass
class RuleOutcome:
    k: int
    margins: tuple[float, float]  # (m₁, m₂) in fractions
    seeds: int
    min_seeds: int
    arms: list[ArmDecision]
    baseline_vs_base: Interval  # the baseline's pass@k − base (95 %), printed beside the rule
    baseline_vs_oracle: Interval | None  # the baseline's pass@1 − oracle (95 %), when the rule checks it
    baseline_learned: bool


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


def decide(results: StudyResults) -> RuleOutcome:
    """The rule (module docstring) on every trained arm other than the baseline."""
    from grae.compare.frontier_report import above_frontier, frontier_points

    study = results.study
    spec = study.rule["keeps_passk"]
    k = int(spec["k"])
    m1, m2 = spec["pass1_margin_vs_baseline"] / 100, spec["passk_margin_vs_base"] / 100
    base = results.base
    if base is None:
        raise RuleError("rule.keeps_passk: the study has no base model rows (base/…jsonl) to pair pass@k against; "
                        "give the study eval: {…} so that compare evaluates the base")
    n_min = min(int(c.n.min()) for m in results.jobs for c in results.finals(m).values())
    if k > min(n_min, int(base.n.min())):
        raise RuleError(f"rule.keeps_passk.k = {k}: the rows reach k = {min(n_min, int(base.n.min()))} only; lower k "
                        "or evaluate with a larger n")
    baseline = study.baseline
    arms = [m for m in results.jobs if m != baseline]
    finals = {m: results.finals(m) for m in results.jobs}
    fixed = {m: dict.fromkeys(finals[m], base) for m in finals}
    d1 = {a: paired_differences(finals[a], finals[baseline], [1])[:, :, 0] for a in arms}
    d2 = {a: paired_differences(finals[a], fixed[a], [k])[:, :, 0] for a in arms}
    d0 = {a: paired_differences(finals[a], fixed[a], [1])[:, :, 0] for a in arms}
    p_arm = [max(margin_p(d1[a], m1), margin_p(d2[a], m2)) for a in arms]
    points, _, base_point = frontier_points(results, k)
    path = ([(base_point[1].mean, base_point[k].mean)] if base_point else []) + [
        (iv[1].mean, iv[k].mean) for _, iv in sorted(points.get(baseline, {}).items())]
    decisions = []
    for a, p, step_alpha, p_adj in zip(arms, p_arm, holm_levels(p_arm, ALPHA), holm(p_arm)):
        level = 1 - step_alpha
        (iv1,), (iv2,), (iv0,) = (crossed_interval(d[a][:, :, None], level) for d in (d1, d2, d0))
        means = method_passk(list(finals[a].values()), [1, k])
        point = (means[1].mean, means[k].mean)
        above = above_frontier(point, path, extend=True) if len(path) >= 1 and points.get(baseline) else None
        if iv1.lo > m1 and iv2.lo > m2 and above is not None and above > 0:
            decision, resolve = "keeps", []
        elif iv1.hi < m1 or iv2.hi < m2:
            decision, resolve = "refuted", []
        else:
            decision, resolve = "inconclusive", []
            for name, values, iv, m in ((f"pass@1 − {baseline}", d1[a], iv1, m1), (f"pass@{k} − base", d2[a], iv2, m2)):
                if iv.lo <= m <= iv.hi:
                    resolve.append(f"{name} [{100 * iv.lo:+.1f}, {100 * iv.hi:+.1f}] holds {100 * m:+.1f}: "
                                   + needed(values, m, level))
            if iv1.lo > m1 and iv2.lo > m2:
                resolve.append(f"both bounds clear their margins, but its point lies {100 * above:+.2f} at "
                               f"{baseline}'s frontier (a point comparison: more seeds decide it only if the point "
                               "moves)" if above is not None else
                               f"both bounds clear their margins, but {baseline} has no frontier at pass@{k}")
        decisions.append(ArmDecision(a, level, p, p_adj, iv1, iv2, iv0, point, above, decision, resolve))
    (baseline_vs_base,) = crossed_interval(paired_differences(finals[baseline], fixed[baseline], [k]))
    vs_oracle, learned = None, True
    if "baseline_pass1_margin_vs_oracle" in spec:
        oracle = results.references["format-only oracle"]
        (vs_oracle,) = crossed_interval(paired_differences(finals[baseline], dict.fromkeys(finals[baseline], oracle), [1]))
        learned = vs_oracle.lo > spec["baseline_pass1_margin_vs_oracle"] / 100
    seeds = min(len(by_seed) for by_seed in results.jobs.values())
    return RuleOutcome(k, (m1, m2), seeds, int(spec["min_seeds"]), decisions, baseline_vs_base, vs_oracle, learned)


def cell(iv: Interval) -> str:
    """An interval in points: ``mean [lo, hi]``."""
    return f"{100 * iv.mean:+.1f} [{100 * iv.lo:+.1f}, {100 * iv.hi:+.1f}]"


def pilot_line(rule: str, min_seeds: int) -> str:
    """A rule's first line when the study has fewer seeds per arm than the rule needs."""
    return (f"**Pilot: no verdict** ({rule}): fewer than the {min_seeds} seeds per arm the rule needs; "
            "the rule's table below is a pilot's reading.")


def answer_line(outcome: RuleOutcome, baseline: str) -> str:
    """The report's first line: which arms keep pass@k while raising pass@1, or that none does (or why
    there is no verdict)."""
    k, arms = outcome.k, outcome.arms
    rule = (f"rule `keeps_passk`, k = {k}, Holm over {len(arms)} arm{'s' * (len(arms) != 1)}, "
            f"{outcome.seeds} seed{'s' * (outcome.seeds != 1)}")
    if outcome.seeds < outcome.min_seeds:
        return pilot_line(rule, outcome.min_seeds)
    if not outcome.baseline_learned:
        iv = outcome.baseline_vs_oracle
        return (f"**No verdict: the testbed failed for these seeds** ({rule}): {baseline} − format-only oracle at "
                f"pass@1 is {100 * iv.mean:+.1f} [{100 * iv.lo:+.1f}, {100 * iv.hi:+.1f}], so {baseline} did not learn.")
    winners = [d.arm for d in arms if d.decision == "keeps" and d.raises_pass1]
    if winners:
        return (f"**Answer:** {', '.join(winners)} keep{'s' * (len(winners) == 1)} pass@{k} while raising pass@1 "
                f"({rule}).")
    counts = {c: sum(d.decision == c for d in arms) for c in ("keeps", "refuted", "inconclusive")}
    return (f"**Answer:** no arm keeps pass@{k} while raising pass@1 ({rule}: {counts['keeps']} keep pass@{k} "
            f"without raising pass@1, {counts['refuted']} refuted, {counts['inconclusive']} inconclusive).")


def rule_lines(outcome: RuleOutcome, baseline: str) -> list[str]:
    """The report's rule section: the procedure, one row per arm at its Holm level, what would resolve
    each inconclusive arm, and the baseline's own pass@k − base beside it."""
    k, (m1, m2) = outcome.k, outcome.margins

    lines = ["", f"## Decision rule: does an arm keep pass@{k}? (points; intervals at each arm's Holm level)", "",
             f"Per arm other than {baseline} (grae.compare.rule): d₁ = pass@1 − {baseline} (paired by seed), "
             f"d₂ = pass@{k} − base, d₀ = pass@1 − base, crossed seeds × problems intervals. **keeps** when d₁'s "
             f"lower bound > {100 * m1:+.1f}, d₂'s > {100 * m2:+.1f} and the final point lies above {baseline}'s "
             f"checkpoint frontier at equal pass@1; **refuted** when d₁'s upper bound < {100 * m1:+.1f} or d₂'s < "
             f"{100 * m2:+.1f}; otherwise **inconclusive**. Holm (α = {ALPHA}) runs over the arms on the "
             "intersection-union p = max(p₁, p₂), each the two-sided-equivalent t probability of its margin; "
             "every interval of an arm is at its Holm step's level, so keeps-bounds ⇔ p_holm < 0.05.", "",
             f"| arm | d₁ = pass@1 − {baseline} | d₂ = pass@{k} − base | d₀ = pass@1 − base | final (pass@1, pass@{k}) "
             f"| above {baseline}'s frontier | level | p | p_holm | decision |", "|---|" + "---|" * 9]
    for d in outcome.arms:
        lines.append(f"| {d.arm} | {cell(d.pass1_vs_baseline)} | {cell(d.passk_vs_base)} | {cell(d.pass1_vs_base)} | "
                     f"{100 * d.point[0]:.1f}, {100 * d.point[1]:.1f} | "
                     + ("–" if d.above is None else f"{100 * d.above:+.2f}")
                     + f" | {100 * d.level:.2f}% | {d.p_arm:.3g} | {d.p_holm:.3g} | **{d.decision}**"
                     + (" (raises pass@1)" if d.decision == "keeps" and d.raises_pass1 else "") + " |")
    unresolved = [d for d in outcome.arms if d.resolve]
    if unresolved:
        lines += ["", "What would decide the inconclusive arms (if each mean and variance component stayed as measured; "
                  "at its level, with the t quantile that design would have):", ""]
        lines += [f"- {d.arm}: " + "; ".join(d.resolve) for d in unresolved]
    lines += ["", f"{baseline}'s own pass@{k} − base: {cell(outcome.baseline_vs_base)} (95 %, not a criterion)"
              + (f"; {baseline} − format-only oracle at pass@1: {cell(outcome.baseline_vs_oracle)} (95 %)"
                 if outcome.baseline_vs_oracle else "") + ".", ""]
    return lines


def outcome_json(outcome: RuleOutcome, answer: str) -> dict[str, Any]:
    """``summary.json`` → ``rule``."""
    return {"answer": answer, "k": outcome.k, "margins": [100 * m for m in outcome.margins], "seeds": outcome.seeds,
            "min_seeds": outcome.min_seeds, "baseline_vs_base": vars(outcome.baseline_vs_base),
            "baseline_vs_oracle": vars(outcome.baseline_vs_oracle) if outcome.baseline_vs_oracle else None,
            "arms": {d.arm: {"decision": d.decision, "raises_pass1": d.raises_pass1, "level": d.level,
                             "p_arm": d.p_arm, "p_holm": d.p_holm, "pass1_vs_baseline": vars(d.pass1_vs_baseline),
                             "passk_vs_base": vars(d.passk_vs_base), "pass1_vs_base": vars(d.pass1_vs_base),
                             "point": list(d.point), "above_frontier": d.above, "resolve": d.resolve}
                     for d in outcome.arms}}
