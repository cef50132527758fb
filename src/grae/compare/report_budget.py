"""A compare report's "Budget" section: methods, seeds, steps and samples, the held-out evaluation, training and
compare wall time with the machines and loads they ran under, and the command that reproduces the study."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np

from grae.compare.machines import blocking, blocking_line
from grae.compare.results import JobResult, StudyResults


def heldout_line(results: StudyResults, n_min: int) -> str:
    """The budget's line on the held-out evaluation: problems, samples (or exact enumeration) and, when compare
    evaluated the models itself, the study's ``eval`` key."""
    study = results.study
    first = results.jobs[study.methods[0]][study.seeds[0]].final
    return (f"- held-out: {first.num_problems} problems × "
            + (f"exact pass@k by answer enumeration (`grae eval --exact`: every answer of the task's set "
               f"teacher-forced, no sampling), k ≤ {n_min}" if first.exact else f"n = {n_min} samples per run")
            + (" — compare's own evaluation of the base, every final model and every frontier checkpoint (study "
               f"key `eval: {json.dumps(study.eval)}`)" if study.eval else ""))


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
        f"- steps per run: {span(steps)}; {per_step} completions per step "
        f"(G = {study.group_size}); {span([per_step * s for s in steps], thousands=True)} training samples "
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


def span(values: list[int], thousands: bool = False) -> str:
    """"120", or "94–120" when runs differ (budget-stopped studies)."""
    fmt = "{:,}" if thousands else "{}"
    if not values:
        return "0"
    lo, hi = min(values), max(values)
    return fmt.format(hi) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


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
