"""``grae train --dry-run``: what a validated config would load and train, said before anything is loaded.

The config is read and checked in full first (:func:`grae.train.config.load_config`: every key, TRL's own
``GRPOConfig``, the task's constructor, the reward functions imported); these lines then say what each
key resolved to — which is where a ``trl grpo`` recipe's keys went — without downloading the model or
the dataset and without writing the run directory.
"""

from __future__ import annotations

from typing import Any

from grae.train.build import heldout_task
from grae.train.config import TrainConfig, grpo_config, reward_specs
from grae.train.trl_recipe import check_model_init_kwargs


def plan_lines(cfg: TrainConfig) -> list[tuple[str, str]]:
    """The rows of :func:`plan`."""
    return plan(cfg)[0]


def plan(cfg: TrainConfig) -> tuple[list[tuple[str, str]], list[str]]:
    """``(what, resolved to)`` rows for a validated ``cfg`` — the estimator first (and whether it is grae's default),
    model and how it loads, task and the columns it reads, sizes fitted to the data, one rendered prompt and what
    its gold answer reads as, the longest prompt plus its budget against the model's context, reward functions and
    where each comes from, steps and batch, held-out evaluation, run directory — and what in the data would leave
    the run nothing to learn from (:func:`grae.train.gold_check.stopping_problems`) or would not fit in the model's
    context (:func:`grae.train.context_check.context_problems`)."""
    from grae.data import HubTask, LocalTask
    from grae.data.hub import fields_line
    from grae.train.trl_rewards import resolve_reward

    load = check_model_init_kwargs(cfg.trl.get("model_init_kwargs"))
    if cfg.trl.get("trust_remote_code"):
        load = {**load, "trust_remote_code": True}
    how = ", ".join(f"{key} {value}" for key, value in load.items()) or "float32"
    task = cfg.task.build()
    size = "all training problems" if cfg.task.train_size is None else f"{cfg.task.train_size} training prompts"
    if isinstance(task, LocalTask):
        size = f"{size} ({len(task.splits()[0])} in the file's training split, {len(task.splits()[1])} held out)"
    if cfg.task.train_subset:
        size = (f"all {len(task)} problems of the band file {cfg.task.train_subset}" if cfg.task.train_size is None else
                f"{cfg.task.train_size} of the {len(task)} problems in the band file {cfg.task.train_subset}")
    rewards = [f"task ({cfg.task.name}'s verifier)" if spec == "task" else f"{spec} ({_origin(resolve_reward(spec))})"
               for spec in reward_specs(cfg)]
    params = ", ".join(f"{key}={value}" for key, value in sorted(cfg.estimator_params.items()))
    chosen = cfg.explicit_keys is None or "estimator" in cfg.explicit_keys or cfg.estimator != TrainConfig.estimator
    args = grpo_config(cfg, output_dir="/nonexistent-dry-run")  # TRL's values, its defaults filled in
    batch = f"{batch_line(args)}, <= {args.max_completion_length} tokens, learning rate {args.learning_rate:g}"
    e = cfg.eval
    tokenizer = _tokenizer(cfg, task)
    held_from = heldout_task(cfg, task) if e.enabled and not isinstance(task, HubTask) else task
    golds, stops = _gold_lines(cfg, task, held_from, tokenizer)
    context, too_long = _context_lines(cfg, task, held_from, tokenizer)
    heldout = (f"{e.num_problems} problems{_heldout_params(cfg)}, {_heldout_kind(cfg)}, {e.max_tokens} tokens, before "
               f"and after{_oracle_part(cfg, task)}" if e.enabled else "off")
    return [("estimator", f"{cfg.estimator}{f' ({params})' if params else ''}"
                          f"{'' if chosen else ' (grae default; --estimator grpo trains TRL GRPO advantages)'}"),
            ("model", f"{cfg.model} (from_pretrained: {how})"),
            ("task", fields_line(task) or f"{cfg.task.name}{f' {params_of(cfg.task.params)}' if cfg.task.params else ''}"),
            *[("fitted", note) for note in cfg.notes],
            ("train on", size),
            *example_lines(task),
            *golds,
            *context,
            ("rewards", "; ".join(rewards)),
            ("steps", f"{cfg.max_steps}, {batch}"),
            ("held-out", heldout),
            ("output", cfg.output_dir),
            ("config", " → ".join(cfg.layers) + " → validated (grae.train.resolve)")], [*stops, *too_long]


