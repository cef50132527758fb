"""``chain_trace``: reasoning-gym's ``chain_sum`` questions answered with every running total (process-verified).

The completion writes the value after each operator, left to right: ``12 + 45 - 7 + 30 =`` is answered
``" 57 50 80"``; the last number is ``chain_sum``'s answer. The verifier accepts the completion only when its first
line is the whole trace (whitespace-normalised), so a correct final answer reached through a wrong running total
scores 0 — process-verified correctness as in Zhang, Neubig & Yue (2025), "On the interplay of pre-, mid-training
and RL". With m running totals, a guesser that knows each total to within ± w succeeds with probability
(2w + 1)^−m, so pass@k at large k measures computation, not a near-miss distribution (issue 45, gate v2 b).

Splits, seeds and strata are ``chain_sum``'s (the same held-out questions for the same generator parameters).
``generator="chain_range"`` draws the operands from ``[0, max_value]`` instead of by digit count (:class:`ChainRange`),
so difficulty varies continuously with the operands' size instead of jumping from 1-digit to 2-digit chains.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset

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


@dataclass
class ChainRangeConfig:
    """``chain_range``: ``num_terms`` in [min_terms, max_terms], each operand uniform in [0, max_value], ``+``/``-``."""

    min_terms: int = 4
    max_terms: int = 5
    max_value: int = 30
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        if not 0 < self.min_terms <= self.max_terms:
            raise ValueError(f"chain_range: need 0 < min_terms <= max_terms, got {self.min_terms}, {self.max_terms}")
        if self.max_value < 1:
            raise ValueError(f"chain_range: max_value must be >= 1, got {self.max_value}")


class ChainRange(ProceduralDataset):
    """chain_sum's questions (same text and metadata keys) with operands uniform in [0, max_value]. Item ``idx`` is
    drawn from ``random.Random(seed + idx)``, as reasoning-gym's generators draw theirs (grae's split arithmetic)."""

    def __init__(self, config: ChainRangeConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)

    def __getitem__(self, idx: int) -> dict:
        rng = random.Random(self.seed + idx)
        cfg = self.config
        num_terms = rng.randint(cfg.min_terms, cfg.max_terms)
        operands = [rng.randint(0, cfg.max_value) for _ in range(num_terms)]
        operators = [rng.choice("+-") for _ in range(num_terms - 1)]
        expression = " ".join([str(operands[0])] + [f"{o} {v}" for o, v in zip(operators, operands[1:])])
        return {"question": f"State the final answer to the following arithmetic problem: {expression} =",
                "answer": str(running_totals(expression)[-1]),
                "metadata": {"source_dataset": "chain_range", "source_index": idx, "num_terms": num_terms,
                             "num_digits": len(str(max(operands))), "expression": expression}}

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        return float(answer is not None and answer.strip() == str(entry["answer"]))


if "chain_range" not in DATASETS:
    register_dataset("chain_range", ChainRange, ChainRangeConfig)
register_task("chain_range")(functools.partial(ReasoningGymTask, "chain_range", name="chain_range"))


class ChainTraceTask(ReasoningGymTask):
    """A chain of ``+``/``-`` (``generator``: ``chain_sum`` or ``chain_range``) with the running-total answer (module
    docstring). ``prompt_style="plain"`` only; other arguments as :class:`~grae.data.procedural.ReasoningGymTask`."""

    one_gold_completion = True

    def __init__(self, generator: str = "chain_sum", **kwargs: Any):
        if generator not in ("chain_sum", "chain_range"):
            raise ValueError(f"chain_trace: generator must be chain_sum or chain_range, got {generator!r}")
        if kwargs.get("prompt_style", "plain") != "plain":
            raise ValueError("chain_trace: prompt_style must be 'plain' (the trace is the whole completion)")
        kwargs.setdefault("plain_answer", "first_line")
        super().__init__(generator, name=kwargs.pop("name", "chain_trace"), **kwargs)

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
