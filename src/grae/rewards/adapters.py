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


def cut_at_budget(completion_ids: Sequence[Sequence[int]] | None, log_extra: Any) -> list[bool] | None:
    """Which completions were cut at the token budget, by TRL's own test (``GRPOTrainer``'s
    ``completions/clipped_ratio`` and ``mask_truncated_completions``): the last token is neither an EOS token nor
    the pad token. The ids are TRL's ``completion_ids`` reward argument; the EOS and pad ids are the trainer's,
    reached through the ``log_extra`` argument TRL passes (a method of the trainer). None when either is missing
    (a reward called outside TRL): nothing is known to be cut."""
    trainer = getattr(log_extra, "__self__", None)
    eos = getattr(trainer, "eos_token_ids", None)
    tokenizer = getattr(trainer, "_tokenizer", None) or getattr(trainer, "processing_class", None)
    if completion_ids is None or eos is None or tokenizer is None:
        return None
    ends = {*eos, getattr(tokenizer, "pad_token_id", None)}
    return [len(ids) > 0 and ids[-1] not in ends for ids in completion_ids]


class TaskReward(_Named):
    """TRL reward scoring each completion with ``task.score`` (binary), built by :func:`make_reward_fn`.

    Rebuilds the example from the dataset columns TRL passes (``question_id``, ``answer``, ``task``,
    ``question``); a row without ``answer`` gets ``None``.

    A completion cut at the token budget (:func:`cut_at_budget`) scores 0.0 without being read: its last number or
    box is wherever the budget fell, not an answer (a policy paid for it learns to ramble until the cut). Pass
    ``score_truncated=True`` to read it as if it had ended. TRL's ``mask_truncated_completions`` is a separate
    knob: it drops cut completions from the loss; their reward still enters their group's baseline, and 0.0 is
    what an unanswered completion is worth there.
    """

    def __init__(self, task: ScoringTask, name: str | None = None, *, score_truncated: bool = False):
        if not isinstance(score_truncated, bool):
            raise TypeError(f"score_truncated: True or False, got {score_truncated!r}")
        self.task = task
        self.__name__ = name or "accuracy"
        self.score_truncated = score_truncated

    def __call__(
        self,
        completions: Sequence[Any],
        answer: Sequence[Any] | None = None,
        question_id: Sequence[str] | None = None,
        task: Sequence[str] | None = None,
        question: Sequence[str] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        if answer is None:
            raise ValueError(
                f"reward {self.__name__!r} needs the dataset column 'answer'; build the dataset with "
                "grae.data `task.to_hf_dataset(examples)`"
            )
        cut = None if self.score_truncated else cut_at_budget(completion_ids, kwargs.get("log_extra"))
        scored = [i for i in range(len(completions)) if answer[i] is not None and not (cut and cut[i])]
        examples = [{
            "answer": answer[i],
            "question_id": question_id[i] if question_id is not None else None,
            "task": task[i] if task is not None else self.task.name,
            "question": question[i] if question is not None else None,
        } for i in scored]
        scores = _scatter(len(completions), scored,
                          self.task.score_batch([completion_text(completions[i]) for i in scored], examples))
        return [0.0 if cut and cut[i] and answer[i] is not None else score for i, score in enumerate(scores)]


def make_reward_fn(task: ScoringTask, name: str | None = None, *, score_truncated: bool = False) -> TaskReward:
    """TRL reward function for a grae task object (``task.reward_fn(name)`` is the same); for a registry
    name: ``grae.data.get_task("chain_sum", **params).reward_fn()``.

    ``__name__`` is ``name`` or ``"accuracy"``. The returned object is picklable (a class instance). A completion
    cut at the token budget scores 0.0 unless ``score_truncated`` (:class:`TaskReward`).
    """
    if isinstance(task, str):
        raise TypeError(f"make_reward_fn takes a task object; for the task named {task!r} use "
                        f"grae.data.get_task({task!r}, **params).reward_fn()")
    return TaskReward(task, name, score_truncated=score_truncated)


__all__ = [
    "DEFAULT_TIMEOUT",
    "FormatReward",
    "OverlongReward",
    "ScoringTask",
    "TaskReward",
    "accuracy_reward",
    "cut_at_budget",
    "make_format_reward_fn",
    "make_overlong_reward_fn",
    "make_reward_fn",
]
