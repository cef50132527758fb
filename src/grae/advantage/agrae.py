"""A-GRAE: asymmetric group-relative advantage estimation.

Yu, Chen, Liu, Zhang, Qu, "Unveiling Implicit Advantage Symmetry: Why GRPO Struggles with
Exploration and Difficulty Adaptation", arXiv:2602.05548 (v3), §5.1, Eqs. 11–13.

1. Training-state proxy, the batch mean reward over all B trajectories (Eq. 11)::

       ω = (1/B) Σ_{i=1}^{B} r_i

2. Dynamic difficulty attention shift — sample level (Eq. 12), p = group success rate, Â = GRPO::

       A_i = (ω/2) · Â_i/√p  +  ((1 − ω)/2) · Â_i/√(1 − p)        for 0 < p < 1  (else A_i = Â_i)

   Early (ω small) the easy-focused term dominates; as the policy improves, the hard-focused one.

3. Attenuation suppression — group level (Eq. 13)::

       A*_i = A_i · min(1, ω/α)   if A_i > 0,   else A_i

   Early in training positives are scaled by ≈ ω (Negative-Dominant behaviour: Σ A* < 0, so
   unsampled trajectories gain probability — exploration, Theorem 1); as ω → α the estimator
   returns to symmetric weights. α = 1 for MATH, 0.5 for the paper's multimodal data.

**ω over the paper's batch** (``omega_samples`` N; default None = Eq. 11 as written, this batch's mean).
The authors' MATH run draws 1,024 prompts × 8 = 8,192 samples per step, so their ω is a mean over
8,192 rewards (≈ 0.49 at step 1, 0.75–0.84 from step 11); a run of 16–128 samples per step measures it
far more noisily, and at a 2–5 % success rate one correct sample moves it by 1/B — the positive mass
then goes as n_correct²/B, close to NSR. With N set, the ω of both Eq. 12 and Eq. 13 is the mean valid
reward over the most recent N samples across steps, this batch included::

    ω_t = (Σ of the newest N valid rewards up to and including step t) / N

Samples of one step are equally recent: where the window cuts through a step, that step counts at its
mean (the average over every choice of which of its samples to take), so ω does not depend on the order
of samples within a batch; a batch of ≥ N valid samples gives its own mean; before N samples have been
seen, ω is the mean over all of them. Missing rewards never enter. The window (one (sum, count) pair per
step it still reaches) is the estimator's state: it is checkpointed, and engines call the estimator on
the batch gathered from every process, so 1 and N processes hold the same window. With N ≥ the samples
of the whole run ω is the running mean of every reward so far.

Known differences from the authors' released code (HKU-HealthAI/A-GRAE, verl fork), all bugs
there — grae follows the paper:

* the A-GRAE branch only runs when ``grpo_weight == 2.0``, which the training loop never passes
  (it passes 2 − step/T with step ≥ 1), so the released scripts train plain GRPO;
* the easy-focused term divides by 1 − √p instead of √(1 − p) (at p = 7/8: ×7.74 instead of ×1.41);
* ω is the mean of per-group means rather than Eq. 11's mean over trajectories (equal only when
  all groups have the same size).

Opt-in remedies for the ω → 0 loop (not in the paper; defaults off = the paper's formula). The loop: a
drop in ω lowers s, the update turns negative-dominant, mass flows to unsampled (mostly wrong) answers and ω
drops further, and an all-wrong group gives zero advantage, so the state absorbs. ``floor`` s ≥ s_min on the
positive factor s = min(1, ω/α);
``omega_ema`` β: s reads an exponential moving average ω̄_t = β ω̄_{t−1} + (1 − β) ω_t (ω̄_0 = ω_0,
carried in the estimator state) instead of the batch ω; ``collapse_guard`` g: a batch with ω < g gets
plain GRPO advantages Â (no rescaling, no suppression).

The text extraction of Eq. 13 reads "min(1, ω α)"; the code and the only non-trivial reading of
the min() use ω/α (identical at the paper's α = 1).
"""

from __future__ import annotations

import torch

from grae.advantage.base import check, register
from grae.advantage.symmetry import _GRPOVariant, difficulty_rescale, scale_positive


