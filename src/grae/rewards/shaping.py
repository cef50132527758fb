"""Reward shaping terms: DAPO's soft overlong penalty and a format reward."""

from __future__ import annotations

import re
from re import Pattern
from typing import Any, Literal

from grae.rewards.extract import completion_text, extract_answer_tag, extract_boxed, extract_procedural_answer


def _penalty_scalar(length: float, max_len: int, cache_len: int, factor: float) -> float:
    soft_start = max_len - cache_len
    if length <= soft_start:
        return 0.0
    if length <= max_len:
        return (soft_start - length) / cache_len * factor
    return -factor


def overlong_penalty(length: Any, max_len: int, cache_len: int, factor: float = 1.0) -> Any:
    """Soft overlong punishment of DAPO (Yu et al., 2025, arXiv:2503.14476, Eq. 13).

    .. math::

        R_\\text{length}(L) = \\begin{cases}
            0 & L \\le L_\\text{max} - L_\\text{cache} \\\\
            \\frac{(L_\\text{max} - L_\\text{cache}) - L}{L_\\text{cache}} \\cdot \\text{factor}
                & L_\\text{max} - L_\\text{cache} < L \\le L_\\text{max} \\\\
            -\\text{factor} & L > L_\\text{max}
        \\end{cases}

    The penalty is added to the correctness reward. It falls linearly from 0 to ``-factor`` over the last
    ``cache_len`` tokens before ``max_len``. DAPO uses ``max_len=20480``, ``cache_len=4096`` with a
    generation limit of 20480 (so truncated completions receive exactly ``-1``).

    Args:
        length: completion length(s) in tokens: a number, a list/tuple, a numpy array or a torch tensor
            (the result has the same kind; tensors come back as float tensors on the same device).
        max_len: ``L_max``, usually the generation limit (``max_completion_length``).
        cache_len: ``L_cache``, width of the linear ramp; ``0 <= cache_len <= max_len``
            (``0`` gives a hard step at ``max_len``).
        factor: magnitude of the full penalty (DAPO: 1.0).
    """
    if not (0 <= cache_len <= max_len):
        raise ValueError(f"need 0 <= cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    if factor < 0:
        raise ValueError(f"factor must be >= 0 (it is the magnitude of a penalty), got {factor}")
    soft_start = max_len - cache_len
    module = type(length).__module__
    if module.startswith("torch"):
        import torch

        lengths = length.to(torch.float32) if not length.is_floating_point() else length
        if cache_len == 0:
            return torch.where(lengths > max_len, -float(factor), 0.0).to(lengths.dtype)
        ramp = (soft_start - lengths) / cache_len * factor
        out = torch.where(lengths <= soft_start, torch.zeros_like(lengths), ramp)
        return torch.where(lengths > max_len, torch.full_like(lengths, -float(factor)), out)
    if module.startswith("numpy"):
        import numpy as np

        lengths = np.asarray(length, dtype=np.float64)
        if cache_len == 0:
            return np.where(lengths > max_len, -float(factor), 0.0)
        out = np.where(lengths <= soft_start, 0.0, (soft_start - lengths) / cache_len * factor)
        return np.where(lengths > max_len, -float(factor), out)
    if isinstance(length, (list, tuple)):
        return [overlong_penalty(x, max_len, cache_len, factor) for x in length]
    if cache_len == 0:
        return -float(factor) if length > max_len else 0.0
    return float(_penalty_scalar(float(length), max_len, cache_len, factor))


AnswerFormat = Literal["boxed", "answer_tag", "plain"]


def format_reward(completion: Any, fmt: AnswerFormat | str | Pattern[str] = "boxed") -> float:
    """1.0 if ``completion`` contains a well-formed final answer in the expected format, else 0.0.

    Args:
        completion: ``str``/``bytes``/TRL message list.
        fmt: ``"boxed"`` (math: a closed, non-empty last ``\\boxed{...}``), ``"answer_tag"``
            (a closed, non-empty ``<answer>...</answer>``), ``"plain"`` (tiny-model ``Answer:`` prompts: the
            completion starts with a non-empty token), or a regular expression (``str`` or compiled) that
            must match somewhere (``re.search``, DOTALL).
    """
    text = completion_text(completion)
    if fmt == "boxed":
        return 1.0 if extract_boxed(text) is not None else 0.0
    if fmt == "answer_tag":
        return 1.0 if extract_answer_tag(text) is not None else 0.0
    if fmt == "plain":
        return 1.0 if extract_procedural_answer(text[:4096], fallback="first_token") is not None else 0.0
    pattern = fmt if isinstance(fmt, re.Pattern) else re.compile(fmt, re.DOTALL)
    return 1.0 if pattern.search(text) else 0.0
