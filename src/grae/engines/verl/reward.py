"""verl reward function for datasets written by ``grae data export --format verl``.

verl 0.9.1 (``reward.custom_reward_function``)::

    reward.custom_reward_function.path=pkg://grae.engines.verl.reward
    reward.custom_reward_function.name=compute_score          # or compute_score_ngrpo

verl's reward manager calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``
in its reward workers. A row exported by grae carries its full example (``extra_info.grae_example``)
and task (``extra_info.task``/``task_params``), and is scored by that task's verifier — the same
function ``grae train`` rewards with. Rows without it (any other verl math dataset) fall back to
``grae.rewards.verify_math(solution_str, ground_truth)``.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from typing import Any

#: reward above which a response counts as correct (grae's ``correct_threshold``).
CORRECT = 0.5


@lru_cache(maxsize=32)
def _task(name: str, params_json: str):
    from grae.data import get_task

    return get_task(name, **json.loads(params_json or "{}"))


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any) -> float:
    """The task's verifier score of ``solution_str`` (a float, 1.0 = correct for binary tasks)."""
    info = extra_info or {}
    example_json, task_name = info.get("grae_example"), info.get("task")
    if example_json and task_name:
        task = _task(str(task_name), str(info.get("task_params") or "{}"))
        return float(task.score(solution_str, json.loads(example_json)))
    from grae.rewards import verify_math

    return float(verify_math(solution_str, str(ground_truth)))


def compute_score_with_filters(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                               **kwargs: Any) -> dict[str, float]:
    """:func:`compute_score` plus two fields for verl's ``algorithm.filter_groups`` (dynamic sampling).

    verl drops every group whose ``filter_groups.metric`` has zero std: with ``metric=reward`` (or
    ``acc``) that is all-correct *and* all-wrong groups, DAPO's rule. To drop one kind only (grae's
    ``sampling.drop`` on TRL), filter on a field whose std is zero only in that kind of group:

    * ``grae_all_correct_filter``: 1.0 for a correct response, a fresh random number in [−1, 0) for a
      wrong one — only all-correct groups are dropped (NGRPO's filter; all-wrong groups carry NSR's,
      W-REINFORCE's and NGRPO's signal);
    * ``grae_all_wrong_filter``: 0.0 for a wrong response, a fresh random number in (0, 1] for a
      correct one — only all-wrong groups are dropped.

    A tie between two random floats has probability ~0.
    """
    score = compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    correct = score > CORRECT
    return {"score": score, "acc": float(correct),
            "grae_all_correct_filter": 1.0 if correct else -random.random() - 1e-12,
            "grae_all_wrong_filter": 1.0 - random.random() if correct else 0.0}


#: NGRPO's recipe name for :func:`compute_score_with_filters` (filter on ``grae_all_correct_filter``)
compute_score_ngrpo = compute_score_with_filters
