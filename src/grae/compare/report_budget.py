"""A compare report's "Budget" section: methods, seeds, steps and samples, the held-out evaluation, training and
compare wall time with the machines and loads they ran under, and the command that reproduces the study.

Every number of steps and samples a report prints is the measured one: the steps each job trained (its
``eval/summary.json``, :attr:`grae.compare.results.JobResult.steps`) and the completions per step it trained on
(the study's per-process batch times the processes that trained it). Where that differs from what the study's
config asks, or from a number of steps in the study's title, :func:`trained_line` says so under the title and
:func:`figure_note` in the figures' titles."""

from __future__ import annotations

import json
import math
import re
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
    per_step = span(per_step_as_run(results))
    total_train = sum(j.counted_seconds for j in jobs if not math.isnan(j.counted_seconds))
    uncounted = sum(j.resumed_uncounted for j in jobs)
    return [
        "## Budget",
        "",
        f"- methods: {len(results.jobs)}; seeds per method: {len(study.seeds)} ({', '.join(map(str, study.seeds))})",
        f"- steps per run: {span(steps)}; {per_step} completions per step "
        f"(G = {study.group_size}); {span(samples_per_run(results), thousands=True)} training samples "
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


#: a device label's process count (grae.train.run.device_label: ``"cuda (…) × 4 processes"``)
_PROCESSES = re.compile(r" × (\d+) processes$")
#: a number of steps as a title states it: "50 steps", "10–50 steps", "200 RL steps", "a 50-step run"
_TITLE_STEPS = re.compile(r"(?<![\w.@])(\d[\d,]*)(?:\s*[-–]\s*(\d[\d,]*))?[\s-]*(?:[A-Za-z]+\s+)?steps?\b",
                          re.IGNORECASE)


def processes(device: str | None) -> int:
    """How many processes trained a job together, from its device label (1 where it says none or is not
    recorded)."""
    found = _PROCESSES.search(device or "")
    return int(found.group(1)) if found else 1


def job_per_step(results: StudyResults, job: JobResult) -> int:
    """The completions one optimiser step of ``job`` trained on: the study's per-process batch (per-device batch ×
    gradient accumulation) times the processes that trained it."""
    return results.study.per_step * processes(job.device)


def _jobs(results: StudyResults) -> list[JobResult]:
    return [j for by_seed in results.jobs.values() for j in by_seed.values()]


def per_step_as_run(results: StudyResults) -> list[int]:
    """The distinct completions per step the jobs trained on, sorted."""
    return sorted({job_per_step(results, j) for j in _jobs(results)})


def samples_per_run(results: StudyResults) -> list[int]:
    """Each job's training samples (its steps × its completions per step), for the jobs that recorded steps."""
    return [job_per_step(results, j) * j.steps for j in _jobs(results) if j.steps is not None]


def trained_steps(results: StudyResults) -> list[int]:
    """The distinct numbers of steps the jobs trained, sorted (none where no job recorded them)."""
    return sorted({int(j.steps) for j in _jobs(results) if j.steps is not None})


def configured_steps(results: StudyResults) -> list[int]:
    """The distinct ``max_steps`` the study's config gave its jobs, sorted (none in a table that does not record
    them)."""
    return sorted({int(j.max_steps) for j in _jobs(results) if j.max_steps is not None})


def title_steps(title: str) -> list[tuple[int, int]]:
    """Every number of steps the title states, as ``(lo, hi)`` ("50 steps": (50, 50); "10–50 steps": (10, 50))."""
    out = []
    for found in _TITLE_STEPS.finditer(title or ""):
        lo = int(found.group(1).replace(",", ""))
        out.append((lo, int(found.group(2).replace(",", "")) if found.group(2) else lo))
    return out


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}–{hi}"


def _differences(results: StudyResults) -> tuple[list[int], list[int], list[tuple[int, int]], list[int]]:
    """The measured steps, the configured ones where they differ (else []), the title's step counts that are not
    the measured span, and the completions per step where they differ from the config's (else [])."""
    measured = trained_steps(results)
    if not measured:
        return [], [], [], []
    configured = configured_steps(results)
    per_step = per_step_as_run(results)
    contradicted = [c for c in title_steps(results.study.title) if c != (measured[0], measured[-1])]
    return (measured, configured if configured and configured != measured else [], contradicted,
            per_step if per_step != [results.study.per_step] else [])


def trained_line(results: StudyResults) -> str | None:
    """The measured budget, for the line under the report's title, where it is not what the study's config asks
    or what its title says: "**Trained:** 10 steps per job (the study's config asks 50); 16 prompts × 8 samples =
    128 completions per step." None where they agree (and where no job recorded its steps): the title is the
    study's own text, kept as written, so it is this line that says what ran."""
    measured, configured, contradicted, per_step = _differences(results)
    if not (configured or contradicted or per_step):
        return None
    study = results.study
    steps = f"{span(measured)} steps per job" + (f" (the study's config asks {span(configured)})" if configured else "")
    ran = per_step_as_run(results)
    if len(ran) == 1 and ran[0] % study.group_size == 0:
        samples = f"{ran[0] // study.group_size} prompts × {study.group_size} samples = {ran[0]} completions per step"
    else:
        samples = f"{span(ran)} completions per step (G = {study.group_size})"
    if per_step:
        samples += f" ({study.per_step} per process, as the config asks)"
    asked = configured_steps(results)
    stale = [c for c in contradicted if not asked or c != (asked[0], asked[-1])]  # not the config's number either
    return (f"**Trained:** {steps}; {samples}."
            + (f" The title's {', '.join(_range(*c) for c in stale)} steps {'is' if len(stale) == 1 else 'are'} not "
               "what ran." if stale else ""))


def figure_note(results: StudyResults) -> str | None:
    """The measured budget in a figure's title, where :func:`trained_line` has a line: "trained 10 steps per job
    (the study's config asks 50)"; None where the measured budget is what the config and the title say."""
    measured, configured, contradicted, per_step = _differences(results)
    if not (configured or contradicted or per_step):
        return None
    return (f"trained {span(measured)} steps per job" + (f" (the study's config asks {span(configured)})"
                                                          if configured else "")
            + (f", {span(per_step)} completions per step" if per_step else ""))


def with_note(title: str, note: str | None) -> str:
    """A figure's title with the measured budget's note on a line of its own (the title alone without one)."""
    return f"{title}\n{note}" if note else title


def frontier_note(results: StudyResults) -> str:
    """The frontier section's word on its fractions where the jobs trained other than the config's steps ("" where
    they trained them): the fractions are of the configured steps, so the 100 % point is each job's final model
    and a fraction past the steps it trained has no checkpoint."""
    measured, configured, _, _ = _differences(results)
    if not configured:
        return ""
    return (f"Here those are fractions of the {span(configured)} steps the study's config asks, not of the "
            f"{span(measured)} the jobs trained: 100% is each job's final model, and a fraction past the steps it "
            "trained has no checkpoint. ")


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
