"""Outcome-based exploration: bonuses over final answers, from history (UCB) or within the batch.

Song, Y., Kempe, J. & Munos, R., "Outcome-based Exploration for LLM Reasoning", arXiv:2509.06941.

Outcome-only RL sharpens the policy onto few final answers; the paper explores over the *outcome*
space — the small set of distinct final answers a question admits — instead of over token sequences.
With a_i the parsed final answer of sample i of question x (``answer_id``; −1 when unparsable) and
Â_i the GRPO advantage of the verifier rewards, the advantage is

    A_i = Â_i + c · (b_i − b̄_i)

with two bonuses:

* historical exploration (``mode="historical"``, UCB-style, counts over the whole run)::

      b_i = min(1, 1/√N(x, a_i))

  where N(x, a) counts the samples of question x (``prompt_key``) with answer a in earlier training
  batches (an answer never seen before gets 1). After the step the batch's answers are added to N.
* batch exploration (``mode="batch"``, within-batch repetition penalty, no state)::

      b_i = −(1/n) Σ_{j≠i} 1{a_j = a_i}

  over the n samples of question x in this batch.

The baseline b̄ (``baseline``): ``"none"`` (b̄ = 0, the plain bonus), ``"mean"`` (b̄ = the mean bonus of
the question's parsed samples in this batch, "UCB-Mean") or ``"constant"`` (b̄ = ``b0``, "UCB-Con"). With
a baseline the term is negative for an answer seen more often than the baseline level: frequent answers
are pushed down ("negative exploration"), not only rare ones pushed up.

grae's conventions (defined here, not in the paper): an unparsable answer (a_i = −1) and a sample with
a missing reward get no exploration term, are never counted in N and never count as a repeat; the mean
baseline is over the question's parsed samples. N counts answers of *training* batches only
(GraeTrainer evaluates on a copy of the estimator).

Sources. The equations above are the paper's (arXiv:2509.06941 v1): the historical bonus
min{1, √(1/N(x, a))}, its two baselines UCB-Mean and UCB-Con, and the batch penalty
−(1/n) Σ_{j≠i} 1{a_j = a_i}, with the bonus added to the GRPO advantage. An independent
re-implementation from the paper agreed with this module to ≤ 1.7e-7. The defaults are the
paper's hyper-parameters: c = 0.2, and b0 = 0.5 (its setting for medium-difficulty data; 1.0 for easy
data). grae found no released code. ``tests/test_outcome_explore.py`` checks the implementation against a
plain-Python loop of the equations above.

Context: ``answer_id`` (both modes) and ``prompt_key`` (the historical counts; the batch mode reads
the group structure only). State (historical): ``counts`` {prompt_key: {answer_id: N}}, ``step``.
"""

from __future__ import annotations

import math

import torch

from grae.advantage.base import Estimator, check, register
from grae.advantage.grpo import check_std_params, grpo_advantages

MODES = ("batch", "historical")
BASELINES = ("none", "mean", "constant")


