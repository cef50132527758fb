"""The cross-field checks of a ``grae train`` config, before any model loads: one named check per config section.

:func:`validate` runs :data:`CHECKS` in order and stops at the first error (a :class:`ConfigError` naming the key
and the fix). The order is fixed: a config with several problems is always refused for the same one first, and a
check may read what an earlier one built (:class:`Built`: the estimator, the task, TRL's ``GRPOConfig``).
Each check runs grae's own rule or builds the library's object (estimator registry, task registry, TRL,
peft) early, so that a mistake TRL or GraeTrainer would find only after the model loads is refused here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grae.advantage import get_estimator, with_reward_correction
from grae.eval.backends import MAX_TEMPERATURE, MIN_TEMPERATURE, MIN_TOP_P
from grae.eval.identity import looks_like_missing_path
from grae.loss import AGG_MODES
from grae.train.build import grpo_config, heldout_task, lora_config, resolve_rewards, reward_specs
from grae.train.errors import ConfigError
from grae.train.model_defaults import fit_sizes
from grae.train.sections import TrainConfig
from grae.train.trl_recipe import check_model_init_kwargs
from grae.train.values import check_trl

#: ``trl.learning_rate`` above this is refused before the model loads unless ``allow_large_learning_rate``
MAX_LEARNING_RATE = 1.0


@dataclass
class Built:
    """What the checks built that later checks read: the estimator (:func:`check_estimator`), the task
    (:func:`check_task`) and TRL's ``GRPOConfig`` (:func:`check_grpo_config`)."""

    estimator: Any = None
    task: Any = None
    args: Any = None
    #: the held-out problems' task where ``eval.heldout_params`` gives one (:func:`check_exact_eval`)
    heldout_task: Any = None


def check_estimator(cfg: TrainConfig, built: Built) -> None:
    """``estimator``, ``estimator_params`` and ``reward_correction``: the estimator is built from the registry, so an
    unknown name or parameter is refused with the registry's own message."""
    try:
        built.estimator = get_estimator(cfg.estimator, **cfg.estimator_params)
        if cfg.reward_correction:
            with_reward_correction(built.estimator, **cfg.reward_correction)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"estimator: {err.args[0] if err.args else err}") from None


def check_loss(cfg: TrainConfig, built: Built) -> None:
    """``loss_agg_mode`` (one of grae.loss's modes) and ``dual_clip`` (GraeTrainer's own argument check)."""
    from grae.engines.trl.arguments import check_dual_clip  # heavy: grae.engines.trl loads trl and transformers

    if cfg.loss_agg_mode is not None and cfg.loss_agg_mode not in AGG_MODES:
        raise ConfigError(f"loss_agg_mode: unknown {cfg.loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")
    try:
        check_dual_clip(cfg.dual_clip)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None


def check_reward_timeout(cfg: TrainConfig, built: Built) -> None:
    """``reward_timeout``: GraeTrainer's own argument check, so a library user and a config are refused alike."""
    from grae.engines.trl.arguments import check_reward_timeout  # heavy: grae.engines.trl loads trl and transformers

    try:
        check_reward_timeout(cfg.reward_timeout)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None


def check_cov_loss(cfg: TrainConfig, built: Built) -> None:
    """``cov_loss``: its mode and coefficients, read as GraeTrainer reads them."""
    if cfg.cov_loss is None:
        return
    from grae.engines.trl import _cov_loss_config  # heavy: grae.engines.trl loads trl and transformers

    try:
        _cov_loss_config(cfg.cov_loss)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_sampling(cfg: TrainConfig, built: Built) -> None:
    """``sampling``: its own ranges, and the estimators it cannot serve (GraeTrainer refuses both only after the
    model loads): dynamic sampling and prompt selection supply no estimator context."""
    try:
        cfg.sampling.check()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    requires = sorted(getattr(built.estimator, "requires", ()))
    if cfg.sampling.active and requires:
        raise ConfigError(f"sampling: dynamic sampling and prompt selection do not supply estimator context yet, and "
                          f"estimator {cfg.estimator!r} requires {', '.join(requires)}; set sampling.dynamic false and "
                          "sampling.selection uniform, or choose an estimator that needs only rewards")
    conflict = cfg.sampling.conflict_with(built.estimator)
    if conflict:
        raise ConfigError(conflict)


