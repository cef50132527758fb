"""``GraeTrainer``: TRL's ``GRPOTrainer`` with grae's advantage estimators and losses.

A drop-in subclass — same constructor arguments — plus:

* ``estimator``: a registry name (``"agrae"``) or an estimator object; ``estimator_params``: its
  keyword parameters. Default ``"grpo"``.
* ``loss_agg_mode`` / ``dual_clip``: select grae's loss (:func:`grae.loss.policy_loss`) for what
  TRL's ``loss_type`` cannot express (verl's ``seq-mean-token-sum``, dual clip, exact sample dropping
  under per-sequence aggregation). Clip ranges (``epsilon``/``epsilon_high``), the importance-sampling
  level (``importance_sampling_level="sequence"`` = GSPO), ``beta`` (k3 KL), a static
  ``entropy_coef`` and vLLM importance-sampling correction keep their TRL meaning there.
  Without them, TRL's own ``loss_type`` computes the loss, unchanged.

How it plugs in, without forking TRL (TRL has no advantage hook; the maintainers' advice on
trl#4525 is to override ``_generate_and_score_completions``):

1. ``_calculate_rewards`` is wrapped to keep the rewards TRL gathered from all processes.
2. After TRL's ``_generate_and_score_completions``, the estimator runs on the *gathered* batch
   (groups are the contiguous runs of ``num_generations`` completions TRL's sampler guarantees),
   and each process keeps its slice — the same gather → estimate → slice order TRL uses.
3. Per-sample weights: a weight-0 sample (PSR's wrong samples, DGPO's collapsed groups, a missing
   reward) gets its ``completion_mask`` zeroed, as TRL itself does for
   ``mask_truncated_completions``, and ``num_items_in_batch`` is recounted. Under TRL's token-level
   loss types (``dapo``, the default, and ``bnpo``) the sample leaves both the loss and its
   normaliser exactly. TRL's per-sequence types (``grpo``, ``dr_grpo``, ``luspo``, ``sapo``) still count
   the row in the micro-batch size; use ``loss_agg_mode`` for exact dropping there.
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

Estimator state updates only on training batches; evaluation batches use a throw-away copy.

Settings that would silently change meaning are mapped or refused at construction:

* ``scale_rewards`` (TRL's std scaling) *is* the estimator's ``scale`` parameter for estimators that
  have one (``grpo``, ``agrae``, the dominant/focused variants): ``scale_rewards="none"`` trains
  unscaled GRPO. An estimator without a ``scale`` parameter refuses any value but TRL's default
  ``"group"``, as does an explicit ``estimator_params["scale"]`` that contradicts it. TRL's clip
  ``epsilon``/``epsilon_high`` keep their meaning on both loss paths; the estimator's std ε (``eps``,
  1e-6 as verl) replaces TRL's hard-coded 1e-4.
* ``loss_type="grpo"`` / ``"dr_grpo"`` normalise by the number of rows, which would count the samples
  grae drops: they are computed by grae's loss as ``seq-mean-token-mean`` /
  ``seq-mean-token-sum-norm`` (the same objective, weight-aware, with a global normaliser).
  ``"sapo"`` and ``"luspo"`` have the same flaw and no grae equivalent: refused.
* On grae's loss path the KL term (β) and the policy term share one normaliser: the generation
  batch's global token count (``token-mean``) or kept-sample count (``seq-mean-*``), divided by the
  number of processes and rescaled to one accumulation window — TRL's ``dapo`` rule.

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
import json
import logging
import os
from typing import Any

import torch
from trl import GRPOTrainer

from grae.advantage import Estimator, get_estimator
from grae.eval.records import atomic_write_json
from grae.loss import AGG_MODES, agg_loss, kl_penalty, policy_loss

logger = logging.getLogger(__name__)

STATE_FILE = "grae_estimator_state.json"
#: written last into a checkpoint folder: a folder without it was cut off mid-write and is never resumed
COMPLETE_MARKER = "grae_checkpoint_complete"
#: TRL loss types whose normaliser counts rows (dropped samples included), mapped onto grae's loss.
SEQUENCE_LOSS_TYPE_AGG = {"grpo": "seq-mean-token-mean", "dr_grpo": "seq-mean-token-sum-norm"}
#: TRL loss types whose row-count normaliser has no weight-aware grae equivalent.
UNWEIGHTED_LOSS_TYPES = ("luspo", "sapo")
#: TRL's default ``scale_rewards``; any other value must mean something for the estimator.
TRL_DEFAULT_SCALE = "group"


def resolve_estimator(estimator: str | Any, params: dict[str, Any] | None) -> Any:
    """A registry name plus params, or a ready estimator object (params must then be empty)."""
    if isinstance(estimator, str):
        return get_estimator(estimator, **(params or {}))
    if params:
        raise ValueError("estimator_params: only valid with an estimator name; got an estimator object and params")
    if not callable(estimator) or not hasattr(estimator, "state_dict"):
        raise TypeError(f"estimator: expected a registry name or a grae estimator, got {type(estimator).__name__}")
    return estimator


class GraeTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from a grae estimator (see the module docstring).

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
    """

    def __init__(
        self,
        *args: Any,
        estimator: str | Estimator = "grpo",
        estimator_params: dict[str, Any] | None = None,
        loss_agg_mode: str | None = None,
        dual_clip: float | None = None,
        contain_reward_faults: bool = True,
        reward_fallback: float | None = None,
        reward_timeout: float | None = None,
        **kwargs: Any,
    ):
        self.estimator = resolve_estimator(estimator, estimator_params)
        self._explicit_scale = not isinstance(estimator, str) or "scale" in (estimator_params or {})
        if contain_reward_faults:
            args, kwargs = _wrap_reward_funcs(args, kwargs, fallback=reward_fallback, timeout=reward_timeout)
        if loss_agg_mode is not None and loss_agg_mode not in AGG_MODES:
            raise ValueError(f"loss_agg_mode: unknown {loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")
        if dual_clip is not None and dual_clip <= 1:
            raise ValueError(f"dual_clip: must be > 1 (verl default 3.0), got {dual_clip}")
        self.grae_loss_agg_mode = loss_agg_mode or ("token-mean" if dual_clip is not None else None)
        self.grae_dual_clip = dual_clip
        super().__init__(*args, **kwargs)
        self._map_loss_type()
        self._check_compatible()
        self._map_scale_rewards()
        self._last_rewards_per_func: torch.Tensor | None = None
        #: the estimator's result on the last gathered batch (identical on every rank)
        self.last_advantage_result = None
        #: written into every checkpoint's completion marker; resume then ignores other runs' checkpoints
        self.grae_run_id: str | None = None

    def _map_scale_rewards(self) -> None:
        """TRL's ``scale_rewards`` becomes the estimator's ``scale``, or is refused (module docstring)."""
        trl_scale, params = self.scale_rewards, dict(getattr(self.estimator, "params", {}))
        name = getattr(self.estimator, "name", type(self.estimator).__name__)
        if "scale" not in params:
            if trl_scale != TRL_DEFAULT_SCALE:
                raise ValueError(
                    f"scale_rewards={trl_scale!r}: estimator {name!r} has no reward-scaling option (its advantage "
                    "is fixed by its paper's equation); leave scale_rewards at 'group' or use an estimator with a "
                    "`scale` parameter (grpo, agrae, positive_dominant, negative_dominant, hard_focused, easy_focused)."
                )
            return
        if trl_scale == params["scale"] or trl_scale == TRL_DEFAULT_SCALE:
            return  # agree, or TRL's untouched default defers to the estimator
        if self._explicit_scale:
            raise ValueError(
                f"scale_rewards={trl_scale!r} contradicts the estimator's scale={params['scale']!r}; "
                "set one of them (scale_rewards is the estimator's `scale`)."
            )
        logger.info("scale_rewards=%r → estimator %s(scale=%r)", trl_scale, name, trl_scale)
        self.estimator = get_estimator(name, **{**params, "scale": trl_scale})

    def _map_loss_type(self) -> None:
        """Per-row loss normalisers would count dropped samples: map them onto grae's loss or refuse."""
        if self.grae_loss_agg_mode is not None:
            return
        if self.loss_type in UNWEIGHTED_LOSS_TYPES:
            raise ValueError(
                f"loss_type={self.loss_type!r}: its normaliser counts every sample, including those grae drops "
                "(weight 0: missing rewards, PSR's wrong samples, DGPO's collapsed groups); use loss_type 'dapo' "
                "(default), 'bnpo', 'grpo', 'dr_grpo', 'cispo' or 'vespo', or grae's loss_agg_mode."
            )
        if self.loss_type in SEQUENCE_LOSS_TYPE_AGG:
            self.grae_loss_agg_mode = SEQUENCE_LOSS_TYPE_AGG[self.loss_type]
            logger.info("loss_type=%r → grae loss_agg_mode=%r (weight-aware, global normaliser)",
                        self.loss_type, self.grae_loss_agg_mode)

    def _check_compatible(self) -> None:
        args = self.args
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "multi_objective_aggregation: GraeTrainer feeds the weighted sum of rewards to the estimator; "
                f"{self.multi_objective_aggregation!r} normalises per function first. Use 'sum_then_normalize'."
            )
        if self.grae_loss_agg_mode is None:
            return
        unsupported = {
            "loss_type": self.loss_type in ("cispo", "sapo", "vespo"),
            "delta": getattr(args, "delta", None) is not None,
            "top_entropy_quantile": self.top_entropy_quantile < 1.0,
            "off_policy_mask_threshold": self.off_policy_mask_threshold is not None,
            "use_adaptive_entropy": self.use_adaptive_entropy,
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
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # [N_global, F], gathered across processes
        self._stop_on_total_reward_failure()
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

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval

        rewards_per_func = self._last_rewards_per_func  # [N_global, F]
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # unscorable: missing, not 0
        group_ids = torch.arange(rewards.numel(), device=rewards.device) // group_size  # [N_global]

        estimator = self.estimator if mode == "train" else copy.deepcopy(self.estimator)
        result = estimator(rewards.float().cpu(), group_ids.cpu())  # identical on every rank: gathered input
        self.last_advantage_result = result
        if mode == "train" and bool(torch.isnan(rewards).all()) and self.accelerator.is_main_process:
            logger.warning("step %d: every reward of the batch is missing (%d samples); this step trains on nothing. "
                           "Check the reward functions' failure_frac and the verifier.", self.state.global_step + 1,
                           rewards.numel())

        n_local = out["prompt_ids"].size(0)
        start = self.accelerator.process_index * n_local
        local = slice(start, start + n_local)
        device = out["advantages"].device
        out["advantages"] = result.advantages[local].to(device=device, dtype=out["advantages"].dtype)
        weights = result.weights[local].to(device)  # [B]
        out["grae_weights"] = weights
        out["completion_mask"] = out["completion_mask"] * (weights > 0).unsqueeze(1).to(out["completion_mask"].dtype)
        loss_mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        # Unconditional: every rank joins this gather (the multi-process rule in the module docstring).
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()  # global kept tokens
        out["grae_num_samples"] = (result.weights > 0).sum().to(device=device, dtype=torch.float32)  # global kept samples

        self._replace_logged_advantages(result.advantages)
        for key, value in result.metrics.items():
            self._metrics[mode][f"grae/{key}"].append(float(value))
        return out

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.numel())):
            logged.pop()
        logged.extend(advantages.tolist())

    # -- loss ----------------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        if self.grae_loss_agg_mode is None:
            return super()._compute_loss(model, inputs)
        mode = "train" if self.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # [B, T]
        per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
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
            **normaliser,
        )
        if self.beta != 0.0:  # k3 as TRL (unclamped), under the policy term's normaliser
            per_token_kl = kl_penalty(per_token_logps, inputs["ref_per_token_logps"], "k3", clamp=None)  # [B, T]
            loss = loss + self.beta * agg_loss(per_token_kl, mask, self.grae_loss_agg_mode, **normaliser)
            self._metrics[mode]["kl"].append(self._global_mean(per_token_kl, mask))
        if self.entropy_coef != 0.0:
            loss = loss - self.entropy_coef * agg_loss(entropies, mask, "token-mean") / accumulation

        self._metrics[mode]["entropy"].append(self._global_mean(entropies, mask))
        for key, trl_name in [("clipfrac_low", "clip_ratio/low_mean"), ("clipfrac_high", "clip_ratio/high_mean"),
                              ("clipfrac", "clip_ratio/region_mean"), ("dual_clipfrac", "grae/dual_clipfrac")]:
            self._metrics[mode][trl_name].append(self.accelerator.gather(metrics[key]).mean().item())
        return loss

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

    # -- estimator state in checkpoints -----------------------------------------------------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        # Every rank reaches this (Trainer saves on all ranks): the marker is written only after every
        # rank has written its part (its RNG state), so a marked checkpoint is whole.
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            atomic_write_json(os.path.join(folder, STATE_FILE), {"estimator": getattr(self.estimator, "name", ""),
                                                                 "state": self.estimator.state_dict()})
            atomic_write_json(os.path.join(folder, COMPLETE_MARKER), {"step": self.state.global_step,
                                                                      "run_id": self.grae_run_id})

    def _load_optimizer_and_scheduler(self, checkpoint):
        with _cpu_map_location():
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
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


