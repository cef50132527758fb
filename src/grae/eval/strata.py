"""How a held-out set splits: its strata (the held-out task's ``heldout_strata``, e.g. ``totals=in_range`` and
``totals=excursion`` on the two-modes testbed) and the strategies of its gold completions (the columns of
:func:`grae.eval.gold.gold_prob_parts`: ``L`` and ``G`` for ``chain_trace`` with ``strategies: two``).
``grae compare``'s mechanism rows and ``grae train``'s exact held-out report read both."""

from __future__ import annotations

from typing import Any


def stratum_labels(task: Any, examples: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{"key=value,…": [question ids]}`` over the held-out task's ``heldout_strata`` (empty without strata)."""
    keys = tuple(getattr(task, "heldout_strata", ()) or ())
    if not keys:
        return {}
    out: dict[str, list[str]] = {}
    for example in examples:
        label = ",".join(f"{k}={v}" for k, v in zip(keys, task.stratum(example)))
        out.setdefault(label, []).append(str(example["question_id"]))
    return dict(sorted(out.items()))


def strategy_labels(task: Any, width: int) -> list[str]:
    """Names of the ``width`` columns of :func:`grae.eval.gold.gold_prob_parts` for ``task``: ``L`` and ``G`` for
    ``chain_trace`` with ``strategies: two`` (its gold completions' order), else ``gold 1``, ``gold 2``, …."""
    if getattr(task, "strategies", None) == "two" and width == 2:
        from grae.data.trace import GROUPED_MARKER, LEFT_MARKER  # the task module loads reasoning_gym: only here

        return [LEFT_MARKER, GROUPED_MARKER]
    return [f"gold {j + 1}" for j in range(width)]
