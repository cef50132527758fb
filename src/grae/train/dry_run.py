"""``grae train --dry-run``: what a validated config would load and train, said before anything is loaded.

The config is read and checked in full first (:func:`grae.train.config.load_config`: every key, TRL's own
``GRPOConfig``, the task's constructor, the reward functions imported); these lines then say what each
key resolved to — which is where a ``trl grpo`` recipe's keys went — without downloading the model or
the dataset and without writing the run directory.
"""

from __future__ import annotations

from typing import Any

from grae.train.config import TrainConfig, grpo_config, reward_specs
from grae.train.trl_recipe import check_model_init_kwargs


def plan_lines(cfg: TrainConfig) -> list[tuple[str, str]]:
    """``(what, resolved to)`` rows for a validated ``cfg``: model and how it loads, task and the columns it
    reads, reward functions and where each comes from, estimator, steps and batch, held-out evaluation, run
    directory."""
    from grae.data import get_task
    from grae.data.hub import fields_line
    from grae.train.trl_rewards import resolve_reward

    load = check_model_init_kwargs(cfg.trl.get("model_init_kwargs"))
    if cfg.trl.get("trust_remote_code"):
        load = {**load, "trust_remote_code": True}
    how = ", ".join(f"{key} {value}" for key, value in load.items()) or "float32"
    task = get_task(cfg.task.name, **cfg.task.params)
    size = "all training problems" if cfg.task.train_size is None else f"{cfg.task.train_size} training prompts"
    rewards = [f"task ({cfg.task.name}'s verifier)" if spec == "task" else f"{spec} ({_origin(resolve_reward(spec))})"
               for spec in reward_specs(cfg)]
    params = ", ".join(f"{key}={value}" for key, value in cfg.estimator_params.items())
    args = grpo_config(cfg, output_dir="/nonexistent-dry-run")  # TRL's values, its defaults filled in
    batch = (f"{args.per_device_train_batch_size} completions per device step, {args.num_generations} per prompt, "
             f"<= {args.max_completion_length} tokens, learning rate {args.learning_rate:g}")
    e = cfg.eval
    heldout = (f"{e.num_problems} problems x n = {e.n}, {e.max_tokens} tokens, before and after" if e.enabled
               else "off")
    return [("model", f"{cfg.model} (from_pretrained: {how})"),
            ("task", fields_line(task) or f"{cfg.task.name}{f' {cfg.task.params}' if cfg.task.params else ''}"),
            ("train on", size),
            ("rewards", "; ".join(rewards)),
            ("estimator", f"{cfg.estimator}{f' ({params})' if params else ''}"),
            ("steps", f"{cfg.max_steps}, {batch}"),
            ("held-out", heldout),
            ("output", cfg.output_dir)]


def _origin(func: Any) -> str:
    """Where a reward callable comes from: ``trl.rewards.accuracy_reward``, ``mymodule.f``."""
    inner = getattr(func, "func", func)  # a TrlReward wraps TRL's function
    module = getattr(inner, "__module__", None) or type(inner).__module__
    if module.startswith("trl.rewards"):
        module = "trl.rewards"
    return f"{module}.{getattr(func, '__name__', type(inner).__name__)}"
