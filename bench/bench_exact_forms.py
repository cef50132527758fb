"""How much of the exact − sampled gap the answer forms outside the canonical one explain (issue 36 §4).

Exact pass@k (grae.eval.exact) teacher-forces the canonical completion " {answer}" only; the chain_sum
verifier also accepts "{answer}" (no leading space) and "  {answer}". This scores all three forms of
every candidate answer on the tiny model's default held-out problems (T = 1, top-p 1, 8 tokens, as
``grae train``'s held-out evaluation) and prints exact pass@k with the canonical form alone and with the
three summed, beside sampled pass@k from rows of the same problems when given
(``grae eval tiny --tasks chain_sum --n 256 --temperature 1 --top-p 1 --num-problems N …``).

    OMP_NUM_THREADS=1 python bench/bench_exact_forms.py [--problems 100] [--sampled ROWS.jsonl]
"""

from __future__ import annotations

import argparse

import numpy as np

KS = (1, 16, 64, 256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--sampled", help="sampled rows of the same problems (grae eval's <task>.jsonl)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from grae.eval.backends import _render_with, load_hf
    from grae.eval.exact import CandidateScorer, task_answer_set
    from grae.eval.tasks import load_examples, resolve_task
    from grae.tiny.tasks import DEFAULT_TASK_KWARGS

    model, tokenizer, _ = load_hf("tiny", device="cpu")
    task = resolve_task("chain_sum", params=dict(DEFAULT_TASK_KWARGS))
    examples = load_examples(task, args.problems)
    answers = task_answer_set(task)
    index = {a: i for i, a in enumerate(answers)}
    forms = {"canonical": [task.answer_completion(a) for a in answers], "no space": list(answers),
             "two spaces": ["  " + a for a in answers]}
    p = {name: np.zeros(len(examples)) for name in forms}  # [P] per form
    for name, completions in forms.items():
        scorer = CandidateScorer(model, tokenizer, completions, temperature=1.0, top_p=1.0, max_tokens=8)
        for i, example in enumerate(examples):
            probs = np.exp(scorer.logprobs(_render_with(tokenizer, example["prompt"])))
            p[name][i] = probs[index[str(example["answer"]).strip()]]

    def passk(q: np.ndarray) -> str:
        return " | ".join(f"{100 * np.mean(1 - (1 - q) ** k):.1f}" for k in KS)

    print(f"{len(examples)} problems; mean p per form: " + ", ".join(f"{n} {100 * v.mean():.2f}" for n, v in p.items()))
    print("| evaluation | " + " | ".join(f"pass@{k}" for k in KS) + " |\n|---|" + "---|" * len(KS))
    print(f"| exact, canonical form only | {passk(p['canonical'])} |")
    print(f"| exact, the three accepted forms | {passk(sum(p.values()))} |")
    if args.sampled:
        from grae.eval.records import read_rows
        from grae.eval.stats import count_problems, per_problem_passk

        counts = count_problems(read_rows(args.sampled), question_ids=[str(e["question_id"]) for e in examples])
        values = per_problem_passk(counts, list(KS)).mean(axis=0)
        print(f"| sampled, n = {int(counts.n.min())} | " + " | ".join(f"{100 * v:.1f}" for v in values) + " |")


if __name__ == "__main__":
    main()
