"""Per-sample reference implementations written directly from the papers' equations.

Plain Python over dicts keyed by group id — the shape of the seeds' verl code
(``id2score``/``id2mean``/``id2std`` loops) — deliberately independent of grae's vectorised code.
Used by the reference tests and by bench/bench_advantage.py as the loop baseline.
"""

from __future__ import annotations

import math
from collections import defaultdict


def _groups(rewards, group_ids):
    id2score = defaultdict(list)
    for r, g in zip(rewards, group_ids):
        if not math.isnan(r):
            id2score[g].append(r)
    return id2score


def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs, unbiased=True):
    if len(xs) <= 1:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1 if unbiased else len(xs)))


def grpo(rewards, group_ids, eps=1e-6, unbiased=True, scale=True):
    id2score = _groups(rewards, group_ids)
    id2mean = {g: _mean(v) for g, v in id2score.items()}
    id2std = {g: _std(v, unbiased) for g, v in id2score.items()}
    out = []
    for r, g in zip(rewards, group_ids):
        if math.isnan(r):
            out.append(0.0)
            continue
        a = r - id2mean[g]
        out.append(a / (id2std[g] + eps) if scale else a)
    return out


def rloo(rewards, group_ids):
    id2score = _groups(rewards, group_ids)
    out = []
    for r, g in zip(rewards, group_ids):
        v = id2score[g]
        out.append(0.0 if len(v) < 2 else r - (sum(v) - r) / (len(v) - 1))
    return out


def agrae(rewards, group_ids, alpha=1.0, eps=1e-6, sample_level=True, group_level=True, scale=True, omega=None):
    """Eqs. 11–13; ``omega`` replaces Eq. 11's batch mean in both Eq. 12 and Eq. 13 when given."""
    id2score = _groups(rewards, group_ids)
    valid = [r for r in rewards if not math.isnan(r)]
    if omega is None:
        omega = sum(valid) / len(valid)  # Eq. 11
    base = grpo(rewards, group_ids, eps, scale=scale)
    out = []
    for a_hat, g, r in zip(base, group_ids, rewards):
        if math.isnan(r):  # a missing reward: no advantage
            out.append(0.0)
            continue
        p = _mean(id2score[g])
        a = a_hat
        if sample_level and 0 < p < 1:  # Eq. 12
            a = (omega / 2) * a_hat / math.sqrt(p) + ((1 - omega) / 2) * a_hat / math.sqrt(1 - p)
        if group_level and a > 0:  # Eq. 13
            a = a * min(1.0, omega / alpha)
        out.append(a)
    return out


def focused(rewards, group_ids, kind, gamma=0.5, eps=1e-6):
    id2score = _groups(rewards, group_ids)
    out = []
    for a_hat, g in zip(grpo(rewards, group_ids, eps), group_ids):
        p = _mean(id2score[g])
        if 0 < p < 1:
            a_hat = gamma * a_hat / (math.sqrt(p) if kind == "hard" else math.sqrt(1 - p))
        out.append(a_hat)
    return out


def dominant(rewards, group_ids, kind, beta=10.0, eps=1e-6):
    factor = beta if kind == "positive" else 1 / beta
    return [a * factor if a > 0 else a for a in grpo(rewards, group_ids, eps)]


def signed_reinforce(rewards, kind, lam=0.1):
    adv, w = [], []
    for r in rewards:
        correct = r > 0.5
        if kind == "psr":
            adv.append(1.0 if correct else 0.0), w.append(1.0 if correct else 0.0)
        elif kind == "nsr":
            adv.append(0.0 if correct else -1.0), w.append(0.0 if correct else 1.0)
        else:
            adv.append(lam if correct else -1.0), w.append(1.0)
    return adv, w


def with_virtual(rewards, group_ids, virtual_for_group, eps=1e-6):
    """GRPO where group g's statistics include the virtual rewards ``virtual_for_group(g, real)``."""
    id2score = _groups(rewards, group_ids)
    stats = {}
    for g, v in id2score.items():
        joined = v + list(virtual_for_group(g, v))
        stats[g] = (_mean(joined), _std(joined))
    return [(r - stats[g][0]) / (stats[g][1] + eps) for r, g in zip(rewards, group_ids)]


def ngrpo(rewards, group_ids, max_reward=1.0, m=1, eps=1e-6):
    return with_virtual(rewards, group_ids, lambda g, v: [max_reward] * m, eps)


