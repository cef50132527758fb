"""``GraeTrainer``: TRL's ``GRPOTrainer`` with grae's advantage estimators and losses.

A drop-in subclass — same constructor arguments — plus:

* ``estimator``: a registry name (``"agrae"``) or an estimator object; ``estimator_params``: its
  keyword parameters. Default ``"grpo"``.
* ``loss_agg_mode`` / ``dual_clip``: select grae's loss (:func:`grae.loss.policy_loss`) for what
  TRL's ``loss_type`` cannot express (verl's ``seq-mean-token-sum``, dual clip, exact sample dropping
  under per-sequence aggregation). Clip ranges (``epsilon``/``epsilon_high``), the importance-sampling
  level (``importance_sampling_level="sequence"`` = GSPO), ``beta`` (k3 KL), a static
  ``entropy_coef`` and vLLM importance-sampling correction keep their TRL meaning there.
  Without them, TRL's own ``loss_type`` computes the loss (every type: ``dapo``, ``bnpo``, ``grpo``,
  ``dr_grpo``, ``cispo``, ``sapo``, ``luspo``, ``vespo``), with grae's advantages. Images and every other
  model input TRL carries (``pixel_values``, ``image_grid_thw``, ``token_type_ids``, ...) reach the
  training forward on both paths.

How it plugs in, without forking TRL (TRL has no advantage hook; the maintainers' advice on
trl#4525 is to override ``_generate_and_score_completions``):

1. ``_calculate_rewards`` is wrapped to keep the rewards TRL gathered from all processes.
2. After TRL's ``_generate_and_score_completions``, the estimator runs on the *gathered* batch
   (groups are the contiguous runs of ``num_generations`` completions TRL's sampler guarantees),
   and each process keeps its slice — the same gather → estimate → slice order TRL uses.
3. Per-sample weights: a weight-0 sample (PSR's wrong samples, DGPO's collapsed groups, a missing
   reward) gets its ``completion_mask`` zeroed, as TRL itself does for
   ``mask_truncated_completions``, and ``num_items_in_batch`` is recounted. Under TRL's token-level
   loss types (``dapo``, the default, ``bnpo``, ``cispo``, ``vespo``) the sample leaves both the loss
   and its normaliser exactly. TRL's per-row types (``grpo``, ``dr_grpo``, ``sapo``, ``luspo``) count the
   rows of a micro-batch; their loss is multiplied by N / N_kept of the generation batch, which makes
   the normaliser the kept rows (globally: the same objective as grae's ``seq-mean-*`` modes) and is
   exactly 1 when nothing is dropped.
4. TRL's logged advantages (``_logs["advantages"]``, the completions table) are replaced with
   grae's, so what is printed is what trained.
5. The estimator's state (AVSPO's τ) is written to ``grae_estimator_state.json`` in every checkpoint
   and restored on resume (the same mechanism TRL uses for its adaptive-entropy controller). A
   completion marker is written last; :func:`latest_complete_checkpoint` only returns checkpoints
   that have it, so a crash in the middle of a save never becomes the one resumed from.
6. Every step logs, through TRL's logging (``report_to``): ``grae/omega``, ``grae/acr``,
   ``grae/frac_all_correct``, ``grae/frac_all_wrong``, ``grae/adv_pos_mass``, ``grae/adv_neg_mass``,
   ``grae/adv_abs_sum_*``, ``grae/frac_dropped``, ``grae/n_missing_rewards`` and the estimator's own
   metrics (``grae/agrae/suppression``, ``grae/avspo/tau``, ...), beside TRL's ``reward``,
   ``entropy`` and ``clip_ratio/*``.

7. ``sampling`` (:class:`grae.sampling.SamplingConfig`): DAPO dynamic sampling and VADE-style prompt
   selection. The training generation step then runs in rounds — choose prompts, TRL generates and
   scores them, every process's rows are gathered, informative groups kept — and the estimator sees
   the assembled batch of kept groups (docs/sampling.md). Logs ``grae/kept_group_frac``,
   ``grae/gen_batches``, ``grae/filler_groups``, ``grae/selected_p``; the posterior is checkpointed.

8. Divergence (:mod:`grae.engines.divergence`): every step's loss and gradient norm are checked before
   the optimizer step, the rollouts' sampling distribution as it is drawn, every weight at each save;
   the first non-finite value raises :class:`~grae.engines.divergence.DivergenceError` (the step, what,
   the likely cause), and a checkpoint with non-finite weights is never written.

Estimator state updates only on training batches; evaluation batches use a throw-away copy.

Settings that would silently change meaning are mapped or refused at construction:

* ``scale_rewards`` (TRL's std scaling) *is* the estimator's ``scale`` parameter for estimators that
  have one (``grpo``, ``agrae``, the dominant/focused variants): ``scale_rewards="none"`` trains
  unscaled GRPO. An estimator without a ``scale`` parameter refuses any value but TRL's default
  ``"group"``, as does an explicit ``estimator_params["scale"]`` that contradicts it. TRL's clip
  ``epsilon``/``epsilon_high`` keep their meaning on both loss paths. The estimator's std ε (``eps``)
  replaces TRL's hard-coded 1e-4; ``estimator="grpo"`` without an explicit ``eps`` gets TRL's 1e-4
  inside GraeTrainer (verl's and the registry's default is 1e-6), so it reproduces stock
  GRPOTrainer's logs (``tests/test_trl_parity.py``).
* ``multi_objective_aggregation="normalize_then_sum"`` (GDPO): every reward function is z-scored per
  group (TRL's ε) and the weighted sum is what the estimator sees; a GRPO-family estimator then
  standardises over the batch (``scale="batch"`` unless set explicitly), TRL's second step. Estimators
  without ``scale`` read rewards as scores and are refused, as is dynamic sampling with it.
* On grae's loss path the KL term (β) and the policy term share one normaliser: the generation
  batch's global token count (``token-mean``) or kept-sample count (``seq-mean-*``), divided by the
  number of processes and rescaled to one accumulation window — TRL's ``dapo`` rule. It logs TRL's
  loss metrics under TRL's keys and reductions (``clip_ratio/low_mean``, ``…/high_mean``,
  ``…/region_mean``, ``…/low_min``, ``…/high_max``, ``entropy``, ``kl``; ``policy_loss`` and
  ``entropy_coef`` when an entropy bonus is on, as TRL).

Multi-process rule. Every collective (``gather``, ``reduce``, ``wait_for_everyone``, ...) in this
module is reached unconditionally, or under a condition computed from data that is identical on every
rank: the gathered batch (rewards, the estimator's result on it) or a config value. A branch on a
rank's *local* slice that contains a collective deadlocks the ranks that skip it. For the same reason
a reward function's total failure is decided on the gathered batch (see :meth:`_calculate_rewards`),
never on one rank. ``tests/test_distributed.py`` runs every estimator on 2 processes whose ranks
disagree, and proves 1-process and 2-process runs give the same advantages, weights and loss.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import json
import logging
import math
import os
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanmax, nanmin, nanstd, pad

from grae.advantage import EstimatorLike, check_context_supported, get_estimator
from grae.engines import STATE_FILE
from grae.engines.divergence import DivergenceError, describe, is_non_finite_sampling, likely_cause, non_finite_count
from grae.engines.rollout_logps import RolloutLogprobRecorder, logit_modifiers, recording_generate, vllm_logprob_modifiers
from grae.engines.rows import LEFT_PADDED, concat_rows, pad_value, per_row_tensors, take_rows, trim_padding
from grae.io import atomic_write_json
from grae.loss import AGG_MODES, agg_loss, kl_penalty, policy_loss
from grae.sampling import GROUP_KINDS, PromptPosterior, PromptStream, SamplingConfig, group_kinds, informative_groups
from grae.weights import checkpoint_damage

logger = logging.getLogger(__name__)

#: dynamic sampling / prompt selection state in a checkpoint: the VADE posterior, the uniform stream, the budget
SAMPLING_STATE_FILE = "grae_sampling_state.json"
#: written last into a checkpoint folder: a folder without it was cut off mid-write and is never resumed
COMPLETE_MARKER = "grae_checkpoint_complete"
#: TRL loss types that normalise per micro-batch by the number of rows (dropped samples included): on
#: TRL's own loss they are rescaled by N / N_kept (:meth:`GraeTrainer._compute_loss`).
ROW_NORMALISED_LOSS_TYPES = ("grpo", "dr_grpo", "sapo", "luspo")
#: GRPOTrainer's default std ε (hard-coded in ``_generate_and_score_completions``); grae's ``grpo``
#: estimator gets it inside GraeTrainer unless ``estimator_params`` sets ``eps``.
TRL_STD_EPS = 1e-4
#: the arguments of ``_get_per_token_logps_and_entropies`` that are model inputs beside the token ids
#: (images, their grids and sizes, token types, ...), read from TRL's own signature so that a model
#: input TRL adds later reaches grae's loss too (:func:`model_input_kwargs`).
_LOGPS_CONTROL_ARGS = ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                       "compute_entropy", "compute_aux_loss")
MODEL_INPUT_KEYS = tuple(name for name in inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
                         if name not in _LOGPS_CONTROL_ARGS)
#: TRL's default ``scale_rewards``; any other value must mean something for the estimator.
TRL_DEFAULT_SCALE = "group"


def model_input_kwargs(inputs: dict[str, Any]) -> dict[str, Any]:
    """The multimodal model inputs of a TRL batch, as ``GRPOTrainer._compute_loss`` passes them to
    ``_get_per_token_logps_and_entropies`` (``pixel_values``, ``image_grid_thw``, ``num_images``,
    ``pixel_attention_mask``, ``image_sizes``, ``token_type_ids``, ...): every key of
    :data:`MODEL_INPUT_KEYS`, ``None`` where the batch has none (text-only)."""
    return {key: inputs.get(key) for key in MODEL_INPUT_KEYS}


def trl_default_params(estimator: str | EstimatorLike, params: dict[str, Any] | None) -> dict[str, Any] | None:
    """``params`` with TRL's std ε for the ``grpo`` estimator named without an explicit ``eps``: inside
    GraeTrainer, ``estimator="grpo"`` reproduces stock GRPOTrainer (ε = 1e-4, not verl's 1e-6)."""
    if estimator == "grpo" and "eps" not in (params or {}):
        return {**(params or {}), "eps": TRL_STD_EPS}
    return params


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


class GraeTrainer(GRPOTrainer):
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
            of a batch stops the run with :class:`grae.rewards.RewardFunctionError` naming it.
        reward_fallback, reward_timeout: see ``contain_reward_faults``.
        answer_fn: completion text → the verifier's canonical parsed answer (None: unparsable), for estimators
            that need ``answer_id`` (``outcome_explore``); default: the ``parse_answer`` of a grae task's reward.
        cov_loss: Clip-Cov / KL-Cov (Cui et al. 2025, :func:`grae.loss.cov_loss`): ``{"mode": "clip_cov" |
            "kl_cov", "ratio": 2e-4, "lb": 1.0, "ub": 5.0, "kl_coef": 0.1}``; implies grae's loss (token-mean
            unless ``loss_agg_mode`` says otherwise). Logs ``grae/cov_frac``.
        sampling: :class:`grae.sampling.SamplingConfig` (or a dict of its fields): DAPO dynamic
            sampling (``dynamic=True``) and VADE-style prompt selection (``selection="vade"``).
            Default: TRL's own sampler, unchanged.
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
        **kwargs: Any,
    ):
        self.estimator = resolve_estimator(estimator, trl_default_params(estimator, estimator_params))
        reward_funcs = kwargs.get("reward_funcs", args[1] if len(args) >= 2 else None)
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
            args, kwargs = _wrap_reward_funcs(args, kwargs, fallback=reward_fallback, timeout=reward_timeout)
        if loss_agg_mode is not None and loss_agg_mode not in AGG_MODES:
            raise ValueError(f"loss_agg_mode: unknown {loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")
        if dual_clip is not None and dual_clip <= 1:
            raise ValueError(f"dual_clip: must be > 1 (verl default 3.0), got {dual_clip}")
        self.grae_cov_loss = _cov_loss_config(cov_loss)
        self.grae_loss_agg_mode = loss_agg_mode or ("token-mean" if dual_clip is not None or cov_loss else None)
        self.grae_dual_clip = dual_clip
        super().__init__(*args, **kwargs)
        self._check_compatible()
        self._map_scale_rewards()
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

    def _check_sampling(self) -> tuple[PromptPosterior | None, PromptStream | None]:
        """Refuse what dynamic sampling / selection cannot do; build their state."""
        cfg = self.sampling
        if not cfg.active:
            return None, None
        if self.multi_objective_aggregation == "normalize_then_sum":
            raise ValueError("multi_objective_aggregation='normalize_then_sum': dynamic sampling and prompt selection "
                             "read raw rewards (success_threshold); use 'sum_then_normalize' with sampling")
        if getattr(self.estimator, "requires", None):
            raise ValueError(f"sampling: dynamic sampling and prompt selection do not supply estimator context yet; "
                             f"estimator {self.estimator.name!r} requires {', '.join(sorted(self.estimator.requires))}")
        dataset = self.train_dataset
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError("sampling: dynamic sampling and prompt selection draw prompts by index; "
                             "train_dataset must be a map-style dataset (not an IterableDataset)")
        columns = set(getattr(dataset, "column_names", None) or [])
        if columns & {"image", "images"}:
            raise ValueError("sampling: dynamic sampling and prompt selection do not support image datasets yet")
        if cfg.dynamic and self.num_generations < 2:
            raise ValueError("sampling.dynamic: needs num_generations >= 2 (a group of one has no reward variance)")
        num_groups = self.args.generation_batch_size // self.num_generations
        if num_groups > len(dataset):
            raise ValueError(f"sampling: a generation batch takes {num_groups} prompts, the dataset has {len(dataset)}")
        posterior = PromptPosterior(len(dataset), cfg.prior_alpha, cfg.prior_beta, cfg.decay) \
            if cfg.selection == "vade" else None
        stream = PromptStream(len(dataset), seed=self.args.seed + 1) if cfg.dynamic and posterior is None else None
        return posterior, stream

    @property
    def _pad_id(self) -> int:
        pad = getattr(self._tokenizer, "pad_token_id", None)
        return 0 if pad is None else int(pad)

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

    # -- advantages ---------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        with _held_records(logging.getLogger(GRPOTrainer.__module__), "All reward functions returned None") as held:
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # [N_global, F], gathered across processes
        requires: frozenset[str] = getattr(self.estimator, "requires", frozenset())
        if "prompt_key" in requires:  # this rank's rows; gathered in _estimator_context
            self._local_keys["prompt_key"] = torch.tensor([stable_key(p) for p in prompts], dtype=torch.long)
        if "answer_id" in requires:
            self._local_keys["answer_id"] = torch.tensor(answer_ids(completions, self.answer_fn), dtype=torch.long)
        self._stop_on_total_reward_failure()  # its one line comes first: TRL's warning only when training goes on
        for record in held:
            logging.getLogger(record.name).handle(record)
        return rewards_per_func

    def _stop_on_total_reward_failure(self) -> None:
        """Stop every rank when a contained reward function failed on every sample of the *global* batch.

        The wrappers never raise on their own (``raise_on_total_failure=False``): a rank whose slice
        all failed while another's worked would stop alone and leave the others in the next collective.
        """
        from grae.rewards.safe import SafeReward

        contained = [f for f in self.reward_funcs if isinstance(f, SafeReward)]  # config: same on every rank
        if not contained:
            return
        local = torch.tensor([f.last_call[:2] for f in contained], dtype=torch.long, device=self.accelerator.device)
        totals = self.accelerator.reduce(local, reduction="sum")  # [F, 2] (samples, failures), every rank
        for func, (n, failures) in zip(contained, totals.tolist()):
            if n and failures == n:
                _, _, timeouts, first = func.last_call
                func._raise_all_failed(n, first, timeouts)

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

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        if mode == "train" and self.sampling.active:
            return self._sample_training_batch(inputs)
        out = super()._generate_and_score_completions(inputs)
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._gathered_rewards(group_size)
        group_ids = torch.arange(rewards.numel()) // group_size  # [N_global]
        estimator = self.estimator if mode == "train" else copy.deepcopy(self.estimator)
        context = self._estimator_context(out)  # None when the estimator requires none
        kwargs = {} if context is None else {"context": context}
        result = estimator(rewards, group_ids, **kwargs)  # identical on every rank: gathered input
        if mode == "train":
            self.grae_generated_completions += rewards.numel()
        self._replace_logged_advantages(result.advantages)
        return self._with_advantages(out, rewards, result, mode)

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

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's, unchanged, plus the rollout log-probs recorded during ``generate`` where
        :meth:`_records_generation_logps` says so. The hook: TRL calls ``unwrapped_model.generate(...)``
        inside this method, on ``accelerator.unwrap_model(model_wrapped)``; shadowing that one instance's
        ``generate`` for the duration of super()'s call adds ``logits_processor=[recorder]`` without copying
        TRL's method or patching a TRL module. TRL's returned ``logprobs`` (its ``sampling_per_token_logps``,
        which its importance-sampling correction reads) stay None: the record lives on the trainer only."""
        self._generation_logps = None
        if not self._records_generation_logps(images, multimodal_fields):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        sink: list[torch.Tensor] = []
        with recording_generate(self.accelerator.unwrap_model(self.model_wrapped),
                                RolloutLogprobRecorder(self.temperature), sink):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                     num_generations, has_tool_images)
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

    def _with_advantages(self, out: dict, rewards: torch.Tensor, result, mode: str) -> dict:
        """``out`` (this rank's rows of the global batch the estimator saw) with grae's advantages, weights
        and loss counts; logs the estimator's metrics."""
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
        out["completion_mask"] = out["completion_mask"] * (weights > 0).unsqueeze(1).to(out["completion_mask"].dtype)
        loss_mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        # Unconditional: every rank joins this gather (the multi-process rule in the module docstring).
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()  # global kept tokens
        kept = (result.weights > 0).sum().to(device=device, dtype=torch.float32)
        out["grae_num_samples"] = kept  # global kept samples
        # TRL's per-row normalisers count every row of the batch: N / N_kept makes them count kept rows only
        out["grae_row_scale"] = result.weights.numel() / kept.clamp(min=1.0)
        for key, value in result.metrics.items():
            self._metrics[mode][f"grae/{key}"].append(float(value))
        return out

    # -- dynamic sampling and prompt selection (grae.sampling) ----------------------------------
    def _sample_training_batch(self, inputs: list[dict]) -> dict:
        """One generation batch under ``self.sampling`` (see :mod:`grae.sampling`).

        Round by round: choose prompts (VADE, or after the first round a seeded uniform stream),
        let TRL generate and score them, gather the rows of every process, keep the informative
        groups. The first round is the whole batch (B prompts); a later round asks for the shortfall
        divided by the fraction kept so far (at most B), so a step that lacks two groups generates a
        few, not B more. Stops when B groups are kept or after ``max_gen_batches`` rounds; then the
        batch is topped up with dropped groups of weight 0 (they train nothing). Every decision reads
        gathered data, so every process takes the same one.
        """
        cfg, group_size = self.sampling, self.num_generations
        n_local, world = len(inputs), self.accelerator.num_processes
        num_groups = n_local * world // group_size
        step = self.state.global_step
        rounds, round_rewards, kept, spare, records = [], [], [], [], []
        selected_p, used = [], set()
        for round_index in range(cfg.max_gen_batches if cfg.dynamic else 1):
            ask = num_groups if round_index == 0 else self._round_size(num_groups - len(kept), len(kept), len(records))
            prompts = None
            if self._posterior is not None:
                rng = np.random.default_rng([self.args.seed, step, round_index])
                prompts = self._posterior.select(ask, step, rng, exclude=used)
                selected_p.extend(self._posterior.mean(prompts, step).tolist())
            elif round_index > 0:
                prompts = self._prompt_stream.take(ask)
            round_local = ask * group_size // world
            if prompts is not None:
                used.update(prompts)
                inputs = self._local_inputs(prompts, round_local)
            out = super()._generate_and_score_completions(inputs)
            rewards = self._gathered_rewards(group_size)  # [ask × G], every process's rows
            self.grae_generated_completions += rewards.numel()
            rows = self._gather_rows(out, round_local)
            if self._posterior is not None:
                grouped = rewards.view(ask, group_size)
                scored = ~torch.isnan(grouped)
                successes = ((grouped >= cfg.success_threshold) & scored).sum(dim=1)
                self._posterior.update(prompts, successes.numpy(), scored.sum(dim=1).numpy(), step)
            keep = informative_groups(rewards, group_size, cfg.drop, cfg.success_threshold) if cfg.dynamic \
                else torch.ones(ask, dtype=torch.bool)
            kinds = group_kinds(rewards, group_size, cfg.success_threshold)
            grouped_rewards = rewards.view(ask, group_size).tolist()  # [ask, G]
            for group in range(ask):
                (kept if keep[group] else spare).append((round_index, group))
                records.append({"round": round_index, "group": group, "prompt_index": None if prompts is None else prompts[group],
                                "kind": GROUP_KINDS[int(kinds[group])],
                                "rewards": [None if r != r else r for r in grouped_rewards[group]]})
            rounds.append(rows)
            round_rewards.append(rewards)
            if len(kept) >= num_groups:
                break
        trained, filler = kept[:num_groups], spare[:max(0, num_groups - len(kept))]
        if filler and self.accelerator.is_main_process:
            logger.warning("step %d: %d of %d groups informative after %d generation rounds (sampling.max_gen_batches); "
                           "training on those, the other %d have weight 0", step + 1, len(trained), num_groups,
                           len(rounds), len(filler))
        return self._assemble(rounds, round_rewards, trained, filler, records, n_local, selected_p)

    def _round_size(self, shortfall: int, kept: int, generated: int) -> int:
        """Prompts for the next round: ``shortfall`` over the fraction kept so far (all if none was kept),
        at most a full batch, rounded up so that every process gets whole rows (TRL's layout)."""
        full = self.args.generation_batch_size // self.num_generations
        ask = full if kept == 0 else min(full, math.ceil(shortfall * generated / kept))
        unit = self.accelerator.num_processes // math.gcd(self.num_generations, self.accelerator.num_processes)
        return min(full, math.ceil(ask / unit) * unit)

    def _assemble(self, rounds, round_rewards, trained, filler, records, n_local, selected_p) -> dict:
        group_size = self.num_generations
        offsets = [0]
        for rewards in round_rewards[:-1]:
            offsets.append(offsets[-1] + rewards.numel())

        def row_index(groups):  # rows of (round, group) pairs in the concatenation of all rounds
            return torch.tensor([offsets[r] + g * group_size + i for r, g in groups for i in range(group_size)],
                                dtype=torch.long)

        every_row = concat_rows(rounds, self._pad_id)
        all_rewards = torch.cat(round_rewards)  # [rounds × N_global]
        kept_rows, filler_rows = row_index(trained), row_index(filler)
        kept_rewards = all_rewards[kept_rows]
        result = self.estimator(kept_rewards, torch.arange(kept_rewards.numel()) // group_size)
        n_filler = filler_rows.numel()
        result = type(result)(torch.cat([result.advantages, torch.zeros(n_filler, dtype=result.advantages.dtype)]),
                              torch.cat([result.weights, torch.zeros(n_filler, dtype=result.weights.dtype)]),
                              dict(result.metrics))
        batch_rows = torch.cat([kept_rows, filler_rows])  # [N_global]
        batch = trim_padding(take_rows(every_row, batch_rows))
        start = self.accelerator.process_index * n_local
        device = self.accelerator.device
        out = {key: value[start:start + n_local].to(device) for key, value in batch.items()}

        logged = torch.zeros(all_rewards.numel())  # what trained, per generated row (0 where nothing did)
        logged[kept_rows] = result.advantages[:kept_rows.numel()].float()
        self._replace_logged_advantages(logged)
        trained_set = set(trained)
        for record in records:
            record["trained"] = (record["round"], record["group"]) in trained_set
        self.last_groups = records
        metrics = self._metrics["train"]
        metrics["grae/kept_group_frac"].append(len(trained) / len(records))
        metrics["grae/gen_batches"].append(float(len(rounds)))
        metrics["grae/filler_groups"].append(float(len(filler)))
        if selected_p:
            metrics["grae/selected_p"].append(float(np.mean(selected_p)))
        return self._with_advantages(out, torch.cat([kept_rewards, torch.full((n_filler,), torch.nan)]), result, "train")

    def _local_inputs(self, prompts: list[int], n_local: int) -> list[dict]:
        """This process's rows when the global batch is ``prompts``, each repeated G times (TRL's layout)."""
        global_rows = [index for index in prompts for _ in range(self.num_generations)]
        start = self.accelerator.process_index * n_local
        return [self.train_dataset[index] for index in global_rows[start:start + n_local]]

    def _gather_rows(self, out: dict, n_local: int) -> dict[str, torch.Tensor]:
        """Every process's rows of ``out``, in global order (the same on every process)."""
        rows = per_row_tensors(out, n_local, skip=("advantages", "num_items_in_batch"))
        gathered = {}
        for key in sorted(rows):  # same order on every process: each key is one collective
            value = rows[key]
            if value.dim() >= 2:
                value = self.accelerator.pad_across_processes(value, dim=1, pad_index=pad_value(key, self._pad_id),
                                                              pad_first=key in LEFT_PADDED)
            gathered[key] = self.accelerator.gather(value).cpu()
        return gathered

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.numel())):
            logged.pop()
        logged.extend(advantages.tolist())

    # -- loss ----------------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        """TRL's own loss for every ``loss_type`` (rescaled to kept rows for the per-row normalisers), or
        grae's :func:`~grae.loss.policy_loss` when ``loss_agg_mode``/``dual_clip`` is set.

        TRL's ``grpo``, ``dr_grpo``, ``sapo`` and ``luspo`` average over the micro-batch's B rows, so a
        dropped sample (weight 0, masked, advantage 0) would still count in B. Multiplying by N / N_kept
        (the generation batch's rows over its kept rows, the same on every rank) gives the weight-aware
        objective with the global normaliser N_kept / processes, as grae's ``seq-mean-*`` modes; with
        nothing dropped the factor is exactly 1 and the loss is stock TRL's, bit for bit. (A static
        ``entropy_coef`` bonus is rescaled with it on those batches.) Images and every other model input
        reach the forward on both paths (:func:`model_input_kwargs`).
        """
        if self.grae_loss_agg_mode is None:
            loss = super()._compute_loss(model, inputs)
            if self.loss_type in ROW_NORMALISED_LOSS_TYPES and "grae_row_scale" in inputs:
                loss = loss * inputs["grae_row_scale"]
            return loss
        return self._grae_loss(model, inputs)

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
        trained one) is non-finite, on every process (the count is summed over them)."""
        bad, total = non_finite_count((model or self.model).parameters())
        count = self.accelerator.reduce(torch.tensor([float(bad)], device=self.accelerator.device), reduction="sum")
        if count.item() > 0:
            raise self._diverged(f"{int(count.item()):,} of the model's {total:,} weights are non-finite",
                                 step=self.state.global_step)

    def _diverged(self, what: str, step: int | None = None) -> DivergenceError:
        """The error naming ``step`` (default: the step being taken), ``what`` and the likely cause from the
        learning rate and the last batch's largest |reward|."""
        rewards = self._last_rewards_per_func
        finite = rewards[torch.isfinite(rewards)] if rewards is not None else None
        scale = float(finite.abs().max()) if finite is not None and finite.numel() else None
        return DivergenceError(self.state.global_step + 1 if step is None else step, what,
                               likely_cause(self.args.learning_rate, scale))

    # -- estimator state in checkpoints -----------------------------------------------------
    def _save_checkpoint(self, model, trial):
        self.grae_check_weights(model)  # the newest checkpoint on disk stays the last finite one
        super()._save_checkpoint(model, trial)
        # Every rank reaches this (Trainer saves on all ranks): the marker is written only after every
        # rank has written its part (its RNG state), so a marked checkpoint is whole.
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            atomic_write_json(os.path.join(folder, STATE_FILE), {"estimator": getattr(self.estimator, "name", ""),
                                                                 "state": self.estimator.state_dict()})
            atomic_write_json(os.path.join(folder, SAMPLING_STATE_FILE), self._sampling_state())
            atomic_write_json(os.path.join(folder, COMPLETE_MARKER), {"step": self.state.global_step,
                                                                      "run_id": self.grae_run_id})

    def _load_optimizer_and_scheduler(self, checkpoint):
        with _cpu_map_location():
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        self._load_sampling_state(checkpoint)
        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            self.estimator.load_state_dict(saved["state"])
        elif self.estimator.state_dict():
            raise FileNotFoundError(
                f"{path}: resuming a stateful estimator ({getattr(self.estimator, 'name', '')}) from a checkpoint "
                "without its state; it was not written by GraeTrainer."
            )

    def _sampling_state(self) -> dict:
        return {"generated_completions": self.grae_generated_completions,
                "posterior": self._posterior.state_dict() if self._posterior is not None else None,
                "stream": self._prompt_stream.state_dict() if self._prompt_stream is not None else None}

    def _load_sampling_state(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, SAMPLING_STATE_FILE)
        if not os.path.exists(path):  # a checkpoint from before dynamic sampling existed
            if self._posterior is not None:
                raise FileNotFoundError(f"{path}: resuming prompt selection (sampling.selection=vade) from a checkpoint "
                                        "without its posterior")
            return
        with open(path) as f:
            saved = json.load(f)
        self.grae_generated_completions = int(saved.get("generated_completions", 0))
        if self._posterior is not None:
            if saved.get("posterior") is None:
                raise ValueError(f"{path}: the checkpoint was trained without sampling.selection=vade; resume with "
                                 "the same sampling settings")
            self._posterior.load_state_dict(saved["posterior"])
        if self._prompt_stream is not None and saved.get("stream") is not None:
            self._prompt_stream.load_state_dict(saved["stream"])


