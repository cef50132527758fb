"""Advantage-computation throughput: grae's vectorised estimators vs a per-sample Python loop.

The loop baseline is tests/reference_estimators.py — dict-of-lists loops in the shape of the seeds'
verl code (id2score / id2mean / id2std). Both run in this one process, interleaved, and the table
reports ratios (machines are noisy; ratios measured side by side are what we publish).

    python bench/bench_advantage.py [--groups 1024 8192] [--group-size 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import reference_estimators as ref  # noqa: E402
from grae.advantage import get_estimator, names  # noqa: E402

LOOPS = {
    "grpo": lambda r, g: ref.grpo(r, g),
    "dr_grpo": lambda r, g: ref.grpo(r, g, scale=False),
    "rloo": ref.rloo,
    "agrae": ref.agrae,
    "hard_focused": lambda r, g: ref.focused(r, g, "hard"),
    "easy_focused": lambda r, g: ref.focused(r, g, "easy"),
    "positive_dominant": lambda r, g: ref.dominant(r, g, "positive"),
    "negative_dominant": lambda r, g: ref.dominant(r, g, "negative"),
    "psr": lambda r, g: ref.signed_reinforce(r, "psr"),
    "nsr": lambda r, g: ref.signed_reinforce(r, "nsr"),
    "w_reinforce": lambda r, g: ref.signed_reinforce(r, "w_reinforce"),
    "ngrpo": ref.ngrpo,
    "avspo": lambda r, g: ref.avspo_step(r, g, 0.5),
    "dgpo": ref.dgpo,
}


def seeds_verl_grpo(scores: torch.Tensor, index, epsilon: float = 1e-6, agrae_omega: float | None = None, alpha: float = 1.0):
    """GRPO (and, with ``agrae_omega``, the paper's A-GRAE) in the shape of the seeds' verl
    ``compute_grpo_outcome_advantage``: Python loops over tensor elements and dicts of lists."""
    scores = scores.clone()
    id2score, id2mean, id2std = {}, {}, {}
    bsz = scores.shape[0]
    for i in range(bsz):
        id2score.setdefault(index[i], []).append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
            id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
    for i in range(bsz):
        s = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        if agrae_omega is not None:
            p = id2mean[index[i]]
            if 0 < p < 1:
                s = agrae_omega / 2 * s / torch.sqrt(p) + (1 - agrae_omega) / 2 * s / torch.sqrt(1 - p)
            if s > 0:
                s = s * min(1.0, agrae_omega / alpha)
        scores[i] = s
    return scores


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def make_batch(n_groups: int, group_size: int):
    gen = torch.Generator().manual_seed(0)
    n = n_groups * group_size
    p = torch.rand(n_groups, generator=gen).repeat_interleave(group_size)
    rewards = torch.bernoulli(p, generator=gen).float()
    perm = torch.randperm(n, generator=gen)
    return rewards[perm], torch.arange(n_groups).repeat_interleave(group_size)[perm]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {args.threads} thread(s); best of {args.repeats}; "
          f"groups of {args.group_size}, p ~ U(0,1) per group, binary rewards, shuffled")
    print("\nvs. the seeds' verl loop (Python loop over tensor elements, as in their core_algos.py):")
    print("| estimator | N | grae (ms) | seeds' loop (ms) | speed-up |")
    print("|---|---|---|---|---|")
    for n_groups in args.groups:
        rewards, group_ids = make_batch(n_groups, args.group_size)
        index = group_ids.numpy()
        omega = float(rewards.mean())
        for name, loop in [("grpo", partial(seeds_verl_grpo, rewards, index)),
                           ("agrae", partial(seeds_verl_grpo, rewards, index, agrae_omega=omega))]:
            est = get_estimator(name)
            fast = best_of(partial(est, rewards, group_ids), args.repeats)
            slow = best_of(loop, 1)
            print(f"| {name} | {len(rewards):,} | {fast * 1e3:.2f} | {slow * 1e3:.0f} | {slow / fast:.0f}× |", flush=True)

    print("\nvs. plain-Python reference loops over floats (tests/reference_estimators.py; input already a list):")
    print("| estimator | N | grae (ms) | float loop (ms) | speed-up |")
    print("|---|---|---|---|---|")
    for n_groups in args.groups:
        rewards, group_ids = make_batch(n_groups, args.group_size)
        n = len(rewards)
        r_list, g_list = rewards.tolist(), group_ids.tolist()
        for name in names():
            est = get_estimator(name)
            fast = best_of(partial(est, rewards, group_ids), args.repeats)
            if name in LOOPS:
                slow = best_of(partial(LOOPS[name], r_list, g_list), args.repeats)
                print(f"| {name} | {n:,} | {fast * 1e3:.2f} | {slow * 1e3:.1f} | {slow / fast:.0f}× |", flush=True)
            else:
                print(f"| {name} | {n:,} | {fast * 1e3:.2f} | – | – |", flush=True)


if __name__ == "__main__":
    main()
