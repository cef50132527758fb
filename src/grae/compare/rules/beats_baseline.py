"""The rule ``beats_baseline`` (study key ``rule:``): which arms beat the baseline, at which k, on which held-out
stratum, and which keep or grow a strategy on the rare stratum. A pure function of the study's table, beside
:mod:`grae.compare.rules.keeps_passk` and :mod:`grae.compare.rules.every_k`; it reads the rows that the study key
``mechanism`` gathers (strata, strategy mass), so it needs that key.

``rule: {beats_baseline: {ks: [1, 64, 256], frontier_ks: [64, 256], rare_stratum: totals=excursion, rare_k: 64,
strategy: G, min_seeds: 4}}`` reads, with d = pass@k(arm) − pass@k(baseline) paired by seed on the same problems and
the report's crossed seeds × problems intervals (grae.compare.stats):

* **beats / below, per k and group.** Groups: all held-out problems, each stratum of the held-out task
  (``heldout_strata``), and the band hold-out when ``mechanism.band_holdout`` names one. Per k of ``ks`` (and
  ``rare_k`` on the rare stratum) and per group, Holm's step-down over the trained arms at α = 0.05 on the
  two-sided t p of d (:func:`grae.compare.stats.holm_intervals`), each interval at its arm's Holm level: an arm
  **beats** the baseline where the lower bound is > 0, is **below** it where the upper bound is < 0, and is
  otherwise **not resolved**.
* **Δ_F, per stratum.** At each k of ``frontier_ks``, the arm's pass@k above the base's temperature frontier at
  equal pass@1, against **the stratum's own** frontier (the base's traced points on that stratum's problems;
  :func:`grae.eval.temperature_frontier.distance_above`), 95 % crossed interval; never pooled over strata. Needs
  ``paired_against: temperature_frontier``.
* **The rare strategy.** On ``rare_stratum``, the exact mass of ``strategy`` (Σ p over its gold completions) at the
  last training step minus the base's on the same problems, paired per problem (crossed interval): **grows** where
  the lower bound is > 0, **loses** where the upper bound is < 0, else **keeps** (no change resolved).
* **Leave one seed out.** For every headline (each arm's d at each k on every group) the range of the mean over the
  seeds with one seed left out: how much one seed moves it.

The report's first lines (:func:`answer_line`) say which arms beat the baseline at the smallest and at the largest
k of ``ks`` on all held-out problems and on each stratum, and which keep, grow or lose the strategy, each with its
interval; "no arm beats the baseline" is said so. With fewer than ``min_seeds`` seeds per arm they say pilot, no
verdict, and the section below is a pilot's reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from grae.compare.rules.common import ALPHA, RuleError, cell, pilot_line
from grae.compare.stats import Interval, difference_interval, holm_intervals, paired_differences
from grae.compare.temperature_frontier import base_temperatures
from grae.eval.temperature_frontier import distance_above, trace_frontier

if TYPE_CHECKING:
    from grae.compare.results import StudyResults

NAME = "beats_baseline"

#: the group of every held-out problem
ALL = "all held-out"


@dataclass
class Difference:
    """One arm − the baseline at one k on one group (fractions, not points)."""

    interval: Interval  # at the arm's Holm step level
    loo: tuple[float, float]  # leave-one-seed-out range of the mean

    @property
    def decision(self) -> str:
        return "beats" if self.interval.lo > 0 else "below" if self.interval.hi < 0 else "not resolved"


@dataclass
class BeatsOutcome:
    baseline: str
    ks: list[int]
    seeds: int
    min_seeds: int
    arms: list[str]
    #: group → k → arm → its difference against the baseline
    vs_baseline: dict[str, dict[int, dict[str, Difference]]]
    #: stratum → k → method (the baseline too) → Δ_F against the stratum's own frontier (95 %)
    delta_f: dict[str, dict[int, dict[str, Interval]]] = field(default_factory=dict)
    #: stratum → its frontier's best temperature
    best_t: dict[str, float] = field(default_factory=dict)
    rare_stratum: str | None = None
    rare_k: int | None = None
    strategy: str | None = None
    strategy_step: int | None = None
    #: method (the baseline too) → the strategy's mass at the last step − the base's, on the rare stratum
    strategy_change: dict[str, Interval] = field(default_factory=dict)

    def beating(self, group: str, k: int) -> list[str]:
        return [a for a, d in self.vs_baseline.get(group, {}).get(k, {}).items() if d.decision == "beats"]


def _loo(values: np.ndarray) -> tuple[float, float]:
    """``values[seeds, problems]`` → (min, max) of the mean with one seed left out (the mean twice for one seed)."""
    if values.shape[0] < 2:
        mean = float(values.mean())
        return mean, mean
    means = [float(np.delete(values, s, axis=0).mean()) for s in range(values.shape[0])]
    return min(means), max(means)


def _strategy_change(results: StudyResults, label: str, strategy: str) -> tuple[int, dict[str, Interval]]:
    """The last probed step and, per method, ``strategy``'s mass there − the base's on stratum ``label``."""
    mech = results.mechanism
    if strategy not in mech.labels:
        raise RuleError(f"rule.{NAME}.strategy = {strategy!r}: the probes' strategies are {mech.labels}")
    from grae.compare.mechanism_report import _rows

    column = mech.labels.index(strategy)
    rows = _rows(mech.strata[label], mech.question_ids)
    base = mech.base.heldout[rows, column]  # [P]
    step = max(s for s in mech.steps if s > 0)
    out = {}
    for m, by_seed in mech.jobs.items():
        arr = np.stack([by_seed[s][step].heldout[rows, column] for s in sorted(by_seed)])  # [S, P]
        (out[m],) = difference_interval((arr - base[None])[:, :, None])
    return step, out


def decide(results: StudyResults) -> BeatsOutcome:
    """The rule (module docstring) on every trained arm other than the baseline."""
    from grae.compare.mechanism_report import BAND, strata_counts

    study = results.study
    spec = study.rule[NAME]
    baseline = study.baseline
    mech = results.mechanism
    if mech is None:
        raise RuleError(f"rule.{NAME}: the study's table has no mechanism rows (strata, strategy mass); give the study "
                        "mechanism: {…}")
    arms = [m for m in results.jobs if m != baseline]
    if not arms:
        raise RuleError(f"rule.{NAME}: the rows hold no trained arm other than {baseline}")
    ks = [int(k) for k in spec["ks"]]
    rare, rare_k = spec.get("rare_stratum"), spec.get("rare_k")
    if rare is not None and rare not in mech.strata:
        raise RuleError(f"rule.{NAME}.rare_stratum = {rare!r}: the held-out strata are {sorted(mech.strata)}")
    groups = {ALL: ({m: results.finals(m) for m in results.jobs}, results.base)}
    groups |= strata_counts(results, mech)
    out = BeatsOutcome(baseline, ks, min(len(by_seed) for by_seed in results.jobs.values()), int(spec["min_seeds"]),
                       arms, {}, rare_stratum=rare, rare_k=rare_k)
    for group, (finals, _) in groups.items():
        group_ks = sorted(set(ks) | ({rare_k} if group == rare and rare_k else set()))
        differences = {a: paired_differences(finals[a], finals[baseline], group_ks) for a in arms}
        adjusted = holm_intervals(differences, group_ks, 1 - ALPHA) if len(arms) >= 2 else {
            a: dict(zip(group_ks, difference_interval(v, 1 - ALPHA))) for a, v in differences.items()}
        out.vs_baseline[group] = {k: {a: Difference(adjusted[a][k], _loo(differences[a][:, :, i])) for a in arms}
                                  for i, k in enumerate(group_ks)}
    temperatures = base_temperatures(results.base_files)
    frontier_ks = [int(k) for k in spec.get("frontier_ks", [])]
    if frontier_ks and not temperatures:
        raise RuleError(f"rule.{NAME}.frontier_ks: the study's rows hold no traced temperature frontier of the base "
                        "(paired_against: temperature_frontier)")
    for label, (finals, _) in groups.items():
        if not frontier_ks or label in (ALL, BAND):
            continue
        ids = mech.strata[label]
        base_t = {t: c.subset(ids) for t, c in temperatures.items()}
        frontiers = {k: trace_frontier(base_t, k) for k in frontier_ks}
        out.best_t[label] = next(iter(frontiers.values())).best().temperature
        out.delta_f[label] = {k: {m: distance_above(finals[m], base_t, k, 1 - ALPHA, frontiers[k]).interval
                                  for m in [baseline, *arms]} for k in frontier_ks}
    if spec.get("strategy") is not None:
        if rare is None:
            raise RuleError(f"rule.{NAME}.strategy: says which strategy to follow on rare_stratum; give rare_stratum")
        out.strategy = spec["strategy"]
        out.strategy_step, out.strategy_change = _strategy_change(results, rare, out.strategy)
    return out


def _names(outcome: BeatsOutcome, group: str, k: int, arms: list[str]) -> str:
    return "; ".join(f"{a} {cell(outcome.vs_baseline[group][k][a].interval)}" for a in arms)


def _strategy_reading(iv: Interval) -> str:
    return "grows" if iv.lo > 0 else "loses" if iv.hi < 0 else "keeps"


def answer_lines(outcome: BeatsOutcome) -> list[str]:
    """Which arms beat the baseline at the smallest and the largest k, per group, and the rare strategy's reading."""
    b, lines = outcome.baseline, []
    for k in (outcome.ks[0], outcome.ks[-1]) if len(outcome.ks) > 1 else outcome.ks:
        parts = []
        for group in outcome.vs_baseline:
            if k not in outcome.vs_baseline[group]:
                continue
            winners = outcome.beating(group, k)
            parts.append(f"{group}: " + (_names(outcome, group, k, winners) if winners else "none"))
        lines.append(f"- beats {b} at pass@{k} (Holm lower bound > 0, points): " + " · ".join(parts))
    if outcome.rare_stratum and outcome.rare_k and outcome.rare_k not in (outcome.ks[0], outcome.ks[-1]):
        k = outcome.rare_k
        winners = outcome.beating(outcome.rare_stratum, k)
        lines.append(f"- beats {b} on {outcome.rare_stratum} at pass@{k}: "
                     + (_names(outcome, outcome.rare_stratum, k, winners) if winners else "none"))
    if outcome.strategy_change:
        by = {r: [m for m, iv in outcome.strategy_change.items() if _strategy_reading(iv) == r]
              for r in ("grows", "keeps", "loses")}
        lines.append(f"- {outcome.strategy} mass on {outcome.rare_stratum} at step {outcome.strategy_step} − the base's "
                     "(points): " + " · ".join(
                         f"{r}: " + ("; ".join(f"{m} {cell(outcome.strategy_change[m])}" for m in ms) if ms else "none")
                         for r, ms in by.items()))
    return lines


