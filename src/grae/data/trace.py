"""``chain_trace``: reasoning-gym's ``chain_sum`` questions answered with every running total (process-verified).

The completion writes the value after each operator, left to right: ``12 + 45 - 7 + 30 =`` is answered
``" 57 50 80"``; the last number is ``chain_sum``'s answer. The verifier accepts the completion only when its first
line is the whole trace (whitespace-normalised), so a correct final answer reached through a wrong running total
scores 0 — process-verified correctness as in Zhang, Neubig & Yue (2025), "On the interplay of pre-, mid-training
and RL". With m running totals, a guesser that knows each total to within ± w succeeds with probability
(2w + 1)^−m, so pass@k at large k measures computation, not a near-miss distribution.

Splits, seeds and strata are ``chain_sum``'s (the same held-out questions for the same generator parameters).
``generator="chain_range"`` draws the operands from ``[0, max_value]`` instead of by digit count (:class:`ChainRange`),
so difficulty varies continuously with the operands' size instead of jumping from 1-digit to 2-digit chains.

Two strategies (``strategies="two"``, "the conflicting rare mode"): the completion's first token names
how it computes, and the verifier accepts either complete, correct trace (every number checked):

* ``L`` — left to right, every running total: ``4 + 7 + 12 - 11 - 18 =`` is answered ``" L 11 23 12 -6"``;
* ``G`` — grouped: the sum of the ``+`` operands (the first operand counts as ``+``), the sum of the ``-`` operands
  (0 when there is none), the result: ``" G 23 29 -6"``.

A bare trace (no marker), a marker followed by the other strategy's numbers, or a partial trace scores 0. The two
accepted completions differ at their first token, so a sample is correct with probability
π(" L …" + EOS) + π(" G …" + EOS), the sum :func:`grae.eval.gold.gold_probs` takes over
:meth:`ChainTraceTask.gold_completions`.

``totals`` filters the problems (training and held-out alike) by their running totals: ``"in_range"`` keeps the
chains whose every running total lies in [0, 99] (:data:`TOTALS_RANGE`; the first operand is not a running total),
``"excursion"`` those with a running total outside it, ``"any"`` (default) all. A filtered split is the unfiltered
stream with the other chains skipped, so its questions are a subset of the unfiltered stream's and a held-out split
of any filter is disjoint from every training split. The class is the stratum key ``totals`` (``heldout_strata:
[num_terms, totals]``).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset

from grae.data.procedural import ReasoningGymTask
from grae.data.registry import register_task

_TERM = re.compile(r"([+-])\s*(\d+)")

#: the strategies a ``chain_trace`` task accepts: ``left`` (the bare running totals) or ``two`` (``L``/``G``, marked)
STRATEGIES = ("left", "two")
#: the ``totals`` filters of a ``chain_trace`` task (module docstring)
TOTALS_FILTERS = ("any", "in_range", "excursion")
#: the interval every running total of an ``in_range`` chain stays in
TOTALS_RANGE = (0, 99)
#: the first token of each strategy's completion under ``strategies="two"``: single tokens of the tiny tokenizer
LEFT_MARKER, GROUPED_MARKER = "L", "G"


def signed_operands(expression: str) -> list[int]:
    """The operands of a ``chain_sum`` expression with their signs (``"12 + 45 - 7"`` -> ``[12, 45, -7]``); the
    first operand keeps its own sign."""
    head = re.match(r"\s*(-?\d+)", expression)
    if head is None:
        raise ValueError(f"not a chain_sum expression: {expression!r}")
    terms = _TERM.findall(expression[head.end():])
    return [int(head.group(1))] + [int(n) if sign == "+" else -int(n) for sign, n in terms]


def running_totals(expression: str) -> list[int]:
    """The value after each operator of a ``chain_sum`` expression (``"12 + 45 - 7"`` -> ``[57, 50]``)."""
    operands = signed_operands(expression)
    value, totals = operands[0], []
    for operand in operands[1:]:
        value += operand
        totals.append(value)
    return totals


def trace_answer(expression: str) -> str:
    """The gold completion text of ``expression``: its running totals, space-separated."""
    return " ".join(str(v) for v in running_totals(expression))


def left_answer(expression: str) -> str:
    """Strategy ``L``: the marker, then the running totals (``"4 + 7 + 12 - 11 - 18"`` -> ``"L 11 23 12 -6"``)."""
    return f"{LEFT_MARKER} {trace_answer(expression)}"


def grouped_answer(expression: str) -> str:
    """Strategy ``G``: the marker, the sum of the ``+`` operands (the first operand is one), the sum of the ``-``
    operands, the result (``"4 + 7 + 12 - 11 - 18"`` -> ``"G 23 29 -6"``)."""
    operands = signed_operands(expression)
    plus = operands[0] + sum(v for v in operands[1:] if v > 0)
    minus = -sum(v for v in operands[1:] if v < 0)
    return f"{GROUPED_MARKER} {plus} {minus} {plus - minus}"


def totals_class(expression: str) -> str:
    """``"in_range"`` when every running total of ``expression`` lies in :data:`TOTALS_RANGE`, else ``"excursion"``."""
    low, high = TOTALS_RANGE
    return "in_range" if all(low <= v <= high for v in running_totals(expression)) else "excursion"


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
    docstring). ``strategies``: ``"left"`` (the bare running totals) or ``"two"`` (``L`` or ``G``, marked); ``totals``:
    ``"any"``, ``"in_range"`` or ``"excursion"`` (which chains the splits hold). ``prompt_style="plain"`` only; other
    arguments as :class:`~grae.data.procedural.ReasoningGymTask`."""

    one_gold_completion = True

    def __init__(self, generator: str = "chain_sum", strategies: str = "left", totals: str = "any", **kwargs: Any):
        if generator not in ("chain_sum", "chain_range"):
            raise ValueError(f"chain_trace: generator must be chain_sum or chain_range, got {generator!r}")
        if strategies not in STRATEGIES:
            raise ValueError(f"chain_trace: strategies must be one of {', '.join(STRATEGIES)}, got {strategies!r} "
                             "(left: the bare running totals; two: 'L' running totals or 'G' grouped sums)")
        if totals not in TOTALS_FILTERS:
            raise ValueError(f"chain_trace: totals must be one of {', '.join(TOTALS_FILTERS)}, got {totals!r} "
                             f"(in_range: every running total in {list(TOTALS_RANGE)}; excursion: some outside it)")
        if kwargs.get("prompt_style", "plain") != "plain":
            raise ValueError("chain_trace: prompt_style must be 'plain' (the trace is the whole completion)")
        kwargs.setdefault("plain_answer", "first_line")
        self.strategies, self.totals = strategies, totals
        super().__init__(generator, name=kwargs.pop("name", "chain_trace"), **kwargs)

    def _gold_answer(self, question: str) -> str:
        expression = expression_of(question)
        return left_answer(expression) if self.strategies == "two" else trace_answer(expression)

    def _example(self, base: int, idx: int, entry: dict) -> dict:
        example = super()._example(base, idx, entry)
        example["answer"] = self._gold_answer(entry["question"])
        return example

    def _distinct(self, base: int, budget: int, exclude: set[str]) -> Iterator[dict]:
        """The generator's distinct questions (as :class:`ReasoningGymTask`), the chains :attr:`totals` leaves out
        skipped."""
        for example in super()._distinct(base, budget, exclude):
            if self.totals == "any" or totals_class(expression_of(example["question"])) == self.totals:
                yield example

    def entry_for(self, example: Mapping[str, Any]) -> dict:
        """The generator's entry with the trace answer and the ``totals`` class in its metadata (a stratum key)."""
        entry = super().entry_for(example)
        if not entry.get("question"):
            return entry
        metadata = {**entry.get("metadata", {}), "totals": totals_class(expression_of(entry["question"]))}
        return {**entry, "answer": self._gold_answer(entry["question"]), "metadata": metadata}

    def answer_set(self) -> None:
        """Traces form no enumerable set: exact pass@k teacher-forces the gold completions instead."""
        return None

    def accepted_answers(self, example: Mapping[str, Any]) -> list[str]:
        """The first lines the verifier accepts for ``example``: its gold trace; under ``strategies="two"`` the ``L``
        and the ``G`` trace of its question's chain."""
        if self.strategies == "left":
            return [" ".join(str(example.get("answer") or self.entry_for(example)["answer"]).split())]
        expression = expression_of(str(example.get("question") or self.entry_for(example)["question"]))
        return [left_answer(expression), grouped_answer(expression)]

    def gold_completions(self, example: Mapping[str, Any]) -> list[str]:
        """The completions the verifier accepts (without EOS): one per strategy, disjoint from their first token."""
        return [self.answer_completion(answer) for answer in self.accepted_answers(example)]

    def parse_answer(self, completion: Any) -> str | None:
        """The completion's first line with whitespace normalised, or None."""
        from grae.rewards.extract import completion_text

        line = completion_text(completion).strip().split("\n", 1)[0]
        return " ".join(line.split()) or None

    def score(self, completion: Any, example: Mapping[str, Any]) -> float:
        """1.0 when the first line is exactly an accepted trace (:meth:`accepted_answers`: every number right),
        else 0.0."""
        return float(self.parse_answer(completion) in self.accepted_answers(example))


register_task("chain_trace")(ChainTraceTask)
