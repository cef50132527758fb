"""GraeTrainer's reward-fault containment: every callable reward function wrapped in
:func:`grae.rewards.safe_reward`, and a function that failed on every sample of any rank's slice
stopping every rank at once (never one rank alone: the others would wait in the next collective).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from grae.rewards.safe import RewardFunctionError, SafeReward


def wrap_reward_funcs(args: tuple, kwargs: dict, *, fallback, timeout) -> tuple[tuple, dict]:
    """Wrap the callable reward functions (GRPOTrainer's second argument) in ``safe_reward``."""
    from grae.rewards import safe_reward
    from grae.rewards.safe import AsyncSafeReward

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
    """Stop every rank when a contained reward function failed on every sample of *any* rank's slice.

    A verifier that works on no sample of one rank (a missing dependency on one node, a broken worker) is
    a bug there, not noise: training on the other ranks' half of the batch would end with exit 0 and a
    run that quietly saw half its data. So the rule is the single-process one applied to each rank's
    own call, decided together: the wrappers never raise on their own (``raise_on_total_failure=False``;
    a rank stopping alone would leave the others waiting in the next collective), every rank gathers
    every rank's (samples, failures) and all raise the same error, naming the ranks that failed.
    """
    contained = [f for f in reward_funcs if isinstance(f, SafeReward)]  # config: same on every rank
    if not contained:
        return
    local = torch.tensor([f.last_call[:2] for f in contained], dtype=torch.long, device=accelerator.device)  # [F, 2]
    world = accelerator.num_processes
    per_rank = accelerator.gather(local).reshape(world, len(contained), 2).tolist()  # [W, F, 2]
    for i, func in enumerate(contained):
        counts = [per_rank[rank][i] for rank in range(world)]  # (samples, failures) of each rank
        failed = [rank for rank, (n, failures) in enumerate(counts) if n and failures == n]
        if not failed:
            continue
        _, _, timeouts, first = func.last_call
        if len(failed) == world:  # the whole gathered batch: the single-process error
            func._raise_all_failed(sum(n for n, _ in counts), first, timeouts)
        mine = accelerator.process_index in failed
        samples = ", ".join(f"{counts[rank][0]} on rank {rank}" for rank in failed)
        what = func.first_failure(first) if mine else f"in rank {failed[0]}'s log"
        raise RewardFunctionError(
            f"reward function {func.__name__!r} failed on every sample of rank {', '.join(map(str, failed))} "
            f"of {world} ({samples}); first failure: {what}. A verifier that works on no sample of a rank is "
            "broken there, so every rank stops instead of training on the other ranks' part of the batch."
        ) from (first if mine else None)


class MissingRewardWatch:
    """Stops training when a reward function gave no reward (None or NaN, TRL's "not applicable") on any sample of
    ``steps`` scored training batches in a row: a policy learns nothing from a function that never scores, and the
    run would end with exit 0, a final/ and a report of training on nothing. ``max_steps``: a run shorter than
    ``steps`` stops once every batch it scored had none. Read from the gathered rewards, so every rank decides
    alike; 0 never stops."""

    def __init__(self, steps: int, max_steps: int):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"missing_reward_steps: an integer >= 0 (0 never stops), got {steps!r}")
        self.limit = min(steps, max_steps) if max_steps > 0 else steps
        #: reward function name -> scored batches in a row without any reward from it
        self.streaks: dict[str, int] = {}

    def see(self, names: list[str], rewards_per_func: torch.Tensor) -> None:
        """One scored batch's gathered rewards ``[B, F]`` (column ``i``: function ``names[i]``)."""
        if not self.limit or not rewards_per_func.numel():
            return
        missing = torch.isnan(rewards_per_func).all(dim=0).tolist()  # [F]
        for name, none in zip(names, missing):
            self.streaks[name] = self.streaks.get(name, 0) + 1 if none else 0
            if self.streaks[name] >= self.limit:
                raise RewardFunctionError(
                    f"reward function {name!r} gave no reward (None or NaN) on any sample of {self.streaks[name]} "
                    f"scored batches in a row ({rewards_per_func.shape[0]} samples each): nothing is learnt from it, "
                    "so training is stopped; fix it (None means 'not applicable'), or raise missing_reward_steps "
                    "(0 never stops)")


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