def avspo_step(rewards, group_ids, tau, r_max=1.0, alpha=0.5, eps=1e-6):
    """One AVSPO advantage computation at threshold ``tau`` (returns advantages and ACR)."""
    id2score = _groups(rewards, group_ids)
    collapsed = {g: _std(v, unbiased=False) < 1e-6 for g, v in id2score.items()}
    acr = sum(collapsed.values()) / len(collapsed)

    def virtual(g, v):
        if not (collapsed[g] and acr > tau):
            return []
        size = len(v)
        k_total = max(1, min(size, math.ceil(size * acr**alpha)))
        return [r_max * (1 - (k - 1) / k_total) for k in range(1, k_total + 1)]

    return with_virtual(rewards, group_ids, virtual, eps), acr


def dgpo(rewards, group_ids, temperature=2.0):
    id2score = _groups(rewards, group_ids)
    valid = {g: _std(v, unbiased=False) >= 1e-6 for g, v in id2score.items()}
    exp_d = {g: math.exp(-_mean(v) / temperature) for g, v in id2score.items() if valid[g]}
    z = sum(exp_d.values())
    lam = {g: len(exp_d) * e / z for g, e in exp_d.items()}
    adv, w = [], []
    for r, g in zip(rewards, group_ids):
        if not valid[g]:
            adv.append(0.0), w.append(0.0)
            continue
        v = id2score[g]
        m = _mean(v)
        mad = sum(abs(x - m) for x in v) / len(v)
        adv.append(lam[g] * (r - m) / mad), w.append(1.0)
    return adv, w


def recent_mean(batches, n):
    """The mean of the most recent ``n`` valid rewards over ``batches`` (oldest first), one sample at a time:
    walk back from the newest batch; a batch that fits whole counts whole; the batch the window cuts
    through counts as the average over every choice of its samples that fills the window, i.e. its
    mean times the number taken. (Samples of one batch are equally recent.) Fewer than ``n`` in all:
    the mean over all of them."""
    total, taken = 0.0, 0
    for batch in reversed(batches):
        valid = [r for r in batch if not math.isnan(r)]
        if not valid:
            continue
        if taken == 0 and len(valid) >= n:  # this batch alone fills the window: all of it, equally recent
            return _mean(valid)
        room = n - taken
        if len(valid) <= room:
            total, taken = total + sum(valid), taken + len(valid)
        else:
            return (total + _mean(valid) * room) / n
        if taken == n:
            break
    return total / taken if taken else float("nan")


def unlikeliness_release(rewards, group_ids, logprob, beta=0.25, eps=1e-6):
    """The authors' release (He, Fried & Welleck, rewarding-unlikely-release), as its procedure reads:
    per group, rank = argsort(argsort(logprob)) / G (least likely -> 0), score x (1 - rank * beta), then
    GRPO with the unbiased std + eps. Ties are ordered by position, as argsort does: use distinct log-probs."""
    shaped = list(rewards)
    for idx in _members(group_ids).values():
        size = len(idx)
        order = sorted(range(size), key=lambda j: (logprob[idx[j]], j))  # argsort
        rank = [0] * size
        for position, j in enumerate(order):  # argsort of the argsort
            rank[j] = position
        for j, i in enumerate(idx):
            shaped[i] = rewards[i] * (1 - rank[j] / size * beta)
    return grpo(shaped, group_ids, eps)


def unlikeliness_correct(rewards, group_ids, logprob, beta=0.25, eps=1e-6):
    """the alternative reading (rank_over="correct"): the group's correct samples ranked among themselves, likeliest = 0 (ties:
    the mean of the ranks they span), correct r x (1 - beta (G - rank) / G); then GRPO."""
    shaped = list(rewards)
    for idx in _members(group_ids).values():
        size = len(idx)
        correct = sorted((i for i in idx if rewards[i] > 0), key=lambda i: -logprob[i])  # likeliest first
        for i in correct:
            ties = [p for p, j in enumerate(correct) if logprob[j] == logprob[i]]
            rank = sum(ties) / len(ties)
            shaped[i] = rewards[i] * (1 - beta * (size - rank) / size)
    return grpo(shaped, group_ids, eps)


def _members(group_ids):
    id2index = defaultdict(list)
    for i, g in enumerate(group_ids):
        id2index[g].append(i)
    return id2index