@register("outcome_explore")
class OutcomeExplore(Estimator):
    """Outcome-based exploration (Song, Kempe & Munos 2025): GRPO + c·(bonus − baseline) over final
    answers; bonus min(1, 1/√N(x, a)) from history (UCB) or −(1/n)·#repeats of a in the batch.

    Args:
        mode: ``"batch"`` (within-batch repetition penalty, stateless) or ``"historical"`` (UCB counts
            over training, checkpointed).
        c: bonus coefficient (the paper: 0.2; 0 is plain GRPO).
        baseline: ``"none"``, ``"mean"`` (the question's mean bonus in the batch) or ``"constant"`` (``b0``).
        b0: the constant baseline (the paper: 0.5 for medium, 1.0 for easy data).
        eps, std_unbiased: GRPO's std convention for Â.
    """

    requires = frozenset({"answer_id", "prompt_key"})

    def __init__(self, *, mode: str = "batch", c: float = 0.2, baseline: str = "none", b0: float = 0.5,
                 eps: float = 1e-6, std_unbiased: bool = True):
        check(mode in MODES, "mode", f"one of {', '.join(MODES)}, got {mode!r}")
        check(baseline in BASELINES, "baseline", f"one of {', '.join(BASELINES)}, got {baseline!r}")
        check(isinstance(c, (int, float)) and math.isfinite(c) and c >= 0, "c", f"must be a finite number >= 0, got {c!r}")
        check(isinstance(b0, (int, float)) and math.isfinite(b0), "b0", f"must be a finite number, got {b0!r}")
        check_std_params(eps, std_unbiased)
        self.mode, self.c, self.baseline, self.b0 = mode, c, baseline, b0
        self.eps, self.std_unbiased = eps, std_unbiased
        #: historical counts N(x, a): prompt_key → answer_id → count (training batches only)
        self.counts: dict[int, dict[int, int]] = {}
        self.step = 0

    def compute(self, rewards, groups, *, answer_id, prompt_key):  # type: ignore[override]  # declared in `requires`
        parsed = groups.valid & (answer_id >= 0)  # [N] samples that take part in exploration
        if self.mode == "batch":
            bonus = self._batch_bonus(answer_id, parsed, groups)
        else:
            bonus = self._historical_bonus(answer_id, prompt_key, parsed)
        bonus = torch.where(parsed, bonus, torch.zeros_like(bonus))  # [N]
        if self.baseline == "mean":
            n_parsed = torch.zeros(groups.num_groups, dtype=torch.float64).index_add_(0, groups.index, parsed.double())
            total = torch.zeros(groups.num_groups, dtype=torch.float64).index_add_(0, groups.index, bonus)
            bonus = bonus - (total / n_parsed.clamp(min=1))[groups.index]  # [N]
        elif self.baseline == "constant":
            bonus = bonus - self.b0
        term = torch.where(parsed, self.c * bonus, torch.zeros_like(bonus))  # [N]
        advantages = grpo_advantages(rewards, groups, eps=self.eps, std_unbiased=self.std_unbiased) + term
        if self.mode == "historical":
            self._count(answer_id, prompt_key, parsed)
        distinct = len({(int(g), int(a)) for g, a, p in zip(groups.index, answer_id, parsed) if p})
        metrics = {"mean_term": float(term[parsed].mean()) if bool(parsed.any()) else 0.0,
                   "frac_unparsed": float((groups.valid & ~parsed).sum()) / max(int(groups.valid.sum()), 1),
                   "distinct_answers_per_group": distinct / max(int((groups.count > 0).sum()), 1)}
        if self.mode == "historical":
            metrics["tracked_prompts"] = float(len(self.counts))
        return advantages, None, metrics

    @staticmethod
    def _batch_bonus(answer_id, parsed, groups) -> torch.Tensor:
        """``[N]`` −(1/n) Σ_{j≠i} 1{a_j = a_i} over the parsed samples of i's group; n = the group's valid count."""
        same = (groups.index[:, None] == groups.index[None, :]) & (answer_id[:, None] == answer_id[None, :])  # [N, N]
        same &= parsed[:, None] & parsed[None, :]
        repeats = same.sum(1).to(torch.float64) - parsed.double()  # j ≠ i
        return -repeats / groups.expand(groups.count).clamp(min=1)

    def _historical_bonus(self, answer_id, prompt_key, parsed) -> torch.Tensor:
        """``[N]`` min(1, 1/√N(x, a)) with N from earlier batches (N = 0 → 1)."""
        seen = [self.counts.get(int(x), {}).get(int(a), 0) if p else 0
                for x, a, p in zip(prompt_key.tolist(), answer_id.tolist(), parsed.tolist())]
        n = torch.tensor(seen, dtype=torch.float64)
        return torch.where(n > 0, n.clamp(min=1).rsqrt(), torch.ones_like(n)).clamp(max=1.0)

    def _count(self, answer_id, prompt_key, parsed) -> None:
        for x, a, p in zip(prompt_key.tolist(), answer_id.tolist(), parsed.tolist()):
            if p:
                per_prompt = self.counts.setdefault(int(x), {})
                per_prompt[int(a)] = per_prompt.get(int(a), 0) + 1
        self.step += 1

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self):
        if self.mode == "batch":
            return {}
        return {"counts": {str(x): {str(a): n for a, n in sorted(per.items())} for x, per in sorted(self.counts.items())},
                "step": self.step}

    def load_state_dict(self, state):
        if self.mode == "batch":
            super().load_state_dict(state)  # stateless: refuses a non-empty state
            return
        missing = {"counts", "step"} - set(state)
        check(not missing, "state_dict", f"outcome_explore (historical) state is missing {sorted(missing)}")
        counts: dict[int, dict[int, int]] = {}
        for x, per in state["counts"].items():
            check(isinstance(per, dict), "state_dict.counts", f"prompt {x}: expected {{answer_id: count}}, got {per!r}")
            row = {int(a): int(n) for a, n in per.items()}
            check(all(n >= 0 for n in row.values()), "state_dict.counts", f"prompt {x}: counts must be >= 0")
            counts[int(x)] = row
        self.counts, self.step = counts, int(state["step"])
