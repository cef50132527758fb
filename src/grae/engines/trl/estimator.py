"""GraeTrainer's estimator room: which estimator runs, and what it is given.

Resolution (a registry name or an estimator object; TRL's ``scale_rewards`` and
``multi_objective_aggregation`` mapped onto the estimator's ``scale`` or refused), the gathered rewards
of a scored batch, the context an estimator requires (sequence log-probs of the rollout policy, prompt
keys, parsed-answer ids; :data:`TRL_CONTEXT`), and the estimator's advantages and weights written into
TRL's batch (:meth:`EstimatorContext._with_advantages`). Everything the estimator sees is gathered from
every process, so its result is identical on every rank (the multi-process rule in
:mod:`grae.engines.trl`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

import torch
from trl.trainer.utils import nanstd, pad

from grae.advantage import EstimatorLike, get_estimator
from grae.engines.rollout_logps import RolloutLogprobRecorder, logit_modifiers, recording_generate, vllm_logprob_modifiers

logger = logging.getLogger("grae.engines.trl")

#: GRPOTrainer's default std ε (hard-coded in ``_generate_and_score_completions``); grae's ``grpo``
#: estimator gets it inside GraeTrainer unless ``estimator_params`` sets ``eps``.
TRL_STD_EPS = 1e-4
#: TRL's default ``scale_rewards``; any other value must mean something for the estimator.
TRL_DEFAULT_SCALE = "group"

def trl_default_params(estimator: str | EstimatorLike, params: dict[str, Any] | None) -> dict[str, Any] | None:
    """``params`` with TRL's std ε for the ``grpo`` estimator named without an explicit ``eps``: inside
    GraeTrainer, ``estimator="grpo"`` reproduces stock GRPOTrainer (ε = 1e-4, not verl's 1e-6)."""
    if estimator == "grpo" and "eps" not in (params or {}):
        return {**(params or {}), "eps": TRL_STD_EPS}
    return params


def scale_from_trl(params: dict[str, Any], given: dict[str, Any], trl_scale: str, aggregation: str) -> dict[str, Any]:
    """``{"scale": …}`` that TRL's ``scale_rewards`` (``"batch"`` under ``normalize_then_sum``) gives an
    estimator with a ``scale`` parameter whose ``scale`` the user left unset (``params``: its parameters;
    ``given``: the ones the user set), as GraeTrainer maps them for a named estimator; ``{}`` otherwise.
    For callers that build the estimator object themselves (``grae train``: a reward correction wraps it)."""
    if "scale" not in params or "scale" in given:
        return {}
    scale = "batch" if aggregation == "normalize_then_sum" else trl_scale
    return {"scale": scale} if scale != TRL_DEFAULT_SCALE or aggregation == "normalize_then_sum" else {}


def scale_rewards_problem(name: str, params: dict[str, Any], trl_scale: str, *, explicit: bool) -> str | None:
    """Why TRL's ``scale_rewards`` cannot become estimator ``name``'s ``scale`` (``params``: its
    parameters; ``explicit``: the user set ``scale`` itself), or None. Checked by ``grae train`` before
    the model loads and by GraeTrainer when it is built."""
    if "scale" not in params:
        if trl_scale != TRL_DEFAULT_SCALE:
            return (f"scale_rewards={trl_scale!r}: estimator {name!r} has no reward-scaling option (its advantage "
                    "is fixed by its paper's equation); leave scale_rewards at 'group' or use an estimator with a "
                    "`scale` parameter (grpo, agrae, positive_dominant, negative_dominant, hard_focused, easy_focused).")
        return None
    if explicit and trl_scale not in (params["scale"], TRL_DEFAULT_SCALE):
        return (f"scale_rewards={trl_scale!r} contradicts the estimator's scale={params['scale']!r}; "
                "set one of them (scale_rewards is the estimator's `scale`).")
    return None


#: Estimator context GraeTrainer always supplies (grae.advantage.CONTEXT_FIELDS). The sequence
#: log-probs come from the rollout policy (log_softmax(logits / T), no top-k/top-p truncation): vLLM's
#: sampling log-probs, else TRL's old_per_token_logps when TRL computes them, else recorded during
#: ``model.generate`` (:mod:`grae.engines.rollout_logps`), else one no-grad forward pass of the
#: generating model (see :meth:`GraeTrainer._logprob_context`; only for estimators that require them).
#: ``prompt_key`` is :func:`stable_key` of the prompt text. ``answer_id`` needs a parser of final answers
#: (``answer_fn``, or the ``parse_answer`` of a grae task's reward function): see :data:`ANSWER_CONTEXT`.
TRL_CONTEXT = frozenset({"logprob_sum", "logprob_mean", "prompt_key"})
#: supplied besides TRL_CONTEXT when GraeTrainer has an answer parser
ANSWER_CONTEXT = frozenset({"answer_id"})
_LOGPROB_FIELDS = frozenset({"logprob_sum", "logprob_mean"})


def stable_key(value: Any) -> int:
    """A 63-bit integer key of ``value`` (a prompt, a parsed answer) that is the same in every process and
    every run: SHA-1 of its text (JSON with sorted keys for a conversational prompt), not Python's salted
    ``hash``."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha1(text.encode("utf-8")).digest()[:8], "big") >> 1


def answer_ids(completions: list[Any], answer_fn: Any) -> list[int]:
    """``answer_fn``'s canonical parsed answer of each completion as :func:`stable_key`, −1 when it is None."""
    from grae.rewards import completion_text

    ids = []
    for completion in completions:
        answer = answer_fn(completion_text(completion))
        ids.append(-1 if answer is None else stable_key(str(answer)))
    return ids


def find_answer_fn(reward_funcs: Any) -> Any:
    """The ``parse_answer`` of the first grae task behind ``reward_funcs`` (a :class:`~grae.rewards.TaskReward`,
    possibly wrapped by ``safe_reward``), else None."""
    funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    for func in funcs:
        func = getattr(func, "fn", func)  # SafeReward wraps the function as .fn
        task = getattr(func, "task", None)
        if task is not None and callable(getattr(task, "parse_answer", None)):
            return task.parse_answer
    return None


def resolve_estimator(estimator: str | EstimatorLike, params: dict[str, Any] | None) -> EstimatorLike:
    """A registry name plus params, or a ready estimator object (params must then be empty)."""
    if isinstance(estimator, str):
        return get_estimator(estimator, **(params or {}))
    if params:
        raise ValueError("estimator_params: only valid with an estimator name; got an estimator object and params")
    if not isinstance(estimator, EstimatorLike):
        raise TypeError(f"estimator: expected a registry name or a grae estimator, got {type(estimator).__name__}")
    return estimator


class EstimatorContext:
    """GraeTrainer's estimator pieces (a mixin of :class:`~grae.engines.trl.GraeTrainer`; every attribute it
    reads is the trainer's)."""

    def _map_normalize_then_sum(self, name: str, params: dict[str, Any]) -> None:
        """TRL's ``normalize_then_sum`` (GDPO): each reward function z-scored per group, weighted and summed
        (:meth:`_gathered_rewards`); the sum is standardised over the batch. A GRPO-family estimator does the
        second step with ``scale="batch"`` (its group mean of a sum of group z-scores is 0), so
        ``estimator="grpo"`` gives TRL's advantages; an estimator without ``scale`` reads rewards as
        scores and is refused."""
        if "scale" not in params:
            raise ValueError(
                f"multi_objective_aggregation='normalize_then_sum': estimator {name!r} reads rewards as scores, but "
                "normalize_then_sum hands it per-function z-scores; use 'sum_then_normalize' or a GRPO-family "
                "estimator (grpo, agrae, positive_dominant, negative_dominant, hard_focused, easy_focused)."
            )
        if not self._explicit_scale and params["scale"] != "batch":
            logger.info("multi_objective_aggregation='normalize_then_sum' → estimator %s(scale='batch')", name)
            self.estimator = get_estimator(name, **{**params, "scale": "batch"})

    def _map_scale_rewards(self) -> None:
        """TRL's ``scale_rewards`` becomes the estimator's ``scale``, or is refused (module docstring)."""
        trl_scale, params = self.scale_rewards, dict(getattr(self.estimator, "params", {}))
        name = getattr(self.estimator, "name", type(self.estimator).__name__)
        if self.multi_objective_aggregation == "normalize_then_sum":
            self._map_normalize_then_sum(name, params)
            return
        why = scale_rewards_problem(name, params, trl_scale, explicit=self._explicit_scale)
        if why:
            raise ValueError(why)
        if "scale" not in params or trl_scale == params["scale"] or trl_scale == TRL_DEFAULT_SCALE:
            return  # agree, or TRL's untouched default defers to the estimator
        logger.info("scale_rewards=%r → estimator %s(scale=%r)", trl_scale, name, trl_scale)
        self.estimator = get_estimator(name, **{**params, "scale": trl_scale})

    def _is_trl_algorithm(self) -> bool:
        """Whether the estimator is TRL's own advantage: grae's ``grpo`` with TRL's ε (1e-4), Bessel std and the
        scale TRL uses (``scale_rewards``; ``"batch"`` under ``normalize_then_sum``). Then, outside dynamic
        sampling, the advantages that train are TRL's own float32 tensor and a sample whose reward is missing
        keeps its tokens with advantage 0, so GraeTrainer logs what stock GRPOTrainer logs (docs/scaling.md
        "TRL parity"). grae's float64 estimate of the same quantity differs in the last float32 bits, which
        Adam amplifies where a gradient coordinate is near 0."""
        from grae.advantage.grpo import GRPO

        if type(self.estimator) is not GRPO:
            return False
        scale = "batch" if self.multi_objective_aggregation == "normalize_then_sum" else self.scale_rewards
        return self.estimator.params == {"eps": TRL_STD_EPS, "std_unbiased": True, "scale": scale}

    # -- rewards and context of a scored batch -------------------------------------------------------
    def _keep_rewards(self, rewards_per_func: torch.Tensor, prompts: list[Any], completions: list[Any]) -> None:
        """Keep what TRL's ``_calculate_rewards`` gathered (``[N_global, F]``) and this rank's prompt keys and
        answer ids where the estimator requires them (gathered in :meth:`_estimator_context`)."""
        self._last_rewards_per_func = rewards_per_func  # [N_global, F], gathered across processes
        requires: frozenset[str] = getattr(self.estimator, "requires", frozenset())
        if "prompt_key" in requires:  # this rank's rows; gathered in _estimator_context
            self._local_keys["prompt_key"] = torch.tensor([stable_key(p) for p in prompts], dtype=torch.long)
        if "answer_id" in requires:
            self._local_keys["answer_id"] = torch.tensor(answer_ids(completions, self.answer_fn), dtype=torch.long)

    def _gathered_rewards(self, group_size: int) -> torch.Tensor:
        """``[N_global]`` reward of the last scored batch, the weighted sum over reward functions; NaN where
        every function was missing. Under ``multi_objective_aggregation="normalize_then_sum"`` each
        function's rewards are first standardised per group with TRL's Bessel std and ε = 1e-4."""
        rewards_per_func = self._last_rewards_per_func  # [N_global, F]
        if self.multi_objective_aggregation == "normalize_then_sum":
            grouped = rewards_per_func.view(-1, group_size, rewards_per_func.size(1))  # [M, G, F]
            mean = torch.nanmean(grouped, dim=1, keepdim=True)
            std = nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
            rewards_per_func = ((grouped - mean) / (std + TRL_STD_EPS)).view_as(rewards_per_func)
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(self._last_rewards_per_func).all(dim=1)] = torch.nan  # unscorable: missing, not 0
        return rewards.float().cpu()

    def _score_with_estimator(self, out: dict, mode: str) -> dict:
        """TRL's scored batch ``out`` (one generation, not dynamic sampling) with the estimator's advantages
        on the gathered batch; evaluation batches use a throw-away copy of the estimator's state."""
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._gathered_rewards(group_size)
        group_ids = torch.arange(rewards.numel()) // group_size  # [N_global]
        estimator = self.estimator if mode == "train" else copy.deepcopy(self.estimator)
        context = self._estimator_context(out)  # None when the estimator requires none
        kwargs = {} if context is None else {"context": context}
        result = estimator(rewards, group_ids, **kwargs)  # identical on every rank: gathered input
        if self.grae_trl_algorithm:  # config-determined: every rank gathers
            result = type(result)(self.accelerator.gather(out["advantages"]).cpu().to(result.advantages.dtype),
                                  result.weights, result.metrics)  # [N_global] TRL's own float32 advantages
        if mode == "train":
            self.grae_generated_completions += rewards.numel()
        self._replace_logged_advantages(result.advantages)
        return self._with_advantages(out, rewards, result, mode, keep_missing=self.grae_trl_algorithm)

    def _estimator_context(self, out: dict) -> dict[str, torch.Tensor] | None:
        """The gathered ``[N_global]`` context the estimator requires (see :data:`TRL_CONTEXT`), or None."""
        requires: frozenset[str] = getattr(self.estimator, "requires", frozenset())
        if not requires:
            return None
        context: dict[str, torch.Tensor] = {}
        for key in sorted(requires & {"prompt_key", "answer_id"}):  # config-determined: every rank gathers
            local = self._local_keys.pop(key).to(self.accelerator.device)  # [B]
            context[key] = self.accelerator.gather(local).cpu()  # [N_global]
        if requires & _LOGPROB_FIELDS:
            context.update(self._logprob_context(out))
        return context

    def _records_generation_logps(self, images: Any, multimodal_fields: Any) -> bool:
        """Whether this generation records the rollout log-probs (:mod:`grae.engines.rollout_logps`):
        only for an estimator that requires them, on TRL's plain ``model.generate`` path (not vLLM, not
        paged/continuous batching, no ``rollout_func``, no tools/multi-turn, no images or other
        multimodal inputs), when TRL computes no ``old_per_token_logps`` (steps aligned with generation,
        TRL's own test in ``_generate_and_score_completions``) and no logits processor of the generation
        config runs before a custom one. No collective hangs on it: a rank may record while another falls
        back (images on one rank only); the gather in :meth:`_logprob_context` is unconditional."""
        requires: frozenset[str] = getattr(self.estimator, "requires", frozenset())
        if not (requires & _LOGPROB_FIELDS) or not self.record_generation_logprobs:
            return False
        if self.use_vllm or self.use_transformers_continuous_batching or self.rollout_func is not None or self.tools:
            return False
        if images is not None or multimodal_fields:
            return False
        if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations) != 0:
            return False  # TRL computes old_per_token_logps itself
        model = self.accelerator.unwrap_model(self.model_wrapped)
        return not logit_modifiers(self.generation_config, getattr(model, "generation_config", None))

    def _generate_recording_logps(self, generate: Callable[[], tuple], images: Any, multimodal_fields: Any) -> tuple:
        """TRL's ``_generate_single_turn`` (``generate``: it, bound to its arguments), unchanged, plus the
        rollout log-probs recorded during ``generate`` where :meth:`_records_generation_logps` says so. TRL
        calls ``unwrapped_model.generate(...)`` inside it, on ``accelerator.unwrap_model(model_wrapped)``;
        shadowing that one instance's ``generate`` for the duration of the call adds
        ``logits_processor=[recorder]`` without copying TRL's method or patching a TRL module. TRL's returned
        ``logprobs`` (its ``sampling_per_token_logps``, which its importance-sampling correction reads) stay
        None: the record lives on the trainer only."""
        self._generation_logps = None
        if not self._records_generation_logps(images, multimodal_fields):
            return generate()
        sink: list[torch.Tensor] = []
        with recording_generate(self.accelerator.unwrap_model(self.model_wrapped),
                                RolloutLogprobRecorder(self.temperature), sink):
            completion_ids, logprobs = generate()
        if len(sink) == 1 and sink[0].size(0) == len(completion_ids):
            # TRL's completion lists end at the first EOS (kept): the same cut masks the record
            self._generation_logps = [row[:len(ids)] for row, ids in zip(sink[0], completion_ids, strict=True)]
        return completion_ids, logprobs

    def _recorded_logps(self, out: dict) -> torch.Tensor | None:
        """``[B, T]`` the log-probs recorded during generation, padded as TRL pads ``completion_ids``; None
        when this generation recorded none (or they do not match ``out``'s rows)."""
        rows, self._generation_logps = self._generation_logps, None
        ids = out["completion_ids"]  # [B, T]
        if rows is None or len(rows) != ids.size(0):
            return None
        logps = pad(rows, padding_value=0.0, padding_side="right", pad_to_multiple_of=self.pad_to_multiple_of)
        return logps.to(ids.device) if logps.shape == ids.shape else None

    def _logprob_context(self, out: dict) -> dict[str, torch.Tensor]:
        """``logprob_sum`` / ``logprob_mean`` ``[N_global]`` under the rollout policy (see :data:`TRL_CONTEXT`):
        log_softmax(logits / T) of the generating model at each completion token, summed over TRL's
        ``completion_mask`` (up to and including the first EOS). From the first source that has them:

        1. vLLM's sampling log-probs (``sampling_per_token_logps``), only where they are that quantity: not with
           top-p / top-k / min-p / a repetition penalty / ``generation_kwargs`` (vLLM returns them after those,
           :func:`~grae.engines.rollout_logps.vllm_logprob_modifiers`);
        2. TRL's ``old_per_token_logps`` (computed when steps are not aligned with generation, and on vLLM with
           its importance-sampling correction, TRL's default);
        3. recorded during ``model.generate`` (:meth:`_generate_single_turn`): TRL's plain generate path;
        4. one no-grad forward pass of the model that generated (no update since), where the recorder does
           not apply: paged / continuous-batching generation, tools (multi-turn), ``rollout_func``,
           multimodal prompts, generation configs with a logits processor ahead of custom ones
           (``repetition_penalty`` ≠ 1, ...), or ``record_generation_logprobs = False``.
           Image inputs have no fallback yet and are refused.
        """
        logps = out.get("sampling_per_token_logps")  # [B, T] vLLM's processed log-probs
        if logps is not None and vllm_logprob_modifiers(self.args):
            logps = None  # after truncation/penalties: not log π_T (the recorder's and the forward pass's)
        if logps is None:
            logps = out.get("old_per_token_logps")  # [B, T] TRL computed them for importance sampling
        recorded = self._recorded_logps(out)  # [B, T] or None; always consumed, so never stale
        if logps is None:
            logps = recorded
        if logps is None and "pixel_values" in out:
            raise ValueError(f"estimator: {self.estimator.name!r} needs sequence log-probs, which GraeTrainer does not "
                             "yet recompute for image inputs; use vLLM with importance sampling or an estimator without context")
        if logps is None:  # TRL has none: one no-grad pass of the model that generated (no update since)
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
            mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
            with torch.no_grad():
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, mask, out["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size)
        mask = out["completion_mask"].to(logps.dtype)  # [B, T]
        total = torch.where(mask > 0, logps, 0.0).sum(dim=1)  # [B]
        length = mask.sum(dim=1).clamp(min=1)  # [B]
        # Unconditional on every rank when the estimator requires context (the multi-process rule).
        total, length = self.accelerator.gather(total), self.accelerator.gather(length)  # [N_global]
        return {"logprob_sum": total.float().cpu(), "logprob_mean": (total / length).float().cpu()}

    def _with_advantages(self, out: dict, rewards: torch.Tensor, result, mode: str, keep_missing: bool = False) -> dict:
        """``out`` (this rank's rows of the global batch the estimator saw) with grae's advantages, weights
        and loss counts; logs the estimator's metrics. A weight-0 sample leaves the loss (its
        ``completion_mask`` zeroed, the counts without it), except, with ``keep_missing`` (TRL's own algorithm),
        a sample whose reward is missing: it keeps its tokens with advantage 0, as in stock TRL."""
        self.last_advantage_result = result
        if mode == "train" and bool(torch.isnan(rewards).all()) and self.accelerator.is_main_process:
            logger.warning("step %d: every reward of the batch is missing (%d samples); this step trains on nothing. "
                           "Check the reward functions' failure_frac and the verifier.", self.state.global_step + 1,
                           rewards.numel())
        n_local = out["prompt_ids"].size(0)
        start = self.accelerator.process_index * n_local
        local = slice(start, start + n_local)
        device = out["prompt_ids"].device
        out["advantages"] = result.advantages[local].to(device=device, dtype=torch.float32)
        weights = result.weights[local].to(device)  # [B]
        out["grae_weights"] = weights
        in_loss = result.weights > 0  # [N_global]
        if keep_missing:
            in_loss = in_loss | torch.isnan(rewards)
        out["completion_mask"] = out["completion_mask"] * in_loss[local].to(device).unsqueeze(1).to(out["completion_mask"].dtype)
        loss_mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        # Unconditional: every rank joins this gather (the multi-process rule in the module docstring).
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()  # global kept tokens
        kept = in_loss.sum().to(device=device, dtype=torch.float32)
        out["grae_num_samples"] = kept  # global kept samples
        # TRL's per-row normalisers count every row of the batch: N / N_kept makes them count kept rows only
        out["grae_row_scale"] = result.weights.numel() / kept.clamp(min=1.0)
        for key, value in result.metrics.items():
            self._metrics[mode][f"grae/{key}"].append(float(value))
        return out

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.numel())):
            logged.pop()
        logged.extend(advantages.tolist())
