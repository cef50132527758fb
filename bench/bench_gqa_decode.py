"""Decoding-step time of a grouped-query model on a CPU: transformers' SDPA attention (which copies each
key/value head G times when a padding mask is given) vs grae's grouped decoding attention (grae.eval.gqa),
on the calls ``grae eval`` makes: problems [start, start + batch/n) of a task, each prompt n times, left
padded, grae's nucleus warper. Interleaved rounds, same seed; a step's time is
(time for N new tokens − time for 1) / (N − 1), so the prefill is left out. Also checks that both draw
the same tokens.

    python bench/bench_gqa_decode.py --model smollm2 --tasks math500=PATH --start 0 216 --tokens 129 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="chain_sum", help="one task, as grae eval --tasks takes it")
    parser.add_argument("--start", type=int, nargs="+", default=[0], help="first problem of each call measured")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n", type=int, default=4, help="samples per problem in a call")
    parser.add_argument("--tokens", type=int, default=129, help="new tokens per sequence (min = max)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from grae.eval import nucleus
    from grae.eval.backends import _render_with, _starts_with_special, load_hf
    from grae.eval.gqa import gqa_decoding
    from grae.eval.tasks import load_examples, resolve_task

    model, tokenizer, _ = load_hf(args.model, device="cpu")
    model.eval()
    examples = load_examples(resolve_task(args.tasks), max(args.start) + args.batch // args.n)
    tokenizer.padding_side = "left"
    warper = nucleus.temperature_nucleus_warper(args.temperature, args.top_p)
    common = dict(do_sample=True, top_k=0, temperature=1.0, top_p=1.0, logits_processor=[warper],
                  pad_token_id=tokenizer.pad_token_id)
    print(f"{args.model}, calls of {args.batch} sequences ({args.batch // args.n} problems × {args.n}), "
          f"{args.tokens} new tokens, {args.threads} thread(s), T = {args.temperature}, top_p = {args.top_p}")
    for start in args.start:
        prompts = [_render_with(tokenizer, ex["prompt"]) for ex in examples[start:start + args.batch // args.n]]
        flat = [p for p in prompts for _ in range(args.n)]
        add_special = not all(_starts_with_special(tokenizer, p) for p in flat)
        enc = tokenizer(flat, return_tensors="pt", padding=True, add_special_tokens=add_special)

        def timed(grouped: bool, tokens: int, enc=enc):
            torch.manual_seed(0)
            began = time.perf_counter()
            with torch.no_grad():
                if grouped:
                    with gqa_decoding(model) as switched:
                        assert switched, "the model is not a grouped-query model on SDPA"
                        out = model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, **common)
                else:
                    out = model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, **common)
            return time.perf_counter() - began, out

        ways = {"transformers sdpa (repeat_kv)": False, "grae grouped decoding": True}
        for grouped in ways.values():  # warm-up
            timed(grouped, 2)
        steps: dict[str, list[float]] = {way: [] for way in ways}
        outs: dict[str, list] = {way: [] for way in ways}
        for _ in range(args.rounds):
            for way, grouped in ways.items():
                first, _ = timed(grouped, 1)
                whole, out = timed(grouped, args.tokens)
                steps[way].append((whole - first) / (args.tokens - 1))
                outs[way].append(out)
        lengths = enc["attention_mask"].sum(1)
        print(f"problems {start}-{start + args.batch // args.n - 1}: prompts padded to {enc['input_ids'].shape[1]} "
              f"tokens (shortest {int(lengths.min())})")
        base = statistics.median(steps["transformers sdpa (repeat_kv)"])
        for way in ways:
            median = statistics.median(steps[way])
            print(f"  {way:30s} {1000 * median:7.1f} ms/step, ratio {median / base:.3f} "
                  f"(rounds {', '.join(f'{1000 * t:.0f}' for t in steps[way])})")
        a, b = outs["transformers sdpa (repeat_kv)"], outs["grae grouped decoding"]
        same = sum(int((x == y).all(1).sum()) for x, y in zip(a, b))
        print(f"  sequences drawn identically: {same} of {sum(len(x) for x in a)}")


if __name__ == "__main__":
    main()
