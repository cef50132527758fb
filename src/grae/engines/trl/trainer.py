"""``GraeTrainer``: TRL's hooks, each a short override that calls into the package's rooms.

The pieces are mixins whose methods read the trainer's attributes: :class:`.estimator.EstimatorContext`
(advantages and the estimator's context), :class:`.sampling.SamplingRounds` (dynamic sampling),
:class:`.loss.GraeLoss` and :class:`.checkpoint.CheckpointState`; reward-fault containment is
:mod:`.rewards`. What GraeTrainer does and the multi-process rule: :mod:`grae.engines.trl`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shutil
from typing import Any

import torch
from trl import GRPOTrainer

from grae.advantage import EstimatorLike, check_context_supported
from grae.engines.divergence import (
    DivergenceError,
    describe,
    is_non_finite_sampling,
    likely_cause,
    non_finite_count,
    probe_forward,
    probe_rows,
)
from grae.engines.rollouts import (
    RolloutOptions,
    decoding_generate,
    describe_generate,
    rollout_options,
    transformers_generate,
)
from grae.engines.rows import group_by_length, trim_padding
from grae.engines.trl.arguments import check_trainer_arguments
from grae.engines.trl.checkpoint import CheckpointState, cpu_map_location
from grae.engines.trl.estimator import (
    ANSWER_CONTEXT,
    TRL_CONTEXT,
    EstimatorContext,
    find_answer_fn,
    resolve_estimator,
    trl_default_params,
)
from grae.engines.trl.loss import GraeLoss, _cov_loss_config
from grae.engines.trl.prompt_forward import shared_prompt_logps
from grae.engines.trl.rewards import MissingRewardWatch, held_records, stop_on_total_reward_failure, wrap_reward_funcs
from grae.engines.trl.sampling import SamplingRounds, _sampling_config
from grae.loss import AGG_MODES
from grae.sampling import SamplingConfig
from grae.supervision.beacon import reward_call

logger = logging.getLogger(__name__)


class GraeTrainer(EstimatorContext, SamplingRounds, GraeLoss, CheckpointState, GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from a grae estimator (see the module docstring).

    Attributes:
        record_generation_logprobs: record the rollout log-probs during ``model.generate`` where it
            applies (default True); False forces the no-grad forward pass (see :meth:`_logprob_context`).

    Args:
        *args, **kwargs: exactly ``GRPOTrainer``'s.
        estimator: registry name or estimator object (default ``"grpo"``).
        estimator_params: keyword parameters for a named estimator.
        loss_agg_mode: one of :data:`grae.loss.AGG_MODES` to compute the loss with grae's
            :func:`~grae.loss.policy_loss` instead of TRL's ``loss_type``.
        dual_clip: dual-clip constant c > 1 (verl ``clip_ratio_c``); implies grae's loss
            (``loss_agg_mode`` then defaults to ``"token-mean"``).
        contain_reward_faults: wrap every callable reward function in
            :func:`grae.rewards.safe_reward`: a sample on which it raises (or overruns
            ``reward_timeout``) gets ``reward_fallback`` (default None = missing, so the estimator
            excludes it), failures are counted and logged, and a function that fails on every sample
            of a batch (of any rank's part of it) stops the run on every rank with
            :class:`grae.rewards.RewardFunctionError` naming it (and the rank).
        reward_fallback, reward_timeout: see ``contain_reward_faults``.
        answer_fn: completion text → the verifier's canonical parsed answer (None: unparsable), for estimators
            that need ``answer_id`` (``outcome_explore``); default: the ``parse_answer`` of a grae task's reward.
        cov_loss: Clip-Cov / KL-Cov (Cui et al. 2025, :func:`grae.loss.cov_loss`): ``{"mode": "clip_cov" |
            "kl_cov", "ratio": 2e-4, "lb": 1.0, "ub": 5.0, "kl_coef": 0.1}``; implies grae's loss (token-mean
            unless ``loss_agg_mode`` says otherwise). Logs ``grae/cov_frac``.
        sampling: :class:`grae.sampling.SamplingConfig` (or a dict of its fields): DAPO dynamic
            sampling (``dynamic=True``) and VADE-style prompt selection (``selection="vade"``).
            Default: TRL's own sampler, unchanged.
        rollouts: :class:`~grae.engines.rollouts.RolloutOptions` (or a dict of its fields): on TRL's plain
            ``generate`` path, rollouts decode with grae's sampling loop (the same tokens as stock TRL for the same
            seed, in float32 and bf16, top-k/top-p ties included; grouped-query decoding, top-k nucleus, shared
            prompt prefill, finished rows leaving; a ``model.generate`` that is not transformers' own is called
            instead, as stock TRL calls it), and the loss's forward computes each group's prompt once
            (``shared_prompt_pass``: float rounding differs from TRL's pass; each prompt's rows fill micro-batches
            together where the loss allows it; off with ``beta`` != 0), each loss micro-batch cut to its own
            longest completion (``trim_padding``: likewise). Default: all on but ``shared_prompt_pass``,
            ``trim_padding`` and ``group_by_length`` (``grae train`` turns them on).
        no_signal_steps: as ``grae train``'s: each logged step without learning signal (no group with a non-zero
            advantage; TRL's ``frac_reward_zero_std == 1`` where grae's advantage masses are not logged) is said at
            INFO on this module's logger, and after this many in a row one WARNING names the likely causes (reward
            format, token budget, task difficulty: :mod:`grae.engines.learning_signal`; each fix named by its GRPOConfig
            argument, the token budget only where completions were cut); 0 turns it off. A
            :class:`~grae.engines.learning_signal.NoSignalWatch` among ``callbacks`` replaces it.
        missing_reward_steps: a reward function that gave no reward (None or NaN) on any sample of this many scored
            training batches in a row (or of every batch of a shorter run) stops training with
            :class:`grae.rewards.RewardFunctionError` naming it (:class:`~grae.engines.trl.rewards.MissingRewardWatch`);
            0 never stops.
    """

    record_generation_logprobs = True

    def __init__(
        self,
        *args: Any,
        estimator: str | EstimatorLike = "grpo",
        estimator_params: dict[str, Any] | None = None,
        loss_agg_mode: str | None = None,
        dual_clip: float | None = None,
        contain_reward_faults: bool = True,
        reward_fallback: float | None = None,
        reward_timeout: float | None = None,
        sampling: SamplingConfig | dict[str, Any] | None = None,
        answer_fn: Any = None,
        cov_loss: dict[str, Any] | None = None,
        rollouts: RolloutOptions | dict[str, Any] | None = None,
        no_signal_steps: int = 3,
        missing_reward_steps: int = 5,
        **kwargs: Any,
    ):
        reward_funcs = kwargs.get("reward_funcs", args[1] if len(args) >= 2 else None)
        check_trainer_arguments(estimator_params=estimator_params, dual_clip=dual_clip,
                                contain_reward_faults=contain_reward_faults, reward_fallback=reward_fallback,
                                reward_timeout=reward_timeout, reward_funcs=reward_funcs)
        self.grae_rollouts = rollout_options(rollouts)
        #: the one-time notice that model.generate is the user's, not transformers' (it then runs as in stock TRL)
        self._told_own_generate = False
        #: (input_ids, attention_mask) of a few rows of the newest rollouts: the divergence probe's input at saves
        self._probe_rows = None
        self.estimator = resolve_estimator(estimator, trl_default_params(estimator, estimator_params))
        #: completion text -> the verifier's canonical parsed answer (None: unparsable), for ``answer_id``
        self.answer_fn = answer_fn if answer_fn is not None else find_answer_fn(reward_funcs)
        if answer_fn is not None and not callable(answer_fn):
            raise TypeError(f"answer_fn: expected a callable (completion text -> parsed answer or None), got {answer_fn!r}")
        supplied = TRL_CONTEXT | (ANSWER_CONTEXT if self.answer_fn is not None else frozenset())
        engine = "GraeTrainer (TRL)" if self.answer_fn is not None else \
            "GraeTrainer (TRL) without answer_fn (pass answer_fn= or a grae task's reward_fn)"
        check_context_supported(self.estimator, supplied, engine)
        self._local_keys: dict[str, torch.Tensor] = {}
        #: this rank's rollout log-probs recorded by the last generation, one [T_i] row per completion, or None
        self._generation_logps: list[torch.Tensor] | None = None
        self._explicit_scale = not isinstance(estimator, str) or "scale" in (estimator_params or {})
        if contain_reward_faults:
            args, kwargs = wrap_reward_funcs(args, kwargs, fallback=reward_fallback, timeout=reward_timeout)
        if loss_agg_mode is not None and loss_agg_mode not in AGG_MODES:
            raise ValueError(f"loss_agg_mode: unknown {loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")
        self.grae_cov_loss = _cov_loss_config(cov_loss)
        self.grae_loss_agg_mode = loss_agg_mode or ("token-mean" if dual_clip is not None or cov_loss else None)
        self.grae_dual_clip = dual_clip
        super().__init__(*args, **kwargs)
        self._watch_learning_signal(no_signal_steps)
        self._missing_rewards = MissingRewardWatch(missing_reward_steps, self.args.max_steps)
        self._check_compatible()
        self._map_scale_rewards()
        #: rollouts.shared_prompt_pass where it keeps the KL term exact: with beta != 0 the reference pass and the
        #: loss pass must give bitwise-equal log-probs where the weights are equal, so both stay TRL's pass
        self._shared_prompt_pass = self.grae_rollouts.shared_prompt_pass and self.beta == 0.0
        if self.grae_rollouts.shared_prompt_pass and not self._shared_prompt_pass:
            logger.warning("rollouts.shared_prompt_pass: off for this run; with beta=%g the reference and loss passes "
                           "must give bitwise-equal log-probs (the KL term), so both are TRL's pass", self.beta)
        #: the generation batch's rows regrouped into micro-batches (rollouts.group_by_length, and each prompt's
        #: rows together for the shared prompt pass) where the loss does not depend on the split
        wanted = self.grae_rollouts.group_by_length or self._shared_prompt_pass
        self._group_by_length = wanted and not self._split_dependence()
        if wanted and not self._group_by_length:
            logger.warning("rollouts.group_by_length / shared_prompt_pass: the rows keep TRL's random split into "
                           "micro-batches for this run; the loss depends on how rows are split (%s)",
                           "; ".join(self._split_dependence()))
        #: the estimator is TRL's own advantage (:meth:`_is_trl_algorithm`): TRL's tensor trains, as stock
        self.grae_trl_algorithm = self._is_trl_algorithm()
        self._last_rewards_per_func: torch.Tensor | None = None
        #: the estimator's result on the last gathered batch (identical on every rank)
        self.last_advantage_result = None
        #: written into every checkpoint's completion marker; resume then ignores other runs' checkpoints
        self.grae_run_id: str | None = None
        self.sampling = _sampling_config(sampling)
        self._posterior, self._prompt_stream = self._check_sampling()
        #: completions generated for training so far (every process, every round: the budget unit)
        self.grae_generated_completions = 0
        #: the groups of the last training generation: round, group, prompt index, kind, rewards, trained
        self.last_groups: list[dict] = []
        #: this optimizer step's micro-batch losses, checked with the gradient norm (:meth:`_get_grad_norm`)
        self._step_losses: list[torch.Tensor] = []

    def _watch_learning_signal(self, streak_steps: int) -> None:
        """Add :class:`~grae.engines.learning_signal.NoSignalWatch` (lines at INFO, the warning at WARNING on this
        module's logger) unless ``streak_steps`` is 0 or the caller's callbacks hold one (``grae train``'s)."""
        from grae.engines.learning_signal import PYTHON_KNOBS, NoSignalWatch

        if isinstance(streak_steps, bool) or not isinstance(streak_steps, int) or streak_steps < 0:
            raise ValueError(f"no_signal_steps: an integer >= 0 (0 turns the warning off), got {streak_steps!r}")
        if streak_steps and not any(isinstance(cb, NoSignalWatch) for cb in self.callback_handler.callbacks):
            self.add_callback(NoSignalWatch(logger.info, streak_steps, warn=logger.warning, knobs=PYTHON_KNOBS))

    # -- TRL's hooks ----------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's gathered rewards, kept for the estimator (:meth:`_keep_rewards`); a contained reward function
        that failed on every sample of any rank's slice stops every rank, its one line before TRL's
        "All reward functions returned None" warning (held back until then)."""
        names = ", ".join(map(str, getattr(self, "reward_func_names", []))) or "rewards"
        with held_records(logging.getLogger(GRPOTrainer.__module__), "All reward functions returned None") as held, \
                reward_call(names):  # grae train's supervisor names what runs (grae.supervision)
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._keep_rewards(rewards_per_func, prompts, completions)
        stop_on_total_reward_failure(self.reward_funcs, self.accelerator)
        if self.model.training:
            self._missing_rewards.see([str(name) for name in self.reward_func_names], rewards_per_func)
        for record in held:
            logging.getLogger(record.name).handle(record)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        """TRL's generation and scoring, then grae's advantages on the gathered batch; in rounds under
        dynamic sampling / prompt selection (:meth:`_sample_training_batch`)."""
        generate = super()._generate_and_score_completions
        mode = "train" if self.model.training else "eval"
        if mode == "train" and self.sampling.active:
            out = self._sample_training_batch(inputs, generate)
        else:
            out = self._score_with_estimator(generate(inputs), mode)
        if mode == "train":
            self._probe_rows = probe_rows(out)  # the divergence probe's input at the next save
        return out

    def _prepare_inputs(self, generation_batch):
        """TRL's; with ``rollouts.group_by_length`` or the shared prompt pass a generation batch it has just buffered
        is split again into micro-batches by completion length, each prompt's rows together for the shared pass
        (:func:`~grae.engines.rows.group_by_length`)."""
        buffered = self._buffered_inputs
        inputs = super()._prepare_inputs(generation_batch)
        if self._group_by_length and self._buffered_inputs is not buffered:  # TRL generated and buffered anew
            # each prompt's rows together only where the shared pass runs (a checkpointed forward keeps no cache)
            by_prompt = self._shared_prompt_pass and not self.args.gradient_checkpointing
            self._buffered_inputs = group_by_length(self._buffered_inputs, by_prompt=by_prompt)
            inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
        return inputs

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's, recording the rollout log-probs where they apply (:meth:`_generate_recording_logps`), its plain
        ``generate`` path on grae's sampling loop (:func:`~grae.engines.rollouts.decoding_generate`); a
        ``model.generate`` that is not transformers' own (the user's, or a test's patch) runs TRL's path unchanged,
        said once."""
        generate = functools.partial(super()._generate_single_turn, prompt_ids, images, multimodal_fields,
                                     num_generations, has_tool_images)
        plain = not (self.use_vllm or self.use_transformers_continuous_batching)
        model = self.accelerator.unwrap_model(self.model_wrapped)
        if plain and not transformers_generate(model):  # the user's generate: TRL's path, untouched
            if not self._told_own_generate:
                self._told_own_generate = True
                logger.warning("model.generate is %s, not transformers' GenerationMixin.generate: GraeTrainer's "
                               "rollouts call it as stock TRL does (no grae decoding, no log-prob recording)",
                               describe_generate(model))
            self._generation_logps = None
            return generate()
        with decoding_generate(model, self.grae_rollouts) if plain else contextlib.nullcontext():
            return self._generate_recording_logps(generate, images, multimodal_fields)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **model_inputs):
        """TRL's, with each group's prompt computed once where that applies and ``rollouts.shared_prompt_pass`` is
        on (:mod:`grae.engines.trl.prompt_forward`: the same log-probs up to float rounding, a shorter pass)."""
        trl = functools.partial(super()._get_per_token_logps_and_entropies, model, logits_to_keep=logits_to_keep,
                                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **model_inputs)
        if not self._shared_prompt_pass or compute_aux_loss or any(v is not None for v in model_inputs.values()):
            return trl(input_ids, attention_mask, batch_size=batch_size)
        size = batch_size or input_ids.size(0)  # TRL's row chunks, each shared where it can be
        unwrapped = self.accelerator.unwrap_model(model)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), size):
            ids, mask = input_ids[start:start + size], attention_mask[start:start + size]  # [b, P + T]
            part = shared_prompt_logps(model, unwrapped, ids, mask, logits_to_keep, compute_entropy=compute_entropy,
                                       autocast=self.accelerator.autocast()) or trl(ids, mask)[:2]
            logps.append(part[0])
            entropies.append(part[1])
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def _compute_loss(self, model, inputs):
        """TRL's own loss for every ``loss_type`` (rescaled to kept rows for the per-row normalisers), or
        grae's :func:`~grae.loss.policy_loss` when ``loss_agg_mode``/``dual_clip`` is set.

        TRL's ``grpo``, ``dr_grpo``, ``sapo`` and ``luspo`` average over the micro-batch's B rows, so a
        dropped sample (weight 0, masked, advantage 0) would still count in B. Multiplying by N / N_kept
        (the generation batch's rows over its kept rows, the same on every rank) gives the weight-aware
        objective with the global normaliser N_kept / processes, as grae's ``seq-mean-*`` modes; with
        nothing dropped the factor is exactly 1 and the loss is stock TRL's, bit for bit. (A static
        ``entropy_coef`` bonus is rescaled with it on those batches.) Images and every other model input
        reach the forward on both paths (:func:`~grae.engines.trl.loss.model_input_kwargs`). With
        ``rollouts.trim_padding`` the micro-batch first drops the completion columns that are padding in all of
        its rows (:func:`~grae.engines.rows.trim_padding`): masked columns, so every normaliser is unchanged.
        """
        if self.grae_rollouts.trim_padding:  # this micro-batch's own longest completion (rows that ended early)
            inputs = trim_padding(inputs, prompts=False)
        if self.grae_loss_agg_mode is None:
            return self._row_scaled(super()._compute_loss(model, inputs), inputs)
        return self._grae_loss(model, inputs)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's model card, except for a local base model (TRL's template would say "fine-tuned version of [None]")."""
        base = getattr(self.model.config, "_name_or_path", "")
        if not base or os.path.isdir(base):
            return
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)

    # -- divergence (grae.engines.divergence) ---------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's micro-step (rollouts, loss, backward); a non-finite sampling distribution stops it, its loss
        is kept for the check before the optimizer step (:meth:`_get_grad_norm`)."""
        try:
            loss = super().training_step(model, inputs, num_items_in_batch)
        except RuntimeError as err:
            if not is_non_finite_sampling(err):
                raise
            raise self._diverged("the rollouts' sampling probabilities are non-finite (the logits overflowed)") from None
        self._step_losses.append(loss.detach().float().reshape(-1)[:1])
        return loss

    def _get_grad_norm(self, model, grad_norm=None):
        """Transformers' gradient norm (before clipping), after which the optimizer steps: a non-finite loss
        of this step (on any process) or a non-finite norm stops training here, the weights untouched."""
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        losses = torch.cat(self._step_losses) if self._step_losses else torch.zeros(1)  # [micro-batches]
        self._step_losses = []
        bad = (~torch.isfinite(losses)).nonzero()
        flag = torch.tensor([float(len(bad))], device=self.accelerator.device)
        if self.accelerator.reduce(flag, reduction="sum").item() > 0:  # every process stops at the same step
            loss = float(losses[bad[0, 0]]) if len(bad) else math.nan
            raise self._diverged(f"the loss is {describe(loss) if len(bad) else 'non-finite on another process'}")
        norm = float(grad_norm) if grad_norm is not None else 0.0
        if not math.isfinite(norm):
            raise self._diverged(f"the gradient norm is {describe(norm)} (the loss was finite)")
        return grad_norm

    def grae_check_weights(self, model=None) -> None:
        """Raise :class:`~grae.engines.divergence.DivergenceError` when any weight of ``model`` (default: the
        trained one) is non-finite, or when they are all finite but a probe forward pass on a few rows of the
        newest rollouts overflows (:func:`~grae.engines.divergence.probe_forward`), on every process (counts
        summed over them)."""
        model = model or self.model
        bad, total = non_finite_count(model.parameters())
        # on every process whatever its own count says: a sharded model's forward gathers from all of them
        probe = probe_forward(self.accelerator.unwrap_model(model), self._probe_rows)
        counts = torch.tensor([float(bad), float(not probe.healthy)], device=self.accelerator.device)
        bad_weights, bad_probes = self.accelerator.reduce(counts, reduction="sum").tolist()
        if bad_weights > 0:
            raise self._diverged(f"{int(bad_weights):,} of the model's {total:,} weights are non-finite",
                                 step=self.state.global_step)
        if bad_probes > 0:
            what = probe.describe() if not probe.healthy else "the probe forward pass overflowed on another process"
            raise self._diverged(what, step=self.state.global_step)

    def _diverged(self, what: str, step: int | None = None) -> DivergenceError:
        """The error naming ``step`` (default: the step being taken), ``what`` and the likely cause from the
        learning rate and the last batch's largest |reward|."""
        rewards = self._last_rewards_per_func
        finite = rewards[torch.isfinite(rewards)] if rewards is not None else None
        scale = float(finite.abs().max()) if finite is not None and finite.numel() else None
        return DivergenceError(self.state.global_step + 1 if step is None else step, what,
                               likely_cause(self.args.learning_rate, scale))

    # -- estimator and sampling state in checkpoints (grae.engines.trl.checkpoint) ---------------
    def _save_checkpoint(self, model, trial):
        self.grae_check_weights(model)  # the newest checkpoint on disk stays the last finite one
        # transformers rotates old checkpoints away inside its save, before the completion marker below: with
        # save_total_limit 1 a kill between the two would leave no complete checkpoint. Rotate after the marker.
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        target = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
        if self.args.should_save and os.path.isdir(target):  # a stale one of this step (cut, or a retrained step):
            shutil.rmtree(target)  # never written into in place, as final/ may share its files (grae.train.disk)
        self.accelerator.wait_for_everyone()
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        # Every rank reaches this (Trainer saves on all ranks): the marker is written only after every
        # rank has written its part (its RNG state), so a marked checkpoint is whole.
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            run_dir = self._get_output_dir(trial=trial)
            self._write_grae_state(os.path.join(run_dir, f"checkpoint-{self.state.global_step}"))
            from transformers.trainer_utils import rotate_checkpoints

            rotate_checkpoints(output_dir=run_dir, save_total_limit=limit,  # by time, as transformers: the one just
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)  # written stays

    def _load_optimizer_and_scheduler(self, checkpoint):
        with cpu_map_location():
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self._load_grae_state(checkpoint)
