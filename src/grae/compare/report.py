"""Aggregate finished compare jobs into tables, PNG plots with bands and ``report.md``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from grae.compare.grid import MIN_VERDICT_SEEDS, CompareConfig
from grae.compare.stats import (
    Interval,
    curve_bands,
    holm_intervals,
    method_passk,
    paired_differences,
    two_level_bootstrap,
)
from grae.eval.records import read_rows
from grae.eval.report import line_colors
from grae.eval.stats import count_problems
from grae.io import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl
from grae.metrics import powers_of_two
from grae.train.rundir import read_metrics

DYNAMICS = [("reward_mean", "reward (batch mean)"), ("entropy", "entropy"), ("acr", "ACR"),
            ("frac_all_correct", "fraction of all-correct groups"), ("frac_all_wrong", "fraction of all-wrong groups"),
            ("adv_neg_mass", "negative advantage mass")]


def collect(cfg: CompareConfig) -> dict:
    """Per method: {seed: ProblemCounts after training}, metrics rows per seed, train seconds per seed.

    The counts are the job's own held-out evaluation (``eval/after.jsonl``), or with the study key
    ``eval`` compare's evaluation of the final model (``eval/frontier/step-<max_steps>``); none in a
    training-only study (``cfg.heldout`` false)."""
    data = {}
    for job in cfg.jobs():
        entry = data.setdefault(job.method, {"counts": {}, "metrics": {}, "seconds": {}, "steps": {}, "generated": {}})
        if cfg.heldout:
            entry["counts"][job.seed] = final_counts(cfg, job)
        entry["metrics"][job.seed] = read_metrics(job.output_dir / "metrics.jsonl")
        summary = json.loads((job.output_dir / "eval" / "summary.json").read_text())
        entry["seconds"][job.seed] = summary.get("train_seconds", float("nan"))
        entry["steps"][job.seed] = summary.get("steps")
        entry["generated"][job.seed] = summary.get("generated_completions")
    return data


def final_counts(cfg: CompareConfig, job):
    """The final model's held-out counts the report uses (:func:`collect`)."""
    if not cfg.eval:
        return count_problems(read_rows(job.output_dir / "eval" / "after.jsonl"))
    from grae.compare.frontier import counts_from_record, curve_path, rows_path, step_done, step_settings

    config = cfg.train_config(job)
    rows = rows_path(job.output_dir, config.max_steps)
    if not step_done(rows, step_settings(config, cfg.eval)):
        raise FileNotFoundError(f"{job.method} seed {job.seed}: no rows of the study's eval settings {cfg.eval} for "
                                f"its final model ({curve_path(rows)}); run grae compare without --report-only")
    return counts_from_record(json.loads(curve_path(rows).read_text()))


def base_rows_path(cfg: CompareConfig) -> Path:
    """The base model's held-out rows the report uses: the shared base evaluation, or with ``eval``
    compare's own (``base/frontier.jsonl``)."""
    return cfg.output_dir / "base" / ("frontier.jsonl" if cfg.eval else "before.jsonl")


def per_method_budget(data: dict) -> list[str]:
    """Steps, generated completions and training wall time per method (means over seeds): where methods
    spend rollouts differently (dynamic sampling), equal steps are not equal budgets."""
    lines = ["", "| method | steps | generated completions | training wall time (s) |", "|---|---|---|---|"]
    for method, entry in data.items():
        steps = [s for s in entry["steps"].values() if s is not None]
        generated = [g for g in entry["generated"].values() if g is not None]
        seconds = [v for v in entry["seconds"].values() if not math.isnan(v)]
        lines.append(f"| {method} | {np.mean(steps):.1f} | " + (f"{np.mean(generated):,.0f}" if generated else "–")
                     + f" | {np.mean(seconds):.0f} |")
    return lines


def _fmt(iv: Interval, scale: float = 100.0) -> str:
    return f"{scale * iv.mean:.1f} [{scale * iv.lo:.1f}, {scale * iv.hi:.1f}]"


def write_compare_report(cfg: CompareConfig) -> Path:
    data = collect(cfg)
    return write_heldout_report(cfg, data) if cfg.heldout else write_training_report(cfg, data)


