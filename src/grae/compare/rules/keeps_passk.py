"""The per-arm rule ``keeps_passk`` (study key ``rule:``), a pure function of the
study's table.

``rule: {keeps_passk: {k: 16, pass1_margin_vs_baseline: -2, passk_margin_vs_base: -1}}`` decides, for every
trained arm other than the baseline, whether it **keeps pass@k** at the deciding k while staying near the
baseline's pass@1, above the baseline's early-stopping frontier (margins in points):

* d₁ = pass@1(arm) − pass@1(baseline), paired by seed on the same problems;
* d₂ = pass@k(arm) − pass@k(base), each seed against the base model's pass@k on the same problem;
* d_F = the arm's pass@k above the baseline's checkpoint frontier at equal pass@1, per seed × problem
  (:mod:`grae.compare.rules.frontier_distance`: linear between the frontier's points, the base model its 0 %
  point, flat beyond its ends; its mean is the distance of the arm's final point);
* each is the report's crossed seeds × problems interval (grae.compare.stats), at the arm's Holm level.

Per arm an intersection-union test (Berger 1982): "keeps" claims d₁ > m₁ *and* d₂ > m₂ *and* d_F > m_F
(``frontier_margin``, default 0), so its p-value is p_arm = max(p₁, p₂, p_F), each p the two-sided-equivalent
t probability of its margin, p = min(1, 2·P(T_ν ≥ (mean − m)/se)), so that p < a exactly when the 1 − a
interval's lower bound clears m. Holm's step-down (Holm 1979) runs over the arms on p_arm at family level
α = 0.05 (:func:`grae.compare.stats.holm_levels`); each arm's intervals (and d₀ = pass@1(arm) − pass@1(base))
are printed at its step's level 1 − a, so:

* **keeps** ⇔ the three lower bounds clear their margins (⇔ Holm rejects the arm's null);
* **refuted** ⇔ an upper bound at the same level falls short (d₁'s below m₁, d₂'s below m₂ or d_F's below
  m_F). An arm Holm does not call "keeps" has level 1 − α/m′ (m′ = the arms left when Holm stops), so its
  upper bounds err together with probability ≤ α/m′, and the refuted calls together ≤ α given m′. A lower
  bound above a margin and an upper bound below it cannot hold at once, so keeps and refuted exclude each other;
* otherwise **inconclusive**, with the seeds (at the study's problems) or problems (at its seeds) that
  would move the undecided bound past its margin if the mean and the variance components stayed as
  measured (:func:`grae.compare.rules.common.needed`).

``frontier_test: point`` is the rule as studies/design/decisive_r4.yaml pre-registered it:
the frontier is a point comparison (d_F's mean > 0), not a criterion under Holm (p_arm = max(p₁, p₂)); a
keeps whose point lies above the frontier but whose d_F interval does not is then inconclusive in neither
direction, and d_F's interval is printed beside the decision.

Beside every arm the report prints d_F's leave-one-seed-out range and each seed's own distance, and the
machine × arm interaction of d₁ and d_F (grae.compare.machines: per machine kind, and between two kinds).

The report's first line (:func:`answer_line`) names the arms that keep pass@k while *raising* pass@1
(d₀'s lower bound > 0), with their d_F interval, leave-one-seed-out range and machine check, or says that none
does; with fewer than the rule's ``min_seeds`` it says pilot, no verdict; with
``baseline_pass1_margin_vs_oracle`` set, a baseline whose pass@1 − format-only oracle 95 % lower bound is at or
below it did not learn, and the line says the testbed failed instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from grae.compare.machines import MachineContrast, blocking, blocking_line, interaction, pair_kinds
from grae.compare.rules.common import ALPHA, RuleError, cell, margin_p, needed, pilot_line
from grae.compare.stats import Interval, crossed_interval, holm, holm_levels, method_passk, paired_differences
from grae.compare.temperature_frontier import base_temperatures
from grae.eval.frontier_distance import FrontierDistance, frontier_distance
from grae.eval.temperature_frontier import distance_above, trace_frontier

if TYPE_CHECKING:
    from grae.compare.results import StudyResults


@dataclass
class ArmDecision:
    """One arm under the rule (differences in fractions, not points)."""

    arm: str
    level: float  # the arm's Holm step level 1 − a of its intervals
    p_arm: float  # intersection-union p: max(p₁, p₂, p_F) (point test: max(p₁, p₂))
    p_holm: float  # Holm's adjusted p_arm over the arms
    pass1_vs_baseline: Interval  # d₁
    passk_vs_base: Interval  # d₂
    pass1_vs_base: Interval  # d₀
    point: tuple[float, float]  # the arm's final (pass@1, pass@k), means over seeds and problems
    above: float | None  # pass@k above the baseline's frontier at the arm's pass@1; None: no frontier at k
    decision: str  # "keeps", "refuted" or "inconclusive"
    resolve: list[str] = field(default_factory=list)  # inconclusive: what would decide it
    #: d_F per seed × problem with its interval at ``level`` (None: no frontier at k, or a table without the
    #: baseline's checkpoint counts under the point test)
    distance: FrontierDistance | None = None
    #: the machine × arm interaction of d₁ and d_F (grae.compare.machines), by the quantity's name
    machines: dict[str, MachineContrast] = field(default_factory=dict)
    #: Δ_F, the distance above the base's temperature frontier, at ``level`` (a criterion with the rule's
    #: ``temperature_frontier_margin``; grae.compare.temperature_frontier), else None
    temperature_distance: FrontierDistance | None = None

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
    frontier_test: str = "interval"  # grae.compare.rules.spec.FRONTIER_TESTS
    frontier_margin: float = 0.0  # m_F, a fraction
    #: the machine check: one line (grae.compare.machines.blocking_line), and the seeds split across kinds
    machine_line: str = ""
    split_seeds: list[int] = field(default_factory=list)
    machines_known: bool = False  # whether any job's machine is known (recorded or declared)
    temperature_margin: float | None = None  # m_T, a fraction: Δ_F's margin when the rule names it


def baseline_checkpoints(results: StudyResults, fractions: list[float]) -> list[dict]:
    """The baseline's per-seed counts at the frontier's ``fractions``; RuleError for a table without them."""
    by_f = results.frontier.get(results.study.baseline, {})
    missing = [f for f in fractions if by_f[f].counts is None]
    if missing:
        raise RuleError("rule.keeps_passk: the frontier test's interval needs the baseline's checkpoint counts per seed, "
                        "which this table (written by a grae that did not record them) lacks; re-render from the rows: "
                        "grae compare CONFIG --report-only")
    return [by_f[f].counts for f in fractions]


def decide(results: StudyResults) -> RuleOutcome:
    """The rule (module docstring) on every trained arm other than the baseline."""
    from grae.compare.frontier_report import above_frontier, frontier_points

    study = results.study
    spec = study.rule["keeps_passk"]
    k = int(spec["k"])
    m1, m2 = spec["pass1_margin_vs_baseline"] / 100, spec["passk_margin_vs_base"] / 100
    # a loaded study's rule always names its test (rules.spec.check_keeps); a table's rule without one was written
    # when the point comparison was the only frontier test
    test, m_f = spec.get("frontier_test", "point"), spec.get("frontier_margin", 0) / 100
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
    points, _, base_point = frontier_points(results, k)
    fractions = sorted(points.get(baseline, {}))
    path = ([(base_point[1].mean, base_point[k].mean)] if base_point else []) + [
        (points[baseline][f][1].mean, points[baseline][f][k].mean) for f in fractions]
    has_counts = all(results.frontier[baseline][f].counts is not None for f in fractions)
    checkpoints = baseline_checkpoints(results, fractions) if fractions and (test == "interval" or has_counts) else None
    if test == "interval" and checkpoints is None:
        raise RuleError(f"rule.keeps_passk: {baseline} has no checkpoint frontier at pass@{k} (its checkpoints' rows "
                        f"stop below k = {k}); evaluate its checkpoints with n >= {k}, or give frontier_test: point")

    dists = {a: frontier_distance(finals[a], checkpoints, base if base_point else None, k, 0.95)
             for a in arms} if checkpoints is not None else {}
    m_t = spec["temperature_frontier_margin"] / 100 if "temperature_frontier_margin" in spec else None
    t_dists = temperature_distances(results, arms, k) if m_t is not None else {}
    p_arm = [max(margin_p(d1[a], m1), margin_p(d2[a], m2),
                 *([margin_p(dists[a].values, m_f)] if test == "interval" else []),
                 *([margin_p(t_dists[a].values, m_t)] if m_t is not None else [])) for a in arms]
    check = blocking(results)
    decisions = []
    for a, p, step_alpha, p_adj in zip(arms, p_arm, holm_levels(p_arm, ALPHA), holm(p_arm)):
        level = 1 - step_alpha
        (iv1,), (iv2,), (iv0,) = (crossed_interval(d[a][:, :, None], level) for d in (d1, d2, d0))
        means = method_passk(list(finals[a].values()), [1, k])
        point = (means[1].mean, means[k].mean)
        above = above_frontier(point, path, extend=True) if fractions else None
        dist = replace(dists[a], interval=crossed_interval(dists[a].values[:, :, None], level)[0]) if dists else None
        # (name, cells, interval, margin, digits printed: d_F to 0.01, its sign decides)
        criteria = [(f"pass@1 − {baseline}", d1[a], iv1, m1, 1), (f"pass@{k} − base", d2[a], iv2, m2, 1)]
        if test == "interval":
            criteria.append((f"distance above {baseline}'s frontier", dist.values, dist.interval, m_f, 2))
        t_dist = None
        if m_t is not None:
            t_dist = replace(t_dists[a], interval=crossed_interval(t_dists[a].values[:, :, None], level)[0])
            criteria.append(("distance above the base's temperature frontier", t_dist.values, t_dist.interval, m_t, 2))
        frontier_ok = above is not None and above > 0 if test == "point" else True
        if all(iv.lo > m for _, _, iv, m, _ in criteria) and frontier_ok:
            decision, resolve = "keeps", []
        elif any(iv.hi < m for _, _, iv, m, _ in criteria):
            decision, resolve = "refuted", []
        else:
            decision, resolve = "inconclusive", []
            for name, values, iv, m, digits in criteria:
                if iv.lo <= m <= iv.hi:
                    resolve.append(f"{name} [{100 * iv.lo:+.{digits}f}, {100 * iv.hi:+.{digits}f}] holds "
                                   f"{100 * m:+.1f}: " + needed(values, m, level))
            if test == "point" and iv1.lo > m1 and iv2.lo > m2:
                resolve.append(f"both bounds clear their margins, but its point lies {100 * above:+.2f} at "
                               f"{baseline}'s frontier (a point comparison: more seeds decide it only if the point "
                               "moves)" if above is not None else
                               f"both bounds clear their margins, but {baseline} has no frontier at pass@{k}")
        kinds = pair_kinds(results, a, baseline)
        seeds_d1 = sorted(set(finals[a]) & set(finals[baseline]))
        dk = paired_differences(finals[a], finals[baseline], [k])[:, :, 0]
        machines = {f"pass@1 − {baseline}": interaction(d1[a], seeds_d1, kinds),
                    f"pass@{k} − {baseline}": interaction(dk, seeds_d1, kinds)}
        if dist is not None:
            machines["distance above the frontier"] = interaction(dist.values, dist.seeds, kinds)
        decisions.append(ArmDecision(a, level, p, p_adj, iv1, iv2, iv0, point, above, decision, resolve, dist, machines,
                                     t_dist))
    (baseline_vs_base,) = crossed_interval(paired_differences(finals[baseline], fixed[baseline], [k]))
    vs_oracle, learned = None, True
    if "baseline_pass1_margin_vs_oracle" in spec:
        oracle = results.references["format-only oracle"]
        (vs_oracle,) = crossed_interval(paired_differences(finals[baseline], dict.fromkeys(finals[baseline], oracle), [1]))
        learned = vs_oracle.lo > spec["baseline_pass1_margin_vs_oracle"] / 100
    seeds = min(len(by_seed) for by_seed in results.jobs.values())
    return RuleOutcome(k, (m1, m2), seeds, int(spec["min_seeds"]), decisions, baseline_vs_base, vs_oracle, learned,
                       test, m_f, blocking_line(check).removeprefix("- machines: "), check.split,
                       bool(check.by_seed), m_t)


def temperature_distances(results: StudyResults, arms: list[str], k: int) -> dict[str, FrontierDistance]:
    """Each arm's Δ_F above the base's temperature frontier (95 %; grae.eval.temperature_frontier)."""
    base = base_temperatures(results.base_files)
    if not base:
        raise RuleError("rule.keeps_passk.temperature_frontier_margin: the table has no base temperature frontier; run "
                        "grae compare without --report-only (paired_against: temperature_frontier)")
    frontier = trace_frontier(base, k)
    return {a: distance_above(results.finals(a), base, k, 0.95, frontier) for a in arms}


def points(value: float) -> str:
    """A distance in points to 0.01 (the decision may hinge on its sign)."""
    return f"{100 * value:+.2f}"


def distance_cell(d: FrontierDistance | None) -> str:
    return "–" if d is None else f"{points(d.interval.mean)} [{points(d.interval.lo)}, {points(d.interval.hi)}]"


def contrast_text(contrast: MachineContrast) -> str:
    """One quantity by machine kind: each kind's interval and seeds, then the difference between the first two."""
    parts = [f"{kind} (seed{'s' * (len(seeds) != 1)} {', '.join(map(str, seeds))}): {points(iv.mean)} "
             f"[{points(iv.lo)}, {points(iv.hi)}]" for kind, (iv, seeds) in contrast.by_kind.items()]
    if contrast.difference is not None:
        first, second = list(contrast.by_kind)[:2]
        iv = contrast.difference
        parts.append(f"{first} − {second}: {points(iv.mean)} [{points(iv.lo)}, {points(iv.hi)}], t = {contrast.t:.2f} "
                     f"(ν = {contrast.dof})")
    if contrast.excluded:
        parts.append(f"left out: seed{'s' * (len(contrast.excluded) != 1)} {', '.join(map(str, contrast.excluded))} "
                     "(the arm and the baseline on different or unknown machines)")
    return "; ".join(parts) if parts else "no seed with a known machine"


