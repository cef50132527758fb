"""Prompt selection by a per-prompt Beta posterior and Thompson sampling (the idea of VADE).

VADE (Hu et al. 2025, arXiv:2511.18902) keeps a Beta posterior on each prompt's success probability,
updates it from every scored group, decays it toward the prior as the policy changes, and picks the
prompts of the next batch with a Thompson sampler scored by information gain — all before rollout,
so no extra completions are generated. Only the abstract was available to us: the equations below
are grae's choices, stated so they can be checked and changed.

For prompt i with evidence last updated at step t_i, at step t::

    decayed:    α_i(t) = α₀ + λ^(t − t_i) · (α_i − α₀),   β_i(t) likewise          (λ = ``decay``)
    update:     α_i ← α_i(t) + s,   β_i ← β_i(t) + (n − s)    after a group with s of n samples ≥ threshold
    selection:  p̃_i ~ Beta(α_i(t), β_i(t)),   score_i = p̃_i (1 − p̃_i),   batch = top-B prompts by score

p(1 − p) is the Bernoulli variance: the expected size of a group's reward spread, largest at
p = ½ and 0 for prompts always or never solved — the groups dynamic sampling would throw away.
One decay scale (per training step) where VADE names two; a prompt never seen scores by its prior.
"""

from __future__ import annotations

import numpy as np


class PromptPosterior:
    """Beta(α_i, β_i) on the success probability of each of ``num_prompts`` prompts.

    Args:
        num_prompts: size of the training set (indices 0 … num_prompts − 1).
        prior_alpha, prior_beta: the prior α₀, β₀ (Beta(1, 1) = uniform).
        decay: λ ∈ (0, 1], per step; 1 keeps all evidence for ever.
    """

    def __init__(self, num_prompts: int, prior_alpha: float = 1.0, prior_beta: float = 1.0, decay: float = 0.95):
        self.prior = (float(prior_alpha), float(prior_beta))
        self.decay = float(decay)
        self.alpha = np.full(num_prompts, self.prior[0])  # [P]
        self.beta = np.full(num_prompts, self.prior[1])  # [P]
        self.last = np.full(num_prompts, -1, dtype=np.int64)  # [P] step of the last update, -1 = never

    def _decayed(self, index: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        keep = np.where(self.last[index] < 0, 1.0, self.decay ** np.maximum(step - self.last[index], 0))  # [K]
        alpha = self.prior[0] + keep * (self.alpha[index] - self.prior[0])
        beta = self.prior[1] + keep * (self.beta[index] - self.prior[1])
        return alpha, beta

    def mean(self, index, step: int) -> np.ndarray:
        """Posterior mean success probability of prompts ``index`` at ``step``."""
        alpha, beta = self._decayed(np.asarray(index, dtype=np.int64), step)
        return alpha / (alpha + beta)

    def update(self, index, successes, trials, step: int) -> None:
        """Add groups' evidence: ``successes[k]`` of ``trials[k]`` scored samples of prompt ``index[k]``.
        A prompt appearing twice (two groups) gets both."""
        index = np.asarray(index, dtype=np.int64)
        successes, trials = np.asarray(successes, dtype=np.float64), np.asarray(trials, dtype=np.float64)
        for prompt in np.unique(index):
            mine = index == prompt
            alpha, beta = self._decayed(np.array([prompt]), step)
            self.alpha[prompt] = alpha[0] + successes[mine].sum()
            self.beta[prompt] = beta[0] + (trials[mine] - successes[mine]).sum()
            self.last[prompt] = step

    def select(self, k: int, step: int, rng: np.random.Generator, exclude=()) -> list[int]:
        """The ``k`` prompts with the largest Thompson-sampled Bernoulli variance at ``step`` (distinct),
        none of ``exclude`` (prompts already generated this step) unless too few others remain."""
        if k > self.alpha.size:
            raise ValueError(f"selection: {k} prompts per batch but the dataset has {self.alpha.size}")
        alpha, beta = self._decayed(np.arange(self.alpha.size), step)
        p = rng.beta(alpha, beta)  # [P]
        score = p * (1.0 - p)
        excluded = np.fromiter(exclude, dtype=np.int64) if exclude else np.zeros(0, dtype=np.int64)
        if excluded.size and self.alpha.size - np.unique(excluded).size >= k:
            score[excluded] = -1.0
        chosen = np.argpartition(-score, k - 1)[:k] if k < score.size else np.arange(score.size)
        return [int(i) for i in chosen[np.argsort(-score[chosen], kind="stable")]]

    def state_dict(self) -> dict:
        """The prompts ever updated (sparse: a large dataset's state stays small)."""
        seen = np.flatnonzero(self.last >= 0)
        return {"prior": list(self.prior), "decay": self.decay, "index": seen.tolist(),
                "alpha": self.alpha[seen].tolist(), "beta": self.beta[seen].tolist(), "last": self.last[seen].tolist()}

    def load_state_dict(self, state: dict) -> None:
        if tuple(state["prior"]) != self.prior or state["decay"] != self.decay:
            raise ValueError(f"sampling: the checkpoint's posterior has prior {state['prior']} and decay {state['decay']}, "
                             f"this run {list(self.prior)} and {self.decay}; resume with the same sampling settings")
        index = np.asarray(state["index"], dtype=np.int64)
        if index.size and index.max() >= self.alpha.size:
            raise ValueError(f"sampling: the checkpoint's posterior covers prompt {int(index.max())}, but the dataset "
                             f"has {self.alpha.size}; resume with the same training set")
        self.alpha[:], self.beta[:], self.last[:] = self.prior[0], self.prior[1], -1
        self.alpha[index], self.beta[index] = state["alpha"], state["beta"]
        self.last[index] = state["last"]
