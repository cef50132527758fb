"""Memorisation diagnostics of a run: the train vs held-out gap and the answer-leakage rate.

A regime in which RL narrows held-out pass@k only because it memorises its training set (regime
R1: 64 problems × 100 epochs) shows two signatures, both cheap to compute from what a run writes:

* **train vs held-out gap** — pass@1 on the training batches (the batch mean reward over the last 10 %
  of steps, an unbiased pass@1 of the training prompts with 0/1 rewards) minus held-out pass@1;
* **answer leakage** — the share of *wrong* held-out answers that equal some training answer. A policy
  that recalls training answers instead of computing puts its wrong mass on them. On a task whose
  answers are dense integers (chain_sum) the training answers cover most of the range, so compare a
  run's rate with the base model's on the same problems, never with 0.

Inputs are ``grae eval`` rows (``pred_answer``, ``label``) and the training examples (``answer``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def normalise_answer(answer: Any) -> str | None:
    """A comparable form of an answer: an integer-valued number as ``str(int)`` (``"+07"``, ``"7.0"`` →
    ``"7"``), anything else stripped; None/empty stays None."""
    if answer is None:
        return None
    text = str(answer).strip().replace(",", "")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def answer_leakage(rows: Iterable[Mapping[str, Any]], train_answers: Iterable[Any]) -> dict[str, float]:
    """Share of wrong held-out answers equal to some training answer.

    ``rows``: ``grae eval`` rows; a row counts when its ``label`` is false and its ``pred_answer``
    parses (unparsable completions carry no answer to leak). Returns ``{"rate", "wrong", "leaked"}``
    (``rate`` is nan when no row is wrong).
    """
    answers = {a for a in (normalise_answer(x) for x in train_answers) if a is not None}
    wrong = leaked = 0
    for row in rows:
        if row.get("label"):
            continue
        pred = normalise_answer(row.get("pred_answer"))
        if pred is None:
            continue
        wrong += 1
        leaked += pred in answers
    return {"rate": leaked / wrong if wrong else float("nan"), "wrong": wrong, "leaked": leaked}


def train_pass1(metrics: Sequence[Mapping[str, Any]], tail: float = 0.1) -> float:
    """pass@1 on the training batches: the mean batch reward over the last ``tail`` of the logged steps
    (nan when none was logged)."""
    vals = [float(r["reward_mean"]) for r in metrics if r.get("reward_mean") is not None]
    if not vals:
        return float("nan")
    window = max(1, round(tail * len(vals)))
    return float(np.mean(vals[-window:]))


def heldout_pass1(rows: Iterable[Mapping[str, Any]]) -> float:
    """Held-out pass@1: the mean over problems of each problem's share of correct samples (an exact row's p)."""
    per_problem: dict[str, list[float]] = {}
    for row in rows:
        per_problem.setdefault(str(row["question_id"]), []).append(
            float(row["p"]) if row.get("exact") else float(bool(row["label"])))
    if not per_problem:
        return float("nan")
    return float(np.mean([np.mean(v) for v in per_problem.values()]))


def train_heldout_gap(metrics: Sequence[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]],
                      tail: float = 0.1) -> dict[str, float]:
    """``{"train_pass1", "heldout_pass1", "gap"}``: training-batch pass@1 (:func:`train_pass1`) minus
    held-out pass@1 (:func:`heldout_pass1`). A gap near 0 means the run generalises what it learns."""
    train, held = train_pass1(metrics, tail), heldout_pass1(rows)
    return {"train_pass1": train, "heldout_pass1": held, "gap": train - held}


def diagnostics_lines(gap: Mapping[str, float], leakage: Mapping[str, float],
                      base_leakage: Mapping[str, float] | None = None) -> list[str]:
    """Markdown bullet lines for a report."""
    lines = [f"- train vs held-out gap: training-batch pass@1 {100 * gap['train_pass1']:.1f} (last 10% of steps) − "
             f"held-out pass@1 {100 * gap['heldout_pass1']:.1f} = **{100 * gap['gap']:+.1f} points**"]
    leak = (f"- answer leakage: {100 * leakage['rate']:.1f}% of wrong held-out answers ({leakage['leaked']:,} of "
            f"{leakage['wrong']:,}) equal some training answer")
    if base_leakage is not None:
        leak += f" (base model: {100 * base_leakage['rate']:.1f}%, the chance level on these problems)"
    return lines + [leak]
