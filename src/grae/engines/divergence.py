"""A diverged run stops at its first non-finite step instead of looking finished.

:class:`~grae.engines.trl.GraeTrainer` checks, on every training step, the loss and the gradient norm
(before the optimizer step, so a non-finite gradient never reaches the weights) and the sampling
distribution of the rollouts (``torch.multinomial`` refuses non-finite probabilities: the logits
overflowed); at each save, every weight and the logits of one probe forward pass
(:func:`probe_logits_finite`: weights can all be finite, ~1e9 after one step at a huge learning rate,
and still overflow every logit). The first non-finite value raises :class:`DivergenceError`
naming the step, what was non-finite and the likely cause (:func:`likely_cause`): the learning rate or
the reward scale. A checkpoint or a final model with non-finite weights is never written, so the newest
checkpoint on disk is the last finite one (``grae train`` names it, exits 1 and writes no ``final/``).

What counts as diverged is only what is not a number: a learning rate that collapses the policy to
reward 0 with finite weights (the tiny model at ``trl.learning_rate`` 10: grad norm 0 from step 3)
is not caught here; ``grae train`` refuses learning rates above 1.0 before the model loads unless
``allow_large_learning_rate`` is set (:data:`grae.train.config.MAX_LEARNING_RATE`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from grae.eval.backends import NON_FINITE_SAMPLING, NonFiniteLogitsError

#: rewards larger than this (in absolute value) are named as the likely cause before the learning rate
LARGE_REWARD = 100.0
#: learning rates above this are named as the likely cause (Adam moves every weight by about the rate per step)
LARGE_LEARNING_RATE = 1e-2


class DivergenceError(RuntimeError):
    """Training met a non-finite value (module docstring). ``step``: the training step (1-based) at which
    it did; ``what``: what was non-finite; ``cause``: :func:`likely_cause`; ``note``: what was kept."""

    def __init__(self, step: int, what: str, cause: str, note: str = ""):
        self.step, self.what, self.cause = step, what, cause
        super().__init__(f"diverged at step {step}: {what}; likely cause: {cause}" + (f"; {note}" if note else ""))


def likely_cause(learning_rate: float, reward_scale: float | None) -> str:
    """The likely cause of a divergence, worded for the one line: the reward scale when rewards reached
    more than :data:`LARGE_REWARD` in absolute value, else the learning rate (``reward_scale``: the largest
    |reward| of the last batch, None when unknown)."""
    rate = f"the learning rate (trl.learning_rate = {learning_rate:g}"
    if reward_scale is not None and reward_scale > LARGE_REWARD:
        return (f"the reward scale (rewards up to |r| = {reward_scale:.3g}; keep them near [0, 1] or let "
                f"trl.scale_rewards normalise them), or {rate})")
    if learning_rate > LARGE_LEARNING_RATE:
        return f"{rate}; lower it, e.g. 1e-5)"
    scale = f"|r| <= {reward_scale:.3g}" if reward_scale is not None else "unknown"
    return f"{rate}) or the reward scale ({scale}); also check trl.max_grad_norm and bf16/fp16 overflow"


def non_finite_count(tensors: Iterable[Any]) -> tuple[int, int]:
    """``(non-finite values, all values)`` over ``tensors`` (a model's parameters), one tensor at a time."""
    import torch

    bad = total = 0
    for tensor in tensors:
        data = tensor.detach()
        total += data.numel()
        if data.is_floating_point() and not bool(torch.isfinite(data).all()):
            bad += int((~torch.isfinite(data)).sum())
    return bad, total


_logger = logging.getLogger(__name__)

#: the probe's input: this many token ids from 0 up (any ids do: weights that overflow, overflow on all inputs)
PROBE_TOKENS = 8


def probe_logits_finite(model: Any) -> tuple[bool, float]:
    """``(every logit finite, largest |weight|)`` of one forward pass of ``model`` on :data:`PROBE_TOKENS`
    token ids, in eval mode (dropout off: no random numbers drawn, so a run's sampling is unchanged) and
    without gradients; the model's training mode is restored. Every process must call it (sharded models
    gather their weights in the forward). A model that cannot run on token ids alone is said once per
    save in a warning and counts as finite (its weights are still checked)."""
    import torch

    params = list(model.parameters())
    largest = max((float(p.detach().abs().max()) for p in params if p.numel() and p.is_floating_point()), default=0.0)
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0) or PROBE_TOKENS
    ids = torch.arange(min(PROBE_TOKENS, vocab), device=params[0].device)[None]  # [1, T]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits  # [1, T, V]
    except Exception as err:  # noqa: BLE001 - a model that needs more than token ids (an image token among them)
        _logger.warning("divergence check: the probe forward pass cannot run on this model (%s: %s); only its "
                        "weights are checked at saves", type(err).__name__, err)
        return True, largest
    finally:
        model.train(was_training)
    return bool(torch.isfinite(logits).all()), largest


def is_non_finite_sampling(err: BaseException) -> bool:
    """``err`` is ``torch.multinomial`` refusing a non-finite distribution (the rollouts' logits overflowed)."""
    return isinstance(err, NonFiniteLogitsError) or (isinstance(err, RuntimeError) and NON_FINITE_SAMPLING in str(err))


def describe(value: float) -> str:
    """``nan``, ``inf`` or ``-inf`` (a non-finite float as the message prints it)."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