def winner_note(d: ArmDecision, baseline: str, test: str) -> str:
    """What the first line carries beside a named arm (with a distance): d_F's interval, its leave-one-seed-out
    range and the machine × arm check (the quantity with the largest |t| between machine kinds)."""
    lo, hi = d.distance.loso_range
    tested = [(name, c) for name, c in d.machines.items() if c.difference is not None]
    diff = ""
    if tested:  # the quantity whose machine × arm t is largest
        name, machine = max(tested, key=lambda item: abs(item[1].t))
        (first, (_, first_seeds)), (second, (_, second_seeds)) = list(machine.by_kind.items())[:2]
        iv = machine.difference
        diff = (f"; machine × arm (its largest of {len(tested)}: {name}), on {first} (seeds "
                f"{', '.join(map(str, first_seeds))}) − on {second} (seeds {', '.join(map(str, second_seeds))}): "
                f"{points(iv.mean)} [{points(iv.lo)}, {points(iv.hi)}] (95 %), t = {machine.t:.2f} (ν = {machine.dof})")
    return (f"{d.arm}'s distance above {baseline}'s frontier {distance_cell(d.distance)} points at its Holm level "
            f"({'the criterion' if test == 'interval' else 'beside the pre-registered point test, not a criterion'}), "
            f"{points(lo)} to {points(hi)} leaving out one seed{diff}")


