"""Decoding-step time of top-p sampling on a CPU: transformers' ``generate(temperature=T, top_p=p)``
(a full sort of the vocabulary per step) vs grae's topk nucleus (grae.eval.nucleus), and the same in
bfloat16 (``grae eval --dtype bfloat16``); interleaved rounds on the same prompts and seed. A step's time
is (time for N new tokens − time for 1) / (N − 1), so the prompt's prefill is left out. Also checks that
the two top-p ways draw the same tokens, and counts the sort fallbacks.

    python bench/bench_top_p.py --model smollm2 --tasks math500=PATH [--rounds 3 --tokens 64 --batch 16]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="chain_sum", help="one task, as grae eval --tasks takes it")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per sequence (min = max)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from grae.eval import nucleus
    from grae.eval.backends import _render_with, _starts_with_special, load_hf
    from grae.eval.tasks import load_examples, resolve_task

    model, tokenizer, _ = load_hf(args.model, device="cpu")
    models = {"float32": model.eval(), "bfloat16": copy.deepcopy(model).to(torch.bfloat16).eval()}
    task = resolve_task(args.tasks)
    prompts = [_render_with(tokenizer, ex["prompt"]) for ex in load_examples(task, args.batch)]
    tokenizer.padding_side = "left"
    add_special = not all(_starts_with_special(tokenizer, p) for p in prompts)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special)
    common = dict(do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id)
    transformers_top_p = dict(temperature=args.temperature, top_p=args.top_p)
    grae_top_p = dict(temperature=1.0, top_p=1.0,
                      logits_processor=[nucleus.temperature_nucleus_warper(args.temperature, args.top_p)])
    ways = {
        "float32, transformers top_p": ("float32", transformers_top_p),
        "float32, grae nucleus": ("float32", grae_top_p),
        "bfloat16, grae nucleus": ("bfloat16", grae_top_p),
    }
    sorts = []
    sorted_keep = nucleus._sorted_keep
    nucleus._sorted_keep = lambda *a: sorts.append(1) or sorted_keep(*a)

    def timed(lm, kwargs, tokens):
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.no_grad():
            out = lm.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, **common, **kwargs)
        return time.perf_counter() - start, out

    for dtype, kwargs in ways.values():  # warm-up: one-time costs out of the first round
        timed(models[dtype], kwargs, 2)
    steps: dict[str, list[float]] = {way: [] for way in ways}
    outputs: dict[str, list] = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way, (dtype, kwargs) in ways.items():
            first, _ = timed(models[dtype], kwargs, 1)
            whole, out = timed(models[dtype], kwargs, args.tokens)
            steps[way].append((whole - first) / (args.tokens - 1))
            outputs[way].append(out)
    print(f"{args.model}, {args.batch} sequences, prompts padded to {enc['input_ids'].shape[1]} tokens, "
          f"{args.tokens} new tokens, {args.threads} thread(s), T = {args.temperature}, top_p = {args.top_p}")
    base = statistics.median(steps["float32, transformers top_p"])
    for way in ways:
        median = statistics.median(steps[way])
        print(f"{way:28s} {1000 * median:7.1f} ms/step, ratio {median / base:.3f} "
              f"(rounds {', '.join(f'{1000 * t:.0f}' for t in steps[way])})")
    same = all(torch.equal(a, b) for a, b in zip(outputs["float32, transformers top_p"], outputs["float32, grae nucleus"]))
    print(f"float32 top_p ways draw the same tokens: {same}; grae's sort fallbacks: {len(sorts)} of "
          f"{2 * (args.rounds * (args.tokens + 1) + 2)} steps")


if __name__ == "__main__":
    main()