def answer_line(outcome: BeatsOutcome, baseline: str) -> str:
    """The report's first lines: the rule named, then :func:`answer_lines` (or why there is no verdict)."""
    n_arms = len(outcome.arms)
    rule = (f"rule `{NAME}`: each arm − {baseline}, Holm over {n_arms} arm{'s' * (n_arms != 1)} per k and group, "
            f"{outcome.seeds} seed{'s' * (outcome.seeds != 1)}")
    if outcome.seeds < outcome.min_seeds:
        return pilot_line(rule, outcome.min_seeds)
    beats_any = any(outcome.beating(g, k) for g in outcome.vs_baseline for k in outcome.vs_baseline[g])
    head = f"**Answer** ({rule})" + ("" if beats_any else f": no arm beats {baseline} here at any k on any group")
    return "\n".join([head + ":", *answer_lines(outcome)])


def rule_lines(outcome: BeatsOutcome, baseline: str) -> list[str]:
    """The rule's section: every difference with its Holm level reading and leave-one-seed-out range, Δ_F per stratum,
    and the strategy's change."""
    lines = ["", f"## Decision rule: which arms beat {baseline}? (points)", "",
             f"grae.compare.rules.beats_baseline: d = pass@k(arm) − pass@k({baseline}), paired by seed on the same "
             f"problems, crossed seeds × problems intervals at each arm's Holm step level (α = {ALPHA}, one family per k "
             f"and group over the {len(outcome.arms)} arms); **beats** where the lower bound is > 0, **below** where the "
             "upper bound is < 0. LOSO: the range of the mean with one seed left out."]
    if outcome.seeds < outcome.min_seeds:
        lines += ["", pilot_line(NAME, outcome.min_seeds)]
    for group, by_k in outcome.vs_baseline.items():
        lines += ["", f"### {group}", "", "| arm | k | d [Holm interval] | reading | LOSO range |", "|---|---|---|---|---|"]
        lines += [f"| {a} | {k} | {cell(d.interval)} | **{d.decision}** | {100 * d.loo[0]:+.1f} … {100 * d.loo[1]:+.1f} |"
                  for k, by_arm in by_k.items() for a, d in by_arm.items()]
    for label, by_k in outcome.delta_f.items():
        lines += ["", f"Δ_F on {label} against its own temperature frontier (best pass@1 at T = "
                  f"{outcome.best_t[label]:g}; 95 %):", "",
                  "| method | " + " | ".join(f"Δ_F@{k}" for k in by_k) + " |", "|---|" + "---|" * len(by_k)]
        methods = next(iter(by_k.values()))
        lines += [f"| {m} | " + " | ".join(cell(by_k[k][m]) for k in by_k) + " |" for m in methods]
    if outcome.strategy_change:
        lines += ["", f"{outcome.strategy} mass on {outcome.rare_stratum} at step {outcome.strategy_step} − the base's "
                  "(paired per problem, 95 %): **grows** where the lower bound is > 0, **loses** where the upper bound "
                  "is < 0, else **keeps**.", "", "| method | change | reading |", "|---|---|---|"]
        lines += [f"| {m} | {cell(iv)} | **{_strategy_reading(iv)}** |" for m, iv in outcome.strategy_change.items()]
    return lines + [""]


def outcome_json(outcome: BeatsOutcome, answer: str) -> dict[str, Any]:
    """``summary.json`` → ``rule``."""
    return {"answer": answer, "rule": NAME, "ks": outcome.ks, "seeds": outcome.seeds, "min_seeds": outcome.min_seeds,
            "arms": outcome.arms,
            "vs_baseline": {g: {str(k): {a: {"interval": vars(d.interval), "decision": d.decision, "loso": list(d.loo)}
                                         for a, d in by_arm.items()} for k, by_arm in by_k.items()}
                            for g, by_k in outcome.vs_baseline.items()},
            "delta_F": {g: {str(k): {m: vars(iv) for m, iv in by_m.items()} for k, by_m in by_k.items()}
                        for g, by_k in outcome.delta_f.items()},
            "frontier_best_T": outcome.best_t, "rare_stratum": outcome.rare_stratum, "rare_k": outcome.rare_k,
            "strategy": outcome.strategy, "strategy_step": outcome.strategy_step,
            "strategy_change": {m: {"interval": vars(iv), "reading": _strategy_reading(iv)}
                                for m, iv in outcome.strategy_change.items()}}
