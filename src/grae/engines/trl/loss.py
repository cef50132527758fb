"""GraeTrainer's loss: TRL's own ``loss_type`` with grae's advantages (rescaled to the kept rows for
TRL's per-row normalisers), or grae's :func:`~grae.loss.policy_loss` when ``loss_agg_mode`` /
``dual_clip`` / ``cov_loss`` asks for what TRL's ``loss_type`` cannot express. On grae's path TRL's loss
metrics are logged under TRL's keys and reductions.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanmax, nanmin

from grae.loss import agg_loss, kl_penalty, policy_loss

#: TRL loss types that normalise per micro-batch by the number of rows (dropped samples included): on
#: TRL's own loss they are rescaled by N / N_kept (:meth:`GraeTrainer._compute_loss`).
ROW_NORMALISED_LOSS_TYPES = ("grpo", "dr_grpo", "sapo", "luspo")
#: the arguments of ``_get_per_token_logps_and_entropies`` that are model inputs beside the token ids
#: (images, their grids and sizes, token types, ...), read from TRL's own signature so that a model
#: input TRL adds later reaches grae's loss too (:func:`model_input_kwargs`).
_LOGPS_CONTROL_ARGS = ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                       "compute_entropy", "compute_aux_loss")
MODEL_INPUT_KEYS = tuple(name for name in inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
                         if name not in _LOGPS_CONTROL_ARGS)

def model_input_kwargs(inputs: dict[str, Any]) -> dict[str, Any]:
    """The multimodal model inputs of a TRL batch, as ``GRPOTrainer._compute_loss`` passes them to
    ``_get_per_token_logps_and_entropies`` (``pixel_values``, ``image_grid_thw``, ``num_images``,
    ``pixel_attention_mask``, ``image_sizes``, ``token_type_ids``, ...): every key of
    :data:`MODEL_INPUT_KEYS`, ``None`` where the batch has none (text-only)."""
    return {key: inputs.get(key) for key in MODEL_INPUT_KEYS}


def _cov_loss_config(cov: dict[str, Any] | None) -> dict[str, Any] | None:
    """``cov_loss`` checked: ``{"mode": "clip_cov" | "kl_cov", "ratio", "lb", "ub", "kl_coef"}`` (grae.loss.cov_loss)."""
    from grae.loss import COV_DEFAULTS, COV_MODES

    if cov is None:
        return None
    if not isinstance(cov, dict) or cov.get("mode") not in COV_MODES:
        raise ValueError(f"cov_loss: expected {{mode: {' | '.join(COV_MODES)}, ratio, lb, ub, kl_coef}}, got {cov!r}")
    unknown = sorted(set(cov) - {"mode", *COV_DEFAULTS})
    if unknown:
        raise ValueError(f"cov_loss: unknown key(s) {', '.join(unknown)}; keys: mode, {', '.join(COV_DEFAULTS)}")
    for key, value in cov.items():
        if key != "mode" and (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)):
            raise ValueError(f"cov_loss.{key}: expected a finite number, got {value!r}")
    if not 0 < cov.get("ratio", COV_DEFAULTS["ratio"]) <= 1:
        raise ValueError(f"cov_loss.ratio: must be in (0, 1] (verl: 2e-4), got {cov['ratio']}")
    return dict(cov)


class GraeLoss:
    """GraeTrainer's loss pieces (a mixin of :class:`~grae.engines.trl.GraeTrainer`; every attribute it
    reads is the trainer's)."""

    def _check_compatible(self) -> None:
        args = self.args
        if self.grae_loss_agg_mode is None:
            return
        unsupported = {
            "loss_type": self.loss_type in ("cispo", "sapo", "vespo"),
            "delta": getattr(args, "delta", None) is not None,
            "top_entropy_quantile": self.top_entropy_quantile < 1.0,
            "off_policy_mask_threshold": self.off_policy_mask_threshold is not None,
            "use_adaptive_entropy": self.use_adaptive_entropy,
            "cov_loss with dual_clip": self.grae_cov_loss is not None and self.grae_dual_clip is not None,
            "cov_loss with importance_sampling_level='sequence'":
                self.grae_cov_loss is not None and self.importance_sampling_level != "token",
        }
        bad = [name for name, on in unsupported.items() if on]
        if bad:
            raise ValueError(
                f"{', '.join(bad)}: not supported together with grae's loss (loss_agg_mode/dual_clip). "
                "Either drop loss_agg_mode/dual_clip to use TRL's loss, or reset these options "
                f"(loss_type={args.loss_type!r}, top_entropy_quantile={args.top_entropy_quantile}, "
                f"off_policy_mask_threshold={args.off_policy_mask_threshold}, use_adaptive_entropy={args.use_adaptive_entropy}, "
                f"delta={getattr(args, 'delta', None)})."
            )

    def _split_dependence(self) -> list[str]:
        """What makes this loss depend on how the generation batch's rows are split into micro-batches (a
        normaliser, quantile, mean or selection over one micro-batch's own tokens); empty when the summed
        gradient is the same for every split into equal micro-batches (``rollouts.group_by_length``)."""
        trl_loss = self.grae_loss_agg_mode is None
        depends = {
            "loss_type='bnpo' (normalised by the micro-batch's tokens)": trl_loss and self.loss_type == "bnpo",
            "loss_type='vespo'": trl_loss and self.loss_type == "vespo",
            "top_entropy_quantile < 1 (the micro-batch's entropy quantile)": self.top_entropy_quantile < 1.0,
            "an entropy bonus (the micro-batch's mean entropy)": self.entropy_coef != 0.0 or self.use_adaptive_entropy,
            "cov_loss (tokens selected within the micro-batch)": self.grae_cov_loss is not None,
            "an auxiliary (MoE) loss": bool(self.aux_loss_enabled),
        }
        return [name for name, on in depends.items() if on]

    def _row_scaled(self, loss: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's loss of a micro-batch, times N / N_kept for TRL's per-row loss types (see
        :meth:`~grae.engines.trl.GraeTrainer._compute_loss`); unchanged for the token-level ones."""
        if self.loss_type in ROW_NORMALISED_LOSS_TYPES and "grae_row_scale" in inputs:
            loss = loss * inputs["grae_row_scale"]
        return loss

    def _grae_loss(self, model, inputs):
        """grae's loss (``loss_agg_mode``/``dual_clip``), logging TRL's loss metrics under TRL's keys."""
        mode = "train" if self.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # [B, T]
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **model_input_kwargs(inputs),
        )  # [B, T], [B, T]
        old_logps = inputs.get("old_per_token_logps")
        old_logps = per_token_logps.detach() if old_logps is None else old_logps
        weights = inputs.get("grae_weights")
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        normaliser = dict(weights=weights, norm_length=self.max_completion_length,
                          denominator=self._loss_denominator(inputs, mode))
        is_ratio = inputs.get("importance_sampling_ratio") if self.use_vllm and self.vllm_importance_sampling_correction else None
        loss, metrics = policy_loss(
            per_token_logps,
            old_logps,
            inputs["advantages"],
            mask,
            token_weights=is_ratio,
            clip_low=self.epsilon_low,
            clip_high=self.epsilon_high,
            dual_clip=self.grae_dual_clip,
            ratio_level=self.importance_sampling_level,
            agg=self.grae_loss_agg_mode,
            cov=self.grae_cov_loss,
            **normaliser,
        )
        if self.grae_cov_loss is not None:
            self._metrics[mode]["grae/cov_frac"].append(self.accelerator.gather(metrics["cov_frac"]).mean().item())
        if self.beta != 0.0:  # k3 as TRL (unclamped), under the policy term's normaliser
            per_token_kl = kl_penalty(per_token_logps, inputs["ref_per_token_logps"], "k3", clamp=None)  # [B, T]
            if self.args.use_bias_correction_kl:  # TRL's default: × the (differentiable) importance ratio,
                per_token_kl = per_token_kl * self._importance_ratio(per_token_logps, old_logps, mask)  # DeepSeek-V3.2
            loss = loss + self.beta * agg_loss(per_token_kl, mask, self.grae_loss_agg_mode, **normaliser)
            self._metrics[mode]["kl"].append(self._global_mean(per_token_kl, mask))
        # TRL's policy_loss: the policy + KL term as TRL's matching loss type logs it, per micro-batch before the
        # accumulation scaling for the per-row types (grpo, dr_grpo ~ seq-mean-*), after it for dapo (~ token-mean)
        policy_value = loss.detach() * (accumulation if self.grae_loss_agg_mode.startswith("seq-mean") else 1.0)
        if self.entropy_coef != 0.0:
            loss = loss - self.entropy_coef * agg_loss(entropies, mask, "token-mean") / accumulation
            # TRL logs these only when its entropy bonus is on; same keys, same reductions
            self._metrics[mode]["policy_loss"].append(self.accelerator.gather(policy_value).nanmean().item())
            if mode == "train" and self.accelerator.sync_gradients:
                self._metrics[mode]["entropy_coef"].append(self.entropy_coef)
        if self.aux_loss_enabled:  # MoE load balancing, scaled for accumulation as TRL
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        self._metrics[mode]["entropy"].append(self._global_mean(entropies, mask))
        for key, trl_name in [("clipfrac_low", "clip_ratio/low_mean"), ("clipfrac_high", "clip_ratio/high_mean"),
                              ("clipfrac", "clip_ratio/region_mean"), ("dual_clipfrac", "grae/dual_clipfrac")]:
            self._metrics[mode][trl_name].append(self.accelerator.gather(metrics[key]).mean().item())
        for key, trl_name, reduce in [("seq_clipfrac_low", "clip_ratio/low_min", nanmin),
                                      ("seq_clipfrac_high", "clip_ratio/high_max", nanmax)]:
            self._metrics[mode][trl_name].append(reduce(self.accelerator.gather(metrics[key])).item())
        return loss

    def _importance_ratio(self, logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """TRL's ``coef_1``: π_θ/π_old per token ``[B, T]``, or the length-normalised sequence ratio ``[B, 1]``."""
        log_ratio = logps - old_logps
        if self.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        return torch.exp(log_ratio)

    def _loss_denominator(self, inputs: dict[str, Any], mode: str) -> torch.Tensor:
        """Normaliser of grae's loss for one micro-batch (TRL's ``dapo`` rule, generalised).

        The generation batch's global count — kept tokens for ``token-mean``, kept samples (× L for
        ``seq-mean-token-sum-norm``) otherwise — over the number of processes, rescaled to one
        accumulation window. Summed over the window and averaged over ranks by DDP, the gradient is the
        global mean: the same on 1 process as on many.
        """
        if self.grae_loss_agg_mode == "token-mean":
            count = inputs["num_items_in_batch"]
        else:
            count = inputs["grae_num_samples"]
            if self.grae_loss_agg_mode == "seq-mean-token-sum-norm":
                count = count * self.max_completion_length
        denominator = count.clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            denominator = denominator * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        return denominator

    def _global_mean(self, x: torch.Tensor, mask: torch.Tensor) -> float:
        totals = self.accelerator.reduce(torch.stack([(x * mask).sum(), mask.sum().float()]).detach(), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()