def answer_line(outcome: RuleOutcome, baseline: str) -> str:
    """The report's first line: which arms keep pass@k while raising pass@1 (with their frontier distance's
    interval, leave-one-seed-out range and machine check), or that none does (or why there is no verdict)."""
    k, arms = outcome.k, outcome.arms
    rule = (f"rule `keeps_passk`, k = {k}, Holm over {len(arms)} arm{'s' * (len(arms) != 1)}, "
            f"{outcome.seeds} seed{'s' * (outcome.seeds != 1)}, frontier test: {outcome.frontier_test}"
            + (f" (margin {100 * outcome.frontier_margin:+.1f})" if outcome.frontier_test == "interval" else
               " (pre-registered)")
            + (f", temperature frontier margin {100 * outcome.temperature_margin:+.1f}"
               if outcome.temperature_margin is not None else ""))
    if outcome.seeds < outcome.min_seeds:
        return pilot_line(rule, outcome.min_seeds)
    if not outcome.baseline_learned:
        iv = outcome.baseline_vs_oracle
        return (f"**No verdict: the testbed failed for these seeds** ({rule}): {baseline} − format-only oracle at "
                f"pass@1 is {100 * iv.mean:+.1f} [{100 * iv.lo:+.1f}, {100 * iv.hi:+.1f}], so {baseline} did not learn.")
    winners = [d for d in arms if d.decision == "keeps" and d.raises_pass1]
    if winners:
        notes = [winner_note(d, baseline, outcome.frontier_test) for d in winners if d.distance is not None]
        return (f"**Answer:** {', '.join(d.arm for d in winners)} keep{'s' * (len(winners) == 1)} pass@{k} while "
                f"raising pass@1 ({rule})." + (" " + "; ".join(notes) + "." if notes else "")
                + (f" Machines: {outcome.machine_line}." if outcome.machines_known else ""))
    counts = {c: sum(d.decision == c for d in arms) for c in ("keeps", "refuted", "inconclusive")}
    return (f"**Answer:** no arm keeps pass@{k} while raising pass@1 ({rule}: {counts['keeps']} keep pass@{k} "
            f"without raising pass@1, {counts['refuted']} refuted, {counts['inconclusive']} inconclusive).")


