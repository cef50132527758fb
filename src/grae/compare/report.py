"""The compare report: ``report.md``, ``summary.json`` and PNG plots with bands, rendered from a study's
table (:class:`grae.compare.results.StudyResults`).

:func:`write_compare_report` gathers a finished study once (:func:`grae.compare.results.gather`) and
:func:`render` writes everything from the table alone: every section and plot is a pure function of it, so a
report re-rendered from ``summary.json`` (``grae compare SUMMARY.json --report-only``) is the same bytes as the
one rendered from the rows. This module puts the sections in order; each lives with its kind:

* :mod:`grae.compare.report_header` — title, pilot banner or verdict, notes, the decision rule's answer;
* :mod:`grae.compare.summary` — the three plain lines under the title;
* :mod:`grae.compare.report_budget` — the "Budget" section;
* :mod:`grae.compare.report_tables` — the held-out table, paired differences, exact − sampled;
* :mod:`grae.compare.frontier_report`, :mod:`grae.compare.temperature_report` — the checkpoint and
  temperature frontiers; :mod:`grae.compare.training` — the training-log sections and ``dynamics.png``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grae.compare.frontier_report import frontier_lines, frontier_points, plot_frontier
from grae.compare.grid import CompareConfig
from grae.compare.mechanism_report import mechanism_section
from grae.compare.report_budget import budget_lines, figure_note, frontier_note, heldout_line, with_note
from grae.compare.report_header import heading_lines, pilot_reason, rule_outcome, title_lines
from grae.compare.report_tables import base_passk, exact_sampled_lines, heldout_table, paired_sections
from grae.compare.results import INVOCATIONS, StudyResults, gather, write_summary
from grae.compare.stats import Interval, method_passk
from grae.compare.summary import plain_summary, training_summary
from grae.compare.temperature_report import temperature_section
from grae.compare.training import dynamics_lines, plot_dynamics, update_allocation
from grae.eval.report import line_colors, plot_passk_curves
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
    allocation = update_allocation(results)
    heading, top = heading_lines(results), len(title_lines(results))
    lines = [*heading[:top], *training_summary(results), "", *heading[top:]]
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
    """``report.md`` of a study with held-out evaluation, section by section: the rule's answer (when the study
    names a rule), the title and plain summary, the budget, the held-out table, the rule's and the paired
    sections, exact − sampled, the frontiers, memorisation, the plots and the training logs."""
    study = results.study
    ks = results.ks()
    finals = {m: results.finals(m) for m in results.jobs}
    per_method = {m: method_passk(list(c.values()), ks, draws=study.bootstrap) for m, c in finals.items()}
    base = base_passk(results, ks)
    paired = paired_sections(results, finals, ks)
    plot_heldout(results, per_method, base, paired.vs_baseline, out)
    allocation = update_allocation(results)
    rule, rule_lines = rule_outcome(results)
    n_min = min(int(c.n.min()) for by_seed in finals.values() for c in by_seed.values())

    heading, top = heading_lines(results), len(title_lines(results))
    summary = [*plain_summary(results, per_method, paired.vs_baseline, ruled=rule is not None), ""]
    lines = ([rule["answer"], ""] if rule else []) + [*heading[:top], *summary, *heading[top:]]
    lines += budget_lines(results, [heldout_line(results, n_min)])
    lines += heldout_table(results, per_method, base, ks)
    lines += rule_lines + paired.lines
    lines += exact_sampled_lines(results, ks)
    lines += frontier_section(results, out)
    temperature_lines, temperature_summary = temperature_section(results)
    lines += temperature_lines
    mechanism_lines, mechanism_summary = mechanism_section(results)
    lines += mechanism_lines
    lines += memorisation_section(results)
    lines += ["", "![pass@k](passk.png)", ""]
    lines += ["![pass@k difference vs baseline](passk_vs_baseline.png)", ""] if paired.vs_baseline else []
    lines += dynamics_lines(results, allocation)
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))

    write_summary(out / "summary.json", {
        "heldout": True,
        "ks": ks, "methods": by_k(per_method),
        "vs_baseline": by_k(paired.vs_baseline),
        "base": {str(k): vars(iv) for k, iv in base.items()} if base else None,
        "vs_base": by_k(paired.vs_base),
        "vs_oracle": by_k(paired.vs_oracle),
        "holm": paired.holm,
        "pilot": pilot_reason(len(study.seeds)),
        "update_allocation": allocation,
        "baseline": study.baseline, "seeds": study.seeds, **({"rule": rule} if rule else {}),
        **({"temperature_frontier": temperature_summary} if temperature_summary else {}),
        **({"mechanism": mechanism_summary} if mechanism_summary else {})}, results)
    return report


def by_k(table: dict[str, dict[int, Interval]]) -> dict[str, dict[str, dict]]:
    """``{arm: {k: Interval}}`` as summary.json holds it: ``{arm: {"k": {mean, lo, hi, …}}}``."""
    return {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in table.items()}


def plot_heldout(results: StudyResults, per_method: dict[str, dict[int, Interval]],
                 base: dict[int, Interval] | None, diffs: dict[str, dict[int, Interval]], out: Path) -> None:
    """``passk.png`` (every method and the base with their bands), ``dynamics.png`` and, with a baseline to
    pair against, ``passk_vs_baseline.png``."""
    study = results.study
    curves = {m: {k: iv.mean for k, iv in r.items()} for m, r in per_method.items()}
    bands = {m: {k: (iv.lo, iv.hi) for k, iv in r.items()} for m, r in per_method.items()}
    if base:
        curves = {"base": {k: iv.mean for k, iv in base.items()}, **curves}
        bands = {"base": {k: (iv.lo, iv.hi) for k, iv in base.items()}, **bands}
    plot_passk_curves(curves, out / "passk.png", passk_title(results), intervals=bands)
    plot_dynamics(results, out / "dynamics.png")
    if diffs:
        plot_differences(diffs, study.baseline, out / "passk_vs_baseline.png", note=figure_note(results))


def passk_title(results: StudyResults) -> str:
    """``passk.png``'s title: the study's title (or "held-out pass@k after training") and, where the jobs trained
    other than the config or the title says, the measured budget on a line of its own (report_budget.figure_note)."""
    return with_note(results.study.title or "held-out pass@k after training", figure_note(results))


def log_invocation(out: Path, *, started: float, wall_seconds: float, jobs_run: list[str]) -> None:
    """Append a row to the study's record of sittings (results.INVOCATIONS): the sitting's start, its wall
    seconds so far and the jobs it finished since the last row."""
    append_jsonl(out / INVOCATIONS, [{"started": started, "wall_seconds": round(wall_seconds, 1), "jobs_run": jobs_run}])


def plot_differences(diffs: dict[str, dict[int, Interval]], baseline: str, path: Path, note: str | None = None) -> Path:
    """Paired pass@k difference against the baseline per k (log₂ axis), one line per method with its 95% band;
    ``note``: the measured budget under the title (report_budget.figure_note), None where it is what was asked."""
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
    ax.set_title(with_note(f"paired difference vs {baseline} (95% crossed seeds × problems interval)", note), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def frontier_section(results: StudyResults, out: Path) -> list[str]:
    """The checkpoint frontier (:mod:`grae.compare.frontier`): table, intervals, ``frontier.png`` and
    ``frontier.json``."""
    study = results.study
    if not study.frontier:
        return []
    if not results.frontier:
        return ["", "## Checkpoint frontier", "", "No frontier rows (the jobs kept no snapshots, e.g. runs made before "
                "the frontier existed): rerun the study to evaluate them.", ""]
    points, k_max, base = frontier_points(results)
    if not points:
        return []
    plot_frontier(points, study.baseline, k_max, out / "frontier.png", base=base, note=figure_note(results))
    atomic_write_json(out / "frontier.json", {
        "k_max": k_max, "fractions": study.frontier,
        "base": {str(k): vars(iv) for k, iv in base.items()} if base else None,
        "methods": {m: {str(f): {str(k): vars(iv) for k, iv in by_k.items()} for f, by_k in by_f.items()}
                    for m, by_f in points.items()}})
    return [""] + frontier_lines(points, study.baseline, k_max, base, note=frontier_note(results))


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
