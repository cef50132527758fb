"""A diverged run stops at its first non-finite step instead of looking finished.

:class:`~grae.engines.trl.GraeTrainer` checks, on every training step, the loss and the gradient norm
(before the optimizer step, so a non-finite gradient never reaches the weights) and the sampling
distribution of the rollouts (``torch.multinomial`` refuses non-finite probabilities: the logits
overflowed); at each save, every weight and one probe forward pass on a few rows of the newest
rollouts (:func:`probe_forward`: weights can all be finite, ~1e8 after a step at a huge learning rate,
while the activations overflow). The first non-finite value raises :class:`DivergenceError`
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
from dataclasses import dataclass
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
#: model classes the probe could not run on (said once each)
_CANNOT_PROBE: set[type] = set()

#: the probe's input without a batch: this many token ids from 0 up
PROBE_TOKENS = 8
#: rows of the newest rollout batch the probe runs on (:func:`probe_rows`)
PROBE_ROWS = 4


def probe_rows(batch: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(input_ids [R, P + C], attention_mask [R, P + C])``: the first :data:`PROBE_ROWS` rows of a scored
    rollout batch (TRL's ``prompt_ids``/``completion_ids`` and masks), the probe's realistic input; None
    when the batch has no such keys."""
    import torch

    keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
    if not all(isinstance(batch.get(k), torch.Tensor) for k in keys):
        return None
    rows = slice(0, PROBE_ROWS)
    ids = torch.cat([batch["prompt_ids"][rows], batch["completion_ids"][rows]], dim=1).detach()  # [R, P + C]
    mask = torch.cat([batch["prompt_mask"][rows], batch["completion_mask"][rows]], dim=1).detach()  # [R, P + C]
    return ids, mask


#: a position's hidden state whose L2 norm ‖h‖₂ reaches this overflows float32 in the next norm layer: RMSNorm and
#: LayerNorm sum its H squares in float32, and that sum is inf once ‖h‖₂ passes sqrt(float32 max) ≈ 1.84e19 — with
#: every |h| only ‖h‖₂/√H (7.7e17 at H = 576). The norm's output is then 0 or NaN and the logits degenerate while
#: every weight is finite. The probe measures ‖h‖₂ in float64, where the sum does not overflow.
OVERFLOWING_ACTIVATION = math.sqrt(3.4028234663852886e38)


@dataclass(frozen=True)
class Probe:
    """What :func:`probe_forward` saw: ``healthy`` when every logit is finite and every position's hidden-state
    norm ‖h‖₂ below :data:`OVERFLOWING_ACTIVATION`; ``largest_weight`` (the largest |w|), ``largest_activation``
    (the largest ‖h‖₂ of a kept position in any hidden state, in float64)."""

    healthy: bool
    largest_weight: float
    largest_activation: float

    def describe(self) -> str:
        return (f"the model's activations overflow on a probe forward pass (hidden states of norm ‖h‖₂ up to "
                f"{self.largest_activation:.3g}, beyond {OVERFLOWING_ACTIVATION:.3g} where a norm layer's sum of "
                "squares overflows float32, or non-finite logits; its weights are finite, the largest |w| = "
                f"{self.largest_weight:.3g})")


def probe_forward(model: Any, rows: tuple[Any, Any] | None = None) -> Probe:
    """One forward pass of ``model`` on ``rows`` (``(input_ids, attention_mask)``, e.g. :func:`probe_rows` of
    the newest rollouts) or, without them, on :data:`PROBE_TOKENS` token ids, reading only the positions
    the mask keeps. Weights can all be finite (~1e8 after one step at a learning rate of 1e9) while the
    activations overflow: a norm then outputs 0 on one input (finite, uniform logits) and NaN on another,
    so the logits alone do not tell; a position whose hidden state's norm ‖h‖₂ reaches
    :data:`OVERFLOWING_ACTIVATION` does (each |h| may be √H times smaller).

    In eval mode (dropout off: no random numbers drawn, so a run's sampling is unchanged), without
    gradients; the model's training mode is restored. Every process must call it (sharded models gather
    their weights in the forward). A model that cannot run on token ids alone is said in a warning and
    counts as healthy (its weights are still checked); said once per model class."""
    import torch

    params = list(model.parameters())
    largest = max((float(p.detach().abs().max()) for p in params if p.numel() and p.is_floating_point()), default=0.0)
    if rows is None:
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0) or PROBE_TOKENS
        ids = torch.arange(min(PROBE_TOKENS, vocab), device=params[0].device)[None]  # [1, T]
        rows = (ids, torch.ones_like(ids))
    ids, mask = (t.to(params[0].device) for t in rows)
    kept = mask.bool() if bool(mask.any()) else torch.ones_like(mask, dtype=torch.bool)  # [R, T]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    except Exception as err:  # noqa: BLE001 - a model that needs more than token ids (an image token among them)
        if type(model) not in _CANNOT_PROBE:  # once per model class, not at every save
            _CANNOT_PROBE.add(type(model))
            _logger.warning("divergence check: the probe forward pass cannot run on this model (%s: %s); only its "
                            "weights are checked at saves", type(err).__name__, err)
        return Probe(True, largest, 0.0)
    finally:
        model.train(was_training)
    # each [R, T, H] → the kept positions' ‖h‖₂, in float64 (in float32 the sum of squares is what overflows);
    # detached: TRL's trainers call enable_input_require_grads (gradient checkpointing), whose hook marks the input
    # embeddings' output as requiring grad even under no_grad; only the values are read here
    hidden = [h.detach()[kept].double().norm(dim=-1).max() for h in (out.hidden_states or ()) if h[kept].numel()]
    activation = float(torch.stack(hidden).nan_to_num(nan=math.inf).max()) if hidden else 0.0
    healthy = bool(torch.isfinite(out.logits.detach()[kept]).all()) and activation < OVERFLOWING_ACTIVATION
    return Probe(healthy, largest, activation)


def is_non_finite_sampling(err: BaseException) -> bool:
    """``err`` is ``torch.multinomial`` refusing a non-finite distribution (the rollouts' logits overflowed)."""
    return isinstance(err, NonFiniteLogitsError) or (isinstance(err, RuntimeError) and NON_FINITE_SAMPLING in str(err))


def describe(value: float) -> str:
    """``nan``, ``inf`` or ``-inf`` (a non-finite float as the message prints it)."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