def rule_lines(outcome: RuleOutcome, baseline: str) -> list[str]:
    """The report's rule section: the procedure, one row per arm at its Holm level, each arm's frontier
    distance by seed, the machine × arm interaction, what would resolve each inconclusive arm, and the
    baseline's own pass@k − base beside it."""
    k, (m1, m2), m_f = outcome.k, outcome.margins, 100 * outcome.frontier_margin
    interval_test = outcome.frontier_test == "interval"
    frontier_rule = (f"d_F's lower bound > {m_f:+.1f}" if interval_test else
                     f"the final point lies above {baseline}'s checkpoint frontier at equal pass@1 (d_F's point > 0: "
                     "the pre-registered point test; d_F's interval is printed beside it, not a criterion)")
    lines = ["", f"## Decision rule: does an arm keep pass@{k}? (points; intervals at each arm's Holm level)", "",
             f"Per arm other than {baseline} (grae.compare.rules.keeps_passk): d₁ = pass@1 − {baseline} (paired by "
             f"seed), d₂ = pass@{k} − base, d₀ = pass@1 − base, d_F = pass@{k} above {baseline}'s checkpoint frontier "
             "at equal pass@1 per seed × problem (grae.compare.rules.frontier_distance), crossed seeds × problems "
             f"intervals. **keeps** when d₁'s lower bound > {100 * m1:+.1f}, d₂'s > {100 * m2:+.1f} and "
             f"{frontier_rule}; **refuted** when d₁'s upper bound < {100 * m1:+.1f} or d₂'s < {100 * m2:+.1f}"
             + (f" or d_F's < {m_f:+.1f}" if interval_test else "") + "; otherwise **inconclusive**. Holm (α = "
             f"{ALPHA}) runs over the arms on the intersection-union p = "
             + ("max(p₁, p₂, p_F)" if interval_test else "max(p₁, p₂)")
             + ", each the two-sided-equivalent t probability of its margin; every interval of an arm is at its Holm "
               "step's level, so keeps-bounds ⇔ p_holm < 0.05.", "",
             f"| arm | d₁ = pass@1 − {baseline} | d₂ = pass@{k} − base | d₀ = pass@1 − base | final (pass@1, pass@{k}) "
             f"| d_F = above {baseline}'s frontier | level | p | p_holm | decision |", "|---|" + "---|" * 9]
    for d in outcome.arms:
        lines.append(f"| {d.arm} | {cell(d.pass1_vs_baseline)} | {cell(d.passk_vs_base)} | {cell(d.pass1_vs_base)} | "
                     f"{100 * d.point[0]:.1f}, {100 * d.point[1]:.1f} | "
                     + (distance_cell(d.distance) if d.distance is not None else
                        "–" if d.above is None else points(d.above))
                     + f" | {100 * d.level:.2f}% | {d.p_arm:.3g} | {d.p_holm:.3g} | **{d.decision}**"
                     + (" (raises pass@1)" if d.decision == "keeps" and d.raises_pass1 else "") + " |")
    with_distance = [d for d in outcome.arms if d.distance is not None]
    if with_distance:
        lines += ["", f"d_F by seed (points: each seed's final point above its own {baseline} path, and d_F's point with "
                  "one seed left out):", "", "| arm | d_F | per seed | leaving one seed out | range |", "|---|---|---|---|---|"]
        for d in with_distance:
            dist = d.distance
            lo, hi = dist.loso_range if dist.leave_one_out else (dist.interval.mean, dist.interval.mean)
            lines.append(f"| {d.arm} | {points(dist.interval.mean)} | "
                         + ", ".join(f"{s}: {points(v)}" for s, v in dist.per_seed.items()) + " | "
                         + ", ".join(f"−{s}: {points(v)}" for s, v in dist.leave_one_out.items())
                         + f" | {points(lo)} to {points(hi)} |")
    if outcome.temperature_margin is not None:
        lines += ["", f"Δ_F = pass@{k} above the base's temperature frontier at equal pass@1 (a criterion: lower bound > "
                  f"{100 * outcome.temperature_margin:+.1f}; grae.compare.temperature_frontier), at each arm's level:", "",
                  "| arm | Δ_F | per seed | leaving one seed out |", "|---|---|---|---|"]
        for d in outcome.arms:
            t = d.temperature_distance
            if t is not None:
                lines.append(f"| {d.arm} | {distance_cell(t)} | " + ", ".join(f"{s}: {points(v)}" for s, v in t.per_seed.items())
                             + " | " + ", ".join(f"−{s}: {points(v)}" for s, v in t.leave_one_out.items()) + " |")
    lines += ["", f"Machines: {outcome.machine_line}.", "",
              f"Machine × arm (95 %, points; per machine kind the crossed interval over the seeds whose arm and {baseline} "
              "ran on it, then the difference between the two kinds with a pooled two-sample t on the seed means; "
              "grae.compare.machines):", ""]
    for d in outcome.arms:
        lines += [f"- {d.arm}, {name}: {contrast_text(c)}" for name, c in d.machines.items()]
    unresolved = [d for d in outcome.arms if d.resolve]
    if unresolved:
        lines += ["", "What would decide the inconclusive arms (if each mean and variance component stayed as measured; "
                  "at its level, with the t quantile that design would have):", ""]
        lines += [f"- {d.arm}: " + "; ".join(d.resolve) for d in unresolved]
    lines += ["", f"{baseline}'s own pass@{k} − base: {cell(outcome.baseline_vs_base)} (95 %, not a criterion)"
              + (f"; {baseline} − format-only oracle at pass@1: {cell(outcome.baseline_vs_oracle)} (95 %)"
                 if outcome.baseline_vs_oracle else "") + ".", ""]
    return lines


