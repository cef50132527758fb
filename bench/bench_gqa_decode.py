"""Decoding-step time of a grouped-query model on a CPU: transformers' SDPA attention (which copies each
key/value head G times when a padding mask is given) vs grae's grouped decoding attention (grae.eval.gqa),
on the calls ``grae eval`` makes: problems [start, start + batch/n) of a task, each prompt n times, left
padded, grae's nucleus warper. Interleaved rounds, same seed; a step's time is
(time for N new tokens − time for 1) / (N − 1), so the prefill is left out. Also checks that both draw
the same tokens.

    python bench/bench_gqa_decode.py --model smollm2 --tasks math500=PATH --start 0 216 --tokens 129 --rounds 2
"""

from __future__ import annotations

import _decode_common as shared


def main() -> None:
    parser = shared.decode_parser(__doc__.splitlines()[0], tokens=129, rounds=2, threads=2)
    parser.add_argument("--start", type=int, nargs="+", default=[0], help="first problem of each call measured")
    parser.add_argument("--n", type=int, default=4, help="samples per problem in a call")
    args = parser.parse_args()
    from grae.eval import nucleus
    from grae.eval.gqa import gqa_decoding

    model, tokenizer = shared.load_model(args)
    problems = args.batch // args.n
    examples = shared.load_task_examples(args, max(args.start) + problems)
    warper = nucleus.temperature_nucleus_warper(args.temperature, args.top_p)
    common = dict(do_sample=True, top_k=0, temperature=1.0, top_p=1.0, logits_processor=[warper],
                  pad_token_id=tokenizer.pad_token_id)
    print(f"{args.model}, calls of {args.batch} sequences ({problems} problems × {args.n}), "
          f"{args.tokens} new tokens, {args.threads} thread(s), T = {args.temperature}, top_p = {args.top_p}")
    for start in args.start:
        enc = shared.encode_prompts(tokenizer, examples[start:start + problems], repeat=args.n)

        def sdpa(tokens, enc=enc):
            return shared.generate_exactly(model, enc, tokens, **common)

        def grouped(tokens, enc=enc):
            with gqa_decoding(model) as switched:
                assert switched, "the model is not a grouped-query model on SDPA"
                return shared.generate_exactly(model, enc, tokens, **common)

        ways = {"transformers sdpa (repeat_kv)": sdpa, "grae grouped decoding": grouped}
        steps, outs = shared.interleaved_step_times(ways, args.tokens, args.rounds)
        lengths = enc["attention_mask"].sum(1)
        print(f"problems {start}-{start + problems - 1}: prompts padded to {enc['input_ids'].shape[1]} "
              f"tokens (shortest {int(lengths.min())})")
        shared.print_step_times(steps, "transformers sdpa (repeat_kv)", indent="  ", width=30)
        a, b = outs["transformers sdpa (repeat_kv)"], outs["grae grouped decoding"]
        same = sum(int((x == y).all(1).sum()) for x, y in zip(a, b))
        print(f"  sequences drawn identically: {same} of {sum(len(x) for x in a)}")


if __name__ == "__main__":
    main()
