"""The report's mechanism sections (study key ``mechanism``; :mod:`grae.compare.mechanism`), pure functions of a
study's table: per held-out stratum and on the band hold-out, each method's exact pass@k, its paired difference
against the baseline (Holm over the arms) and Δ_F against the stratum's own temperature frontier; each strategy's
exact mass at the study's steps; the ratio of collapsed groups to the baseline's; advantage mass and ω over
training."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import t as student_t

from grae.compare.results import GATE_KEYS
from grae.compare.stats import (
    Interval,
    curve_bands,
    difference_interval,
    holm_intervals,
    method_passk,
    paired_differences,
    proportion_interval,
)
from grae.compare.temperature_frontier import base_temperatures
from grae.compare.training import TRAINING_FRACTIONS, at_fractions
from grae.eval.stats import ProblemCounts, per_problem_passk
from grae.eval.temperature_frontier import distance_above, exact_counts, trace_frontier

if TYPE_CHECKING:
    from grae.compare.mechanism import Mechanism
    from grae.compare.results import StudyResults

#: the name of the band hold-out among the strata
BAND = "band hold-out"


def _pts(iv: Interval, digits: int = 2, sign: bool = False) -> str:
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    return f"{f.format(100 * iv.mean)} [{f.format(100 * iv.lo)}, {f.format(100 * iv.hi)}]"


def _iv(iv: Interval) -> dict[str, Any]:
    return dict(vars(iv))


def strata_counts(results: StudyResults, mech: Mechanism) -> dict[str, tuple[dict[str, dict[int, ProblemCounts]],
                                                                          ProblemCounts | None]]:
    """Stratum → (method → seed → the final model's exact counts there, the base's counts there): every held-out
    stratum (the final evaluation's rows) and the band hold-out (the final step's probe, p = Σ over the gold
    completions)."""
    out: dict[str, tuple[dict[str, dict[int, ProblemCounts]], ProblemCounts | None]] = {}
    base = results.base
    for label, ids in mech.strata.items():
        out[label] = ({m: {s: c.subset(ids) for s, c in results.finals(m).items()} for m in results.jobs},
                      base.subset(ids) if base is not None else None)
    if mech.band_ids:
        k_max = min(int(j.final.n.min()) for by_seed in results.jobs.values() for j in by_seed.values())
        finals = {m: {s: exact_counts(by_step[max(by_step)].band.sum(axis=1), mech.band_ids, k_max)
                      for s, by_step in mech.jobs[m].items()} for m in results.jobs}
        out[BAND] = (finals, exact_counts(mech.base.band.sum(axis=1), mech.band_ids, k_max))
    return out


def stratum_lines(results: StudyResults, mech: Mechanism) -> tuple[list[str], dict[str, Any]]:
    """Per stratum: pass@k of the base and every method, each arm − the baseline (Holm over the arms with two or
    more), Δ_F against the stratum's own temperature frontier where the study traced one."""
    ks, baseline = mech.ks, results.study.baseline
    temperatures = base_temperatures(results.base_files)
    lines = ["", "## Held-out pass@k per stratum (exact; %, mean [95% CI])", "",
             "Each stratum of the held-out problems (the held-out task's `heldout_strata`) and the band hold-out (band "
             "problems held out of `task.train_subset`) on its own: crossed seeds × problems intervals; differences "
             f"paired by seed against {baseline} on the same problems, Holm-adjusted over the trained arms (one family "
             "per k and stratum) where there are two or more; Δ_F against **the stratum's own** temperature frontier "
             "(the base's points on that stratum's problems; never pooled)."]
    summary: dict[str, Any] = {}
    for label, (finals, base) in strata_counts(results, mech).items():
        n_problems = next(iter(next(iter(finals.values())).values())).num_problems
        header = ["| method | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
        lines += ["", f"### {label} ({n_problems} problems)", "", *header]
        entry: dict[str, Any] = {"problems": n_problems, "methods": {}, "vs_baseline": {}}
        if base is not None:
            base_iv = proportion_interval(per_problem_passk(base, ks)[None])
            lines.append("| base model | " + " | ".join(_pts(iv) for iv in base_iv) + " |")
            entry["base"] = {str(k): _iv(iv) for k, iv in zip(ks, base_iv)}
        for m, by_seed in finals.items():
            per_k = method_passk(list(by_seed.values()), ks)
            lines.append(f"| {m} | " + " | ".join(_pts(per_k[k]) for k in ks) + " |")
            entry["methods"][m] = {str(k): _iv(per_k[k]) for k in ks}
        arms = {m: paired_differences(c, finals[baseline], ks) for m, c in finals.items() if m != baseline}
        if arms:
            adjusted = holm_intervals(arms, ks) if len(arms) >= 2 else {
                m: dict(zip(ks, difference_interval(v))) for m, v in arms.items()}
            lines += ["", f"{'Holm-adjusted ' if len(arms) >= 2 else ''}difference vs {baseline} (points):", "", *header]
            lines += [f"| {m} | " + " | ".join(_pts(d[k], sign=True) for k in ks) + " |" for m, d in adjusted.items()]
            entry["vs_baseline"] = {m: {str(k): _iv(d[k]) for k in ks} for m, d in adjusted.items()}
        if temperatures and label != BAND:
            ids = mech.strata[label]
            base_t = {t: c.subset(ids) for t, c in temperatures.items()}
            big = [k for k in ks if k > 1]
            frontiers = {k: trace_frontier(base_t, k) for k in big}
            best = next(iter(frontiers.values())).best() if frontiers else None
            if best is not None:
                edge = " (the grid's lowest: F may continue below it)" if best.temperature == min(temperatures) else ""
                lines += ["", f"Δ_F against this stratum's temperature frontier (points; its best pass@1 is at T = "
                          f"{best.temperature:g}, {100 * best.pass1:.2f}{edge}):", "",
                          "| method | " + " | ".join(f"Δ_F@{k}" for k in big) + " |", "|---|" + "---|" * len(big)]
                entry["delta_F"] = {}
                entry["frontier_best_T"] = best.temperature
                for m, by_seed in finals.items():
                    d = {k: distance_above(by_seed, base_t, k, 0.95, frontiers[k]).interval for k in big}
                    lines.append(f"| {m} | " + " | ".join(_pts(d[k], sign=True) for k in big) + " |")
                    entry["delta_F"][m] = {str(k): _iv(d[k]) for k in big}
        summary[label] = entry
    return lines + [""], summary


def _rows(ids: list[str], question_ids: list[str]) -> np.ndarray:
    index = {q: i for i, q in enumerate(question_ids)}
    return np.array([index[q] for q in ids], dtype=int)


def strategy_mass_lines(results: StudyResults, mech: Mechanism) -> tuple[list[str], dict[str, Any]]:
    """Each strategy's exact mass (Σ p over its gold completions) per method and step on every stratum, with the
    crossed seeds × problems interval, and its change against the base's, paired per problem."""
    groups: dict[str, tuple[str, np.ndarray]] = {"all held-out": ("heldout", np.arange(len(mech.question_ids)))}
    groups |= {label: ("heldout", _rows(ids, mech.question_ids)) for label, ids in mech.strata.items()}
    if mech.band_ids:
        groups[BAND] = ("band", np.arange(len(mech.band_ids)))
    labels = mech.labels
    lines = ["", "## Strategy mass (exact; %, mean [95% CI])", "",
             "Σ p over each strategy's gold completion per problem (teacher-forced at the evaluation's temperature; "
             f"strategies {', '.join(labels)}), averaged over the problems, at each step of `mechanism.steps` (0 = the "
             "base); Δ is the change against the base's mass on the same problems, paired per problem (crossed seeds × "
             "problems intervals)."]
    summary: dict[str, Any] = {}
    for name, (split, rows) in groups.items():
        base = getattr(mech.base, split)[rows]  # [P, J]
        lines += ["", f"### {name} ({len(rows)} problems)", "",
                  "| method | step | " + " | ".join(labels) + " | " + " | ".join(f"Δ{j} vs base" for j in labels) + " |",
                  "|---|---|" + "---|" * (2 * len(labels))]
        base_iv = proportion_interval(base[None])
        lines.append("| base model | 0 | " + " | ".join(_pts(iv, 3) for iv in base_iv) + " |" + " – |" * len(labels))
        entry: dict[str, Any] = {"base": {j: _iv(iv) for j, iv in zip(labels, base_iv)}, "methods": {}}
        for m, by_seed in mech.jobs.items():
            for step in [s for s in mech.steps if s > 0]:
                arr = np.stack([getattr(by_seed[s][step], split)[rows] for s in sorted(by_seed)])  # [S, P, J]
                level = proportion_interval(arr)
                delta = difference_interval(arr - base[None])
                lines.append(f"| {m} | {step} | " + " | ".join(_pts(iv, 3) for iv in level) + " | "
                             + " | ".join(_pts(iv, 3, sign=True) for iv in delta) + " |")
                entry["methods"].setdefault(m, {})[str(step)] = {
                    "mass": {j: _iv(iv) for j, iv in zip(labels, level)},
                    "delta_vs_base": {j: _iv(iv) for j, iv in zip(labels, delta)}}
        summary[name] = entry
    return lines + [""], summary


def _seed_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and t_{S−1} interval of per-seed values (nan bounds for one seed)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan
    half = float(student_t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def collapse_lines(results: StudyResults) -> tuple[list[str], dict[str, Any]]:
    """Each arm's collapsed groups (ACR: the share of groups whose rewards are all equal, per step) over training as
    a ratio to the baseline's: per seed, the arm's mean ACR over its logged steps over the baseline's (the same
    seed: equal groups per step, so it is the ratio of collapsed-group counts), then the geometric mean over seeds
    with a t_{S−1} interval on the log scale. An arm whose estimator acts only on some steps (:data:`GATE_KEYS`)
    says on how many of its logged steps it acted: one that never did trained as plain group normalisation."""
    baseline = results.study.baseline
    base_jobs = results.jobs[baseline]

    def mean_acr(job) -> float:
        vals = [v for v in job.series("acr") if v is not None]
        return float(np.mean(vals)) if vals else math.nan

    lines = ["", f"## Collapsed groups against {baseline}", "",
             f"ACR per step averaged over training, per seed; ratio = arm / {baseline} on the same seed, geometric mean "
             "over seeds with a 95% t interval over seeds on the log scale (a seed where either is 0 is left out and "
             f"counted); fewer = 1 − ratio; acted = the steps on which an estimator that acts only on some steps "
             "did (AVSPO: ACR_t > τ_t), over every seed.", "",
             f"| method | mean ACR | {baseline}'s | ratio [95% CI] | fewer collapsed groups | seeds | acted |",
             "|---|---|---|---|---|---|---|"]
    summary: dict[str, Any] = {}
    for m, by_seed in results.jobs.items():
        if m == baseline:
            continue
        acted = gate_steps(by_seed.values())
        acted_cell = f"{acted[0]} of {acted[1]} steps" if acted else "–"
        pairs = [(mean_acr(by_seed[s]), mean_acr(base_jobs[s])) for s in sorted(by_seed) if s in base_jobs]
        usable = [(a, b) for a, b in pairs if a > 0 and b > 0]
        if not usable:
            lines.append(f"| {m} | – | – | – | – | 0 of {len(pairs)} | {acted_cell} |")
            if acted:
                summary[m] = {"acted": acted[0], "logged": acted[1]}
            continue
        mean, lo, hi = _seed_interval([math.log(a / b) for a, b in usable])
        ratio = (math.exp(mean), math.exp(lo) if not math.isnan(lo) else math.nan,
                 math.exp(hi) if not math.isnan(hi) else math.nan)
        band = f"{ratio[0]:.3f} [{ratio[1]:.3f}, {ratio[2]:.3f}]" if not math.isnan(ratio[1]) else f"{ratio[0]:.3f} [–]"
        fewer = (f"{100 * (1 - ratio[0]):.1f}% [{100 * (1 - ratio[2]):.1f}, {100 * (1 - ratio[1]):.1f}]"
                 if not math.isnan(ratio[1]) else f"{100 * (1 - ratio[0]):.1f}%")
        lines.append(f"| {m} | {np.mean([a for a, _ in usable]):.4f} | {np.mean([b for _, b in usable]):.4f} | "
                     f"{band} | {fewer} | {len(usable)} of {len(pairs)} | {acted_cell} |")
        summary[m] = {"ratio": ratio[0], "lo": ratio[1], "hi": ratio[2], "seeds": len(usable), "of": len(pairs),
                      **({"acted": acted[0], "logged": acted[1]} if acted else {})}
    return lines + [""], summary


def gate_steps(jobs) -> tuple[int, int] | None:
    """``(acted, logged)``: over the jobs, the steps on which a gated estimator acted and the steps its gate was
    logged; None when no job logs a gate (:data:`grae.compare.results.GATE_KEYS`)."""
    flags = [v for job in jobs for key in GATE_KEYS for v in job.series(key) if v is not None]
    return (sum(1 for v in flags if v > 0), len(flags)) if flags else None


def training_lines(results: StudyResults, mech: Mechanism) -> tuple[list[str], dict[str, Any]]:
    """Positive and negative advantage mass, ω and ACR at 25/50/75/100 % of training (each the mean of the last 10 %
    of steps up to there), mean over seeds with a 95% t_{S−1} band (grae.compare.stats.curve_bands)."""
    quantities = (("adv_pos_mass", "positive advantage mass", {"lower": 0.0}),
                  ("adv_neg_mass", "negative advantage mass", {"lower": 0.0}),
                  ("omega", "ω (batch mean reward)", {}), ("acr", "ACR", {"proportion": True}))
    header = " | ".join(f"{int(100 * f)}%" for f in TRAINING_FRACTIONS)
    lines = ["", "## Advantage mass and ω over training (mean over seeds [95% CI])", "",
             "Σ max(A, 0) and Σ max(−A, 0) over a step's samples / its samples (grae.metrics.batch_diagnostics), ω and "
             "ACR, each the mean of the last 10% of steps up to the fraction of training.", "",
             f"| method | quantity | {header} |", "|---|---|" + "---|" * len(TRAINING_FRACTIONS)]
    summary: dict[str, Any] = {}
    for m, by_seed in results.jobs.items():
        for key, label, kind in quantities:
            series = [mech.adv_pos_mass.get(m, {}).get(s, []) if key == "adv_pos_mass" else job.series(key)
                      for s, job in sorted(by_seed.items())]
            windows = [at_fractions([v for v in vals if v is not None]) for vals in series
                       if any(v is not None for v in vals)]
            if not windows:
                continue
            mean, lo, hi = curve_bands(windows, **kind)
            lines.append(f"| {m} | {label} | " + " | ".join(
                f"{a:.3f} [{b:.3f}, {c:.3f}]" if len(windows) > 1 else f"{a:.3f}" for a, b, c in zip(mean, lo, hi)) + " |")
            summary.setdefault(m, {})[key] = {"mean": mean.tolist(), "lo": lo.tolist(), "hi": hi.tolist(),
                                              "seeds": len(windows)}
    return lines + [""], summary


def mechanism_section(results: StudyResults) -> tuple[list[str], dict[str, Any] | None]:
    """``(lines, summary)`` of every mechanism section; nothing for a study without ``mechanism``."""
    mech = results.mechanism
    if mech is None:
        return [], None
    lines: list[str] = []
    summary: dict[str, Any] = {"steps": mech.steps, "ks": mech.ks, "labels": mech.labels}
    for key, (part, numbers) in (("strata", stratum_lines(results, mech)),
                                 ("strategy_mass", strategy_mass_lines(results, mech)),
                                 ("collapse_ratio", collapse_lines(results)),
                                 ("training", training_lines(results, mech))):
        lines += part
        summary[key] = numbers
    return lines, summary