def check_answer_reward(cfg: TrainConfig, built: Built) -> None:
    """``reward_funcs`` for the estimator: one that reads each completion's parsed answer (context ``answer_id``)
    gets it from the task's verifier, so ``"task"`` must be among the reward functions."""
    if "answer_id" in getattr(built.estimator, "requires", ()) and "task" not in reward_specs(cfg):
        raise ConfigError(f"estimator: {cfg.estimator!r} needs each completion's parsed answer (context answer_id), which "
                          "grae train takes from the task's verifier; add 'task' to reward_funcs")


def check_reference_model(cfg: TrainConfig, built: Built) -> None:
    """``trl.sync_ref_model``: it needs a reference model (``trl.beta`` > 0) that is not a LoRA run's; TRL refuses
    both only after the model is loaded."""
    if not cfg.trl.get("sync_ref_model"):
        return
    if not cfg.trl.get("beta"):
        raise ConfigError("trl.sync_ref_model: there is no reference model to reset with trl.beta = 0 (TRL's default); "
                          "set trl.beta > 0 (the KL coefficient), or drop sync_ref_model")
    if cfg.peft is not None:
        raise ConfigError("trl.sync_ref_model: TRL cannot reset the reference model of a LoRA (peft) run; "
                          "drop peft or sync_ref_model")


def check_peft(cfg: TrainConfig, built: Built) -> None:
    """``peft``: peft's ``LoraConfig`` is built from it (:func:`grae.train.build.lora_config`)."""
    if cfg.peft is not None:
        lora_config(cfg.peft)


def check_steps(cfg: TrainConfig, built: Built) -> None:
    """``max_steps``, ``save_steps``, ``missing_reward_steps``, ``no_signal_steps`` and ``keep_steps``: counts of
    steps in their ranges, and kept steps that are training steps."""
    for name in ("max_steps", "save_steps"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name}: must be >= 1, got {getattr(cfg, name)}")
    if isinstance(cfg.missing_reward_steps, bool) or not isinstance(cfg.missing_reward_steps, int) \
            or cfg.missing_reward_steps < 0:
        raise ConfigError(f"missing_reward_steps: must be an integer >= 0 (scored batches in a row without any reward "
                          f"from a function before the run stops; 0 never stops), got {cfg.missing_reward_steps!r}")
    if isinstance(cfg.no_signal_steps, bool) or not isinstance(cfg.no_signal_steps, int) or cfg.no_signal_steps < 0:
        raise ConfigError(f"no_signal_steps: must be an integer >= 0 (logged steps without signal in a row before the "
                          f"run stops; 0 turns the stop off), got {cfg.no_signal_steps!r}")
    bad_steps = [s for s in cfg.keep_steps if not isinstance(s, int) or isinstance(s, bool) or not 1 <= s <= cfg.max_steps]
    if bad_steps:
        raise ConfigError(f"keep_steps: {bad_steps} are not training steps in 1..max_steps ({cfg.max_steps}); "
                          "list the steps whose model to keep, e.g. [100, 250]")


def check_seeds(cfg: TrainConfig, built: Built) -> None:
    """``seed`` and ``eval.seed``: 32-bit, as numpy's and CUDA's seeds are."""
    for name, seed in [("seed", cfg.seed), ("eval.seed", cfg.eval.seed)]:
        if not 0 <= seed < 2**32:
            raise ConfigError(f"{name}: must be in [0, 2**32), got {seed}")


