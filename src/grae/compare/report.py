"""The compare report: ``report.md``, ``summary.json`` and PNG plots with bands, rendered from a study's
table (:class:`grae.compare.results.StudyResults`).

:func:`write_compare_report` gathers a finished study once (:func:`grae.compare.results.gather`) and
:func:`render` writes everything from the table alone: every section and plot below is a pure function of
it, so a report re-rendered from ``summary.json`` (``grae compare SUMMARY.json --report-only``) is the
same bytes as the one rendered from the rows.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from grae.compare.grid import MIN_VERDICT_SEEDS, CompareConfig
from grae.compare.machines import blocking, blocking_line
from grae.compare.results import INVOCATIONS, JobResult, StudyResults, gather, write_summary
from grae.compare.stats import (
    Interval,
    difference_interval,
    holm_intervals,
    interval_text,
    method_passk,
    n_note,
    p_text,
    paired_differences,
    proportion_interval,
    two_level_bootstrap,
)
from grae.compare.training import dynamics_lines, plot_dynamics, update_allocation
from grae.eval.report import line_colors
from grae.io import append_jsonl, atomic_write_json, atomic_write_text


def write_compare_report(cfg: CompareConfig) -> Path:
    """Gather the study's results once and render its report into ``cfg.output_dir``."""
    return render(gather(cfg), cfg.output_dir)