def _wrap_reward_funcs(args: tuple, kwargs: dict, *, fallback, timeout) -> tuple[tuple, dict]:
    """Wrap the callable reward functions (GRPOTrainer's second argument) in ``safe_reward``."""
    from grae.rewards import safe_reward
    from grae.rewards.safe import AsyncSafeReward, SafeReward

    def wrap(funcs):
        single = not isinstance(funcs, (list, tuple))
        wrapped = [safe_reward(f, fallback=fallback, timeout=timeout) if callable(f) and not isinstance(f, (str, SafeReward, AsyncSafeReward))
                   and not isinstance(f, torch.nn.Module) else f for f in ([funcs] if single else funcs)]
        for f in wrapped:
            if isinstance(f, SafeReward):
                f.raise_on_total_failure = False  # decided on the gathered batch: GraeTrainer._stop_on_total_reward_failure
        return wrapped[0] if single else wrapped

    if "reward_funcs" in kwargs:
        kwargs = {**kwargs, "reward_funcs": wrap(kwargs["reward_funcs"])}
    elif len(args) >= 2:
        args = (args[0], wrap(args[1]), *args[2:])
    return args, kwargs


def latest_complete_checkpoint(folder: str, run_id: str | None = None) -> str | None:
    """The newest ``checkpoint-N`` in ``folder`` whose save finished (has the completion marker) and,
    when ``run_id`` is given, that this run wrote (a marker naming another run, or none, is foreign)."""
    if not os.path.isdir(folder):
        return None
    steps = []
    for name in os.listdir(folder):
        marker = os.path.join(folder, name, COMPLETE_MARKER)
        if name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit() and os.path.exists(marker):
            if run_id is None or _marker_run_id(marker) == run_id:
                steps.append(int(name[len("checkpoint-"):]))
    return os.path.join(folder, f"checkpoint-{max(steps)}") if steps else None


def _marker_run_id(marker: str) -> str | None:
    try:
        with open(marker) as f:
            return json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
