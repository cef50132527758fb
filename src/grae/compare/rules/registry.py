"""Every decision rule a study can name (study key ``rule:``), by name: its four pure functions of the
study's table. Their keys and study-level checks are :data:`grae.compare.rules.spec.RULE_SPECS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grae.compare.rules import beats_baseline, every_k, keeps_passk

if TYPE_CHECKING:
    from grae.compare.results import StudyResults


@dataclass(frozen=True)
class RuleKind:
    """One rule's pure functions: ``decide(results)`` → outcome, ``answer_line(outcome, baseline)`` (the
    report's first line), ``lines(outcome, baseline)`` (its report section) and ``json(outcome, answer)``
    (``summary.json`` → ``rule``)."""

    decide: Callable[[StudyResults], Any]
    answer_line: Callable[[Any, str], str]
    lines: Callable[[Any, str], list[str]]
    json: Callable[[Any, str], dict[str, Any]]


RULES = {
    "keeps_passk": RuleKind(keeps_passk.decide, keeps_passk.answer_line, keeps_passk.rule_lines,
                            keeps_passk.outcome_json),
    "non_inferior_every_k": RuleKind(every_k.decide, every_k.answer_line, every_k.rule_lines, every_k.outcome_json),
    "beats_baseline": RuleKind(beats_baseline.decide, beats_baseline.answer_line, beats_baseline.rule_lines,
                               beats_baseline.outcome_json),
}


def rule_kind(study_rule: dict[str, Any]) -> RuleKind:
    """The kind of a study's normalised ``rule`` (``{name: spec}``, grae.compare.grid.check_rule)."""
    (name,) = study_rule
    return RULES[name]
