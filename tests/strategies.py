"""Hypothesis strategies for flat reward batches with non-contiguous, unequal groups."""

from __future__ import annotations

import torch
from hypothesis import strategies as st


@st.composite
def reward_batches(draw, binary=None, min_groups=1, max_groups=8, min_size=1, max_size=12, nan=False):
    """(rewards [N] float64, group_ids [N] int64): groups of random sizes, shuffled, arbitrary ids."""
    n_groups = draw(st.integers(min_groups, max_groups))
    sizes = draw(st.lists(st.integers(min_size, max_size), min_size=n_groups, max_size=n_groups))
    ids = draw(st.lists(st.integers(-10**6, 10**6), min_size=n_groups, max_size=n_groups, unique=True))
    is_binary = draw(st.booleans()) if binary is None else binary
    value = st.sampled_from([0.0, 1.0]) if is_binary else st.floats(0.0, 1.0, allow_nan=False, width=32)
    if nan:
        value = st.one_of(value, st.just(float("nan")))
    rewards, group_ids = [], []
    for gid, size in zip(ids, sizes):
        rewards += draw(st.lists(value, min_size=size, max_size=size))
        group_ids += [gid] * size
    perm = draw(st.permutations(range(len(rewards))))
    return (
        torch.tensor([rewards[i] for i in perm], dtype=torch.float64),
        torch.tensor([group_ids[i] for i in perm], dtype=torch.long),
    )


def general_names() -> list[str]:
    """Estimators that take any finite reward batch with no context: the ones the generic property and
    engine tests loop over. Binary-only (pass@k) and context-needing estimators have their own tests
    (tests/test_passk_estimators.py, tests/test_estimator_context.py)."""
    from grae.advantage import names
    from grae.advantage.base import _REGISTRY

    return [n for n in names() if not _REGISTRY[n].requires and not _REGISTRY[n].requires_binary]
