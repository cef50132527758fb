"""The shared prompt pass (``rollouts.shared_prompt_pass``): prompt rows it computes against the ideal and TRL's
pass, and the step time with it on and off, with gradient checkpointing off and on (TRL's default is on).

GraeTrainer on one model, one data set and reward, ``grae train``'s rollouts (grae's decoding, ``trim_padding``,
``group_by_length``), ``loss_type`` dapo, beta 0, ``P`` prompts x 8 samples per step in micro-batches of
``--micro-batch`` rows. Sides, each in turn per round (one process, so machine noise hits all):

* ``trl-pass``: ``shared_prompt_pass`` off (TRL's pass over every row);
* ``shared-unsorted``: the shared pass on micro-batches as TRL's shuffle leaves them (before issue 48);
* ``shared``: the shared pass with each prompt's rows filling micro-batches together (issue 48 §3).

Per side: prompt rows the loss passes computed per step (TRL's pass: every row; ideal: one per prompt in each
micro-batch, i.e. max(prompts, micro-batches)), and the median s/step after ``--warmup`` steps.

    python bench/bench_shared_prompt.py [--model tiny] [--prompts 4] [--micro-batch 8] [--max-completion-length 32]
        [--rounds 2] [--steps 5] [--warmup 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_trl_overhead import StepTimer, reward  # noqa: E402

GROUP = 8


def run(side: str, args, checkpointing: bool, seed: int) -> tuple[list[float], list[int]]:
    """One GraeTrainer run: every step's seconds and the prompt rows its loss passes computed, per step."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    import grae.engines.trl.trainer as trainer_module
    from grae.engines.rows import group_by_length
    from grae.engines.trl import GraeTrainer, prompt_forward
    from grae.eval.prefill import prompt_runs
    from grae.presets import resolve_model

    computed: list[int] = []

    def counting(model, unwrapped, input_ids, attention_mask, logits_to_keep, **kwargs):
        out = prompt_forward.shared_prompt_logps(model, unwrapped, input_ids, attention_mask, logits_to_keep, **kwargs)
        width = input_ids.size(1) - logits_to_keep
        computed.append(prompt_runs(input_ids[:, :width], attention_mask[:, :width])[0].numel() if out is not None
                        else input_ids.size(0))
        return out

    trainer_module.shared_prompt_logps = counting
    trainer_module.group_by_length = (lambda chunks, by_prompt=False: group_by_length(chunks)) \
        if side == "shared-unsorted" else group_by_length
    model_dir = resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    timer = StepTimer()
    rows = GROUP * args.prompts
    data = Dataset.from_list([{"prompt": f"State the final answer: {a} + {b} =\nAnswer:"}
                              for a in range(40) for b in range(10)])
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                         logging_steps=1, max_steps=args.steps, learning_rate=1e-4,
                         per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=rows // args.micro_batch,
                         num_generations=GROUP, max_completion_length=args.max_completion_length, temperature=1.0,
                         top_k=0, beta=0.0, loss_type="dapo", gradient_checkpointing=checkpointing, disable_tqdm=True,
                         dataloader_num_workers=0, seed=seed)
        options = {"trim_padding": True, "group_by_length": True, "shared_prompt_pass": side != "trl-pass"}
        trainer = GraeTrainer(model=model, processing_class=tok, reward_funcs=[reward], args=cfg, train_dataset=data,
                              callbacks=[timer.callback], estimator="grpo", rollouts=options)
        trainer.train()
    micro_batches = rows // args.micro_batch
    per_step = [sum(computed[i:i + micro_batches]) for i in range(0, len(computed), micro_batches)]
    return timer.times, per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = GROUP * args.prompts
    ideal = max(args.prompts, rows // args.micro_batch)
    print(f"{args.model}, {args.prompts} prompts x {GROUP}, micro-batches of {args.micro_batch}, <= "
          f"{args.max_completion_length} tokens, {args.threads} thread(s), {args.rounds} rounds x "
          f"{args.steps - args.warmup} timed steps; prompt rows per step: TRL's pass {rows}, ideal {ideal}")
    print("| gradient checkpointing | side | prompt rows computed per step (mean) | median s/step |")
    print("|---|---|---|---|")
    for checkpointing in (False, True):
        times: dict[str, list[float]] = {}
        counts: dict[str, list[int]] = {}
        for round_index in range(args.rounds):
            for side in ("trl-pass", "shared-unsorted", "shared"):
                steps, per_step = run(side, args, checkpointing, seed=round_index)
                times.setdefault(side, []).extend(steps[args.warmup:])
                counts.setdefault(side, []).extend(per_step or [rows] * args.steps)
        for side in times:
            print(f"| {'on' if checkpointing else 'off'} | {side} | {statistics.mean(counts[side]):.1f} | "
                  f"{statistics.median(times[side]):.3f} |", flush=True)


if __name__ == "__main__":
    main()