def _sampling_config(sampling: SamplingConfig | dict[str, Any] | None) -> SamplingConfig:
    if sampling is None:
        return SamplingConfig()
    if isinstance(sampling, dict):
        unknown = set(sampling) - set(SamplingConfig.__dataclass_fields__)
        if unknown:
            valid = ", ".join(SamplingConfig.__dataclass_fields__)
            raise ValueError(f"sampling: unknown fields {sorted(unknown)}; valid: {valid}")
        sampling = SamplingConfig(**sampling)
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"sampling: expected a grae.sampling.SamplingConfig or a dict, got {type(sampling).__name__}")
    sampling.check()
    return sampling


@contextlib.contextmanager
def _held_records(logger: logging.Logger, text: str):
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


@contextlib.contextmanager
def _cpu_map_location():
    """Load ``"cpu:<rank>"`` map locations as ``"cpu"``.

    transformers loads the optimizer state with ``map_location=args.device`` under data parallelism;
    on CPU (gloo) that device is ``cpu:<rank>``, which ``torch.load`` cannot restore ("don't know how to
    restore data location ... tagged with cpu:0"), so every multi-process CPU resume would fail.
    """
    original = torch.load

    def load(*args: Any, map_location: Any = None, **kwargs: Any) -> Any:
        if map_location is not None and str(map_location).startswith("cpu:"):
            map_location = "cpu"
        return original(*args, map_location=map_location, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = original


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


def _wrap_reward_funcs(args: tuple, kwargs: dict, *, fallback, timeout) -> tuple[tuple, dict]:
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
                f.raise_on_total_failure = False  # decided on the gathered batch: GraeTrainer._stop_on_total_reward_failure
        return wrapped[0] if single else wrapped

    if "reward_funcs" in kwargs:
        kwargs = {**kwargs, "reward_funcs": wrap(kwargs["reward_funcs"])}
    elif len(args) >= 2:
        args = (args[0], wrap(args[1]), *args[2:])
    return args, kwargs


def latest_complete_checkpoint(folder: str, run_id: str | None = None, on_damaged=None) -> str | None:
    """The newest ``checkpoint-N`` in ``folder`` whose save finished (has the completion marker), whose
    files are whole (:func:`checkpoint_damage`) and, when ``run_id`` is given, that this run wrote (a
    marker naming another run, or none, is foreign). ``on_damaged(checkpoint, reason)`` hears of each
    newer complete checkpoint passed over because a file of it is cut or corrupt."""
    if not os.path.isdir(folder):
        return None
    steps = []
    for name in os.listdir(folder):
        marker = os.path.join(folder, name, COMPLETE_MARKER)
        if name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit() and os.path.exists(marker):
            if run_id is None or _marker_run_id(marker) == run_id:
                steps.append(int(name[len("checkpoint-"):]))
    for step in sorted(steps, reverse=True):
        checkpoint = os.path.join(folder, f"checkpoint-{step}")
        reason = checkpoint_damage(checkpoint)
        if reason is None:
            return checkpoint
        if on_damaged is not None:
            on_damaged(checkpoint, reason)
    return None


def _marker_run_id(marker: str) -> str | None:
    try:
        with open(marker) as f:
            return json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
