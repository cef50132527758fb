"""grae's clipped policy loss as verl policy-loss modes (imports verl).

verl 0.9.1's own modes cover most of grae's loss (``vanilla`` = PPO clip with asymmetric
``clip_ratio_low/high`` and an always-on dual clip ``clip_ratio_c``; ``gspo`` = sequence ratio
without dual clip). What verl cannot say, these modes add:

* ``grae_ppo`` — :func:`grae.loss.policy_loss` with the ratio level and the dual clip as switches:
  ``ratio_level: token|sequence`` and ``dual_clip: true|false`` (the constant is verl's own
  ``actor.clip_ratio_c``). With the defaults (token, dual clip on) it computes verl's ``vanilla``;
  ``dual_clip: false`` is PPO without dual clip (verl asserts ``clip_ratio_c > 1``, so ``vanilla``
  cannot switch it off); ``ratio_level: sequence`` + ``dual_clip: true`` is GSPO with dual clip.
* ``grae_gspo`` — ``grae_ppo`` with the sequence ratio fixed (GSPO-token, Zheng et al. 2025), dual
  clip per ``dual_clip`` (default on): usable without the config subclass.

Both aggregate with verl's global-batch normalisers (``config.global_batch_info``: ``dp_size``,
``batch_num_tokens``, ``global_batch_size``, ``loss_scale_factor``), so the loss is invariant to data
parallelism and micro-batching exactly as verl's ``agg_loss``, and multiply verl's rollout-correction
``rollout_is_weights`` into the per-token loss (``token_weights``, outside the normaliser, as verl).

The knobs need the config subclass (verl's ``PolicyLossConfig`` is a dataclass that rejects unknown
keys)::

    actor_rollout_ref.actor.policy_loss._target_=grae.engines.verl.losses.GraePolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=grae_ppo
    +actor_rollout_ref.actor.policy_loss.ratio_level=sequence
    +actor_rollout_ref.actor.policy_loss.dual_clip=true

Per-sample weights (grae's dropped samples) cannot reach the loss: verl hands a policy loss only
``old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights``.
The estimator side handles them (``grae.engines.verl.advantage.drop_renorm_factor``).

Images: these modes compute no log-probs. verl's actor runs the forward (with the batch's
``multi_modal_inputs``) and hands over ``log_prob``/``old_log_prob``, so a multimodal batch reaches the
model exactly as under verl's own modes; nothing here can drop an image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from verl.workers.config import PolicyLossConfig

from grae.loss import RATIO_LEVELS, policy_loss


@dataclass
class GraePolicyLossConfig(PolicyLossConfig):
    """verl's ``PolicyLossConfig`` plus grae's switches (Hydra ``_target_`` of ``actor.policy_loss``).

    Args:
        loss_mode: ``grae_ppo`` (default) or ``grae_gspo`` (any verl mode also works).
        ratio_level: ``token`` (PPO) or ``sequence`` (GSPO-token) for ``grae_ppo``.
        dual_clip: cap negative-advantage losses at ``−A · actor.clip_ratio_c`` (Ye et al. 2020).
    """

    loss_mode: str = "grae_ppo"
    ratio_level: str = "token"
    dual_clip: bool = True

    def __post_init__(self):
        if self.ratio_level not in RATIO_LEVELS:
            raise ValueError(f"actor.policy_loss.ratio_level: {self.ratio_level!r}; valid: {', '.join(RATIO_LEVELS)}")
        if not isinstance(self.dual_clip, bool):
            raise ValueError(f"actor.policy_loss.dual_clip: expected true/false, got {self.dual_clip!r} "
                             "(the constant is actor.clip_ratio_c)")


def _get(cfg: Any, key: str, default: Any) -> Any:
    if cfg is None:
        return default
    if hasattr(cfg, "get"):
        value = cfg.get(key, default)
    else:
        value = getattr(cfg, key, default)
    return default if value is None else value


def verl_aggregation(loss_agg_mode: str, response_mask: torch.Tensor, info: dict) -> dict[str, Any]:
    """grae ``agg_loss`` arguments that reproduce verl 0.9.1 ``agg_loss(..., **global_batch_info)``."""
    dp = info.get("dp_size") or 1
    if loss_agg_mode in ("token-mean", "token-sum"):
        if loss_agg_mode == "token-sum":
            return {"agg": "token-mean", "weights": None, "norm_length": None, "denominator": 1.0 / dp}
        tokens = info.get("batch_num_tokens")
        if tokens is None and dp > 1:
            raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
        return {"agg": "token-mean", "weights": None, "norm_length": None,
                "denominator": None if tokens is None else tokens / dp}
    if loss_agg_mode not in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")
    seq_mask = (response_mask.sum(-1) > 0).to(torch.float32)  # verl excludes fully masked sequences
    size = info.get("global_batch_size")
    if size is None and dp > 1:
        raise ValueError("global_batch_size is required when dp_size > 1")
    length = None
    if loss_agg_mode == "seq-mean-token-sum-norm":
        length = info.get("loss_scale_factor") or response_mask.shape[-1]
    denominator = None if size is None else size / dp * (length or 1)
    return {"agg": loss_agg_mode, "weights": seq_mask, "norm_length": length, "denominator": denominator}


def grae_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    *,
    ratio_level: str | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl ``PolicyLossFn``: :func:`grae.loss.policy_loss` with verl's clip settings and normalisers."""
    if config is None:
        raise ValueError("grae_ppo: verl passes the actor config as config=; got None")
    loss_cfg = _get(config, "policy_loss", None)
    level = ratio_level or _get(loss_cfg, "ratio_level", "token")
    clip_ratio = _get(config, "clip_ratio", 0.2)
    low = _get(config, "clip_ratio_low", clip_ratio)
    high = _get(config, "clip_ratio_high", clip_ratio)
    dual = _get(config, "clip_ratio_c", 3.0) if _get(loss_cfg, "dual_clip", True) else None
    info = dict(_get(config, "global_batch_info", {}) or {})
    mask = response_mask.to(torch.bool)
    loss, m = policy_loss(
        log_prob,
        old_log_prob,
        advantages,
        mask,
        token_weights=rollout_is_weights,
        clip_low=low,
        clip_high=high,
        dual_clip=dual,
        ratio_level=level,
        **verl_aggregation(loss_agg_mode, mask, info),
    )
    metrics = {
        "actor/pg_clipfrac": m["clipfrac"].item(),
        "actor/ppo_kl": m["approx_kl"].item(),
        "actor/pg_clipfrac_lower": m["dual_clipfrac"].item(),
        "actor/grae/clipfrac_low": m["clipfrac_low"].item(),
        "actor/grae/clipfrac_high": m["clipfrac_high"].item(),
        "actor/grae/ratio_mean": m["ratio_mean"].item(),
    }
    return loss, metrics


def grae_gspo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="seq-mean-token-mean",
                   config=None, rollout_is_weights=None):
    """``grae_ppo`` with the sequence-level ratio (GSPO-token) and optional dual clip."""
    return grae_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                            rollout_is_weights, ratio_level="sequence")


#: verl name → function (registered by grae.engines.verl.plugin).
LOSSES = {"grae_ppo": grae_policy_loss, "grae_gspo": grae_gspo_loss}
for _name, _fn in LOSSES.items():
    _fn.__grae__ = _name
