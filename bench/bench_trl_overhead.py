"""Step-time overhead of GraeTrainer over stock trl.GRPOTrainer on the same config, side by side.

Both trainers run the same model, data, reward and GRPOConfig, interleaved round by round in one
process (A, B, A, B, …) so machine noise hits both; the first steps of each run are warm-up and
dropped. Reported: median seconds per step of each and their ratio.

    python bench/bench_trl_overhead.py [--rounds 4] [--steps 12] [--estimator agrae] [--model tiny]
        [--prompts 16] [--max-completion-length 8] [--trainers both]

``--model smollm2 --prompts 2 --max-completion-length 48`` is the smollm2 recipe's step shape (2 prompts
x 8 samples of up to 48 tokens); ``--recipe smollm2`` takes the recipe's own task prompts (chat template),
reward and GRPOConfig (its batch shape too) instead of the synthetic ``a + b`` prompts and the crc reward.
``--trainers`` picks the sides, a comma list of ``stock`` (trl.GRPOTrainer), ``grae`` (GraeTrainer as
``grae train`` runs it: rollouts on grae's sampling loop, grae.eval.decode, and the shared prompt pass) and
``grae-generate`` (GraeTrainer with ``rollouts: {grae_decoding: false}``: TRL's ``model.generate`` and TRL's
loss pass, GraeTrainer as it was before issue 34). Every run is a fresh process (spawned), so each side's
peak RSS is its own.

An estimator that needs context (``unlikeliness``: the rollout log-probs, recorded during HF generate since
TRL has none here; ``outcome_explore``: answer ids and prompt keys, parsed with :func:`first_token`) measures
the context's cost too.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
import zlib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def reward(completions, **kwargs):
    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


def first_token(text: str) -> str | None:
    """The parsed answer of a plain ``Answer:`` completion: its first whitespace-separated token."""
    parts = text.split()
    return parts[0] if parts else None


class StepTimer:
    def __init__(self):
        from transformers import TrainerCallback

        outer = self

        class _CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                outer.t0 = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                outer.times.append(time.perf_counter() - outer.t0)

        self.callback = _CB()
        self.times: list[float] = []


def recipe_setup(recipe: str, out: str, *, steps: int, seed: int, prompts: int, completion_length: int):
    """``(dataset, reward functions, GRPOConfig)`` of a grae train recipe, built by grae's own functions, with
    this bench's step count, seed and completion length, and no checkpoints; its batch shape is the recipe's
    (``prompts`` only sizes the dataset)."""
    from grae.data import get_task
    from grae.train.config import grpo_config, load_config, resolve_rewards

    cfg = load_config(recipe, {"max_steps": steps, "seed": seed, "eval.enabled": False,
                               "trl.max_completion_length": completion_length, "trl.save_strategy": "no",
                               "trl.report_to": "none"})
    task = get_task(cfg.task.name, **cfg.task.params)
    return task.to_hf_dataset(task.train(64 * prompts, seed=seed)), resolve_rewards(cfg, task), grpo_config(cfg, output_dir=out)


def run(trainer_cls, model_dir, steps, seed, extra, prompts=16, completion_length=8, recipe=None):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        if recipe:
            data, rewards, cfg = recipe_setup(recipe, out, steps=steps, seed=seed, prompts=prompts,
                                              completion_length=completion_length)
        else:
            data = Dataset.from_list([{"prompt": f"State the final answer: {a} + {b} =\nAnswer:"}
                                      for a in range(40) for b in range(10)])
            rewards = [reward]
            cfg = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                             logging_steps=1, max_steps=steps, learning_rate=1e-4, per_device_train_batch_size=8 * prompts,
                             num_generations=8, max_completion_length=completion_length, temperature=1.0, top_k=0,
                             beta=0.0, gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0,
                             seed=seed)
        trainer = trainer_cls(model=model, processing_class=tok, reward_funcs=rewards, args=cfg, train_dataset=data,
                              callbacks=[timer.callback], **extra)
        trainer.train()
    return timer.times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--estimator", default="agrae")
    parser.add_argument("--model", default="tiny", help="'tiny' (shipped), 'random' (throw-away), or a path")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (8 samples each)")
    parser.add_argument("--max-completion-length", type=int, default=8)
    parser.add_argument("--trainers", default="stock,grae",
                        help="comma list of stock, grae, grae-generate ('both' = stock,grae)")
    parser.add_argument("--recipe", default=None, help="a grae train recipe (smollm2): its prompts, reward, GRPOConfig")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sides = ["stock", "grae"] if args.trainers == "both" else args.trainers.split(",")
    if not set(sides) <= {"stock", "grae", "grae-generate"} or not sides:
        parser.error(f"--trainers: {args.trainers!r}; use a comma list of stock, grae, grae-generate")
    if args.model == "random":
        from tiny_model import build_random_tiny

        model_dir = build_random_tiny(tempfile.mkdtemp(), hidden=256, layers=4, vocab=512)
    else:
        from grae.presets import resolve_model

        model_dir = str(resolve_model(args.model))
    times: dict[str, list[float]] = {side: [] for side in sides}
    peaks: dict[str, float] = {side: 0.0 for side in sides}
    spawn = multiprocessing.get_context("spawn")  # each run in a fresh process: its own peak RSS, no leftover heap
    for r in range(args.rounds):
        for side in sides:
            with spawn.Pool(1) as pool:
                steps, peak = pool.apply(run_side, (side, model_dir, vars(args), r))
            times[side].extend(steps[args.warmup:])
            peaks[side] = max(peaks[side], peak)
            print(f"round {r} {side}: median {statistics.median(steps[args.warmup:]):.3f} s/step, "
                  f"peak RSS {peak:.2f} GiB", flush=True)
    shape = f"recipe {args.recipe}'s batch shape" if args.recipe else f"{args.prompts} prompts x 8 samples"
    print(f"\nmodel {args.model}, {shape}, completions of <= {args.max_completion_length} tokens, {args.threads} threads, "
          f"{args.rounds} rounds x {args.steps - args.warmup} timed steps each, each run in its own process")
    base = statistics.median(times[sides[0]])
    print(f"| trainer | median s/step | ratio to {sides[0]} | peak RSS (GiB) |\n|---|---|---|---|")
    for side in sides:
        median = statistics.median(times[side])
        print(f"| {side} | {median:.3f} | {median / base:.3f} | {peaks[side]:.2f} |")


def run_side(side: str, model_dir: str, args: dict, seed: int) -> tuple[list[float], float]:
    """One trainer's run (in a child process): every step's seconds and the process's peak RSS (GiB)."""
    torch.set_num_threads(args["threads"])
    from trl import GRPOTrainer

    from grae.advantage.base import _REGISTRY
    from grae.engines.trl import GraeTrainer

    grae_kw: dict = {"estimator": args["estimator"]}
    if "answer_id" in _REGISTRY[args["estimator"]].requires:
        grae_kw["answer_fn"] = first_token
    sides = {"stock": (GRPOTrainer, {}),  # grae: as grae train runs it; grae-generate: as before issue 34
             "grae": (GraeTrainer, {**grae_kw, "rollouts": {"shared_prompt_pass": True, "trim_padding": True,
                                                            "group_by_length": True}}),
             "grae-generate": (GraeTrainer, {**grae_kw, "rollouts": {"grae_decoding": False}})}
    cls, extra = sides[side]
    steps = run(cls, model_dir, args["steps"], seed=seed, extra=extra, prompts=args["prompts"],
                completion_length=args["max_completion_length"], recipe=args["recipe"])
    return steps, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


if __name__ == "__main__":
    main()