def check_task(cfg: TrainConfig, built: Built) -> None:
    """``task.name``, ``task.params`` and ``task.train_subset``: the task is built from the registry (a local file is
    read now, so a bad line is refused before anything is claimed or loaded) and restricted to its band file; sizes
    a local or band task cannot fill are fitted to it, with a note (:func:`grae.train.model_defaults.fit_sizes`)."""
    from grae.data import LocalTask, get_task  # heavy: grae.data loads reasoning-gym
    from grae.data.band import BandFileError, with_train_subset
    from grae.data.fields import DataFormatError
    from grae.data.registry import unknown_parameter

    try:
        task = get_task(cfg.task.name, **cfg.task.params)
        if isinstance(task, LocalTask):
            task.splits()
    except FileNotFoundError as err:
        raise ConfigError(f"task.name: {err.args[0] if err.args else err}; give an existing .jsonl/.json/.parquet "
                          "file (local:PATH or PATH)") from None
    except DataFormatError as err:
        raise ConfigError(f"task: {err}") from None
    except (KeyError, TypeError, ValueError, AssertionError, OverflowError) as err:  # reasoning-gym checks by assert
        raise ConfigError(unknown_parameter(err, cfg.task.name)
                          or f"task: {err.args[0] if err.args else err} (task.params: {cfg.task.params})") from None
    try:
        built.task = with_train_subset(task, cfg.task.train_subset, cfg.task.name, cfg.task.params)
    except BandFileError as err:
        raise ConfigError(str(err)) from None
    if isinstance(built.task, LocalTask) or cfg.task.train_subset:
        cfg.notes = (*cfg.notes, *fit_sizes(cfg, built.task))


def check_task_training(cfg: TrainConfig, built: Built) -> None:
    """``task.train_size`` and the task's kind: a visual task cannot go through dynamic sampling or prompt selection
    (the one GraeTrainer path that cannot carry images), and only a dataset task or a band file has a whole
    training split to train on (``train_size: null``)."""
    from grae.data import RowsTask  # heavy: grae.data loads reasoning-gym
    from grae.data.visual import VisualTask

    if isinstance(built.task, VisualTask) and cfg.sampling.active:
        raise ConfigError(f"sampling: dynamic sampling and prompt selection do not carry images yet (task "
                          f"{cfg.task.name!r} is visual); set sampling.dynamic false and sampling.selection uniform")
    if cfg.task.train_size is None and not isinstance(built.task, RowsTask) and not cfg.task.train_subset:
        raise ConfigError(f"task.train_size: null (the whole training split) needs a dataset task or a train_subset; "
                          f"{cfg.task.name!r} generates problems without end: give a number, e.g. 10000")
    if cfg.task.train_size is not None and cfg.task.train_size < 1:
        raise ConfigError(f"task.train_size: must be >= 1, got {cfg.task.train_size}")


def check_eval(cfg: TrainConfig, built: Built) -> None:
    """``eval``: sizes, and sampling settings grae's sampler accepts (a temperature it can divide by in half
    precision, a top_p that does not round to 0)."""
    e = cfg.eval
    if e.enabled and (e.n < 1 or e.num_problems < 1):
        raise ConfigError(f"eval: n and num_problems must be >= 1, got n={e.n}, num_problems={e.num_problems}")
    for name, bad, rule in [("eval.temperature", not (e.temperature == 0 or MIN_TEMPERATURE <= e.temperature <= MAX_TEMPERATURE),
                             f"0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]"),
                            ("eval.top_p", not MIN_TOP_P <= e.top_p <= 1, f"in [{MIN_TOP_P:g}, 1]"),
                            ("eval.max_tokens", e.max_tokens < 1, ">= 1"), ("eval.batch_size", e.batch_size < 1, ">= 1")]:
        if bad:
            raise ConfigError(f"{name}: must be {rule}, got {getattr(e, name.split('.')[1])}")
    if e.oracle_max_seconds is not None and e.oracle_max_seconds < 0:
        raise ConfigError(f"eval.oracle_max_seconds: must be >= 0 (null: no limit), got {e.oracle_max_seconds}")


