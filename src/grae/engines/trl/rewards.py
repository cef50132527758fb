"""GraeTrainer's reward-fault containment: every callable reward function wrapped in
:func:`grae.rewards.safe_reward`, and a function that failed on every sample of the *gathered* batch
stopping every rank at once (never one rank alone: the others would wait in the next collective).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch


def wrap_reward_funcs(args: tuple, kwargs: dict, *, fallback, timeout) -> tuple[tuple, dict]:
    """Wrap the callable reward functions (GRPOTrainer's second argument) in ``safe_reward``."""
    from grae.rewards import safe_reward
    from grae.rewards.safe import AsyncSafeReward, SafeReward

    def wrap(funcs):
        single = not isinstance(funcs, (list, tuple))
        wrappable = [callable(f) and not isinstance(f, (str, SafeReward, AsyncSafeReward, torch.nn.Module))
                     for f in ([funcs] if single else funcs)]
        wrapped = [safe_reward(f, fallback=fallback, timeout=timeout) if ok else f
                   for f, ok in zip([funcs] if single else funcs, wrappable)]
        for f in wrapped:
            if isinstance(f, SafeReward):
                f.raise_on_total_failure = False  # decided on the gathered batch: stop_on_total_reward_failure
        return wrapped[0] if single else wrapped

    if "reward_funcs" in kwargs:
        kwargs = {**kwargs, "reward_funcs": wrap(kwargs["reward_funcs"])}
    elif len(args) >= 2:
        args = (args[0], wrap(args[1]), *args[2:])
    return args, kwargs


def stop_on_total_reward_failure(reward_funcs: list[Any], accelerator: Any) -> None:
    """Stop every rank when a contained reward function failed on every sample of the *global* batch.

    The wrappers never raise on their own (``raise_on_total_failure=False``): a rank whose slice
    all failed while another's worked would stop alone and leave the others in the next collective.
    """
    from grae.rewards.safe import SafeReward

    contained = [f for f in reward_funcs if isinstance(f, SafeReward)]  # config: same on every rank
    if not contained:
        return
    local = torch.tensor([f.last_call[:2] for f in contained], dtype=torch.long, device=accelerator.device)
    totals = accelerator.reduce(local, reduction="sum")  # [F, 2] (samples, failures), every rank
    for func, (n, failures) in zip(contained, totals.tolist()):
        if n and failures == n:
            _, _, timeouts, first = func.last_call
            func._raise_all_failed(n, first, timeouts)


@contextlib.contextmanager
def held_records(logger: logging.Logger, text: str):
    """Hold back ``logger``'s records whose message holds ``text`` (yields the list they go to)."""
    held: list[logging.LogRecord] = []

    def keep(record: logging.LogRecord) -> bool:
        if text in str(record.msg):  # accelerate prefixes "[RANK i] "
            held.append(record)
            return False
        return True

    logger.addFilter(keep)
    try:
        yield held
    finally:
        logger.removeFilter(keep)
