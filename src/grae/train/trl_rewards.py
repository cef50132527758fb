"""``reward_funcs`` entries as a TRL recipe names them, resolved to callables before any model or data loads.

An entry is ``"task"`` (the task's own verifier, resolved by the caller), one of the names ``trl grpo``
accepts (``trl/scripts/grpo.py``'s registry in TRL 1.16: ``accuracy_reward``, ``reasoning_accuracy_reward``,
``think_format_reward``, ``get_soft_overlong_punishment`` built with ``max_completion_len=1280,
soft_punish_cache=256``) — TRL's own functions from ``trl.rewards`` — or a dotted path
(:func:`grae.rewards.dotted.load_reward_function`).

TRL's functions read conversational completions (``completion[0]["content"]``) and, for the accuracy
rewards, a ``solution`` dataset column. :class:`TrlReward` hands them what they read on grae's tasks:
a plain-text completion becomes one assistant message, and without a ``solution`` column the task's
``answer`` column is passed as ``solution`` in math delimiters (``$42$``, as TRL's own
``trl-lib/DeepMath-103K`` writes it; ``True``/``False``/``Yes``/``No`` as they are). The logged name is
TRL's (``rewards/accuracy_reward/mean``).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

from grae.rewards.dotted import load_reward_function

#: ``trl grpo --reward_funcs`` names -> (``trl.rewards`` attribute, factory keyword arguments or None for a function)
TRL_REWARD_NAMES: dict[str, tuple[str, dict[str, int] | None]] = {
    "accuracy_reward": ("accuracy_reward", None),
    "reasoning_accuracy_reward": ("reasoning_accuracy_reward", None),
    "think_format_reward": ("think_format_reward", None),
    "get_soft_overlong_punishment": ("get_soft_overlong_punishment",
                                     {"max_completion_len": 1280, "soft_punish_cache": 256}),
}
#: the rewards that verify with math_verify (TRL raises ImportError only when first called)
_MATH_VERIFY = {"accuracy_reward", "reasoning_accuracy_reward"}
#: gold answers TRL's DeepMath-103K leaves without ``$…$``
_BARE_GOLDS = {"True", "False", "Yes", "No"}


class TrlReward:
    """A ``trl.rewards`` function fed grae's columns (see the module docstring); picklable, named as TRL names it."""

    def __init__(self, func: Callable[..., Any]):
        self.func = func
        self.__name__ = getattr(func, "__name__", type(func).__name__)
        try:
            self.reads_solution = "solution" in inspect.signature(func).parameters
        except (TypeError, ValueError):
            self.reads_solution = False

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        completions = [[{"role": "assistant", "content": c}] if isinstance(c, str) else c for c in completions]
        if self.reads_solution and "solution" not in kwargs and "answer" in kwargs:
            kwargs["solution"] = [latex_gold(a) for a in kwargs["answer"]]
        return self.func(completions=completions, **kwargs)

    def __repr__(self) -> str:
        return f"<TRL reward {self.__name__}>"


def latex_gold(answer: Any) -> str:
    """grae's gold ``answer`` as TRL's ``solution`` column holds it: ``$answer$`` (math_verify parses the
    delimited form), booleans and yes/no bare; None gives "" (TRL then scores the sample None)."""
    if answer is None:
        return ""
    text = str(answer).strip()
    return text if text in _BARE_GOLDS or text.startswith("$") else f"${text}$"


def resolve_reward(spec: str) -> Callable[..., Any]:
    """The callable of one ``reward_funcs`` entry other than ``"task"``: a TRL name or a dotted path (a
    ``trl.rewards`` function named by path is wrapped too). ``ValueError``, one line, for anything else."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"expected a reward name or 'module:function', got {spec!r}")
    if spec in TRL_REWARD_NAMES:
        attr, factory_kwargs = TRL_REWARD_NAMES[spec]
        import trl.rewards

        if spec in _MATH_VERIFY:
            from trl.import_utils import is_math_verify_available

            if not is_math_verify_available():
                raise ValueError(f"{spec!r} (TRL's) verifies with math_verify: pip install math-verify")
        func = getattr(trl.rewards, attr)
        return TrlReward(func(**factory_kwargs) if factory_kwargs is not None else func)
    if ":" not in spec and "." not in spec:
        close = difflib.get_close_matches(spec, [*TRL_REWARD_NAMES, "task"], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{spec!r} is not a reward function.{hint} Write 'task' (the task's verifier), one of TRL's "
                         f"{', '.join(TRL_REWARD_NAMES)}, or a dotted path (mymodule:my_reward)")
    func = load_reward_function(spec)
    return TrlReward(func) if getattr(func, "__module__", "").startswith("trl.rewards") else func