def check_exact_eval(cfg: TrainConfig, built: Built) -> None:
    """``eval.exact``, ``eval.heldout_params`` and ``eval.temperatures``: exact p needs a task with a finite answer set
    or one gold completion (:func:`grae.eval.exact.exact_by`) and temperatures a sampler takes; held-out parameters the
    task accepts (the held-out task is built here, as the run builds it)."""
    from grae.eval.exact import ExactError, exact_by

    e = cfg.eval
    if e.heldout_params:
        built.heldout_task = heldout_task(cfg, built.task)
    if not (e.enabled and e.exact):
        return
    try:
        exact_by(built.heldout_task or built.task)
    except ExactError as err:
        raise ConfigError(f"eval.exact: {err}; set eval.exact false to sample eval.n completions per problem") from None
    bad = [t for t in e.temperatures if not MIN_TEMPERATURE <= t <= MAX_TEMPERATURE]
    if not e.temperatures or bad:
        raise ConfigError(f"eval.temperatures: the base's temperature frontier needs temperatures in "
                          f"[{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], got {e.temperatures}")


def check_output_dir(cfg: TrainConfig, built: Built) -> None:
    """``output_dir``: not empty, as every file of the run goes under it."""
    if not str(cfg.output_dir).strip():
        raise ConfigError("output_dir: empty; name the run directory (--output-dir runs/my-run)")


def check_model(cfg: TrainConfig, built: Built) -> None:
    """``model``: a name that looks like a local path must exist (a hub id or a preset is left to loading)."""
    if looks_like_missing_path(cfg.model):
        raise ConfigError(f"model: {cfg.model!r} does not exist "
                          "(a local directory, a hub id org/name, or a preset: tiny, tiny-vlm, smollm2)")


def check_trl_section(cfg: TrainConfig, built: Built) -> None:
    """``trl``: every key a GRPOConfig field grae does not set itself, numeric values converted in place
    (:func:`grae.train.values.check_trl`), and ``trl.model_init_kwargs`` as the model loader takes them."""
    cfg.trl = check_trl(cfg.trl)
    try:
        check_model_init_kwargs(cfg.trl.get("model_init_kwargs"))
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_rewards(cfg: TrainConfig, built: Built) -> None:
    """``reward_funcs``: each is imported now (:func:`grae.train.build.resolve_rewards`), so an unknown name fails
    here, not after the data loads."""
    resolve_rewards(cfg)


def check_generation(cfg: TrainConfig, built: Built) -> None:
    """``trl.temperature`` and ``trl.top_p``: the rollouts' sampling in the range where it stays meaningful and
    finite (the same bounds as ``eval``'s)."""
    if cfg.trl.get("temperature", 0) > MAX_TEMPERATURE:
        raise ConfigError(f"trl.temperature: must be in (0, {MAX_TEMPERATURE:g}] (above, every token is about equally "
                          f"likely), got {cfg.trl['temperature']}")
    if 0 < cfg.trl.get("temperature", 1) < MIN_TEMPERATURE:
        raise ConfigError(f"trl.temperature: must be at least {MIN_TEMPERATURE:g}, got {cfg.trl['temperature']:g}: below, "
                          "the logits divided by it overflow in half precision and the sampling probabilities become "
                          f"non-finite (vLLM raises such a temperature to {MIN_TEMPERATURE:g} too)")
    if 0 < cfg.trl.get("top_p", 1) < MIN_TOP_P:
        raise ConfigError(f"trl.top_p: must be at least {MIN_TOP_P:g}, got {cfg.trl['top_p']:g}: any top_p below the most "
                          "probable token's probability (>= 1/vocabulary size) keeps that token alone, so a smaller "
                          f"one changes nothing but rounds to 0 in float32; write {MIN_TOP_P:g}")


def check_grpo_config(cfg: TrainConfig, built: Built) -> None:
    """``trl`` as a whole: TRL's ``GRPOConfig`` is built from it (TRL validates its own fields and combinations),
    then one reward weight per reward function and a learning rate below :data:`MAX_LEARNING_RATE` unless forced."""
    built.args = args = grpo_config(cfg, output_dir="/nonexistent-validation-only")
    _check_reward_weights(args.reward_weights, reward_specs(cfg))
    if args.learning_rate > MAX_LEARNING_RATE and not cfg.allow_large_learning_rate:
        raise ConfigError(f"trl.learning_rate: {args.learning_rate:g} is above {MAX_LEARNING_RATE:g}, where training "
                          "diverges or collapses (the tiny recipe trains at 2e-5); lower it, or force it with "
                          "--allow_large_learning_rate")


