"""PSR, NSR and W-REINFORCE: REINFORCE on binary outcomes, decomposed by sign.

Zhu, Xia, Wei, Chen, Chen, Meng, "The Surprising Effectiveness of Negative Reinforcement in LLM
Reasoning", arXiv:2506.01347 (NeurIPS 2025), §3 and Eq. 9. With r ∈ {+1, −1}:
L_RLVR = L_PSR + L_NSR, and W-REINFORCE: L = λ · L_PSR + L_NSR (λ = 0.1 recommended).

A sample is *correct* when its reward exceeds ``correct_threshold`` (0.5 for 0/1 rewards).
No baseline, no grouping, no std normalisation::

    psr:          A = +1 for correct;   wrong samples dropped (weight 0)
    nsr:          A = −1 for wrong;     correct samples dropped (weight 0)
    w_reinforce:  A = +λ for correct,   A = −1 for wrong

Dropping matters for the loss: the released code removes the samples from the batch
(``batch.subset``), so they also leave the token-mean denominator — grae's weight 0 does the same
in :func:`grae.loss.agg_loss`. Note the released config default for λ is 1 (plain REINFORCE):
the paper's λ = 0.1 must be set explicitly there; here it is the default.
"""

from __future__ import annotations

import torch

from grae.advantage.base import Estimator, check, register


class _SignedReinforce(Estimator):
    def _init_threshold(self, correct_threshold: float) -> None:
        self.correct_threshold = correct_threshold

    def correct(self, rewards):
        return rewards > self.correct_threshold  # [N] bool


@register("psr")
class PSR(_SignedReinforce):
    """PSR (positive sample reinforcement): A = +1 on correct samples, wrong ones dropped."""

    def __init__(self, *, correct_threshold: float = 0.5):
        self._init_threshold(correct_threshold)

    def compute(self, rewards, groups):
        correct = self.correct(rewards).double()
        return correct, correct, {}


@register("nsr")
class NSR(_SignedReinforce):
    """NSR (negative sample reinforcement): A = −1 on wrong samples, correct ones dropped."""

    def __init__(self, *, correct_threshold: float = 0.5):
        self._init_threshold(correct_threshold)

    def compute(self, rewards, groups):
        wrong = (~self.correct(rewards)).double()
        return -wrong, wrong, {}


@register("w_reinforce")
class WReinforce(_SignedReinforce):
    """W-REINFORCE: A = +λ on correct samples, −1 on wrong ones (Eq. 9, λ = 0.1)."""

    def __init__(self, *, lam: float = 0.1, correct_threshold: float = 0.5):
        check(0 <= lam <= 1, "lam", f"must be in [0, 1] (paper: 0.1; 0 is NSR, 1 is REINFORCE), got {lam}")
        self.lam = lam
        self._init_threshold(correct_threshold)

    def compute(self, rewards, groups):
        correct = self.correct(rewards)
        return torch.where(correct, rewards.new_full((), self.lam), rewards.new_full((), -1.0)), None, {}


@register("reinforce")
class Reinforce(Estimator):
    """REINFORCE without a baseline: A = r (Williams 1992). The λ = 1 end of W-REINFORCE for
    ±1 rewards; with forward noise correction (:mod:`grae.advantage.corrections`) A = w(r̃)."""

    def __init__(self):
        pass

    def compute(self, rewards, groups):
        return rewards.clone(), None, {}
