"""DAPO's dynamic-sampling filter: which groups carry a reward signal.

DAPO (Yu et al. 2025, arXiv:2503.14476, §3.2, the constraint of Eq. 11) trains only on groups with
0 < |{o_i correct}| < G: a group whose samples are all correct or all wrong has zero advantage
under group normalisation and only costs compute. For non-binary rewards the same test is "zero
reward variance" (OpenRLHF#1270): a group is informative when its scored rewards are not all equal.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: group kinds returned by :func:`group_kinds`
INFORMATIVE, ALL_CORRECT, ALL_WRONG, UNSCORED = 0, 1, 2, 3
GROUP_KINDS = {INFORMATIVE: "informative", ALL_CORRECT: "all_correct", ALL_WRONG: "all_wrong", UNSCORED: "unscored"}


def group_kinds(rewards: Tensor, group_size: int, success_threshold: float = 0.5) -> Tensor:
    """Kind of each contiguous group of ``group_size`` samples.

    Args:
        rewards: ``[N]`` rewards, NaN = missing (N a multiple of ``group_size``).
        group_size: G, samples per prompt.
        success_threshold: a zero-variance group whose common reward is >= this is all-correct.

    Returns:
        ``[N / G]`` long tensor of :data:`INFORMATIVE`, :data:`ALL_CORRECT`, :data:`ALL_WRONG` or
        :data:`UNSCORED` (no scored sample). A group with one scored sample has no variance: its
        kind follows that sample.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"rewards: {rewards.numel()} samples is not a whole number of groups of {group_size}")
    grouped = rewards.detach().double().view(-1, group_size)  # [B, G]
    scored = ~torch.isnan(grouped)  # [B, G]
    top = torch.where(scored, grouped, torch.full_like(grouped, -torch.inf)).max(dim=1).values  # [B]
    bottom = torch.where(scored, grouped, torch.full_like(grouped, torch.inf)).min(dim=1).values  # [B]
    kinds = torch.full((grouped.size(0),), INFORMATIVE, dtype=torch.long)
    flat = scored.any(dim=1) & (top == bottom)  # [B]
    kinds[flat & (top >= success_threshold)] = ALL_CORRECT
    kinds[flat & (top < success_threshold)] = ALL_WRONG
    kinds[~scored.any(dim=1)] = UNSCORED
    return kinds


def informative_groups(rewards: Tensor, group_size: int, drop: str = "both", success_threshold: float = 0.5) -> Tensor:
    """``[N / G]`` bool: the groups dynamic sampling keeps.

    ``drop`` is which zero-variance groups go: ``"both"`` (DAPO), ``"all_correct"`` or ``"all_wrong"``.
    Unscored groups (every reward missing) always go.
    """
    kinds = group_kinds(rewards, group_size, success_threshold)
    dropped = {"both": (ALL_CORRECT, ALL_WRONG), "all_correct": (ALL_CORRECT,), "all_wrong": (ALL_WRONG,)}[drop]
    keep = kinds != UNSCORED
    for kind in dropped:
        keep &= kinds != kind
    return keep
