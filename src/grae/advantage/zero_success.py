"""Zero-success gating: update only on problems whose group has no observed success.

Yuan et al. 2026, "Understanding Diversity Collapse in RLVR via the Lens of Overtraining",
arXiv:2606.15455. The abstract's intervention: with few rollouts per problem, a single observed success
already puts a problem in a nearly saturated regime for high-k pass@k, so further updates on it are
overtraining; "restricting updates to problems with zero observed success lifts Pass@256 above the base
model on difficult benchmarks". That is this estimator's gate, for group g with valid samples S_g::

    keep_g = [ |{i ∈ S_g : r_i > τ}| = 0 ]        (no observed success; τ = correct_threshold)
    A_i    = keep_g · A_i^base,   w_i = keep_g · w_i^base

Samples of every other group are dropped (weight 0: out of the loss and its token normaliser, as
``nsr`` drops). **What this is not:** the paper's own method, Bayesian Boundary Gating (BBG), weights
each problem by an estimate of its marginal contribution to the reasoning boundary. Its equations are in
the paper's method section, which grae could not reach (only the abstract and introduction were
readable); this estimator is the plain gate the abstract states, and ``bbg`` (:mod:`grae.advantage.bbg`) is BBG as
a third-party reading gives it, checked against that reading, not the paper (docs/estimators.md,
"Zero-success gating").

The base advantage. GRPO's advantage is exactly 0 in a group with no success (zero reward variance), so
GRPO gated to those groups would never update: the kept groups need an advantage that is nonzero when
every sample failed. The default is NSR's signed REINFORCE, A = −1 on a wrong sample (Zhu et al. 2025,
arXiv:2506.01347; ``nsr``); in a group with no success W-REINFORCE and REINFORCE on ±1 rewards give the
same −1, so the gated update does not depend on which of them is meant. ``base="ngrpo"`` uses NGRPO's
virtual maximum reward instead (an all-wrong group of G samples gets −1/√(G+1): G = 4, −0.4472; G = 8, −1/3). A base that
gives an all-wrong group advantage 0 (``grpo``, ``rloo``, ``dr_grpo``, ``passk``, ...) is refused with the
gate on; with ``gate=False`` the estimator is its base unchanged (``base="grpo", gate=False`` is GRPO).
"""

from __future__ import annotations

import torch

from grae.advantage.base import Estimator, check, describe, get_estimator, names, register


def rewards_only_base(base: str, correct_threshold: float, fix: str = "choose an estimator that needs only rewards"
                      ) -> Estimator:
    """The registered estimator ``base`` that a gate wraps: built with the gate's ``correct_threshold`` when it has
    that parameter (so both count the same successes), and refused (``ValueError`` naming ``base`` and ``fix``) when
    it needs estimator context, which a gate does not pass on."""
    check(base in names(), "base", f"unknown estimator {base!r}; registered: {', '.join(names())}")
    shares_threshold = "correct_threshold" in describe(base)["defaults"]
    est = get_estimator(base, **({"correct_threshold": correct_threshold} if shares_threshold else {}))
    check(not est.requires, "base",
          f"{base!r} requires estimator context ({', '.join(sorted(est.requires))}), which the gate does not pass on; "
          f"{fix}")
    return est


@register("zero_success_gate")
class ZeroSuccessGate(Estimator):
    """Zero-success gating (Yuan et al. 2026, arXiv:2606.15455, the abstract's intervention; not the paper's
    Bayesian Boundary Gating): only groups with no sample above ``correct_threshold`` update, with the
    base estimator's advantage (NSR: −1 per sample); every other group is dropped.

    Args:
        base: registry name of the estimator whose advantages the kept groups get (default ``"nsr"``:
            A = −1; ``"ngrpo"``: NGRPO's virtual-maximum advantage). With ``gate`` on it must give an
            all-wrong group a nonzero advantage (``nsr``, ``w_reinforce``, ``ngrpo``, ``avspo``); it may
            not need estimator context. Its input policy (0/1 or [0, 1] rewards) applies.
        gate: True (default) keeps only the groups with zero observed successes; False is ``base`` unchanged.
        correct_threshold: a sample succeeds when its reward exceeds this (0.5 for 0/1 rewards); passed to
            the base too when it has the same parameter (``nsr``, ``w_reinforce``), so both agree.
    """

    def __init__(self, *, base: str = "nsr", gate: bool = True, correct_threshold: float = 0.5):
        check(isinstance(gate, bool), "gate", f"must be True or False, got {gate!r}")
        check(isinstance(base, str) and base != self.name, "base",
              f"must be another estimator's registry name (default 'nsr'), got {base!r}")
        self.base, self.gate, self.correct_threshold = base, gate, correct_threshold
        self._base = self._build_base()
        if gate:
            self._check_base_learns_from_failures()

    def _build_base(self) -> Estimator:
        est = rewards_only_base(self.base, self.correct_threshold, "use nsr (default) or ngrpo")
        # the base's input policy is the gate's: pass@k bases refuse graded rewards, A-GRAE's rewards outside [0, 1]
        # (per instance: which base the gate wraps is a constructor argument, so the class default cannot say it)
        self.requires_binary = est.requires_binary  # type: ignore[misc]
        self.requires_unit_interval = est.requires_unit_interval  # type: ignore[misc]
        return est

    def _check_base_learns_from_failures(self) -> None:
        """A fresh copy of the base on one all-wrong group (rewards 0, 0): all-zero advantages would make
        every gated update zero, a run that trains nothing and exits 0."""
        probe = self._build_base()(torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.long))
        check(bool((probe.advantages != 0).any()), "base",
              f"{self.base!r} gives a group with no success advantage 0, so the gate (on every group without a success) "
              "would leave nothing to update; use nsr (default) or ngrpo, or gate=False")

    def compute(self, rewards, groups):
        advantages, weights, own = self._base.compute(rewards, groups)
        weights = torch.ones_like(rewards) if weights is None else weights
        successes = groups.sum((rewards > self.correct_threshold).to(torch.float64))  # [M]
        zero_success = (successes == 0) & (groups.count > 0)  # [M]
        metrics = {f"{self.base}/{k}": v for k, v in own.items()}
        metrics.update({"groups_zero_success": float(zero_success.sum()),
                        "frac_groups_zero_success": float(zero_success.sum()) / max(1, int((groups.count > 0).sum()))})
        if not self.gate:
            return advantages, weights, metrics
        keep = groups.expand(zero_success)  # [N]
        return torch.where(keep, advantages, 0.0), torch.where(keep, weights, 0.0), metrics

    @property
    def only_all_wrong_groups(self) -> bool:
        """True while the gate is on: a sampler that drops all-wrong groups leaves this estimator nothing."""
        return self.gate

    def state_dict(self):
        return self._base.state_dict()

    def load_state_dict(self, state):
        self._base.load_state_dict(state)