def _oracle_part(cfg: TrainConfig, task: Any) -> str:
    """``; the base's format-only oracle (exact: 298 candidate answers per problem, once before training; …)`` where
    the run computes it (:mod:`grae.train.oracle`), why not where its task has one and it cannot, else ""."""
    from grae.eval.exact import BY_ANSWER_SET, exact_by
    from grae.train.oracle import skip_reason

    try:  # the answer set first: no held-out problem is read (nor downloaded) for a task without one
        if not (cfg.eval.oracle and exact_by(task) == BY_ANSWER_SET):
            return ""
        reason = skip_reason(cfg, task, task.heldout(1))
    except (ValueError, RuntimeError):  # no answer set (ExactError), or a split that cannot be read here
        return ""
    if reason is None:
        limit = cfg.eval.oracle_max_seconds
        return (f"; the base's format-only oracle (exact: {len(task.answer_set()):,} candidate answers per problem, "
                f"once before training{'' if limit is None else f'; skipped if estimated above {limit:g} s'})")
    return f"; no format-only oracle ({reason})" if reason else ""


def batch_line(args: Any) -> str:
    """One optimizer step's batch in prompts × samples, from TRL's ``GRPOConfig`` ``args``: ``2 prompts × 8 samples
    per step (4 completions per device micro-batch × 4 accumulation steps)`` (× N processes where several
    train)."""
    processes = max(1, int(getattr(args, "world_size", 1) or 1))
    completions = args.per_device_train_batch_size * args.gradient_accumulation_steps * processes
    prompts = completions / args.num_generations
    shown = f"{prompts:g} prompt{'s' if prompts != 1 else ''}"
    return (f"{shown} × {args.num_generations} samples per step ({args.per_device_train_batch_size} completions per "
            f"device micro-batch × {args.gradient_accumulation_steps} accumulation step"
            f"{'s' if args.gradient_accumulation_steps != 1 else ''}{f' × {processes} processes' if processes > 1 else ''})")


def params_of(params: dict) -> dict:
    """A parameter mapping in key order (the order a file or the flags give them in changes nothing)."""
    return dict(sorted(params.items()))


def _tokenizer(cfg: TrainConfig, task: Any) -> Any:
    """The model's tokenizer where the dry run reads the task's rows (not a hub dataset) and the model's files are
    on this machine, else None."""
    from grae.data import HubTask
    from grae.train.gold_check import model_tokenizer
    from grae.train.trl_recipe import processor_load_kwargs

    return None if isinstance(task, HubTask) else model_tokenizer(cfg.model, processor_load_kwargs(cfg.trl))


