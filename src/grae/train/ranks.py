"""``grae train`` on several processes (``accelerate launch``, ``torchrun``): the main process owns the
run directory and decides; every process learns the decision.

One process claims the directory (one ``run.json``, one run id), picks the checkpoint to resume,
writes the configuration, the held-out rows, ``final/`` and the report. Without this every rank
would claim the directory for itself, and all but the first would find it owned by "another run".
On one process every function here is a plain call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from grae.train.config import ConfigError

T = TypeVar("T")


def is_main(args) -> bool:
    """True on the process that writes the run directory (``args``: the run's ``GRPOConfig``)."""
    return args.process_index == 0


def decided_by_main(args, decide: Callable[[], T]) -> T:
    """``decide()`` on the main process; its result — or its :class:`ConfigError`, raised on every
    process alike, so a refused run ends everywhere with the same one line — on all of them."""
    if args.world_size == 1:
        return decide()
    import torch.distributed as dist

    outcome: list = [None]
    if is_main(args):
        try:
            outcome = [("ok", decide())]
        except ConfigError as err:
            outcome = [("refused", str(err))]
    dist.broadcast_object_list(outcome, src=0, device=_device(args))
    kind, value = outcome[0]
    if kind == "refused":
        raise ConfigError(value)
    return value


def wait_for_everyone(args) -> None:
    if args.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def agreed_signal(args, local: int | None) -> int | None:
    """The signal any process received (the largest number), on every process; None if none did.

    Ranks receive a pre-emption signal at slightly different moments; stopping at a step some ranks
    have not finished would leave the others waiting in a collective for ever."""
    if args.world_size == 1:
        return local
    import torch
    import torch.distributed as dist

    flag = torch.tensor([local or 0], dtype=torch.int64, device=_device(args))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item()) or None


def _device(args):
    import torch

    return args.device if args.device.type == "cuda" else torch.device("cpu")
