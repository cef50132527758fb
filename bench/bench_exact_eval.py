"""Speed of the exact evaluation (grae.eval.exact): 200 held-out chain_sum problems × 298 candidate
answers, teacher-forced on the tiny model, one CPU thread (issue 21 §1 target: ≤ 60 s; the research
note's naive version, prompt + candidate re-encoded for every candidate, took 150 s).

    OMP_NUM_THREADS=1 python bench/bench_exact_eval.py [--problems 200]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=200)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from grae.eval.backends import _render_with, load_hf
    from grae.eval.exact import reference_table, run_exact
    from grae.eval.tasks import load_examples, resolve_task
    from grae.tiny.tasks import DEFAULT_TASK_KWARGS

    model, tokenizer, _ = load_hf("tiny", device="cpu")
    task = resolve_task("chain_sum", params=dict(DEFAULT_TASK_KWARGS))
    examples = load_examples(task, args.problems)
    start = time.perf_counter()
    counts, rows, _ = run_exact(model, tokenizer, examples, task, render=lambda p: _render_with(tokenizer, p),
                                temperature=0.6, top_p=0.95, max_tokens=8)
    seconds = time.perf_counter() - start
    print(f"{len(examples)} problems x {len(task.answer_set())} candidates: {seconds:.1f} s on one thread "
          f"({len(examples) * len(task.answer_set()) / seconds:.0f} candidates/s)")
    print(f"enumerated mass: mean {counts.mass.mean():.3f}, min {counts.mass.min():.3f}")
    for name, row in reference_table(counts, rows).items():
        print(f"{name:28s} " + "  ".join(f"pass@{k} {100 * v:5.1f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
