"""What a checked config builds for TRL: its ``GRPOConfig`` (:func:`grpo_config`), peft's ``LoraConfig``
(:func:`lora_config`) and the reward callables (:func:`resolve_rewards`); each error names the config key."""

from __future__ import annotations

from typing import Any

import torch

from grae.train.errors import ConfigError
from grae.train.sections import TrainConfig
from grae.train.trl_rewards import resolve_reward
from grae.train.trl_values import check_enumerations
from grae.train.values import TRL_RANGES, check_trl, coerce


def reward_specs(cfg: TrainConfig) -> list:
    """``reward_funcs`` as a list (one string is a list of one)."""
    return [cfg.reward_funcs] if isinstance(cfg.reward_funcs, str) else list(cfg.reward_funcs)


def resolve_rewards(cfg: TrainConfig, task: Any = None) -> list:
    """The reward callables of ``reward_funcs``: ``"task"`` is ``task.reward_fn()`` (None while only validating),
    the rest TRL names or dotted paths (:func:`grae.train.trl_rewards.resolve_reward`); errors name the key."""
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
        from peft import LoraConfig  # heavy (peft loads transformers): only a LoRA run needs it
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
    from trl import GRPOConfig  # heavy (transformers): importing grae.train.config must not load it

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


def _cuda() -> bool:
    """Whether a CUDA GPU is there to train on."""
    return torch.cuda.is_available()


def _cuda_bf16() -> bool:
    """Whether a CUDA GPU that supports bf16 is there (TRL's default precision on one)."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def heldout_task(cfg: Any, task: Any) -> Any:
    """The task the held-out problems come from: ``task`` itself, or with ``eval.heldout_params`` the task built with
    them laid over ``task.params`` (no band file: a band restricts training only). :class:`ConfigError` naming
    ``eval.heldout_params`` for parameters the task refuses."""
    from grae.data import get_task  # heavy: grae.data loads reasoning-gym

    if not cfg.eval.heldout_params:
        return task
    params = {**cfg.task.params, **cfg.eval.heldout_params}
    try:
        return get_task(cfg.task.name, **params)
    except (KeyError, TypeError, ValueError, AssertionError) as err:
        raise ConfigError(f"eval.heldout_params: {err.args[0] if err.args else err} (held-out task.params: {params})") from None
