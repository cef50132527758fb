"""Whole sampling calls of ``grae eval``'s HF backend on a CPU with each problem's prompt prefilled once for its
n samples (``share_prefill``, grae.eval.prefill) vs once per sample: problems [start, start + batch/n) of a
task, each prompt n times, left padded, through grae's sampling loop (grae.eval.decode.decode, as HFSampler
calls it: rows end at EOS and leave the batch). Interleaved rounds, same seed; also times a 1-token call
(the prefill and one draw) and checks that both ways draw the same tokens.

    python bench/bench_eval_prefill.py --model smollm2 --tasks math500=PATH --start 0 4 216 --tokens 65 --rounds 2
"""

from __future__ import annotations

import statistics

import _decode_common as shared


def sampling_plan(model, tokenizer, args, tokens: int):
    """The :class:`grae.eval.decode.Plan` of an HFSampler call with ``args``' temperature and top-p and at most
    ``tokens`` new tokens (the config HFSampler hands :func:`grae.eval.decode.plan_of`)."""
    from transformers import GenerationConfig

    from grae.eval.decode import plan_of

    config = GenerationConfig(max_new_tokens=tokens, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=model.generation_config.eos_token_id or tokenizer.eos_token_id,
                              do_sample=True, top_k=0, temperature=args.temperature, top_p=args.top_p)
    plan = plan_of(model, config)
    assert plan is not None, "grae's sampling loop does not run this model (HFSampler would call generate)"
    return plan


def interleaved_call_times(ways: dict[str, shared.Generate], tokens: int, rounds: int):
    """Per way, every round's seconds for a 1-token call and for a ``tokens`` call, and the latter's output;
    each way in turn within a round, from the same seed, after one warm-up call each."""
    for generate in ways.values():
        shared.timed(generate, 2)
    first: dict[str, list[float]] = {way: [] for way in ways}
    whole: dict[str, list[float]] = {way: [] for way in ways}
    outputs: dict[str, list] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, generate in ways.items():
            first[way].append(shared.timed(generate, 1)[0])
            seconds, out = shared.timed(generate, tokens)
            whole[way].append(seconds)
            outputs[way].append(out)
    return first, whole, outputs


def identical_rows(a, b, pad_token_id: int) -> int:
    """How many rows of ``a`` and ``b`` (``[B, P + T_a]``, ``[B, P + T_b]``) are equal once the shorter is padded
    with the pad token (a call stops early only when every row has ended, so its rows are pad after that)."""
    import torch.nn.functional as F

    width = max(a.shape[1], b.shape[1])
    a, b = (F.pad(x, (0, width - x.shape[1]), value=pad_token_id) for x in (a, b))
    return int((a == b).all(1).sum())


def print_call_times(times: dict[str, list[float]], base: str, label: str, *, indent: str = "  ") -> None:
    """One line per way: the median seconds of ``label``, its ratio to ``base``'s median, every round's time."""
    reference = statistics.median(times[base])
    for way, rounds in times.items():
        median = statistics.median(rounds)
        print(f"{indent}{way:18s} {label} {median:7.3f} s, ratio {median / reference:.3f} "
              f"(rounds {', '.join(f'{t:.3f}' for t in rounds)})")


def main() -> None:
    parser = shared.decode_parser(__doc__.splitlines()[0], tokens=65, rounds=2, threads=2)
    parser.add_argument("--start", type=int, nargs="+", default=[0, 4, 216], help="first problem of each call")
    parser.add_argument("--n", type=int, default=4, help="samples per problem in a call")
    args = parser.parse_args()
    from grae.eval.decode import decode

    model, tokenizer = shared.load_model(args)
    if tokenizer.pad_token_id is None:  # as HFSampler sets it
        tokenizer.pad_token = tokenizer.eos_token
    problems = args.batch // args.n
    examples = shared.load_task_examples(args, max(args.start) + problems)
    print(f"{args.model}, calls of {args.batch} sequences ({problems} problems × {args.n}), at most {args.tokens} "
          f"new tokens, {args.threads} thread(s), T = {args.temperature}, top_p = {args.top_p}")
    for start in args.start:
        enc = shared.encode_prompts(tokenizer, examples[start:start + problems], repeat=args.n)

        def call(tokens, share, enc=enc):
            plan = sampling_plan(model, tokenizer, args, tokens)
            return decode(model, enc["input_ids"], enc["attention_mask"], plan.sampling,
                          max_new_tokens=plan.max_new_tokens, eos_token_ids=plan.eos_token_ids,
                          pad_token_id=plan.pad_token_id, share_prefill=share).sequences

        ways = {"shared prefill": lambda t: call(t, True), "prefill per row": lambda t: call(t, False)}
        first, whole, outs = interleaved_call_times(ways, args.tokens, args.rounds)
        lengths = enc["attention_mask"].sum(1)
        drawn = [out.shape[1] - enc["input_ids"].shape[1] for out in outs["shared prefill"]]
        print(f"problems {start}-{start + problems - 1}: prompts padded to {enc['input_ids'].shape[1]} tokens "
              f"(shortest {int(lengths.min())}); calls ran {', '.join(map(str, drawn))} steps")
        print_call_times(whole, "prefill per row", "call  ")
        print_call_times(first, "prefill per row", "1-tok ")
        unshared = statistics.median(whole["prefill per row"])
        saved = unshared - statistics.median(whole["shared prefill"])
        print(f"  saved {saved:.3f} s a call ({100 * saved / unshared:.1f} %); a 1-token call is "
              f"{100 * statistics.median(first['prefill per row']) / unshared:.1f} % of a call without sharing")
        a, b = outs["shared prefill"], outs["prefill per row"]
        same = sum(identical_rows(x, y, tokenizer.pad_token_id) for x, y in zip(a, b))
        print(f"  sequences drawn identically: {same} of {sum(len(x) for x in a)}")


if __name__ == "__main__":
    main()
