"""``chain_trace``: reasoning-gym's ``chain_sum`` questions answered with every running total (process-verified).

The completion writes the value after each operator, left to right: ``12 + 45 - 7 + 30 =`` is answered
``" 57 50 80"``; the last number is ``chain_sum``'s answer. The verifier accepts the completion only when its first
line is the whole trace (whitespace-normalised), so a correct final answer reached through a wrong running total
scores 0 — process-verified correctness as in Zhang, Neubig & Yue (2025), "On the interplay of pre-, mid-training
and RL". With m running totals, a guesser that knows each total to within ± w succeeds with probability
(2w + 1)^−m, so pass@k at large k measures computation, not a near-miss distribution (issue 45, gate v2 b).

Splits, seeds and strata are ``chain_sum``'s (the same held-out questions for the same generator parameters).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from grae.data.procedural import ReasoningGymTask
from grae.data.registry import register_task

_TERM = re.compile(r"([+-])\s*(\d+)")


def running_totals(expression: str) -> list[int]:
    """The value after each operator of a ``chain_sum`` expression (``"12 + 45 - 7"`` -> ``[57, 50]``)."""
    head = re.match(r"\s*(-?\d+)", expression)
    if head is None:
        raise ValueError(f"not a chain_sum expression: {expression!r}")
    value, totals = int(head.group(1)), []
    for sign, number in _TERM.findall(expression[head.end():]):
        value = value + int(number) if sign == "+" else value - int(number)
        totals.append(value)
    return totals


def trace_answer(expression: str) -> str:
    """The gold completion text of ``expression``: its running totals, space-separated."""
    return " ".join(str(v) for v in running_totals(expression))


def expression_of(question: str) -> str:
    """The arithmetic of a ``chain_sum`` question (``"... problem: 4 - 1 ="`` -> ``"4 - 1"``)."""
    return question.rsplit(":", 1)[-1].rstrip().rstrip("=").strip()


class ChainTraceTask(ReasoningGymTask):
    """``chain_sum`` with the running-total answer (module docstring). ``prompt_style="plain"`` only; other
    arguments as :class:`~grae.data.procedural.ReasoningGymTask`."""

    def __init__(self, **kwargs: Any):
        if kwargs.get("prompt_style", "plain") != "plain":
            raise ValueError("chain_trace: prompt_style must be 'plain' (the trace is the whole completion)")
        kwargs.setdefault("plain_answer", "first_line")
        super().__init__("chain_sum", name=kwargs.pop("name", "chain_trace"), **kwargs)

    def _example(self, base: int, idx: int, entry: dict) -> dict:
        example = super()._example(base, idx, entry)
        example["answer"] = trace_answer(expression_of(entry["question"]))
        return example

    def entry_for(self, example: Mapping[str, Any]) -> dict:
        entry = super().entry_for(example)
        return {**entry, "answer": trace_answer(expression_of(entry["question"]))} if entry.get("question") else entry

    def answer_set(self) -> None:
        """Traces form no enumerable set: exact pass@k teacher-forces the one gold completion instead."""
        return None

    def parse_answer(self, completion: Any) -> str | None:
        """The completion's first line with whitespace normalised, or None."""
        from grae.rewards.extract import completion_text

        line = completion_text(completion).strip().split("\n", 1)[0]
        return " ".join(line.split()) or None

    def score(self, completion: Any, example: Mapping[str, Any]) -> float:
        """1.0 when the first line is exactly the gold trace (every running total right), else 0.0."""
        gold = str(example.get("answer") or self.entry_for(example)["answer"])
        return float(self.parse_answer(completion) == " ".join(gold.split()))


register_task("chain_trace")(ChainTraceTask)