def _check_reward_weights(weights: Any, specs: list) -> None:
    """``trl.reward_weights`` (numbers, as :func:`check_trl` checked): one per reward function (TRL refuses another
    count only when it builds the trainer, after the run directory is claimed and the model loaded)."""
    if weights is None:
        return
    if len(weights) != len(specs):
        raise ConfigError(f"trl.reward_weights: {len(weights)} weights for {len(specs)} reward function"
                          f"{'s' if len(specs) != 1 else ''} (reward_funcs: {specs}); give one weight per reward "
                          "function, in their order, or drop reward_weights (all 1)")


def check_generation_batch(cfg: TrainConfig, built: Built) -> None:
    """``task.train_size`` against TRL's generation batch: one batch's prompts must be there to draw."""
    args = built.args
    prompts_per_step = args.generation_batch_size // args.num_generations
    if cfg.task.train_size is not None and cfg.task.train_size < prompts_per_step:
        raise ConfigError(f"task.train_size: {cfg.task.train_size} prompts, but one generation batch takes {prompts_per_step} "
                          f"(per_device_train_batch_size {args.per_device_train_batch_size} × steps_per_generation "
                          f"{args.steps_per_generation} / num_generations {args.num_generations}); raise task.train_size")


def check_reward_aggregation(cfg: TrainConfig, built: Built) -> None:
    """``trl.multi_objective_aggregation`` and ``trl.scale_rewards`` for the estimator and sampling (GraeTrainer's
    own rules, checked before the model loads): ``normalize_then_sum`` hands z-scores to an estimator and to
    sampling that read raw rewards; otherwise TRL's reward scaling must agree with the estimator's ``scale``."""
    args, estimator = built.args, built.estimator
    if args.multi_objective_aggregation == "normalize_then_sum":
        if cfg.sampling.active:
            raise ConfigError("trl.multi_objective_aggregation='normalize_then_sum': dynamic sampling and prompt "
                              "selection read raw rewards (success_threshold); use 'sum_then_normalize' with sampling")
        if "scale" not in estimator.params:
            raise ConfigError(f"trl.multi_objective_aggregation='normalize_then_sum': estimator {cfg.estimator!r} reads "
                              "rewards as scores, not z-scores; use 'sum_then_normalize' or a GRPO-family estimator")
        return
    from grae.engines.trl import scale_rewards_problem  # heavy: grae.engines.trl loads trl and transformers

    why = scale_rewards_problem(cfg.estimator, dict(estimator.params), args.scale_rewards,
                                explicit="scale" in cfg.estimator_params)
    if why:
        raise ConfigError(f"trl.{why}")


def check_dynamic_sampling(cfg: TrainConfig, built: Built) -> None:
    """``sampling.dynamic`` against ``trl.num_generations``: a group of one has no reward variance to keep it by."""
    if cfg.sampling.dynamic and built.args.num_generations < 2:
        raise ConfigError(f"sampling.dynamic: needs trl.num_generations >= 2 (got {built.args.num_generations}): "
                          "a group of one has no reward variance")


#: the checks :func:`validate` runs, in this order (a config with several problems is refused for the first)
CHECKS: tuple[Callable[[TrainConfig, Built], None], ...] = (
    check_estimator, check_loss, check_reward_timeout, check_cov_loss, check_sampling, check_answer_reward,
    check_reference_model, check_peft, check_steps, check_seeds, check_task, check_task_training, check_eval,
    check_exact_eval, check_output_dir, check_model, check_trl_section, check_rewards, check_generation,
    check_grpo_config, check_generation_batch, check_reward_aggregation, check_dynamic_sampling,
)


def validate(cfg: TrainConfig) -> None:
    """Cross-field checks that need the registries (estimators, tasks, TRL's config): :data:`CHECKS` in order; the
    first problem raises :class:`ConfigError`. ``cfg.trl`` is left converted, and ``cfg.notes`` says each size fitted
    to the task."""
    built = Built()
    for check in CHECKS:
        check(cfg, built)
