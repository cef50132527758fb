"""The top of a compare report: its title (with the measured budget under it where that is not what the study's
config or title says), the pilot banner or the study's verdict, the study's notes, and the answer of the study's
decision rule (:mod:`grae.compare.rules.registry`), which is the report's first line."""

from __future__ import annotations

from typing import Any

from grae.compare.grid import MIN_VERDICT_SEEDS
from grae.compare.report_budget import trained_line
from grae.compare.results import StudyResults
from grae.compare.rules.registry import rule_kind


def pilot_reason(seeds: int) -> str | None:
    """Why a study with ``seeds`` < MIN_VERDICT_SEEDS seeds per method draws no verdict (None with enough)."""
    if seeds >= MIN_VERDICT_SEEDS:
        return None
    why = ("with 1 seed every interval is over problems only: which training seed was run is not in it, so "
           "they say nothing of how far another seed's run would land" if seeds == 1 else
           "with 2 seeds the seed part of each interval rests on about 1 degree of freedom: in simulated studies where "
           "seeds dominate the paired interval covered 90–93 % at nominal 95 % (docs/compare.md), so its bounds are "
           "not 95 % bounds")
    return (f"{seeds} seed(s) per method, fewer than {MIN_VERDICT_SEEDS}: {why}. At {MIN_VERDICT_SEEDS} seeds the "
            "paired interval covers 93–97 % (docs/compare.md). Read the numbers as a pilot's: they may choose what to "
            "run next, they decide nothing (no 'keeps', 'narrows' or 'no').")


def title_lines(results: StudyResults) -> list[str]:
    """The report's title, as the study gives it, and under it the measured budget where that is not what the
    study's config asks or its title says (report_budget.trained_line)."""
    trained = trained_line(results)
    return [f"# {results.study.title or 'grae compare'}", "", *([trained, ""] if trained else [])]


def heading_lines(results: StudyResults) -> list[str]:
    """The report's title lines (:func:`title_lines`), the pilot banner (fewer than MIN_VERDICT_SEEDS seeds) or the
    study's verdict, and the study's notes."""
    study = results.study
    lines = title_lines(results)
    reason = pilot_reason(len(study.seeds))
    if reason:
        lines += [f"> **Pilot: no verdict.** {reason}", ""]
    elif study.verdict:
        lines += ["## Verdict", "", study.verdict.strip(), ""]
    return lines + ([study.notes.strip(), ""] if study.notes else [])


def rule_outcome(results: StudyResults) -> tuple[dict[str, Any] | None, list[str]]:
    """The study's decision rule decided on its table: its summary.json record (whose ``answer`` opens the
    report) and its section's lines; ``(None, [])`` for a study without a rule."""
    study = results.study
    if not study.rule:
        return None, []
    kind = rule_kind(study.rule)
    outcome = kind.decide(results)
    return kind.json(outcome, kind.answer_line(outcome, study.baseline)), kind.lines(outcome, study.baseline)
