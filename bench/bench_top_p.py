"""Decoding-step time of top-p sampling on a CPU: transformers' ``generate(temperature=T, top_p=p)``
(a full sort of the vocabulary per step) vs grae's topk nucleus (grae.eval.nucleus), and the same in
bfloat16 (``grae eval --dtype bfloat16``); interleaved rounds on the same prompts and seed. A step's time
is (time for N new tokens − time for 1) / (N − 1), so the prompt's prefill is left out. Also checks that
the two top-p ways draw the same tokens, and counts the sort fallbacks.

    python bench/bench_top_p.py --model smollm2 --tasks math500=PATH [--rounds 3 --tokens 64 --batch 16]
"""

from __future__ import annotations

import copy

import _decode_common as shared


def main() -> None:
    args = shared.decode_parser(__doc__.splitlines()[0], tokens=64, rounds=3, threads=1).parse_args()
    import torch

    from grae.eval import nucleus

    model, tokenizer = shared.load_model(args)
    models = {"float32": model, "bfloat16": copy.deepcopy(model).to(torch.bfloat16).eval()}
    enc = shared.encode_prompts(tokenizer, shared.load_task_examples(args, args.batch))
    common = dict(do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id)
    transformers_top_p = dict(temperature=args.temperature, top_p=args.top_p)
    grae_top_p = dict(temperature=1.0, top_p=1.0,
                      logits_processor=[nucleus.temperature_nucleus_warper(args.temperature, args.top_p)])

    def way(dtype, kwargs):
        return lambda tokens: shared.generate_exactly(models[dtype], enc, tokens, **common, **kwargs)

    ways = {
        "float32, transformers top_p": way("float32", transformers_top_p),
        "float32, grae nucleus": way("float32", grae_top_p),
        "bfloat16, grae nucleus": way("bfloat16", grae_top_p),
    }
    sorts = []
    sorted_keep = nucleus._sorted_keep
    nucleus._sorted_keep = lambda *a: sorts.append(1) or sorted_keep(*a)
    steps, outputs = shared.interleaved_step_times(ways, args.tokens, args.rounds)
    print(f"{args.model}, {args.batch} sequences, prompts padded to {enc['input_ids'].shape[1]} tokens, "
          f"{args.tokens} new tokens, {args.threads} thread(s), T = {args.temperature}, top_p = {args.top_p}")
    shared.print_step_times(steps, "float32, transformers top_p")
    same = all(torch.equal(a, b) for a, b in zip(outputs["float32, transformers top_p"], outputs["float32, grae nucleus"]))
    print(f"float32 top_p ways draw the same tokens: {same}; grae's sort fallbacks: {len(sorts)} of "
          f"{2 * (args.rounds * (args.tokens + 1) + 2)} steps")


if __name__ == "__main__":
    main()
