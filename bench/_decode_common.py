"""The set-up the decoding benches share (``bench_top_p.py``, ``bench_gqa_decode.py``): their arguments, the
model load, a task's prompts rendered and encoded left padded as ``grae eval`` encodes them, and interleaved
timing of a decoding step.

A step's time is (time for N new tokens − time for 1) / (N − 1), so the prompt's prefill is left out. Every
way of decoding is timed in turn within a round, each from the same seed, after one warm-up call each, so
that drift in the machine's speed falls on every way alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

Generate = Callable[[int], Any]  # new tokens -> generate's output, [B, prompt + tokens]


def decode_parser(description: str, *, tokens: int, rounds: int, threads: int) -> argparse.ArgumentParser:
    """The arguments both benches take; each bench adds its own and picks its defaults."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="chain_sum", help="one task, as grae eval --tasks takes it")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=tokens, help="new tokens per sequence (min = max)")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    return parser


def load_model(args: argparse.Namespace):
    """``(model, tokenizer)`` on the CPU with ``args.threads`` torch threads, the model in eval mode and the
    tokenizer padding on the left (as ``grae eval`` decodes)."""
    import torch

    from grae.eval.backends import load_hf

    torch.set_num_threads(args.threads)
    model, tokenizer, _ = load_hf(args.model, device="cpu")
    tokenizer.padding_side = "left"
    return model.eval(), tokenizer


def load_task_examples(args: argparse.Namespace, count: int) -> list[dict]:
    """The first ``count`` problems of ``args.tasks``."""
    from grae.eval.tasks import load_examples, resolve_task

    return load_examples(resolve_task(args.tasks), count)


def encode_prompts(tokenizer, examples: list[dict], repeat: int = 1):
    """Each example's prompt rendered with the model's chat template, ``repeat`` times in a row, left padded
    into one batch; special tokens are added unless every rendered prompt already starts with one."""
    from grae.eval.backends import _render_with, _starts_with_special

    prompts = [_render_with(tokenizer, ex["prompt"]) for ex in examples for _ in range(repeat)]
    add_special = not all(_starts_with_special(tokenizer, p) for p in prompts)
    return tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special)


def generate_exactly(model, enc, tokens: int, **kwargs):
    """``model.generate`` drawing exactly ``tokens`` new tokens per sequence."""
    return model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, **kwargs)


def timed(generate: Generate, tokens: int) -> tuple[float, Any]:
    """``(seconds, output)`` of one call, from seed 0, without gradients."""
    import torch

    torch.manual_seed(0)
    began = time.perf_counter()
    with torch.no_grad():
        out = generate(tokens)
    return time.perf_counter() - began, out


def interleaved_step_times(ways: dict[str, Generate], tokens: int, rounds: int
                           ) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Per way, the seconds per decoding step of every round and the output of every round's long call."""
    for generate in ways.values():  # warm-up: one-time costs out of the first round
        timed(generate, 2)
    steps: dict[str, list[float]] = {way: [] for way in ways}
    outputs: dict[str, list[Any]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, generate in ways.items():
            first, _ = timed(generate, 1)
            whole, out = timed(generate, tokens)
            steps[way].append((whole - first) / (tokens - 1))
            outputs[way].append(out)
    return steps, outputs


def print_step_times(steps: dict[str, list[float]], base: str, *, indent: str = "", width: int = 28) -> None:
    """One line per way: the median ms per step, its ratio to ``base``'s median, and every round's time."""
    reference = statistics.median(steps[base])
    for way, times in steps.items():
        median = statistics.median(times)
        print(f"{indent}{way:{width}s} {1000 * median:7.1f} ms/step, ratio {median / reference:.3f} "
              f"(rounds {', '.join(f'{1000 * t:.0f}' for t in times)})")
