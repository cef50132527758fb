"""The three plain lines under a compare report's first line: what was run, what the numbers show, and what can
and cannot be concluded from them, for a reader who has not read the rest."""

from __future__ import annotations

from grae.compare.grid import MIN_VERDICT_SEEDS
from grae.compare.results import StudyResults
from grae.compare.stats import Interval


def plain_summary(results: StudyResults, per_method: dict[str, dict[int, Interval]],
                  diffs: dict[str, dict[int, Interval]], ruled: bool = False) -> list[str]:
    """Three lines (a markdown list) for a held-out report: the design, each arm's change in pass@1 and at the
    largest k against the baseline with its paired interval, and what those intervals allow one to say
    (``ruled``: the study's decision rule answered on the first line, and that answer is its conclusion)."""
    study = results.study
    seeds = len(study.seeds)
    first = next(iter(per_method.values()))
    ks = sorted(first)
    problems = next((job.final.num_problems for by_seed in results.jobs.values() for job in by_seed.values()
                     if job.final is not None), 0)
    methods = len(results.jobs)
    design = (f"- **Run:** {methods} method{'s' * (methods != 1)} × {seeds} seed{'s' * (seeds != 1)}, each final model "
              f"evaluated on the same {problems} held-out problems; baseline `{study.baseline}`.")
    if not diffs:
        return [design, "- **Shows:** " + "; ".join(f"{m} pass@{ks[0]} {100 * r[ks[0]].mean:.1f}"
                                                   for m, r in per_method.items()) + ".",
                "- **Concludes:** nothing about differences: there is no second method to pair with the baseline."]
    shown = [ks[0]] + ([ks[-1]] if ks[-1] != ks[0] else [])
    changes = []
    for method, by_k in diffs.items():
        parts = [f"pass@{k} {100 * by_k[k].mean:+.1f} [{100 * max(by_k[k].lo, -1):+.1f}, "
                 f"{100 * min(by_k[k].hi, 1):+.1f}]" for k in shown]
        changes.append(f"{method} {', '.join(parts)}")
    shows = f"- **Shows:** change against {study.baseline} in points, paired by seed and problem (95 % interval): " \
            + "; ".join(changes) + "."
    rule = "the decision rule's answer (first line) is the study's conclusion; beside it, " if ruled else ""
    return [design, shows, "- **Concludes:** " + rule + conclusion(diffs, shown, seeds)]


def conclusion(diffs: dict[str, dict[int, Interval]], ks: list[int], seeds: int) -> str:
    """What the paired intervals allow: nothing beyond a pilot's hint below MIN_VERDICT_SEEDS seeds; else which
    differences exclude 0 and which do not."""
    separated = [f"{m} at pass@{k} ({'above' if d[k].lo > 0 else 'below'})" for m, d in diffs.items() for k in ks
                 if d[k].lo > 0 or d[k].hi < 0]
    if seeds < MIN_VERDICT_SEEDS:
        hint = (f"the interval excludes 0 for {', '.join(separated)}, a hint worth a confirmation run"
                if separated else "no interval excludes 0")
        return (f"a pilot: {seeds} seed{'s' * (seeds != 1)} cannot tell a method's effect from which seed was run "
                f"(at least {MIN_VERDICT_SEEDS} are needed for a verdict), so nothing here says one method is better; "
                f"{hint}.")
    if not separated:
        return ("no difference can be told from 0 at these seeds and problems: \"no difference found\", not \"the "
                "methods are equal\" (the interval width says how large a difference could still hide).")
    return (f"the difference excludes 0 for {', '.join(separated)} (each interval on its own; the Holm-adjusted "
            "table below accounts for comparing several arms); every other difference cannot be told from 0.")


def training_summary(results: StudyResults) -> list[str]:
    """The three lines of a training-only report: the design, each method's batch mean reward over training, and
    that nothing held out was measured."""
    from grae.compare.training import early_late

    seeds, methods = len(results.study.seeds), len(results.jobs)
    rewards = []
    for method, by_seed in results.jobs.items():
        early, late = early_late(list(by_seed.values()), "reward_mean")
        rewards.append(f"{method} {early:.3f} → {late:.3f}")
    return [f"- **Run:** {methods} method{'s' * (methods != 1)} × {seeds} seed{'s' * (seeds != 1)}, training only "
            "(no held-out evaluation).",
            "- **Shows:** batch mean reward, first → last 20 % of steps (mean over seeds): " + "; ".join(rewards) + ".",
            "- **Concludes:** nothing about held-out pass@k, which was not measured: a rising training reward can be "
            "learning or memorising the training problems."]