def render(results: StudyResults, out: Path) -> Path:
    """``report.md``, ``summary.json`` (with the table) and the plots of ``results`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return write_heldout_report(results, out) if results.study.heldout else write_training_report(results, out)


def write_training_report(results: StudyResults, out: Path) -> Path:
    """``report.md`` of a training-only study (every job ran with ``eval.enabled: false`` and the study
    has no ``eval`` key): budget, training dynamics and pass@k on the training batches, no held-out table."""
    plot_dynamics(results, out / "dynamics.png")
    from grae.compare.summary import training_summary

    allocation = update_allocation(results)
    heading = heading_lines(results)
    lines = [*heading[:2], *training_summary(results), "", *heading[2:]]
    lines += budget_lines(results, ["- held-out: none (training-only study: every job ran with `eval.enabled: "
                                    "false` and the study has no `eval` key; `eval: {n: N}` would evaluate every "
                                    "final model)"])
    lines += ["## Held-out pass@k", "", "Not computed: a training-only study. What follows comes from the training "
              "logs (`metrics.jsonl`).", ""]
    lines += frontier_section(results, out)
    lines += dynamics_lines(results, allocation)
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    write_summary(out / "summary.json", {"heldout": False, "update_allocation": allocation,
                                         "baseline": results.study.baseline, "seeds": results.study.seeds}, results)
    return report


def write_heldout_report(results: StudyResults, out: Path) -> Path:
    from grae.eval.report import plot_passk_curves
    from grae.eval.stats import per_problem_passk

    study = results.study
    ks = results.ks()
    finals = {m: results.finals(m) for m in results.jobs}
    per_method = {m: method_passk(list(c.values()), ks, draws=study.bootstrap) for m, c in finals.items()}
    diff_values = {m: paired_differences(c, finals[study.baseline], ks) for m, c in finals.items() if m != study.baseline}
    diffs = intervals_of(diff_values, ks)
    counts = results.base
    base, vs_base, vs_oracle = None, {}, {}
    sections: list[str] = []
    holm: dict[str, dict] = {}
    if diffs:
        sections += paired_section(f"Paired difference vs {study.baseline}", [], diff_values, ks, holm, "vs_baseline")
    if counts is not None:
        base = dict(zip(ks, proportion_interval(per_problem_passk(counts, ks)[None])))
        if "base" in study.paired_against:
            values = {m: paired_differences(c, dict.fromkeys(c, counts), ks) for m, c in finals.items()}
            vs_base = intervals_of(values, ks)
            sections += paired_section("Paired difference vs the base model", [
                "Each seed's per-problem pass@k minus the base model's on the same problem (the base is evaluated "
                "once: its samples are shared by every seed)."], values, ks, holm, "vs_base")
        if "oracle" in study.paired_against:
            vs_oracle, oracle_lines = oracle_section(results, ks, holm)
            sections += oracle_lines

    curves = {m: {k: iv.mean for k, iv in r.items()} for m, r in per_method.items()}
    bands = {m: {k: (iv.lo, iv.hi) for k, iv in r.items()} for m, r in per_method.items()}
    if base:
        curves = {"base": {k: iv.mean for k, iv in base.items()}, **curves}
        bands = {"base": {k: (iv.lo, iv.hi) for k, iv in base.items()}, **bands}
    plot_passk_curves(curves, out / "passk.png", study.title or "held-out pass@k after training", intervals=bands)
    plot_dynamics(results, out / "dynamics.png")
    if diffs:
        plot_differences(diffs, study.baseline, out / "passk_vs_baseline.png")

    allocation = update_allocation(results)
    rule = None
    if study.rule:  # the study's decision rule (grae.compare.rules.registry): its answer is the report's first line
        from grae.compare.rules.registry import rule_kind

        kind = rule_kind(study.rule)
        outcome = kind.decide(results)
        rule = kind.json(outcome, kind.answer_line(outcome, study.baseline))
        sections = kind.lines(outcome, study.baseline) + sections
    first = results.jobs[study.methods[0]][study.seeds[0]].final
    n_min = min(int(c.n.min()) for by_seed in finals.values() for c in by_seed.values())
    from grae.compare.summary import plain_summary

    heading = heading_lines(results)
    summary = [*plain_summary(results, per_method, diffs, ruled=rule is not None), ""]
    lines = ([rule["answer"], ""] if rule else []) + [*heading[:2], *summary, *heading[2:]]
    lines += budget_lines(results, [
        f"- held-out: {first.num_problems} problems × "
        + (f"exact pass@k by answer enumeration (`grae eval --exact`: every answer of the task's set teacher-forced, "
           f"no sampling), k ≤ {n_min}" if first.exact else f"n = {n_min} samples per run")
        + (" — compare's own evaluation of the base, every final model and every frontier checkpoint (study key "
           f"`eval: {json.dumps(study.eval)}`)" if study.eval else "")])
    lines += [
        "## Held-out pass@k after training (%; mean [95% CI])",
        "",
        "| method | " + " | ".join(f"pass@{k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    if base:
        lines.append("| base model | " + " | ".join(interval_text(base[k]) for k in ks) + " |")
        lines += reference_rows(results, ks)
    for m, r in per_method.items():
        lines.append(f"| {m} | " + " | ".join(interval_text(r[k]) for k in ks) + " |")
    if base:
        lines += large_k_lines(results, base, ks)
    lines += sections
    lines += exact_sampled_lines(results, ks)
    lines += frontier_section(results, out)
    from grae.compare.temperature_report import temperature_section

    temperature_lines, temperature_summary = temperature_section(results)
    lines += temperature_lines
    from grae.compare.mechanism_report import mechanism_section

    mechanism_lines, mechanism_summary = mechanism_section(results)
    lines += mechanism_lines
    lines += memorisation_section(results)
    lines += ["", "![pass@k](passk.png)", ""]
    lines += ["![pass@k difference vs baseline](passk_vs_baseline.png)", ""] if diffs else []
    lines += dynamics_lines(results, allocation)
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    write_summary(out / "summary.json", {
        "heldout": True,
        "ks": ks, "methods": {m: {str(k): vars(iv) for k, iv in r.items()} for m, r in per_method.items()},
        "vs_baseline": {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in diffs.items()},
        "base": {str(k): vars(iv) for k, iv in base.items()} if base else None,
        "vs_base": {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in vs_base.items()},
        "vs_oracle": {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in vs_oracle.items()},
        "holm": holm,
        "pilot": pilot_reason(len(study.seeds)),
        "update_allocation": allocation,
        "baseline": study.baseline, "seeds": study.seeds, **({"rule": rule} if rule else {}),
        **({"temperature_frontier": temperature_summary} if temperature_summary else {}),
        **({"mechanism": mechanism_summary} if mechanism_summary else {})}, results)
    return report


def intervals_of(values: dict[str, np.ndarray], ks) -> dict[str, dict[int, Interval]]:
    """``{arm: [seeds, problems, ks] differences}`` → ``{arm: {k: crossed interval}}`` (at n where the cells agree
    exactly: :func:`grae.compare.stats.difference_interval`)."""
    return {m: dict(zip((int(k) for k in ks), difference_interval(v))) for m, v in values.items()}


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
        lines += [f"| {m} | " + " | ".join(f"{difference(d[k])} "
                                           f"{p_text(d[k].p_holm, 'p_holm')}" for k in ks) + " |" for m, d in adjusted.items()]
    return lines


def oracle_section(results: StudyResults, ks, holm: dict[str, dict]) -> tuple[dict[str, dict[int, Interval]], list[str]]:
    """Every trained arm, the base and the other reference policies paired per problem against the base's
    format-only oracle (``paired_against: oracle``; grae.eval.exact.reference_counts)."""
    references = dict(results.references)
    oracle = references.pop("format-only oracle")
    values = {m: paired_differences(c, dict.fromkeys(c, oracle), ks) for m, c in ((m, results.finals(m)) for m in results.jobs)}
    fixed = {name: paired_differences({0: c}, {0: oracle}, ks)
             for name, c in {"base model": results.base, **{f"reference: {n}": c for n, c in references.items()}}.items()}
    lines = paired_section("Paired difference vs the format-only oracle", [
        "Each seed's per-problem pass@k minus the format-only oracle's on the same problem: the base with every "
        "answer outside the enumerated format deleted and the rest renormalised (p / mass; grae.eval.exact). An arm "
        "below it learned less than deleting the format would give. The base and the references are single fixed "
        "policies: their intervals are over problems only."], values, ks, holm, "vs_oracle", fixed)
    return intervals_of({**values, **fixed}, ks), lines


def exact_sampled_lines(results: StudyResults, ks) -> list[str]:
    """With exact rows: exact − sampled pass@k where the same model was also sampled (the base's shared
    evaluation, the jobs' own ``eval/after.jsonl``), and the bound the enumerated mass puts on the gap."""
    if not (results.study.eval or {}).get("exact"):
        return []
    lines = ["", "## Exact − sampled pass@k (points)", "",
             "Exact pass@k teacher-forces the canonical answer string only; a sample the verifier accepts in another "
             "form (other tokenisation, spacing) counts in sampled pass@k and not here, so exact is a lower bound. "
             "Upper bound of the gap: pass@k with the whole mass outside the enumerated set counted correct.", ""]
    header = ["| model | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    rows: list[str] = []
    exact = results.base_files.get("frontier.jsonl")
    if exact is not None:
        sampled = results.base_files.get("before.jsonl")
        if sampled is not None:
            rows.append(_gap_row("base model: exact − sampled", {0: exact}, {0: sampled}, ks))
        rows.append(_bound_row("base model: bound from the mass outside the set", exact, ks))
    for method, by_seed in results.jobs.items():
        sampled_by_seed = {seed: job.sampled for seed, job in by_seed.items() if job.sampled is not None}
        if sampled_by_seed:
            rows.append(_gap_row(f"{method}: exact − sampled", results.finals(method), sampled_by_seed, ks))
    if not any(": exact − sampled" in r for r in rows):
        lines += ["Not measured in this study: no model here was also sampled (the jobs ran with `eval.enabled: false` "
                  "and the base has no sampled evaluation); the bound below is all the rows give.", ""]
    return lines + header + rows + [""]


def _gap_row(label: str, exact: dict, sampled: dict, ks) -> str:
    usable = [k for k in ks if all(int(c.n.min()) >= k for c in sampled.values())]
    gaps = dict(zip(usable, two_level_bootstrap(paired_differences(exact, sampled, usable)))) if usable else {}
    return f"| {label} | " + " | ".join(difference(gaps[k])
                                        if k in gaps else "–" for k in ks) + " |"


def _bound_row(label: str, exact, ks) -> str:
    if exact.mass is None:
        return f"| {label} | " + " | ".join("–" for _ in ks) + " |"
    upper = np.clip(exact.p + (1 - exact.mass), 0.0, 1.0)
    bound = [float(np.mean((1 - (1 - upper) ** k) - (1 - (1 - exact.p) ** k))) for k in ks]
    return f"| {label} | " + " | ".join(f"≤ {100 * b:.1f}" for b in bound) + " |"


def pilot_reason(seeds: int) -> str | None:
    """Why a study with ``seeds`` < MIN_VERDICT_SEEDS seeds per method draws no verdict (None with enough)."""
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


def heading_lines(results: StudyResults) -> list[str]:
    """The report's title, the pilot banner (fewer than MIN_VERDICT_SEEDS seeds) or the study's verdict,
    and the study's notes."""
    study = results.study
    lines = [f"# {study.title or 'grae compare'}", ""]
    reason = pilot_reason(len(study.seeds))
    if reason:
        lines += [f"> **Pilot: no verdict.** {reason}", ""]
    elif study.verdict:
        lines += ["## Verdict", "", study.verdict.strip(), ""]
    return lines + ([study.notes.strip(), ""] if study.notes else [])


def per_method_budget(results: StudyResults) -> list[str]:
    """Steps, generated completions and training wall time per method (means over seeds): where methods
    spend rollouts differently (dynamic sampling), equal steps are not equal budgets."""
    lines = ["", "| method | steps | generated completions | training wall time (s) | ran on (load at the end) |",
             "|---|---|---|---|---|"]
    for method, by_seed in results.jobs.items():
        steps = [j.steps for j in by_seed.values() if j.steps is not None]
        generated = [j.generated for j in by_seed.values() if j.generated is not None]
        seconds = [j.counted_seconds for j in by_seed.values() if not math.isnan(j.counted_seconds)]
        lines.append(f"| {method} | {np.mean(steps):.1f} | " + (f"{np.mean(generated):,.0f}" if generated else "–")
                     + f" | {np.mean(seconds):.0f} | {machines_cell(list(by_seed.values()))} |")
    return lines + ["", "A wall time is the machine's and its load's as much as the method's: compare methods' "
                    "times only where they ran on the same machine under a like load."]


def machines_cell(jobs: list[JobResult]) -> str:
    """What a method's jobs trained on and under: ``cpu (AMD EPYC 7B13, 1 thread), load 5.2 on 2 CPUs`` (each
    distinct one once); ``not recorded`` for jobs from before grae recorded it."""
    seen = list(dict.fromkeys(", ".join(filter(None, [j.device, j.load])) or "not recorded" for j in jobs))
    return "; ".join(seen)


def budget_lines(results: StudyResults, heldout: list[str]) -> list[str]:
    """The report's "Budget" section; ``heldout``: its line(s) on the held-out evaluation."""
    study = results.study
    jobs = [j for by_seed in results.jobs.values() for j in by_seed.values()]
    steps = sorted({j.steps for j in jobs if j.steps is not None})
    per_step = study.per_step
    total_train = sum(j.counted_seconds for j in jobs if not math.isnan(j.counted_seconds))
    uncounted = sum(j.resumed_uncounted for j in jobs)
    return [
        "## Budget",
        "",
        f"- methods: {len(results.jobs)}; seeds per method: {len(study.seeds)} ({', '.join(map(str, study.seeds))})",
        f"- steps per run: {_span(steps)}; {per_step} completions per step "
        f"(G = {study.group_size}); {_span([per_step * s for s in steps], thousands=True)} training samples "
        "per run",
        *heldout,
        f"- training wall time: {total_train / 60:.1f} min summed over runs"
        + (f" ({uncounted} run{'s' * (uncounted != 1)} resumed before grae counted an earlier process's time: for "
           f"{'them' if uncounted != 1 else 'it'} the logged step times of every process, a lower bound)"
           if uncounted else ""),
        *devices_line(jobs),
        *([blocking_line(check)] if (check := blocking(results)).by_seed else []),
        invocations_line(results.invocations, study.num_jobs, study.shared_jobs_dir),
        *(per_method_budget(results) + [""] if any(j.generated for j in jobs) else []),
        ("- statistics: mean over seeds and problems, 95% crossed seeds × problems interval "
         "(t, Satterthwaite df; docs/compare.md); differences paired by seed against the baseline (grae.compare.stats)"
         if study.heldout else "- statistics: mean over seeds, 95% interval over seeds (grae.compare.stats)"),
        f"- reproduce: `grae compare {study.source}`",
        "",
    ]


def reference_rows(results: StudyResults, ks) -> list[str]:
    """Table rows of the reference policies (exact, no reasoning; grae.eval.exact) when the base model's
    rows are exact: the format-only oracle and the near-miss guesser. Empty for sampled rows."""
    from grae.eval.stats import passk_estimates

    out = []
    for name, ref in results.references.items():
        values = passk_estimates(ref, ks, bootstrap=0)
        out.append(f"| reference: {name} (exact) | " + " | ".join(f"{100 * values[k].value:.1f}" for k in ks) + " |")
    return out


#: points within which a guesser's pass@k lies of the base's where no arm can show narrowing (issue 45 §3)
GUESSER_WITHIN = 15.0
#: the base's pass@k (points) from which a k is at its ceiling (issue 45 §3: the fair test's k >= 16)
CEILING = 99.0


def large_k_lines(results: StudyResults, base: dict[int, Interval], ks) -> list[str]:
    """Below the held-out table: the k > 1 at which a reference with no computation (every reference policy but the
    format-only oracle, which is the base renormalised) lies within GUESSER_WITHIN points of the base's pass@k.
    There pass@k cannot show narrowing: a method would have to fall below what guessing reaches. Before it, the k
    at which the base's pass@k is at least CEILING: no method can rise above it there. Empty when neither holds."""
    from grae.eval.stats import passk_estimates

    close: dict[int, list[str]] = {}
    for name, ref in results.references.items():
        if name == "format-only oracle":
            continue
        values = passk_estimates(ref, ks, bootstrap=0)
        for k in ks[1:] if ks[0] == 1 else ks:  # narrowing is a loss at k > 1 (pass@1 is what RL raises)
            if 100 * (base[k].mean - values[k].value) <= GUESSER_WITHIN:
                close.setdefault(k, []).append(f"{name} {100 * values[k].value:.1f}")
    ceiling = [k for k in ks if 100 * base[k].mean >= CEILING]
    lines = ["", f"**pass@k is at its ceiling at k = {', '.join(map(str, ceiling))}**: the base reaches "
             + ", ".join(f"{100 * base[k].mean:.1f}" for k in ceiling) + f" there (≥ {CEILING:.0f}), so no method can "
             "rise above it and an interval that holds a margin there says little."] if ceiling else []
    if not close:
        return lines
    return lines + ["", f"**pass@k cannot show narrowing at k = {', '.join(map(str, sorted(close)))}**: there a reference with "
            f"no computation lies within {GUESSER_WITHIN:.0f} points of the base ("
            + "; ".join(f"k = {k}: base {100 * base[k].mean:.1f}, {', '.join(close[k])}" for k in sorted(close))
            + "), so a method's pass@k − base there says \"cannot show narrowing\", not \"did not narrow\"."]


def _span(values: list[int], thousands: bool = False) -> str:
    """"120", or "94–120" when runs differ (budget-stopped studies)."""
    fmt = "{:,}" if thousands else "{}"
    if not values:
        return "0"
    lo, hi = min(values), max(values)
    return fmt.format(hi) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def difference(iv: Interval) -> str:
    """``+3.0 [-35.1, +41.1]``: a difference of two proportions in points, its interval shown inside [−100, +100]
    (the range of such a difference; at 2 seeds t_1 = 12.7 can reach past it). Only the display: p, Holm and the
    decision rules read the interval as computed."""
    return f"{100 * iv.mean:+.1f} [{100 * max(iv.lo, -1.0):+.1f}, {100 * min(iv.hi, 1.0):+.1f}]" + n_note(iv.n_eff)


def difference_row(method: str, d: dict[int, Interval], ks) -> str:
    return f"| {method} | " + " | ".join(f"{difference(d[k])} {p_text(d[k].p_opposite)}" for k in ks) + " |"


def log_invocation(out: Path, *, started: float, wall_seconds: float, jobs_run: list[str]) -> None:
    """Append a row to the study's record of sittings (results.INVOCATIONS): the sitting's start, its wall
    seconds so far and the jobs it finished since the last row."""
    append_jsonl(out / INVOCATIONS, [{"started": started, "wall_seconds": round(wall_seconds, 1), "jobs_run": jobs_run}])


def invocations_line(rows: list[dict], num_jobs: int, shared_jobs_dir: bool | None = None) -> str:
    """Budget line: compare wall time over the recorded sittings (rows sharing a start are one sitting: its
    longest wall time), and how many jobs they ran; the others say where they may have come from."""
    if not rows:
        return "- compare wall time: not recorded (no invocation ran a job)"
    sittings: dict[float, float] = {}
    for row in rows:
        sittings[row["started"]] = max(sittings.get(row["started"], 0.0), row["wall_seconds"])
    ran = {j for r in rows for j in r["jobs_run"]}
    others = num_jobs - len(ran)
    line = (f"- compare wall time: {sum(sittings.values()) / 60:.1f} min over {len(sittings)} invocation(s), "
            f"which ran {len(ran)} of the {num_jobs} jobs")
    if not others:
        return line
    where = {True: " (this study's jobs_dir is shared: other studies run jobs there too)",
             False: " (rows brought from another machine, or a sitting stopped before it recorded its jobs)",
             None: ""}[shared_jobs_dir]
    return line + f"; the other {others} were finished outside these invocations{where}"


def devices_line(jobs: list[JobResult]) -> list[str]:
    """Budget line: what trained the jobs and the machine's load at each one's end (each job's
    ``eval/summary.json``); none when no job recorded it."""
    recorded = Counter(", ".join(filter(None, [j.device, j.load])) for j in jobs if j.device is not None)
    if not recorded:
        return []
    parts = [f"{n} on {device}" for device, n in sorted(recorded.items(), key=lambda item: (-item[1], item[0]))]
    missing = len(jobs) - sum(recorded.values())
    return ["- trained by: " + "; ".join(parts)
            + (f"; {missing} not recorded (trained before grae recorded the device)" if missing else "")]


def plot_differences(diffs: dict[str, dict[int, Interval]], baseline: str, path: Path) -> Path:
    """Paired pass@k difference against the baseline per k (log₂ axis), one line per method with its 95% band."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.2), dpi=150)
    for (method, by_k), color in zip(diffs.items(), line_colors(len(diffs))):
        ks = sorted(by_k)
        ax.plot(ks, [100 * by_k[k].mean for k in ks], marker="o", markersize=3, linewidth=1.4, label=method, color=color)
        ax.fill_between(ks, [100 * max(by_k[k].lo, -1.0) for k in ks], [100 * min(by_k[k].hi, 1.0) for k in ks],
                        color=color, alpha=0.12, linewidth=0)
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


def frontier_section(results: StudyResults, out: Path) -> list[str]:
    """The checkpoint frontier (:mod:`grae.compare.frontier`): table, intervals, ``frontier.png`` and
    ``frontier.json``."""
    from grae.compare.frontier_report import frontier_lines, frontier_points, plot_frontier

    study = results.study
    if not study.frontier:
        return []
    if not results.frontier:
        return ["", "## Checkpoint frontier", "", "No frontier rows (the jobs kept no snapshots, e.g. runs made before "
                "the frontier existed): rerun the study to evaluate them.", ""]
    points, k_max, base = frontier_points(results)
    if not points:
        return []
    plot_frontier(points, study.baseline, k_max, out / "frontier.png", base=base)
    atomic_write_json(out / "frontier.json", {
        "k_max": k_max, "fractions": study.frontier,
        "base": {str(k): vars(iv) for k, iv in base.items()} if base else None,
        "methods": {m: {str(f): {str(k): vars(iv) for k, iv in by_k.items()} for f, by_k in by_f.items()}
                    for m, by_f in points.items()}})
    return [""] + frontier_lines(points, study.baseline, k_max, base)


def memorisation_section(results: StudyResults) -> list[str]:
    """Per method (mean over seeds): the train vs held-out gap and the answer-leakage rate
    (:mod:`grae.eval.diagnostics`), the base model's leakage on the same problems beside it."""
    heading = ["", "## Memorisation diagnostics (mean over seeds)", ""]
    sampled = {m: [j.memorisation for j in by_seed.values() if j.memorisation is not None]
               for m, by_seed in results.jobs.items()}
    if not any(sampled.values()):  # e.g. jobs run with eval.enabled false, evaluated exactly by compare
        return heading + ["Not computed: no job has a sampled held-out evaluation (`eval/after.jsonl`; the jobs ran "
                          "with `eval.enabled: false`), and leakage needs sampled answers.", ""]
    lines = [*heading,
             *(["From the jobs' own sampled held-out evaluation (`eval/after.jsonl`, the base's `base/before.jsonl`): "
                "leakage needs sampled answers.", ""] if results.study.eval else []),
             "Gap: pass@1 on the training batches (last 10% of steps) − held-out pass@1. Leakage: share of wrong "
             "held-out answers that equal some answer of the seed's training set; the base model's rate on the same "
             "problems and training answers is the chance level.", "",
             "| method | train pass@1 | held-out pass@1 | gap (points) | answer leakage | base model's leakage |",
             "|---|---|---|---|---|---|"]
    for method, per_seed in sampled.items():
        if not per_seed:
            lines.append(f"| {method} | – | – | – | – | – |")
            continue
        leaks = [d["leakage"] for d in per_seed]
        base_leaks = [d["base_leakage"] for d in per_seed if d["base_leakage"] is not None]
        lines.append(f"| {method} | {100 * np.mean([d['train_pass1'] for d in per_seed]):.1f} | "
                     f"{100 * np.mean([d['heldout_pass1'] for d in per_seed]):.1f} | "
                     f"{100 * np.mean([d['gap'] for d in per_seed]):+.1f} | "
                     + (f"{100 * np.nanmean(leaks):.1f}% | " if not np.isnan(leaks).all() else "– | ")
                     + (f"{100 * np.nanmean(base_leaks):.1f}%" if base_leaks else "–") + " |")
    return lines + [""]
