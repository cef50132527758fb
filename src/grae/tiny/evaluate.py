"""Held-out pass@k of a tiny checkpoint: grae.data's held-out split of its task, sampled by grae.eval.

The same problems, parser and unbiased estimator as ``grae train``'s before/after evaluation, so a
build's ``base_eval`` is directly comparable with a run's ``eval/before.jsonl``.
"""

from __future__ import annotations

from typing import Any

from .tasks import DEFAULT_TASK, DEFAULT_TASK_KWARGS


def evaluate_passk(
    model,
    tokenizer,
    *,
    task: str = DEFAULT_TASK,
    task_kwargs: dict[str, Any] | None = None,
    n_problems: int = 200,
    n_samples: int = 64,
    temperature: float = 1.0,
    max_new_tokens: int = 8,
    seed: int = 0,
    batch_size: int = 512,
) -> dict[str, Any]:
    """pass@{1, 2, 4, …, n_samples} on the first ``n_problems`` held-out problems (plain prompts, top_p = 1)."""
    from grae.data import get_task
    from grae.eval import evaluate

    heldout_task = get_task(task, prompt_style="plain", **(DEFAULT_TASK_KWARGS if task_kwargs is None else task_kwargs))
    result = evaluate(model, tokenizer, heldout_task.heldout(n_problems), heldout_task, n=n_samples,
                      temperature=temperature, top_p=1.0, max_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
    summary = result.summary()
    return {**{f"pass@{k}": round(v, 4) for k, v in result.curve.items()},
            "frac_never_solved": round(summary["frac_never_solved"], 4),
            "frac_always_solved": round(summary["frac_always_solved"], 4),
            "n_problems": n_problems, "n_samples": n_samples, "temperature": temperature,
            "eval_seconds": round(result.seconds, 1)}
