"""Step-time overhead of GraeTrainer over stock trl.GRPOTrainer on the same config, side by side.

Both trainers run the same model, data, reward and GRPOConfig, interleaved round by round in one
process (A, B, A, B, …) so machine noise hits both; the first steps of each run are warm-up and
dropped. Reported: median seconds per step of each and their ratio.

    python bench/bench_trl_overhead.py [--rounds 4] [--steps 12] [--estimator agrae] [--model tiny]
        [--prompts 16] [--max-completion-length 8] [--trainers both]

``--model smollm2 --prompts 2 --max-completion-length 48`` is the smollm2 recipe's step shape (2 prompts
x 8 samples of up to 48 tokens). ``--trainers stock`` / ``grae`` runs one side only, so that
``/usr/bin/time -v`` gives each trainer's peak RSS.

An estimator that needs context (``unlikeliness``: the rollout log-probs, recorded during HF generate since
TRL has none here; ``outcome_explore``: answer ids and prompt keys, parsed with :func:`first_token`) measures
the context's cost too.
"""

from __future__ import annotations

import argparse
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


def run(trainer_cls, model_dir, steps, seed, extra, prompts=16, completion_length=8):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = Dataset.from_list([{"prompt": f"State the final answer: {a} + {b} =\nAnswer:"} for a in range(40) for b in range(10)])
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
                         max_steps=steps, learning_rate=1e-4, per_device_train_batch_size=8 * prompts, num_generations=8,
                         max_completion_length=completion_length, temperature=1.0, top_k=0, beta=0.0,
                         gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0, seed=seed)
        trainer = trainer_cls(model=model, processing_class=tok, reward_funcs=[reward], args=cfg, train_dataset=data,
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
    parser.add_argument("--trainers", choices=["both", "stock", "grae"], default="both")
    args = parser.parse_args()
    torch.set_num_threads(2)

    from trl import GRPOTrainer

    from grae.engines.trl import GraeTrainer

    if args.model == "random":
        from tiny_model import build_random_tiny

        model_dir = build_random_tiny(tempfile.mkdtemp(), hidden=256, layers=4, vocab=512)
    else:
        from grae.presets import resolve_model

        model_dir = resolve_model(args.model)
    from grae.advantage.base import _REGISTRY

    grae_kw: dict = {"estimator": args.estimator}
    if "answer_id" in _REGISTRY[args.estimator].requires:
        grae_kw["answer_fn"] = first_token
    stock, grae = [], []
    for r in range(args.rounds):
        sides = [("GRPOTrainer", GRPOTrainer, {}, stock), ("GraeTrainer", GraeTrainer, grae_kw, grae)]
        for name, cls, extra, sink in sides:
            if args.trainers != "both" and (name == "GraeTrainer") != (args.trainers == "grae"):
                continue
            times = run(cls, model_dir, args.steps, seed=r, extra=extra, prompts=args.prompts,
                        completion_length=args.max_completion_length)[args.warmup:]
            sink.extend(times)
            print(f"round {r} {name}: median {statistics.median(times):.3f} s/step", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\nmodel {args.model}, {args.prompts} prompts x 8 samples of <= {args.max_completion_length} tokens, "
          f"{args.rounds} rounds x {args.steps - args.warmup} timed steps each; peak RSS {peak:.2f} GiB")
    if args.trainers != "both":
        return
    ms, mg = statistics.median(stock), statistics.median(grae)
    print("| trainer | median s/step |\n|---|---|")
    print(f"| trl.GRPOTrainer | {ms:.3f} |\n| grae GraeTrainer ({args.estimator}) | {mg:.3f} |")
    print(f"overhead: {100 * (mg / ms - 1):+.1f}% (ratio {mg / ms:.3f}; issue 22's target: <= 1.03)")


if __name__ == "__main__":
    main()
