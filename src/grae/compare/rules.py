"""Every decision rule a study can name (study key ``rule:``), by name: its four pure functions of the
study's table. Their keys and study-level checks are :data:`grae.compare.rule_spec.RULE_SPECS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grae.compare import rule, rule_every_k

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
    "keeps_passk": RuleKind(rule.decide, rule.answer_line, rule.rule_lines, rule.outcome_json),
    "non_inferior_every_k": RuleKind(rule_every_k.decide, rule_every_k.answer_line, rule_every_k.rule_lines,
                                     rule_every_k.outcome_json),
}


def rule_kind(study_rule: dict[str, Any]) -> RuleKind:
    """The kind of a study's normalised ``rule`` (``{name: spec}``, grae.compare.grid.check_rule)."""
    (name,) = study_rule
    return RULES[name]
