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
   exactly 1 when nothing is dropped. On TRL's own algorithm (below) a sample whose reward is missing
   is not dropped: it keeps its tokens with advantage 0, as in stock TRL.
4. TRL's logged advantages (``_logs["advantages"]``, the completions table) are replaced with
   grae's, so what is printed is what trained.
5. The estimator's state (AVSPO's τ) is written to ``grae_estimator_state.json`` in every checkpoint
   and restored on resume (the same mechanism TRL uses for its adaptive-entropy controller). A
   completion marker is written last; :func:`grae.train.checkpoints.latest_complete_checkpoint` only
   returns checkpoints that have it, so a crash in the middle of a save never becomes the one resumed from.
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
  inside GraeTrainer (verl's and the registry's default is 1e-6). That estimator with TRL's settings
  (ε 1e-4, Bessel std, ``scale`` = ``scale_rewards``) is TRL's own algorithm (``grae_trl_algorithm``):
  outside dynamic sampling the advantages that train are TRL's own float32 tensor, and a missing
  reward's sample keeps its tokens (advantage 0). GraeTrainer then logs what stock GRPOTrainer logs,
  every key to float32 tolerance (``tests/test_trl_parity.py``). grae's float64 estimate of the same
  advantage differs in the last float32 bits, and Adam amplifies that where a gradient coordinate is
  near 0.
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
a reward function's total failure (on every sample of any rank) is decided together from every
rank's counts (see :mod:`.rewards`), never by one rank alone. ``tests/test_distributed.py`` runs
every estimator on 2 processes whose ranks disagree, and proves 1-process and 2-process runs give
the same advantages, weights and loss.

The package's rooms: :mod:`.trainer` (``GraeTrainer``: TRL's hooks, each a short override calling into the
rooms below), :mod:`.estimator` (estimator resolution, the gathered rewards, the estimator context, the
advantages written into TRL's batch), :mod:`.sampling` (dynamic-sampling rounds and their assembly),
:mod:`.loss` (TRL's loss rescaled, or grae's), :mod:`.checkpoint` (the estimator's and the sampling state in
each checkpoint), :mod:`.rewards` (reward-fault containment). Checkpoint-damage detection is run
integrity: :mod:`grae.train.checkpoints`.
"""

from grae.engines import COMPLETE_MARKER, STATE_FILE
from grae.engines.trl.checkpoint import SAMPLING_STATE_FILE
from grae.engines.trl.estimator import (
    ANSWER_CONTEXT,
    TRL_CONTEXT,
    TRL_DEFAULT_SCALE,
    TRL_STD_EPS,
    answer_ids,
    find_answer_fn,
    resolve_estimator,
    scale_from_trl,
    scale_rewards_problem,
    stable_key,
    trl_default_params,
)
from grae.engines.trl.loss import MODEL_INPUT_KEYS, ROW_NORMALISED_LOSS_TYPES, _cov_loss_config, model_input_kwargs
from grae.engines.trl.rewards import held_records as _held_records
from grae.engines.trl.trainer import GraeTrainer
from grae.train.checkpoints import checkpoint_damage, latest_complete_checkpoint

__all__ = [
    "ANSWER_CONTEXT", "COMPLETE_MARKER", "MODEL_INPUT_KEYS", "ROW_NORMALISED_LOSS_TYPES", "SAMPLING_STATE_FILE",
    "STATE_FILE", "TRL_CONTEXT", "TRL_DEFAULT_SCALE", "TRL_STD_EPS", "GraeTrainer", "_cov_loss_config",
    "_held_records", "answer_ids", "checkpoint_damage", "find_answer_fn", "latest_complete_checkpoint",
    "model_input_kwargs", "resolve_estimator", "scale_from_trl", "scale_rewards_problem", "stable_key", "trl_default_params",
]
