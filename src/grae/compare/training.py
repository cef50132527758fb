"""The compare report's training-log sections, pure functions of a study's table
(:class:`grae.compare.results.StudyResults`): dynamics early vs late and ``dynamics.png``, pass@k on the
training batches over training, and where the update goes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from grae.compare.results import ALLOCATION_KEYS, DYNAMICS_KEYS, JobResult, StudyResults
from grae.compare.stats import Interval, curve_bands, interval_text, proportion_interval

DYNAMICS = list(zip(DYNAMICS_KEYS, ("reward (batch mean)", "entropy", "ACR", "fraction of all-correct groups",
                                    "fraction of all-wrong groups", "negative advantage mass")))
TRAINING_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
#: dynamics that are shares of groups: their bands over seeds stay in [0, 1] (stats.curve_bands)
FRACTION_KEYS = ("acr", "frac_all_correct", "frac_all_wrong")
#: dynamics that are shares where every logged value is in [0, 1] (the batch mean of a 0/1 reward); a shaped
#: reward outside it keeps the plain band
FRACTION_IF_INSIDE = ("reward_mean",)
#: dynamics that cannot go below 0: their bands stay above it (stats.curve_bands' ``lower``)
NONNEGATIVE_KEYS = ("entropy", "adv_neg_mass")

#: Where an estimator spends its update over training (grae.metrics.batch_diagnostics): the batch mean
#: reward ω (A-GRAE's training state), A-GRAE's positive-advantage factor min(1, ω/α), and Σ|A| per
#: group on hard (success rate p < 0.25) and easy (p ≥ 0.75) groups. A-GRAE's easy→hard curriculum
#: (Yu et al. 2026 §5.1) shows as the hard/easy ratio rising with ω. (The table keeps each key as logged,
#: or under ``grae/<key>``.)
ALLOCATION = tuple(zip(ALLOCATION_KEYS, ("ω", "min(1, ω/α)", "Σ|A| hard (p < 0.25)", "Σ|A| easy (p ≥ 0.75)")))


def at_fractions(vals: list[float]) -> list[float]:
    """One seed's per-step values → their mean over the last 10 % of steps up to each training fraction."""
    window = max(1, len(vals) // 10)
    ends = [max(window, round(f * len(vals))) for f in TRAINING_FRACTIONS]
    return [float(np.mean(vals[e - window:e])) for e in ends]


def _windowed(job: JobResult, key: str) -> list[float] | None:
    """A seed's ``key`` at each training fraction (:func:`at_fractions`); None when never logged."""
    # a difficulty bin with no group that step is logged as 0 (a group with 0 < p < 1 always has Σ|A| > 0)
    vals = [v for v in job.series(key) if v is not None and not (key.startswith("adv_abs_sum") and v == 0)]
    return at_fractions(vals) if vals else None


def update_allocation(results: StudyResults) -> dict[str, dict[str, list[float]]]:
    """Per method and quantity of :data:`ALLOCATION`: the mean over seeds at each training fraction."""
    out: dict[str, dict[str, list[float]]] = {}
    for method, by_seed in results.jobs.items():
        for key, _ in ALLOCATION:
            per_seed = [w for job in by_seed.values() if (w := _windowed(job, key)) is not None]
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


def training_passk(jobs: Sequence[JobResult], group_size: int, draws: int = 2000,
                   per_step: int | None = None) -> dict[str, list[Interval]]:
    """pass@1 and pass@G of the training batches at 25/50/75/100 % of training, with an interval over seeds
    inside [0, 1] (stats.proportion_interval; ``draws`` unused). Where the seeds agree exactly (or sit at 0 or
    1) the interval is the binomial one at the completions (pass@1) or groups (pass@G) the seeds' windows hold,
    ``per_step`` completions a step (unknown: one a seed).

    With 0/1 rewards a group of G samples is an unbiased pass@k sample for k ≤ G: pass@1 is the batch
    mean reward and pass@G is 1 − the fraction of all-wrong groups. Each seed's value at a fraction f is
    its mean over the last 10 % of steps up to f·steps.
    """
    out: dict[str, list[Interval]] = {}
    for name, key, transform, per_window_step in (("pass@1", "reward_mean", lambda v: v, per_step),
                                                  (f"pass@{group_size}", "frac_all_wrong", lambda v: 1 - v,
                                                   per_step // group_size if per_step else None)):
        per_seed, windows = [], []  # [seeds, fractions]; steps averaged per cell
        for job in jobs:
            vals = [transform(v) for v in job.series(key) if v is not None]
            if vals:
                per_seed.append(at_fractions(vals))
                windows.append(max(1, len(vals) // 10))
        if per_seed:
            outcomes = min(windows) * per_window_step if per_window_step else 1
            out[name] = proportion_interval(np.array(per_seed)[:, None, :], outcomes=outcomes)
    return out


def training_passk_lines(results: StudyResults) -> list[str]:
    group_size = results.study.group_size
    header = " | ".join(f"{int(100 * f)}% of steps" for f in TRAINING_FRACTIONS)
    lines = ["## pass@k on the training batches over training (%; mean [95% CI over seeds])", "",
             f"With 0/1 rewards each group of G = {group_size} samples gives pass@1 (batch mean reward) and "
             f"pass@{group_size} (1 − fraction of all-wrong groups); each cell averages the last 10% of steps up to "
             "that point.", "", "| method | k | " + header + " |", "|---|---|" + "---|" * len(TRAINING_FRACTIONS)]
    for m, by_seed in results.jobs.items():
        for name, intervals in training_passk(list(by_seed.values()), group_size, results.study.bootstrap,
                                              results.study.per_step).items():
            lines.append(f"| {m} | {name} | " + " | ".join(interval_text(iv) for iv in intervals) + " |")
    return lines + [""]


def early_late(jobs: Sequence[JobResult], key: str) -> tuple[float, float]:
    early, late = [], []
    for job in jobs:
        vals = [v for v in job.series(key) if v is not None]
        if vals:
            cut = max(1, len(vals) // 5)
            early.append(np.mean(vals[:cut]))
            late.append(np.mean(vals[-cut:]))
    return (float(np.mean(early)) if early else float("nan"), float(np.mean(late)) if late else float("nan"))


def dynamics_lines(results: StudyResults, allocation: dict[str, dict[str, list[float]]]) -> list[str]:
    """Training dynamics table and plot, pass@k on the training batches, where the update goes
    (``allocation``: :func:`update_allocation`), and the few-seeds note: what the training logs say
    (``dynamics.png`` is written by :func:`plot_dynamics`)."""
    lines = ["## Training dynamics (mean over seeds, first vs last 20% of steps)", "",
             "| method | " + " | ".join(f"{label} early → late" for _, label in DYNAMICS[:4]) + " |", "|---|" + "---|" * 4]
    for m, by_seed in results.jobs.items():
        cells = []
        for key, _ in DYNAMICS[:4]:
            early, late = early_late(list(by_seed.values()), key)
            cells.append(f"{early:.3f} → {late:.3f}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "![dynamics](dynamics.png)", ""]
    lines += training_passk_lines(results)
    lines += update_allocation_lines(allocation)
    seeds = len(results.study.seeds)
    if seeds < 5:
        lines += [f"Note: {seeds} seeds per method; with fewer than 5 seeds the seed part of each interval "
                  "rests on few degrees of freedom (t with Satterthwaite df, docs/compare.md): where seeds disagree the "
                  "intervals are wide, and the spread between seeds is itself poorly estimated. Paired differences "
                  "still cover 93–97 % from 3 seeds on; a method's own mean with 3 seeds covered 90–92 % in simulated "
                  "studies where seeds dominate (86 % at pass@256 where they dominate strongly: its seed means are "
                  "skewed), so read 3-seed absolute levels as slightly optimistic.", ""]
    return lines


def plot_dynamics(results: StudyResults, path: Path) -> Path:
    """``dynamics.png``: :func:`dynamics_figure`, saved."""
    fig = dynamics_figure(results)  # selects the Agg backend before pyplot is imported here
    import matplotlib.pyplot as plt

    fig.savefig(path)
    plt.close(fig)
    return path


def dynamics_figure(results: StudyResults):
    """The training-log panels (one line per method, its band over seeds) against the logged steps; where the jobs
    trained other than the study's config or title says, the measured budget as the figure's title
    (grae.compare.report_budget.figure_note). The caller closes it."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from grae.compare.report_budget import figure_note
    from grae.eval.report import line_colors

    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), dpi=120)
    colors = dict(zip(results.jobs, line_colors(len(results.jobs))))
    # ACR is the sum of the two shares drawn beside it: not drawn a third time
    panels = [(key, label) for key, label in DYNAMICS if key != "acr"]
    for ax in axes.ravel()[len(panels):]:
        ax.set_axis_off()
    bands = dynamics_bands(results)
    for ax, (key, label) in zip(axes.ravel(), panels):
        for method, (mean, lo, hi, proportion) in bands.get(key, {}).items():
            if proportion:
                ax.set_ylim(-0.02, 1.02)
            steps = np.arange(1, len(mean) + 1)
            line, = ax.plot(steps, mean, linewidth=1.4, label=method, color=colors[method])
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(True, alpha=0.3)
    axes.ravel()[0].legend(fontsize=7)
    note = figure_note(results)
    if note:
        fig.suptitle(note, fontsize=9)
    fig.tight_layout()
    return fig


def dynamics_bands(results: StudyResults) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, bool]]]:
    """What ``dynamics.png`` draws: per quantity and method, the smoothed mean over seeds and its band
    (stats.curve_bands) inside the quantity's range (shares in [0, 1], entropy and advantage mass above 0), and
    whether the quantity is a share."""
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, bool]]] = {}
    for key, _ in DYNAMICS:
        for method, by_seed in results.jobs.items():
            series = [_smooth(job.series(key)) for job in by_seed.values() if job.logged_steps]
            if not series:
                continue
            logged = [v for s in series for v in s if v is not None]
            proportion = key in FRACTION_KEYS or (key in FRACTION_IF_INSIDE and all(0 <= v <= 1 for v in logged))
            mean, lo, hi = curve_bands(series, proportion=proportion, lower=0.0 if key in NONNEGATIVE_KEYS else None)
            out.setdefault(key, {})[method] = (mean, lo, hi, proportion)
    return out


def _smooth(values: list, window: int = 10) -> list:
    out, buf = [], []
    for v in values:
        if v is not None:
            buf.append(v)
        buf = buf[-window:]
        out.append(sum(buf) / len(buf) if buf else None)
    return out
