"""RLVR in one file, no TRL: the tiny model, procedural prompts, a verifier, any grae estimator, grae.loss.

    python examples/minimal_loop.py                       # A-GRAE, 60 steps, about a minute on a CPU
    python examples/minimal_loop.py --estimator grpo --steps 20

Reads top to bottom: sample G completions per prompt → score them → estimator → advantages → the
clipped policy loss on the completion tokens → an optimizer step. Everything the trainers add
(batching across processes, vLLM, checkpoints) is left out on purpose.
"""

from __future__ import annotations

import argparse
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grae.advantage import get_estimator
from grae.loss import policy_loss
from grae.tiny import tiny_model_path


def make_prompt(rng: random.Random) -> tuple[str, int]:
    """A procedural problem in the form the tiny model was warmed up on (reasoning-gym chain_sum, 2 terms)."""
    a, b, sign = rng.randint(0, 99), rng.randint(0, 99), rng.choice("+-")
    answer = a + b if sign == "+" else a - b
    return f"State the final answer to the following arithmetic problem: {a} {sign} {b} =\nAnswer:", answer


def verify(completion: str, answer: int) -> float:
    """1.0 if the completion's first token is the right number, else 0.0."""
    words = completion.strip().split()
    return float(bool(words) and words[0].rstrip(".,") == str(answer))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimator", default="agrae", help="any name from `grae estimators`")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="G, completions per prompt")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    estimator = get_estimator(args.estimator)
    G = args.group_size

    for step in range(1, args.steps + 1):
        # 1. sample G completions for each prompt
        problems = [make_prompt(rng) for _ in range(args.prompts)]
        prompts = [prompt for prompt, _ in problems for _ in range(G)]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True)
        model.eval()
        with torch.no_grad():
            sequences = model.generate(**encoded, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=8,
                                       pad_token_id=tokenizer.pad_token_id)  # [N, P + T]
        prompt_len = encoded["input_ids"].size(1)
        completion_ids = sequences[:, prompt_len:]  # [N, T]
        completion_mask = _until_eos(completion_ids, tokenizer.eos_token_id)  # [N, T]

        # 2. score them with the verifier
        texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        rewards = torch.tensor([verify(text, answer) for text, (_, answer) in
                                zip(texts, [p for p in problems for _ in range(G)])])  # [N]
        group_ids = torch.arange(args.prompts).repeat_interleave(G)  # [N]

        # 3. the estimator turns rewards into advantages (and per-sample weights)
        result = estimator(rewards, group_ids)

        # 4. the clipped policy loss on the completion tokens (one update per batch: ratio 1)
        model.train()
        attention = torch.cat([encoded["attention_mask"], completion_mask], dim=1)  # [N, P + T]
        logits = model(input_ids=sequences, attention_mask=attention).logits[:, prompt_len - 1:-1]  # [N, T, V]
        logp = torch.log_softmax(logits.float(), dim=-1).gather(2, completion_ids.unsqueeze(2)).squeeze(2)  # [N, T]
        loss, _ = policy_loss(logp, logp.detach(), result.advantages, completion_mask.float(),
                              weights=result.weights, agg="token-mean")

        # 5. an optimizer step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 1 or step % 10 == 0 or step == args.steps:
            print(f"step {step:>3}  reward {rewards.mean():.3f}  omega {result.metrics['omega']:.3f}  "
                  f"acr {result.metrics['acr']:.3f}  loss {loss.item():+.4f}")


def _until_eos(completion_ids: torch.Tensor, eos: int) -> torch.Tensor:
    """``[N, T]`` mask of each completion's tokens up to and including its first EOS."""
    is_eos = completion_ids == eos
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return (~after_eos).long()


if __name__ == "__main__":
    main()