def contrast_json(contrast: MachineContrast) -> dict[str, Any]:
    return {"by_kind": {kind: {"interval": vars(iv), "seeds": seeds} for kind, (iv, seeds) in contrast.by_kind.items()},
            "excluded": contrast.excluded, "difference": vars(contrast.difference) if contrast.difference else None,
            "t": contrast.t, "dof": contrast.dof}


def distance_json(d: FrontierDistance | None) -> dict[str, Any] | None:
    return None if d is None else {"interval": vars(d.interval), "per_seed": d.per_seed,
                                   "leave_one_seed_out": d.leave_one_out}


def outcome_json(outcome: RuleOutcome, answer: str) -> dict[str, Any]:
    """``summary.json`` → ``rule``."""
    return {"answer": answer, "k": outcome.k, "margins": [100 * m for m in outcome.margins], "seeds": outcome.seeds,
            "min_seeds": outcome.min_seeds, "frontier_test": outcome.frontier_test,
            "frontier_margin": 100 * outcome.frontier_margin, "machines": outcome.machine_line,
            **({"temperature_frontier_margin": 100 * outcome.temperature_margin}
               if outcome.temperature_margin is not None else {}),
            "split_seeds": outcome.split_seeds, "baseline_vs_base": vars(outcome.baseline_vs_base),
            "baseline_vs_oracle": vars(outcome.baseline_vs_oracle) if outcome.baseline_vs_oracle else None,
            "arms": {d.arm: {"decision": d.decision, "raises_pass1": d.raises_pass1, "level": d.level,
                             "p_arm": d.p_arm, "p_holm": d.p_holm, "pass1_vs_baseline": vars(d.pass1_vs_baseline),
                             "passk_vs_base": vars(d.passk_vs_base), "pass1_vs_base": vars(d.pass1_vs_base),
                             "point": list(d.point), "above_frontier": d.above, "resolve": d.resolve,
                             "frontier_distance": distance_json(d.distance),
                             **({"temperature_frontier_distance": distance_json(d.temperature_distance)}
                                if d.temperature_distance is not None else {}),
                             "machines": {name: contrast_json(c) for name, c in d.machines.items()}}
                     for d in outcome.arms}}