def _gold_lines(cfg: TrainConfig, task: Any, held_from: Any, tokenizer: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """Every gold through the verifier and the token budget (:mod:`grae.train.gold_check`), the held-out ones from
    ``held_from`` (:func:`grae.train.build.heldout_task`): the rows, and what in them leaves the run nothing to
    learn from."""
    from grae.train.gold_check import budget_lines, check_golds, gold_lines, stopping_problems

    heldout = cfg.eval.num_problems if cfg.eval.enabled else 0
    check = check_golds(task, cfg.task.train_size, heldout, cfg.seed, held_from)
    args = grpo_config(cfg, output_dir="/nonexistent-dry-run")
    tokenizer = tokenizer if check is not None else None
    eval_tokens = cfg.eval.max_tokens if cfg.eval.enabled else None
    rows = [*gold_lines(check), *budget_lines(check, tokenizer, args.max_completion_length, eval_tokens,
                                              getattr(task, "instruction", None))]
    return rows, stopping_problems(check, tokenizer, args.max_completion_length, eval_tokens)


def _context_lines(cfg: TrainConfig, task: Any, held_from: Any, tokenizer: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """The longest training and held-out prompt the run would use, plus its budget, against the model's context
    (:mod:`grae.train.context_check`): the row, and what does not fit. A hub dataset is not read (no row)."""
    from grae.data import HubTask
    from grae.train.context_check import context_lines, context_problems, measure_context, unmeasured
    from grae.train.gold_check import model_config
    from grae.train.trl_recipe import processor_load_kwargs

    if isinstance(task, HubTask):
        return [("context", "prompts measured when the data is local (a dry run downloads nothing)")], []
    config = model_config(cfg.model, processor_load_kwargs(cfg.trl)) if tokenizer is not None else None
    why = unmeasured([], tokenizer, config)  # before the examples are made: no tokenizer here, or a VLM
    if why:
        return context_lines(None, why), []
    try:  # the examples the run trains and evaluates on
        train = task.train(cfg.task.train_size, seed=cfg.seed)
        heldout = held_from.heldout(cfg.eval.num_problems) if cfg.eval.enabled else []
    except (ValueError, RuntimeError) as err:
        return context_lines(None, f"task: {err.args[0] if err.args else err}"), []
    why = unmeasured([*train, *heldout], tokenizer, config)
    if why:
        return context_lines(None, why), []
    args = grpo_config(cfg, output_dir="/nonexistent-dry-run")
    fit = measure_context(task, train, heldout, tokenizer, config, args.max_completion_length,
                          cfg.eval.max_tokens if cfg.eval.enabled else None, args.chat_template_kwargs)
    return context_lines(fit), context_problems(fit)


def example_lines(task: Any) -> list[tuple[str, str]]:
    """One training prompt as the model gets it (before its chat template) and its gold answer: what the
    answer column reads as, how completions are read, and the score of a completion that states the gold that
    way (1.0 unless the verifier cannot match this gold). None for a hub dataset (nothing is downloaded)."""
    from grae.data import HubTask, LocalTask
    from grae.data.local import read_records

    if isinstance(task, HubTask):
        return [("prompt", "(shown when the data is local; a dry run downloads nothing)")]
    try:
        example = next(iter(task.iter_train(0)))
    except (StopIteration, ValueError):
        return [("prompt", f"{task.name} has no training problem")]
    prompt = example["prompt"]
    text = prompt if isinstance(prompt, str) else " | ".join(f"{m['role']}: {m['content']}" for m in prompt)
    gold = example["answer"]
    extraction = getattr(task, "extraction", None)
    stated = extraction.stating(gold) if extraction is not None else task.answer_completion(gold)
    fallback = getattr(task, "plain_answer", None)
    read = extraction.describe() if extraction is not None else \
        f"{task.answer_format}{f' (else {fallback})' if fallback and fallback != 'none' else ''}"
    column = ""
    if isinstance(task, LocalTask):
        raw = next((r.get("answer") for r in read_records(task.path, task.max_line_bytes)
                    if " ".join(str(r.get("question", r.get("problem", ""))).split()) == " ".join(example["question"].split())),
                   None)
        if isinstance(raw, str) and raw.strip() != gold:
            column = f" (from the answer column {' '.join(raw.split())!r})"
    score = task.score(stated, example)
    verdict = "scores 1" if score == 1.0 else (f"scores {score:g}: the verifier cannot match this gold the way answers "
                                               "are read; check the answer column, or task.params.answer_extraction")
    return [("prompt", repr(text)),
            ("gold", f"{gold!r}{column}; answers read: {read}; the reply {stated!r} {verdict}")]


def _origin(func: Any) -> str:
    """Where a reward callable comes from: ``trl.rewards.accuracy_reward``, ``mymodule.f``."""
    inner = getattr(func, "func", func)  # a TrlReward wraps TRL's function
    module = getattr(inner, "__module__", None) or type(inner).__module__
    if module.startswith("trl.rewards"):
        module = "trl.rewards"
    return f"{module}.{getattr(func, '__name__', type(inner).__name__)}"


def _heldout_params(cfg: TrainConfig) -> str:
    """`` (task.params + {totals: any, …})``: the held-out task's own parameters, where ``eval.heldout_params``
    gives them."""
    given = cfg.eval.heldout_params
    return f" (task.params + {params_of(given)})" if given else ""


def _heldout_kind(cfg: TrainConfig) -> str:
    """How held-out pass@k is measured: sampled, or exact with the base's temperature frontier."""
    e = cfg.eval
    if not e.exact:
        return f"n = {e.n} samples each"
    grid = f"{min(e.temperatures):g}-{max(e.temperatures):g}"
    return (f"exact pass@k for k <= {e.n} (teacher-forced gold completions) against the base's temperature frontier "
            f"(T = {grid}, {len(e.temperatures)} temperatures)")