@register("agrae")
class AGRAE(_GRPOVariant):
    """A-GRAE (Eqs. 11–13): ω-weighted hard/easy rescaling, then positives × min(1, ω/α); α = 1 math, 0.5 multimodal.

    Args:
        alpha: α of Eq. 13. The paper (App. C.2) uses 1.0 for math and 0.5 for its multimodal
            (Geometry3K) and medical data, "which exhibit a higher propensity for training collapse";
            grae's multimodal recipes (``configs/tiny_vlm.yaml``, ``examples/verl/run_geo3k_agrae.sh``) use 0.5.
        sample_level: apply Eq. 12 (the ablation "group-level only" sets it False).
        group_level: apply Eq. 13 (the ablation "sample-level only" sets it False).
        eps, std_unbiased: GRPO's std convention for Â.
        scale: ``"group"`` (GRPO's Â), ``"batch"``, or ``"none"`` (Dr. GRPO's Â = r − mean, for the
            paper's Dr.GRPO + A-GRAE runs).
        omega_samples: N, the number of most recent samples (across steps, this batch included) whose mean
            valid reward is the ω of Eqs. 12 and 13 (None = the paper's formula: this batch's mean; the
            authors' batch is 8,192). Checkpointed.
        floor: remedy, lower bound s_min ∈ [0, 1] on min(1, ω/α) (0 = paper).
        omega_ema: remedy, EMA decay β ∈ [0, 1) of the ω that Eq. 13 reads (None = paper: this batch's ω).
        collapse_guard: remedy, ω threshold below which the batch gets GRPO's Â (None = paper).
    """

    requires_unit_interval = True

    def __init__(
        self,
        *,
        alpha: float = 1.0,
        sample_level: bool = True,
        group_level: bool = True,
        eps: float = 1e-6,
        std_unbiased: bool = True,
        scale: str = "group",
        omega_samples: int | None = None,
        floor: float = 0.0,
        omega_ema: float | None = None,
        collapse_guard: float | None = None,
    ):
        check(0 < alpha <= 1, "alpha", f"must be in (0, 1] (paper: α ≤ 1; 1.0 for MATH, 0.5 for multimodal), got {alpha}")
        check(sample_level or group_level, "sample_level/group_level",
              "at least one of A-GRAE's two halves must be on (both off is plain GRPO: use 'grpo')")
        check(0 <= floor <= 1, "floor", f"must be in [0, 1] (0 = the paper's formula; 0.25 suggested), got {floor}")
        check(omega_ema is None or 0 <= omega_ema < 1, "omega_ema", f"must be None or in [0, 1), got {omega_ema}")
        check(collapse_guard is None or 0 < collapse_guard <= 1, "collapse_guard",
              f"must be None or in (0, 1], got {collapse_guard}")
        check(omega_samples is None or (isinstance(omega_samples, int) and not isinstance(omega_samples, bool)
                                        and omega_samples >= 1), "omega_samples",
              f"must be None (this batch, the paper's formula) or an integer >= 1 (the authors' batch: 8192), "
              f"got {omega_samples!r}")
        check(omega_samples is None or omega_ema is None, "omega_samples",
              "and omega_ema both replace the batch's ω; set one of them")
        self.alpha, self.sample_level, self.group_level = alpha, sample_level, group_level
        self.omega_samples = omega_samples
        #: (Σ valid rewards, #valid) of each recent step the ω window still reaches, oldest first (omega_samples only)
        self.omega_window: list[tuple[float, int]] = []
        self.floor, self.omega_ema, self.collapse_guard = floor, omega_ema, collapse_guard
        self.omega_avg: float | None = None  # ω̄ (omega_ema only)
        self._init_std(eps, std_unbiased, scale)

    def compute(self, rewards, groups):
        omega_batch = rewards[groups.valid].mean()  # Eq. 11, over all trajectories
        window = None if self.omega_samples is None else self._window_omega(rewards[groups.valid], self.omega_samples)
        omega = omega_batch if window is None else window[0]
        grpo = self.grpo(rewards, groups)  # [N] Â
        p = groups.expand(groups.mean(rewards))  # [N]

        omega_s = omega  # the ω Eq. 13 reads
        if self.omega_ema is not None and bool(torch.isfinite(omega)):
            prev = float(omega) if self.omega_avg is None else self.omega_avg
            self.omega_avg = self.omega_ema * prev + (1 - self.omega_ema) * float(omega)
            omega_s = torch.tensor(self.omega_avg, dtype=omega.dtype)
        guarded = self.collapse_guard is not None and bool(omega < self.collapse_guard)

        advantages = grpo
        if self.sample_level and not guarded:  # Eq. 12
            advantages = difficulty_rescale(grpo, p, hard=omega / 2, easy=(1 - omega) / 2)
        suppression = (omega_s / self.alpha).clamp(max=1.0).clamp(min=self.floor)
        if self.group_level and not guarded:  # Eq. 13
            advantages = scale_positive(advantages, suppression)

        metrics = {"omega": omega, "suppression": suppression, "guarded": float(guarded)}
        if window is not None:
            metrics.update(omega_batch=omega_batch, omega_window_samples=float(window[1]))
        return advantages, None, metrics

    def _window_omega(self, valid_rewards: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        """(ω over the newest ``n`` valid rewards, this batch's ``valid_rewards`` included; the number of samples it
        averaged). Records the batch in the window and drops the steps the window no longer reaches."""
        if valid_rewards.numel():
            self.omega_window.append((float(valid_rewards.sum()), int(valid_rewards.numel())))
        total, taken, keep = 0.0, 0, 0
        for step_sum, step_count in reversed(self.omega_window):
            keep += 1
            if taken == 0 and step_count >= n:  # the newest step alone fills the window: all of it, equally recent
                total, taken = step_sum, step_count
                break
            take = min(step_count, n - taken)  # the step the window cuts through counts at its mean
            total += step_sum if take == step_count else step_sum * take / step_count
            taken += take
            if taken == n:
                break
        self.omega_window = self.omega_window[len(self.omega_window) - keep:]
        return torch.tensor(total / taken if taken else float("nan"), dtype=torch.float64), taken

    def state_dict(self):
        if self.omega_samples is not None:
            return {"omega_window": [[step_sum, count] for step_sum, count in self.omega_window]}
        return {"omega_avg": self.omega_avg} if self.omega_ema is not None else {}

    def load_state_dict(self, state):
        if self.omega_samples is not None:
            check(set(state) == {"omega_window"}, "state_dict",
                  f"A-GRAE (omega_samples) state has exactly the key 'omega_window', got {sorted(state)}")
            window = []
            for entry in state["omega_window"]:
                ok = (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], int)
                      and entry[1] >= 1 and isinstance(entry[0], (int, float)) and 0 <= entry[0] <= entry[1])
                check(ok, "state_dict.omega_window", f"entries are [sum of rewards in [0, count], count >= 1], got {entry!r}")
                window.append((float(entry[0]), int(entry[1])))
            self.omega_window = window
            return
        if self.omega_ema is None:
            super().load_state_dict(state)
            return
        check("omega_avg" in state, "state_dict", "A-GRAE (omega_ema) state is missing 'omega_avg'")
        self.omega_avg = None if state["omega_avg"] is None else float(state["omega_avg"])
