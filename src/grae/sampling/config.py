"""``SamplingConfig``: the knobs of dynamic sampling and prompt selection (``grae train``'s ``sampling:``)."""

from __future__ import annotations

from dataclasses import dataclass

#: which zero-variance groups dynamic sampling drops (verl drops every group whose metric has zero std)
DROP_CHOICES = ("both", "all_correct", "all_wrong")
#: how the prompts of a generation batch are chosen
SELECTIONS = ("uniform", "vade")


@dataclass
class SamplingConfig:
    """How a training step's rollouts are chosen. The defaults change nothing (TRL's own sampler).

    Dynamic sampling (DAPO, Yu et al. 2025, arXiv:2503.14476, §3.2; verl ``algorithm.filter_groups``):
    generate, score, drop groups without reward variance, and generate more prompts until the
    generation batch is full of informative groups. Prompt selection (VADE, Hu et al. 2025,
    arXiv:2511.18902): choose the prompts before generating, from a per-prompt Beta posterior on
    success, so no rollout is spent on a prompt the policy always or never solves. Both may be on.
    """

    #: drop groups whose rewards have zero variance and generate more until the batch is full
    dynamic: bool = False
    #: which zero-variance groups are dropped: "both" (DAPO's 0 < |correct| < G), "all_correct" (keep
    #: all-wrong groups: NSR, W-REINFORCE and Negative-Dominant learn from them) or "all_wrong".
    #: A group with no scored sample is always dropped.
    drop: str = "both"
    #: most generation rounds per step (verl ``max_num_gen_batches``, default 10 there); when reached,
    #: the step trains on the informative groups it has (the rest of the batch has weight 0) and logs it,
    #: where verl raises
    max_gen_batches: int = 10
    #: "uniform" (TRL's sampler; extra rounds draw from a seeded shuffle of the dataset) or "vade"
    selection: str = "uniform"
    #: a reward >= this counts as a success (posterior update; all-correct vs all-wrong groups)
    success_threshold: float = 0.5
    #: Beta(prior_alpha, prior_beta) prior on each prompt's success probability (VADE uses Beta(1, 1))
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    #: per training step, a prompt's evidence decays toward the prior by this factor (policy drift:
    #: what was learnt about a prompt 50 steps ago says little about the policy now); 1 = no decay
    decay: float = 0.95
    #: stop training once this many completions have been generated, extra rounds included
    #: (equal-budget comparisons); None = max_steps alone decides
    budget_completions: int | None = None
    #: write every generated group's rewards, prompt index and whether it was trained on to
    #: ``groups.jsonl`` in the run directory (``grae train`` only)
    log_groups: bool = False

    @property
    def active(self) -> bool:
        """True when the generation step differs from TRL's own (filtering or selection)."""
        return self.dynamic or self.selection != "uniform"

    def conflict_with(self, estimator: object) -> str | None:
        """Why this sampling cannot feed ``estimator`` (one line naming the field and the fix), or None. An estimator
        that trains only on all-wrong groups (``only_all_wrong_groups``: ``zero_success_gate``) gets nothing from
        dynamic sampling that drops them, and is starved by VADE's selection: its score p(1 − p) steers the batch
        away from prompts the policy never solves (posterior mean → 0), the very groups the gate updates."""
        if not getattr(estimator, "only_all_wrong_groups", False):
            return None
        name = getattr(estimator, "name", type(estimator).__name__)
        if self.dynamic and self.drop != "all_correct":
            return (f"sampling.drop: {self.drop!r} drops the all-wrong groups, the only groups estimator {name!r} trains "
                    "on (every update would be zero); set sampling.drop: all_correct, or turn sampling.dynamic off")
        if self.selection == "vade":
            return (f"sampling.selection: 'vade' picks prompts by p(1 − p) and so steers away from the prompts the "
                    f"policy never solves, the only groups estimator {name!r} trains on (it would starve the gate it "
                    "feeds); set sampling.selection: uniform")
        return None

    def check(self) -> None:
        """Raise ``ValueError`` naming the field and the fix."""
        if self.drop not in DROP_CHOICES:
            raise ValueError(f"sampling.drop: {self.drop!r}; one of {', '.join(DROP_CHOICES)}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"sampling.selection: {self.selection!r}; one of {', '.join(SELECTIONS)}")
        if self.max_gen_batches < 1:
            raise ValueError(f"sampling.max_gen_batches: must be >= 1, got {self.max_gen_batches}")
        if not 0 <= self.success_threshold <= 1:
            raise ValueError(f"sampling.success_threshold: a share of the reward in [0, 1] (a reward >= it is a success), "
                             f"got {self.success_threshold}")
        if self.prior_alpha <= 0 or self.prior_beta <= 0:
            raise ValueError(f"sampling.prior_alpha/prior_beta: must be > 0, got {self.prior_alpha}, {self.prior_beta}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"sampling.decay: must be in (0, 1], got {self.decay}")
        if self.budget_completions is not None and self.budget_completions < 1:
            raise ValueError(f"sampling.budget_completions: must be >= 1 or null, got {self.budget_completions}")