def write_training_report(cfg: CompareConfig, data: dict) -> Path:
    """``report.md`` of a training-only study (every job ran with ``eval.enabled: false`` and the study
    has no ``eval`` key): budget, training dynamics and pass@k on the training batches, no held-out table."""
    out = cfg.output_dir
    plot_dynamics(data, out / "dynamics.png")
    allocation = update_allocation(data)
    lines = heading_lines(cfg)
    lines += budget_lines(cfg, data, ["- held-out: none (training-only study: every job ran with `eval.enabled: "
                                      "false` and the study has no `eval` key; `eval: {n: N}` would evaluate every "
                                      "final model)"])
    lines += ["## Held-out pass@k", "", "Not computed: a training-only study. What follows comes from the training "
              "logs (`metrics.jsonl`).", ""]
    lines += frontier_section(cfg, out)
    lines += dynamics_lines(cfg, data, allocation)
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    atomic_write_json(out / "summary.json", {"heldout": False, "update_allocation": allocation,
                                            "baseline": cfg.baseline, "seeds": cfg.seeds})
    return report


def write_heldout_report(cfg: CompareConfig, data: dict) -> Path:
    from grae.eval.report import plot_passk_curves

    out = cfg.output_dir
    first = next(iter(data.values()))["counts"]
    n_min = min(int(c.n.min()) for entry in data.values() for c in entry["counts"].values())
    ks = powers_of_two(n_min)
    results = {m: method_passk(list(e["counts"].values()), ks, draws=cfg.bootstrap) for m, e in data.items()}
    diff_values = {m: paired_differences(e["counts"], data[cfg.baseline]["counts"], ks)
                   for m, e in data.items() if m != cfg.baseline}
    diffs = intervals_of(diff_values, ks)
    base_path = base_rows_path(cfg)
    base, vs_base, vs_oracle = None, {}, {}
    sections: list[str] = []
    holm: dict[str, dict] = {}
    if diffs:
        sections += paired_section(f"Paired difference vs {cfg.baseline}", [], diff_values, ks, holm, "vs_baseline")
    if base_path.exists():
        from grae.eval.stats import per_problem_passk

        counts = count_problems(read_rows(base_path))
        base = dict(zip(ks, two_level_bootstrap(per_problem_passk(counts, ks)[None], cfg.bootstrap)))
        if "base" in cfg.paired_against:
            values = {m: paired_differences(e["counts"], dict.fromkeys(e["counts"], counts), ks) for m, e in data.items()}
            vs_base = intervals_of(values, ks)
            sections += paired_section("Paired difference vs the base model", [
                "Each seed's per-problem pass@k minus the base model's on the same problem (the base is evaluated "
                "once: its samples are shared by every seed)."], values, ks, holm, "vs_base")
        if "oracle" in cfg.paired_against:
            vs_oracle, oracle_lines = oracle_section(counts, read_rows(base_path), data, ks, holm)
            sections += oracle_lines

    curves = {m: {k: iv.mean for k, iv in r.items()} for m, r in results.items()}
    bands = {m: {k: (iv.lo, iv.hi) for k, iv in r.items()} for m, r in results.items()}
    if base:
        curves = {"base": {k: iv.mean for k, iv in base.items()}, **curves}
        bands = {"base": {k: (iv.lo, iv.hi) for k, iv in base.items()}, **bands}
    plot_passk_curves(curves, out / "passk.png", cfg.title or "held-out pass@k after training", intervals=bands)
    plot_dynamics(data, out / "dynamics.png")
    if diffs:
        plot_differences(diffs, cfg.baseline, out / "passk_vs_baseline.png")

    allocation = update_allocation(data)
    lines = heading_lines(cfg)
    lines += budget_lines(cfg, data, [
        f"- held-out: {first[cfg.seeds[0]].num_problems} problems × "
        + (f"exact pass@k by answer enumeration (`grae eval --exact`: every answer of the task's set teacher-forced, "
           f"no sampling), k ≤ {n_min}" if first[cfg.seeds[0]].exact else f"n = {n_min} samples per run")
        + (" — compare's own evaluation of the base, every final model and every frontier checkpoint (study key "
           f"`eval: {json.dumps(cfg.eval)}`)" if cfg.eval else "")])
    lines += [
        "## Held-out pass@k after training (%; mean [95% CI])",
        "",
        "| method | " + " | ".join(f"pass@{k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    if base:
        lines.append("| base model | " + " | ".join(_fmt(base[k]) for k in ks) + " |")
        lines += reference_rows(counts, read_rows(base_path), ks)
    for m, r in results.items():
        lines.append(f"| {m} | " + " | ".join(_fmt(r[k]) for k in ks) + " |")
    lines += sections
    lines += exact_sampled_lines(cfg, data, ks)
    lines += frontier_section(cfg, out)
    lines += memorisation_section(cfg, data)
    lines += ["", "![pass@k](passk.png)", ""]
    lines += ["![pass@k difference vs baseline](passk_vs_baseline.png)", ""] if diffs else []
    lines += dynamics_lines(cfg, data, allocation)
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    atomic_write_json(out / "summary.json", {
        "heldout": True,
        "ks": ks, "methods": {m: {str(k): vars(iv) for k, iv in r.items()} for m, r in results.items()},
        "vs_baseline": {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in diffs.items()},
        "base": {str(k): vars(iv) for k, iv in base.items()} if base else None,
        "vs_base": {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in vs_base.items()},
        "vs_oracle": {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in vs_oracle.items()},
        "holm": holm,
        "pilot": pilot_reason(cfg),
        "update_allocation": allocation,
        "baseline": cfg.baseline, "seeds": cfg.seeds})
    return report


def intervals_of(values: dict[str, np.ndarray], ks) -> dict[str, dict[int, Interval]]:
    """``{arm: [seeds, problems, ks] differences}`` → ``{arm: {k: crossed interval}}``."""
    return {m: dict(zip((int(k) for k in ks), two_level_bootstrap(v))) for m, v in values.items()}


def paired_section(title: str, explanation: list[str], values: dict[str, np.ndarray], ks, holm: dict[str, dict],
                   key: str, fixed: dict[str, np.ndarray] | None = None) -> list[str]:
    """A paired-difference table (``values``: trained arms; ``fixed``: fixed references, one "seed"), and
    when it compares several trained arms their Holm-adjusted table (recorded in ``holm[key]``)."""
    header = ["| method | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    lines = ["", f"## {title} (points; mean [95% CI], p = one-sided t probability of the other sign)", "",
             *([" ".join(explanation), ""] if explanation else []), *header]
    lines += [difference_row(m, d, ks) for m, d in intervals_of({**values, **(fixed or {})}, ks).items()]
    if len(values) >= 2:
        adjusted = holm_intervals(values, ks)
        holm[key] = {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in adjusted.items()}
        lines += ["", f"Holm-adjusted over the {len(values)} trained arms (one family per k): each interval is at its "
                  "Holm step's level, so it excludes 0 exactly where the adjusted two-sided p is below 0.05 "
                  "(grae.compare.stats.holm_intervals).", "", *header]
        lines += [f"| {m} | " + " | ".join(f"{100 * d[k].mean:+.1f} [{100 * d[k].lo:+.1f}, {100 * d[k].hi:+.1f}] "
                                           f"p_holm={d[k].p_holm:.2f}" for k in ks) + " |" for m, d in adjusted.items()]
    return lines


def oracle_section(counts, rows: list[dict], data: dict, ks, holm: dict[str, dict],
                   ) -> tuple[dict[str, dict[int, Interval]], list[str]]:
    """Every trained arm, the base and the other reference policies paired per problem against the base's
    format-only oracle (``paired_against: oracle``; grae.eval.exact.reference_counts)."""
    from grae.eval.exact import reference_counts

    references = reference_counts(counts, rows)
    oracle = references.pop("format-only oracle")
    values = {m: paired_differences(e["counts"], dict.fromkeys(e["counts"], oracle), ks) for m, e in data.items()}
    fixed = {name: paired_differences({0: c}, {0: oracle}, ks)
             for name, c in {"base model": counts, **{f"reference: {n}": c for n, c in references.items()}}.items()}
    lines = paired_section("Paired difference vs the format-only oracle", [
        "Each seed's per-problem pass@k minus the format-only oracle's on the same problem: the base with every "
        "answer outside the enumerated format deleted and the rest renormalised (p / mass; grae.eval.exact). An arm "
        "below it learned less than deleting the format would give. The base and the references are single fixed "
        "policies: their intervals are over problems only."], values, ks, holm, "vs_oracle", fixed)
    return intervals_of({**values, **fixed}, ks), lines


def exact_sampled_lines(cfg: CompareConfig, data: dict, ks) -> list[str]:
    """With exact rows: exact − sampled pass@k where the same model was also sampled (the base's shared
    evaluation, the jobs' own ``eval/after.jsonl``), and the bound the enumerated mass puts on the gap."""
    if not (cfg.eval or {}).get("exact"):
        return []
    lines = ["", "## Exact − sampled pass@k (points)", "",
             "Exact pass@k teacher-forces the canonical answer string only; a sample the verifier accepts in another "
             "form (other tokenisation, spacing) counts in sampled pass@k and not here, so exact is a lower bound. "
             "Upper bound of the gap: pass@k with the whole mass outside the enumerated set counted correct.", ""]
    header = ["| model | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    base_exact = cfg.output_dir / "base" / "frontier.jsonl"
    rows: list[str] = []
    if base_exact.exists():
        exact = count_problems(read_rows(base_exact))
        sampled_path = cfg.output_dir / "base" / "before.jsonl"
        if sampled_path.exists():
            rows.append(_gap_row("base model: exact − sampled", {0: exact}, {0: count_problems(read_rows(sampled_path))},
                                 ks))
        rows.append(_bound_row("base model: bound from the mass outside the set", exact, ks))
    for method, entry in data.items():
        sampled = {job.seed: count_problems(read_rows(job.output_dir / "eval" / "after.jsonl")) for job in cfg.jobs()
                   if job.method == method and (job.output_dir / "eval" / "after.jsonl").exists()}
        if sampled:
            rows.append(_gap_row(f"{method}: exact − sampled", entry["counts"], sampled, ks))
    if not any(": exact − sampled" in r for r in rows):
        lines += ["Not measured in this study: no model here was also sampled (the jobs ran with `eval.enabled: false` "
                  "and the base has no sampled evaluation); the bound below is all the rows give.", ""]
    return lines + header + rows + [""]


def _gap_row(label: str, exact: dict, sampled: dict, ks) -> str:
    usable = [k for k in ks if all(int(c.n.min()) >= k for c in sampled.values())]
    gaps = dict(zip(usable, two_level_bootstrap(paired_differences(exact, sampled, usable)))) if usable else {}
    return f"| {label} | " + " | ".join(f"{100 * gaps[k].mean:+.1f} [{100 * gaps[k].lo:+.1f}, {100 * gaps[k].hi:+.1f}]"
                                        if k in gaps else "–" for k in ks) + " |"


def _bound_row(label: str, exact, ks) -> str:
    if exact.mass is None:
        return f"| {label} | " + " | ".join("–" for _ in ks) + " |"
    upper = np.clip(exact.p + (1 - exact.mass), 0.0, 1.0)
    bound = [float(np.mean((1 - (1 - upper) ** k) - (1 - (1 - exact.p) ** k))) for k in ks]
    return f"| {label} | " + " | ".join(f"≤ {100 * b:.1f}" for b in bound) + " |"


def pilot_reason(cfg: CompareConfig) -> str | None:
    """Why a study with fewer than MIN_VERDICT_SEEDS seeds draws no verdict (None with enough seeds)."""
    seeds = len(cfg.seeds)
    if seeds >= MIN_VERDICT_SEEDS:
        return None
    why = ("with 1 seed every interval is over problems only: which training seed was run is not in it (on R1 "
           "GRPO's exact held-out pass@1 was 15.1 to 25.8 over 5 seeds)" if seeds == 1 else
           "with 2 seeds the seed part of each interval rests on about 1 degree of freedom: in simulated studies where "
           "seeds dominate the paired interval covered 90–93 % at nominal 95 % (docs/compare.md), so its bounds are "
           "not 95 % bounds")
    return (f"{seeds} seed(s) per method, fewer than {MIN_VERDICT_SEEDS}: {why}. At {MIN_VERDICT_SEEDS} seeds the "
            "paired interval covers 93–97 % (docs/compare.md). Read the numbers as a pilot's: they may choose what to "
            "run next, they decide nothing (no 'keeps', 'narrows' or 'no').")


def heading_lines(cfg: CompareConfig) -> list[str]:
    """The report's title, the pilot banner (fewer than MIN_VERDICT_SEEDS seeds) or the study's verdict,
    and the study's notes."""
    lines = [f"# {cfg.title or 'grae compare'}", ""]
    reason = pilot_reason(cfg)
    if reason:
        lines += [f"> **Pilot: no verdict.** {reason}", ""]
    elif cfg.verdict:
        lines += ["## Verdict", "", cfg.verdict.strip(), ""]
    return lines + ([cfg.notes.strip(), ""] if cfg.notes else [])


def budget_lines(cfg: CompareConfig, data: dict, heldout: list[str]) -> list[str]:
    """The report's "Budget" section; ``heldout``: its line(s) on the held-out evaluation."""
    steps = sorted({s for e in data.values() for s in e["steps"].values() if s is not None})
    trl = cfg.train_config(cfg.jobs()[0]).trl
    per_step = trl.get("per_device_train_batch_size", 8) * trl.get("gradient_accumulation_steps", 1)
    total_train = sum(v for e in data.values() for v in e["seconds"].values() if not math.isnan(v))
    return [
        "## Budget",
        "",
        f"- methods: {len(data)}; seeds per method: {len(cfg.seeds)} ({', '.join(map(str, cfg.seeds))})",
        f"- steps per run: {_span(steps)}; {per_step} completions per step "
        f"(G = {trl.get('num_generations', 8)}); {_span([per_step * s for s in steps], thousands=True)} training samples "
        "per run",
        *heldout,
        f"- training wall time: {total_train / 60:.1f} min summed over runs",
        invocations_line(cfg.output_dir, len(cfg.jobs())),
        *(per_method_budget(data) + [""] if any(e["generated"].get(s) for e in data.values() for s in e["generated"]) else []),
        ("- statistics: mean over seeds and problems, 95% crossed seeds × problems interval "
         "(t, Satterthwaite df; docs/compare.md); differences paired by seed against the baseline (grae.compare.stats)"
         if cfg.heldout else "- statistics: mean over seeds, 95% interval over seeds (grae.compare.stats)"),
        f"- reproduce: `grae compare {cfg.source}`",
        "",
    ]


def dynamics_lines(cfg: CompareConfig, data: dict, allocation: dict[str, dict[str, list[float]]]) -> list[str]:
    """Training dynamics table and plot, pass@k on the training batches, where the update goes
    (``allocation``: :func:`update_allocation`), and the few-seeds note: what the training logs say
    (``dynamics.png`` is written by the caller)."""
    group_size = int(cfg.train_config(cfg.jobs()[0]).trl.get("num_generations", 8))
    lines = ["## Training dynamics (mean over seeds, first vs last 20% of steps)", "",
              "| method | " + " | ".join(f"{label} early → late" for _, label in DYNAMICS[:4]) + " |", "|---|" + "---|" * 4]
    for m, e in data.items():
        cells = []
        for key, _ in DYNAMICS[:4]:
            early, late = _early_late(list(e["metrics"].values()), key)
            cells.append(f"{early:.3f} → {late:.3f}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "![dynamics](dynamics.png)", ""]
    lines += training_passk_lines(data, group_size, draws=cfg.bootstrap)
    lines += update_allocation_lines(allocation)
    if len(cfg.seeds) < 5:
        lines += [f"Note: {len(cfg.seeds)} seeds per method; with fewer than 5 seeds the seed part of each interval "
                  "rests on few degrees of freedom (t with Satterthwaite df, docs/compare.md): where seeds disagree the "
                  "intervals are wide, and the spread between seeds is itself poorly estimated. Paired differences "
                  "still cover 93–97 % from 3 seeds on; a method's own mean with 3 seeds covered 90–92 % in simulated "
                  "studies where seeds dominate (86 % at pass@256 where they dominate strongly: its seed means are "
                  "skewed), so read 3-seed absolute levels as slightly optimistic.", ""]
    return lines


def reference_rows(counts, rows: list[dict], ks) -> list[str]:
    """Table rows of the reference policies (exact, no reasoning; grae.eval.exact) when the base model's
    rows are exact: the format-only oracle and the near-miss guesser. Empty for sampled rows."""
    if getattr(counts, "p", None) is None:
        return []
    from grae.eval.exact import reference_counts
    from grae.eval.stats import passk_estimates

    out = []
    for name, ref in reference_counts(counts, rows).items():
        values = passk_estimates(ref, ks, bootstrap=0)
        out.append(f"| reference: {name} (exact) | " + " | ".join(f"{100 * values[k].value:.1f}" for k in ks) + " |")
    return out


def _span(values: list[int], thousands: bool = False) -> str:
    """"120", or "94–120" when runs differ (budget-stopped studies)."""
    fmt = "{:,}" if thousands else "{}"
    if not values:
        return "0"
    lo, hi = min(values), max(values)
    return fmt.format(hi) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def difference_row(method: str, d: dict[int, Interval], ks) -> str:
    return f"| {method} | " + " | ".join(f"{100 * d[k].mean:+.1f} [{100 * d[k].lo:+.1f}, {100 * d[k].hi:+.1f}] "
                                          f"p={d[k].p_opposite:.2f}" for k in ks) + " |"


TRAINING_FRACTIONS = (0.25, 0.5, 0.75, 1.0)

#: Where an estimator spends its update over training (grae.metrics.batch_diagnostics): the batch mean
#: reward ω (A-GRAE's training state), A-GRAE's positive-advantage factor min(1, ω/α), and Σ|A| per
#: group on hard (success rate p < 0.25) and easy (p ≥ 0.75) groups. A-GRAE's easy→hard curriculum
#: (Yu et al. 2026 §5.1) shows as the hard/easy ratio rising with ω.
ALLOCATION = (("omega", "ω"), ("agrae/suppression", "min(1, ω/α)"),
              ("adv_abs_sum_p[0.00,0.25)", "Σ|A| hard (p < 0.25)"), ("adv_abs_sum_p[0.75,1.00)", "Σ|A| easy (p ≥ 0.75)"))


def at_fractions(vals: list[float]) -> list[float]:
    """One seed's per-step values → their mean over the last 10 % of steps up to each training fraction."""
    window = max(1, len(vals) // 10)
    ends = [max(window, round(f * len(vals))) for f in TRAINING_FRACTIONS]
    return [float(np.mean(vals[e - window:e])) for e in ends]


def _windowed(rows: list[dict], key: str) -> list[float] | None:
    """A seed's ``key`` at each training fraction (:func:`at_fractions`); None when never logged."""
    vals = [r.get(key, r.get(f"grae/{key}")) for r in rows]
    # a difficulty bin with no group that step is logged as 0 (a group with 0 < p < 1 always has Σ|A| > 0)
    vals = [v for v in vals if v is not None and not (key.startswith("adv_abs_sum") and v == 0)]
    return at_fractions(vals) if vals else None


def update_allocation(data: dict) -> dict[str, dict[str, list[float]]]:
    """Per method and quantity of :data:`ALLOCATION`: the mean over seeds at each training fraction."""
    out: dict[str, dict[str, list[float]]] = {}
    for method, entry in data.items():
        for key, _ in ALLOCATION:
            per_seed = [w for rows in entry["metrics"].values() if (w := _windowed(rows, key)) is not None]
            if per_seed:
                out.setdefault(method, {})[key] = [round(float(v), 4) for v in np.mean(per_seed, axis=0)]
    return out


def update_allocation_lines(allocation: dict[str, dict[str, list[float]]]) -> list[str]:
    header = " | ".join(f"{int(100 * f)}%" for f in TRAINING_FRACTIONS)
    lines = ["## Where the update goes over training (mean over seeds)", "",
             "ω is the batch mean reward; Σ|A| is the sum of |advantage| over a group's samples, averaged over the "
             "groups whose success rate p lies in the bin; each cell averages the last 10% of steps up to that "
             "point. A-GRAE's easy→hard shift shows as the hard/easy ratio rising with ω.", "",
             "| method | quantity | " + header + " |", "|---|---|" + "---|" * len(TRAINING_FRACTIONS)]
    for method, quantities in allocation.items():
        for key, label in ALLOCATION:
            if key in quantities:
                lines.append(f"| {method} | {label} | " + " | ".join(f"{v:.3f}" for v in quantities[key]) + " |")
        hard, easy = quantities.get(ALLOCATION[2][0]), quantities.get(ALLOCATION[3][0])
        if hard and easy:
            lines.append(f"| {method} | hard / easy | " + " | ".join(
                f"{h / e:.2f}" if e > 0 else "–" for h, e in zip(hard, easy)) + " |")
    return lines + [""]


def training_passk(runs: list[list[dict]], group_size: int, draws: int = 2000) -> dict[str, list[Interval]]:
    """pass@1 and pass@G of the training batches at 25/50/75/100 % of training, with a bootstrap over seeds.

    With 0/1 rewards a group of G samples is an unbiased pass@k sample for k ≤ G: pass@1 is the batch
    mean reward and pass@G is 1 − the fraction of all-wrong groups. Each seed's value at a fraction f is
    its mean over the last 10 % of steps up to f·steps.
    """
    out: dict[str, list[Interval]] = {}
    for name, key, transform in (("pass@1", "reward_mean", lambda v: v),
                                 (f"pass@{group_size}", "frac_all_wrong", lambda v: 1 - v)):
        per_seed = []  # [seeds, fractions]
        for rows in runs:
            vals = [transform(r[key]) for r in rows if r.get(key) is not None]
            if vals:
                per_seed.append(at_fractions(vals))
        if per_seed:
            out[name] = two_level_bootstrap(np.array(per_seed)[:, None, :], draws)
    return out


def training_passk_lines(data: dict, group_size: int, *, draws: int) -> list[str]:
    header = " | ".join(f"{int(100 * f)}% of steps" for f in TRAINING_FRACTIONS)
    lines = ["## pass@k on the training batches over training (%; mean [95% CI over seeds])", "",
             f"With 0/1 rewards each group of G = {group_size} samples gives pass@1 (batch mean reward) and "
             f"pass@{group_size} (1 − fraction of all-wrong groups); each cell averages the last 10% of steps up to "
             "that point.", "", "| method | k | " + header + " |", "|---|---|" + "---|" * len(TRAINING_FRACTIONS)]
    for m, e in data.items():
        for name, intervals in training_passk(list(e["metrics"].values()), group_size, draws).items():
            lines.append(f"| {m} | {name} | " + " | ".join(_fmt(iv) for iv in intervals) + " |")
    return lines + [""]


INVOCATIONS = "invocations.jsonl"


def log_invocation(out: Path, *, started: float, wall_seconds: float, jobs_run: list[str]) -> None:
    """Append one ``grae compare`` invocation (start time, wall seconds, jobs it ran) to the study's log."""
    append_jsonl(out / INVOCATIONS, [{"started": started, "wall_seconds": round(wall_seconds, 1), "jobs_run": jobs_run}])


def invocations_line(out: Path, num_jobs: int) -> str:
    """Budget line: compare wall time over every invocation, and how many jobs this study ran itself."""
    rows = read_jsonl(out / INVOCATIONS, missing_ok=True)
    if not rows:
        return "- compare wall time: not recorded (no invocation ran a job)"
    ran = {j for r in rows for j in r["jobs_run"]}
    reused = num_jobs - len(ran)
    line = (f"- compare wall time: {sum(r['wall_seconds'] for r in rows) / 60:.1f} min over {len(rows)} invocation(s), "
            f"which ran {len(ran)} of the {num_jobs} jobs")
    return line + (f"; the other {reused} were already finished in the shared jobs_dir (run by another study)" if reused else "")


def _early_late(runs: list[list[dict]], key: str) -> tuple[float, float]:
    early, late = [], []
    for rows in runs:
        vals = [r[key] for r in rows if r.get(key) is not None]
        if vals:
            cut = max(1, len(vals) // 5)
            early.append(np.mean(vals[:cut]))
            late.append(np.mean(vals[-cut:]))
    return (float(np.mean(early)) if early else float("nan"), float(np.mean(late)) if late else float("nan"))


def plot_dynamics(data: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), dpi=120)
    colors = dict(zip(data, line_colors(len(data))))
    for ax, (key, label) in zip(axes.ravel(), DYNAMICS):
        for method, entry in data.items():
            series = [_smooth([r.get(key) for r in rows]) for rows in entry["metrics"].values() if rows]
            if not series:
                continue
            mean, lo, hi = curve_bands(series)
            steps = np.arange(1, len(mean) + 1)
            line, = ax.plot(steps, mean, linewidth=1.4, label=method, color=colors[method])
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(True, alpha=0.3)
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_differences(diffs: dict[str, dict[int, Interval]], baseline: str, path: Path) -> Path:
    """Paired pass@k difference against the baseline per k (log₂ axis), one line per method with its 95% band."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.2), dpi=150)
    for (method, by_k), color in zip(diffs.items(), line_colors(len(diffs))):
        ks = sorted(by_k)
        ax.plot(ks, [100 * by_k[k].mean for k in ks], marker="o", markersize=3, linewidth=1.4, label=method, color=color)
        ax.fill_between(ks, [100 * by_k[k].lo for k in ks], [100 * by_k[k].hi for k in ks], color=color, alpha=0.12, linewidth=0)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ks = sorted({k for by_k in diffs.values() for k in by_k})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (samples)")
    ax.set_ylabel(f"pass@k − {baseline} (points)")
    ax.set_title(f"paired difference vs {baseline} (95% crossed seeds × problems interval)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _smooth(values: list, window: int = 10) -> list:
    out, buf = [], []
    for v in values:
        if v is not None:
            buf.append(v)
        buf = buf[-window:]
        out.append(sum(buf) / len(buf) if buf else None)
    return out


def frontier_section(cfg: CompareConfig, out: Path) -> list[str]:
    """The checkpoint frontier (:mod:`grae.compare.frontier`): table, intervals and ``frontier.png``."""
    from grae.compare.frontier import collect_frontier, frontier_lines, frontier_points, plot_frontier
    from grae.eval.stats import per_problem_passk

    if not cfg.frontier:
        return []
    max_steps = cfg.train_config(cfg.jobs()[0]).max_steps
    data = collect_frontier(cfg.jobs(), cfg.frontier, max_steps)
    if not data:
        return ["", "## Checkpoint frontier", "", "No frontier rows (the jobs kept no snapshots, e.g. runs made before "
                "the frontier existed): rerun the study to evaluate them.", ""]
    n_min = min(int(c.n.min()) for by_f in data.values() for per_seed in by_f.values() for c in per_seed.values())
    k_max = powers_of_two(n_min)[-1]
    base = None
    for name in ("frontier.jsonl",) if cfg.eval else ("frontier.jsonl", "before.jsonl"):
        path = out / "base" / name
        if path.exists():
            counts = count_problems(read_rows(path))
            if int(counts.n.min()) >= k_max:
                base = dict(zip([1, k_max], two_level_bootstrap(per_problem_passk(counts, [1, k_max])[None], cfg.bootstrap)))
                break
    points = frontier_points(data, k_max, draws=cfg.bootstrap)
    if not points:
        return []
    plot_frontier(points, cfg.baseline, k_max, out / "frontier.png", base=base)
    atomic_write_json(out / "frontier.json", {
        "k_max": k_max, "fractions": cfg.frontier,
        "base": {str(k): vars(iv) for k, iv in base.items()} if base else None,
        "methods": {m: {str(f): {str(k): vars(iv) for k, iv in by_k.items()} for f, by_k in by_f.items()}
                    for m, by_f in points.items()}})
    return [""] + frontier_lines(points, cfg.baseline, k_max, base)


def memorisation_section(cfg: CompareConfig, data: dict) -> list[str]:
    """Per method (mean over seeds): the train vs held-out gap and the answer-leakage rate
    (:mod:`grae.eval.diagnostics`), the base model's leakage on the same problems beside it."""
    from grae.data import get_task
    from grae.eval.diagnostics import answer_leakage, train_heldout_gap

    heading = ["", "## Memorisation diagnostics (mean over seeds)", ""]
    sampled = {m: [j for j in cfg.jobs() if j.method == m and (j.output_dir / "eval" / "after.jsonl").exists()]
               for m in data}
    if not any(sampled.values()):  # e.g. jobs run with eval.enabled false, evaluated exactly by compare
        return heading + ["Not computed: no job has a sampled held-out evaluation (`eval/after.jsonl`; the jobs ran "
                          "with `eval.enabled: false`), and leakage needs sampled answers.", ""]
    base_path = cfg.output_dir / "base" / "before.jsonl"
    base_rows = read_rows(base_path) if base_path.exists() else None
    lines = [*heading,
             *(["From the jobs' own sampled held-out evaluation (`eval/after.jsonl`, the base's `base/before.jsonl`): "
                "leakage needs sampled answers.", ""] if cfg.eval else []),
             "Gap: pass@1 on the training batches (last 10% of steps) − held-out pass@1. Leakage: share of wrong "
             "held-out answers that equal some answer of the seed's training set; the base model's rate on the same "
             "problems and training answers is the chance level.", "",
             "| method | train pass@1 | held-out pass@1 | gap (points) | answer leakage | base model's leakage |",
             "|---|---|---|---|---|---|"]
    for method in data:
        gaps, leaks, base_leaks = [], [], []
        if not sampled[method]:
            lines.append(f"| {method} | – | – | – | – | – |")
            continue
        for job in sampled[method]:
            config = cfg.train_config(job)
            try:
                train_answers = [e["answer"] for e in get_task(config.task.name, **config.task.params).train(
                    config.task.train_size, seed=config.seed)]
            except (KeyError, OSError, TypeError, ValueError):  # training answers that cannot be listed
                train_answers = []
            rows = read_rows(job.output_dir / "eval" / "after.jsonl")
            gaps.append(train_heldout_gap(data[method]["metrics"][job.seed], rows))
            leaks.append(answer_leakage(rows, train_answers)["rate"] if train_answers else float("nan"))
            if base_rows is not None and train_answers:
                base_leaks.append(answer_leakage(base_rows, train_answers)["rate"])
        lines.append(f"| {method} | {100 * np.mean([g['train_pass1'] for g in gaps]):.1f} | "
                     f"{100 * np.mean([g['heldout_pass1'] for g in gaps]):.1f} | "
                     f"{100 * np.mean([g['gap'] for g in gaps]):+.1f} | "
                     + (f"{100 * np.nanmean(leaks):.1f}% | " if not np.isnan(leaks).all() else "– | ")
                     + (f"{100 * np.nanmean(base_leaks):.1f}%" if base_leaks else "–") + " |")
    return lines + [""]
