"""TRL-compatible reward functions.

TRL 1.16 ``GRPOTrainer._calculate_rewards`` calls each reward function once per batch as::

    f(prompts=[...], completions=[...], completion_ids=[[...], ...],
      **{column: [...] for every dataset column except prompt/completion/completion_ids},
      trainer_state=TrainerState, log_extra=callable, log_metric=callable[, environments=[...]])

and expects ``list[float | None]`` with one entry per completion (``None`` -> NaN, "not applicable").
Completions are ``str`` for plain-text prompts and ``[{"role": "assistant", "content": ...}]`` for
conversational prompts. TRL names the function by ``__name__`` in its logs (``rewards/<name>/mean``).
Every function here accepts ``**kwargs`` so that extra dataset columns never break it.
"""

from __future__ import annotations

from collections.abc import Sequence
from re import Pattern
from typing import Any, Protocol

from grae.rewards.extract import completion_text
from grae.rewards.shaping import AnswerFormat, format_reward, overlong_penalty
from grae.rewards.verify import DEFAULT_TIMEOUT, verify_math_batch


class ScoringTask(Protocol):
    """What :class:`TaskReward` needs of a task (every :class:`grae.data.Task` has it): a ``name`` and
    ``score_batch(completions, examples) -> [0.0 | 1.0, …]``. grae.rewards does not import grae.data."""

    name: str

    def score_batch(self, completions: list[Any], examples: list[dict]) -> list[float]: ...


def accuracy_reward(completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """Math correctness reward for TRL: :func:`grae.rewards.verify_math` of each completion against the
    ``answer`` dataset column (bare gold or text containing ``\\boxed{}``); a missing gold (``None``) gives
    ``None``. Uses the default 5 s timeout per completion."""
    scored = [i for i, gold in enumerate(answer) if gold is not None]
    if len(completions) != len(answer):
        raise ValueError(f"answer: {len(answer)} for {len(completions)} completions")
    return _scatter(len(completions), scored, verify_math_batch([completions[i] for i in scored], [answer[i] for i in scored]))


def _scatter(n: int, indices: Sequence[int], values: Sequence[float]) -> list[float | None]:
    """``values`` at ``indices`` of an ``n``-list of None (samples without a gold answer stay None)."""
    out: list[float | None] = [None] * n
    for i, value in zip(indices, values):
        out[i] = value
    return out


class _Named:
    """Base for picklable callable reward objects with a TRL-visible ``__name__``."""

    __name__ = "reward"

    def __repr__(self) -> str:
        return f"<grae reward {self.__name__}>"


class FormatReward(_Named):
    """TRL reward: :func:`grae.rewards.format_reward` of each completion."""

    def __init__(self, fmt: AnswerFormat | str | Pattern[str] = "boxed", name: str = "format_reward"):
        self.fmt = fmt
        self.__name__ = name

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return [format_reward(c, self.fmt) for c in completions]


def make_format_reward_fn(fmt: AnswerFormat | str | Pattern[str] = "boxed", name: str = "format_reward") -> FormatReward:
    """TRL reward giving 1.0 for a well-formed final answer in ``fmt`` (see :func:`format_reward`)."""
    return FormatReward(fmt, name)


class OverlongReward(_Named):
    """TRL reward: DAPO soft overlong penalty on ``len(completion_ids[i])`` (see :func:`overlong_penalty`)."""

    def __init__(self, max_len: int, cache_len: int, factor: float = 1.0, name: str = "overlong_penalty"):
        overlong_penalty(0, max_len, cache_len, factor)  # validate the arguments now
        self.max_len, self.cache_len, self.factor = max_len, cache_len, factor
        self.__name__ = name

    def __call__(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None, **kwargs: Any):
        if completion_ids is None:
            raise ValueError(f"{self.__name__} needs `completion_ids` (token ids), which TRL passes")
        return overlong_penalty([len(ids) for ids in completion_ids], self.max_len, self.cache_len, self.factor)


def make_overlong_reward_fn(max_len: int, cache_len: int, factor: float = 1.0) -> OverlongReward:
    """TRL reward adding DAPO's soft overlong penalty (arXiv:2503.14476, Eq. 13) from token counts."""
    return OverlongReward(max_len, cache_len, factor)


class TaskReward(_Named):
    """TRL reward scoring each completion with ``task.score`` (binary), built by :func:`make_reward_fn`.

    Rebuilds the example from the dataset columns TRL passes (``question_id``, ``answer``, ``task``,
    ``question``); a row without ``answer`` gets ``None``.
    """

    def __init__(self, task: ScoringTask, name: str | None = None):
        self.task = task
        self.__name__ = name or "accuracy"

    def __call__(
        self,
        completions: Sequence[Any],
        answer: Sequence[Any] | None = None,
        question_id: Sequence[str] | None = None,
        task: Sequence[str] | None = None,
        question: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        if answer is None:
            raise ValueError(
                f"reward {self.__name__!r} needs the dataset column 'answer'; build the dataset with "
                "grae.data `task.to_hf_dataset(examples)`"
            )
        scored = [i for i in range(len(completions)) if answer[i] is not None]
        examples = [{
            "answer": answer[i],
            "question_id": question_id[i] if question_id is not None else None,
            "task": task[i] if task is not None else self.task.name,
            "question": question[i] if question is not None else None,
        } for i in scored]
        return _scatter(len(completions), scored,
                        self.task.score_batch([completion_text(completions[i]) for i in scored], examples))


def make_reward_fn(task: ScoringTask, name: str | None = None) -> TaskReward:
    """TRL reward function for a grae task object (``task.reward_fn(name)`` is the same); for a registry
    name: ``grae.data.get_task("chain_sum", **params).reward_fn()``.

    ``__name__`` is ``name`` or ``"accuracy"``. The returned object is picklable (a class instance).
    """
    if isinstance(task, str):
        raise TypeError(f"make_reward_fn takes a task object; for the task named {task!r} use "
                        f"grae.data.get_task({task!r}, **params).reward_fn()")
    return TaskReward(task, name)


__all__ = [
    "DEFAULT_TIMEOUT",
    "FormatReward",
    "OverlongReward",
    "ScoringTask",
    "TaskReward",
    "accuracy_reward",
    "make_format_reward_fn",
    "make_overlong_reward_fn",
    "make_reward_fn",
]
