"""The GPU check of issue 34 §6: GraeTrainer against stock ``trl.GRPOTrainer``, and ``grae eval``'s HF backend,
with grae's decoding (:mod:`grae.eval.decode`) on and off, on a Qwen2-shaped model with random weights.

    python bench/bench_gpu_rollouts.py [--size qwen2-0.5b|tiny] [--rounds 2] [--steps 4] [--warmup 1]
        [--prompts 4] [--tokens 256] [--eval-problems 8] [--n 16] [--out FILE.json]

``qwen2-0.5b`` is Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query / 2 key-value heads, MLP 4864, vocabulary
151,936, tied embeddings), built from its config with random weights: no hub, nothing downloaded. The tokenizer is
a word-level one over the whole vocabulary (``w0 w1 …``; pad 0, end 1), so every sampled id decodes. Random
weights almost never sample the end token, so every completion runs to ``--tokens``: rows never leave the batch
here, and the numbers are the decoding paths' (grouped-query decoding, top-k nucleus, shared prefill).

On a GPU the model trains in bf16 (weights and optimizer); on a CPU in fp32 (``--size tiny`` is the CPU smoke
test of this script, ``tests/test_bench_gpu_rollouts.py``). Trainers run interleaved round by round (stock,
GraeTrainer with TRL's generate and loss pass, GraeTrainer as ``grae train`` runs it: grae's decoding and the
shared prompt pass), each from the same weights; their first
``--warmup`` steps are dropped. Reported: median seconds per step, ratio to stock, peak GPU memory; then the HF
sampler's samples/s with grae's loop against transformers' ``generate`` (same prompts, interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_trl_overhead import StepTimer, reward  # noqa: E402

SHAPES = {
    "qwen2-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2, vocab_size=151_936, max_position_embeddings=32_768, rope_theta=1e6),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=1024),
}


def build(size: str, folder: str) -> str:
    """A random-weight Qwen2 of ``size`` and its word-level tokenizer, saved under ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    shape = SHAPES[size]
    vocab = {f"w{i}": i for i in range(shape["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="w0", eos_token="w1", padding_side="left")
    torch.manual_seed(0)
    config = Qwen2Config(**shape, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=None)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def prompts(count: int, seed: int = 0) -> list[str]:
    """``count`` prompts of 24–64 words (a MATH-like prompt's length in tokens)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(24, 65, (count,), generator=gen).tolist()
    return [" ".join(f"w{int(i)}" for i in torch.randint(2, 500, (n,), generator=gen)) for n in lengths]


def dtype() -> torch.dtype:
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32


def train_steps(way: str, folder: str, args) -> tuple[list[float], float]:
    """Seconds of every step after the warm-up, and peak GPU memory (GiB; 0 on a CPU), of one trainer."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from grae.engines.trl import GraeTrainer

    cuda = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype())
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, use_cpu=not cuda, bf16=cuda, report_to="none", save_strategy="no",
                         logging_steps=1, max_steps=args.steps, learning_rate=1e-6,
                         per_device_train_batch_size=8 * args.prompts, num_generations=8,
                         max_completion_length=args.tokens, temperature=1.0, top_k=0, beta=0.0,
                         gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0, seed=0)
        on = way == "grae decoding"  # grae train's defaults: grae's sampling loop and the shared prompt pass
        extra = {} if way == "stock" else {"estimator": "grpo",
                                           "rollouts": {"grae_decoding": on, "shared_prompt_pass": on}}
        trainer = (GRPOTrainer if way == "stock" else GraeTrainer)(
            model=model, processing_class=AutoTokenizer.from_pretrained(folder), reward_funcs=[reward], args=cfg,
            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts(64)]), callbacks=[timer.callback], **extra)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    del trainer, model
    if cuda:
        torch.cuda.empty_cache()
    return timer.times[args.warmup:], peak


def sample_rates(folder: str, args) -> dict[str, list[float]]:
    """Samples per second of grae eval's HF sampler (grae's loop) and of transformers' ``generate``, interleaved."""
    from grae.eval.backends import HFSampler, SamplingSettings, load_hf

    model, tokenizer, _ = load_hf(folder, dtype="bfloat16" if torch.cuda.is_available() else "float32")
    settings = SamplingSettings(temperature=1.0, top_p=0.95, max_tokens=args.tokens)
    sampler = HFSampler(model, tokenizer, settings)
    texts = prompts(args.eval_problems, seed=1)
    tokenizer.padding_side = "left"
    enc = tokenizer([t for t in texts for _ in range(args.n)], return_tensors="pt", padding=True).to(model.device)

    def stock():
        with torch.no_grad():
            model.generate(**enc, do_sample=True, temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=args.tokens,
                           pad_token_id=0, eos_token_id=1)

    ways = {"grae eval (grae decoding)": lambda: sampler.generate(texts, args.n, seed=0),
            "transformers generate": stock}
    rates: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way, run in ways.items():
            _sync()
            began = time.perf_counter()
            run()
            _sync()
            rates[way].append(len(texts) * args.n / (time.perf_counter() - began))
    return rates


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SHAPES), default="qwen2-0.5b")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (8 samples each)")
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens (training and eval)")
    parser.add_argument("--eval-problems", type=int, default=8)
    parser.add_argument("--n", type=int, default=16, help="samples per eval problem")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup (the warm-up steps are dropped)")
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({torch.get_num_threads()} threads)"
    print(f"device: {device}; model {args.size} {str(dtype()).replace('torch.', '')}, {args.prompts} prompts x 8 "
          f"samples of {args.tokens} tokens, {args.rounds} rounds x {args.steps - args.warmup} timed steps", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        build(args.size, folder)
        ways = ["stock", "grae, TRL generate", "grae decoding"]
        times: dict[str, list[float]] = {way: [] for way in ways}
        peaks: dict[str, float] = {way: 0.0 for way in ways}
        for r in range(args.rounds):
            for way in ways:
                steps, peak = train_steps(way, folder, args)
                times[way] += steps
                peaks[way] = max(peaks[way], peak)
                print(f"round {r} {way}: median {statistics.median(steps):.3f} s/step, peak {peak:.2f} GiB", flush=True)
        rates = sample_rates(folder, args)
    stock = statistics.median(times["stock"])
    print("\n| trainer | median s/step | ratio to stock | peak GPU memory (GiB) |\n|---|---|---|---|")
    for way in ways:
        median = statistics.median(times[way])
        print(f"| {way} | {median:.3f} | {median / stock:.3f} | {peaks[way]:.2f} |")
    print("\n| grae eval HF backend | samples/s (median) | rounds |\n|---|---|---|")
    for way, values in rates.items():
        print(f"| {way} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"device": device, "args": vars(args), "step_seconds": times, "peak_gib": peaks,
                       "samples_per_second": rates}, handle, indent=1)


if __name__ == "__main__":
    main()
