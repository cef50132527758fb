"""Context estimators against independent references, and the context contract of the base class.

unlikeliness is checked against per-group loops (tests/reference_estimators.py) written from the authors'
released procedure (argsort of argsort) and from grae's earlier correct-only reading. (passk and pkpo, defined over
k-subsets, are checked against brute-force enumeration in tests/test_passk_estimators.py.)
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_estimators as ref
from grae.advantage import CONTEXT_FIELDS, check_context_supported, get_estimator
from strategies import reward_batches
from tolerances import assert_close_scaled

#: the worked example of grae/advantage/unlikeliness.py: r, logp, and both readings' advantages to 4 decimals,
#: by hand from the procedure (r̃ = [0, 0.875, 0.9375, 0] and [0, 0.75, 0.8125, 0])
ISSUE_R, ISSUE_LP = [0.0, 1.0, 1.0, 0.0], [-0.1, -0.5, -1.0, -2.0]
ISSUE_RELEASE, ISSUE_CORRECT = [-0.8650, 0.8053, 0.9247, -0.8650], [-0.8646, 0.7955, 0.9338, -0.8646]


def unlikeliness(r, g, lp, **params):
    return get_estimator("unlikeliness", **params)(r, g, context={"logprob_mean": lp}).advantages


@pytest.mark.parametrize("params, reference, expected", [
    ({}, ref.unlikeliness_release, ISSUE_RELEASE),
    ({"rank_over": "correct"}, ref.unlikeliness_correct, ISSUE_CORRECT),
], ids=["default-is-release", "grae-correct-only"])
def test_unlikeliness_issue_example(params, reference, expected):
    r, g, lp = torch.tensor(ISSUE_R), torch.zeros(4, dtype=torch.long), torch.tensor(ISSUE_LP)
    got = unlikeliness(r, g, lp, **params)
    assert [round(x, 4) for x in got.tolist()] == expected
    assert [round(x, 4) for x in reference(ISSUE_R, [0] * 4, ISSUE_LP)] == expected


@settings(max_examples=40, deadline=None)
@given(reward_batches(min_size=1, max_size=8, max_groups=4), st.data(), st.sampled_from([0.0, 0.25, 0.6]))
def test_unlikeliness_default_matches_the_release_procedure(batch, data, beta):
    """Distinct log-probs (the release orders ties by position); rewards binary or graded."""
    r, g = batch
    lp = data.draw(st.lists(st.floats(-8.0, 0.0, allow_nan=False), min_size=len(r), max_size=len(r), unique=True))
    got = unlikeliness(r, g, torch.tensor(lp, dtype=torch.float64), beta=beta)
    # tol: float64 advantages of [0, 1] rewards, at most √G in size: rounding ~1e-15, the reference loop's order
    assert got.tolist() == pytest.approx(ref.unlikeliness_release(r.tolist(), g.tolist(), lp, beta), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(reward_batches(binary=True, min_size=1, max_size=8, max_groups=4), st.data())
def test_unlikeliness_correct_only_matches_reference_with_ties(batch, data):
    r, g = batch
    lp = torch.tensor(data.draw(st.lists(st.sampled_from([-3.0, -2.0, -1.5, -1.0, -0.5]), min_size=len(r),
                                         max_size=len(r))), dtype=torch.float64)
    got = unlikeliness(r, g, lp, beta=0.25, rank_over="correct")
    # tol: float64 advantages of [0, 1] rewards, at most √G in size: rounding ~1e-15, the reference loop's order
    assert got.tolist() == pytest.approx(ref.unlikeliness_correct(r.tolist(), g.tolist(), lp.tolist(), 0.25), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(reward_batches(binary=True, min_size=2, max_size=8, max_groups=4), st.data())
def test_unlikeliness_ties_do_not_depend_on_batch_order(batch, data):
    """Tied log-probs share their mean rank (the one departure from the release's argsort): permuting the
    batch permutes the advantages, and every all-correct group gets the same advantages under both readings
    (the readings then differ by a constant shift of r̃, which GRPO removes)."""
    r, g = batch
    lp = torch.tensor(data.draw(st.lists(st.sampled_from([-2.0, -1.0, -0.5]), min_size=len(r), max_size=len(r))),
                      dtype=torch.float64)
    perm = torch.tensor(data.draw(st.permutations(range(len(r)))))
    a = unlikeliness(r, g, lp)
    assert_close_scaled(unlikeliness(r[perm], g[perm], lp[perm]), a[perm], rel=1e-9)
    b = unlikeliness(r, g, lp, rank_over="correct")
    for gid in g.unique():
        rows = g == gid
        if bool((r[rows] == 1).all()):
            # tol: float64 advantages, at most √G; the shift's rounding (1e-16) over the std (≥ ε = 1e-6) is ≤ 1e-10
            assert a[rows].tolist() == pytest.approx(b[rows].tolist(), abs=1e-6)


def test_unlikeliness_rank_over_is_validated():
    with pytest.raises(ValueError, match=r"^rank_over: must be one of \('group', 'correct'\)"):
        get_estimator("unlikeliness", rank_over="all")


def test_unlikeliness_favours_the_unlikely_correct_sample_and_beta0_is_grpo():
    r, g = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    lp = torch.tensor([-0.1, -2.0, -1.0, -1.0])
    a = get_estimator("unlikeliness")(r, g, context={"logprob_mean": lp}).advantages
    assert a[1] > a[0] > 0 > a[2]
    b = get_estimator("unlikeliness", beta=0.0)(r, g, context={"logprob_mean": lp}).advantages
    assert_close_scaled(b, get_estimator("grpo")(r, g).advantages, rel=1e-6)


def test_context_contract_is_uniform():
    r, g = torch.tensor([1.0, 0.0]), torch.zeros(2, dtype=torch.long)
    est = get_estimator("unlikeliness")
    with pytest.raises(ValueError, match=r"context\.logprob_mean: estimator 'unlikeliness' requires it"):
        est(r, g)
    with pytest.raises(ValueError, match=r"context\.logprob_mean: shape \(3,\)"):
        est(r, g, context={"logprob_mean": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"context\.logprob_mean: contains NaN"):
        est(r, g, context={"logprob_mean": torch.tensor([0.0, float("nan")])})
    # an estimator that declares nothing ignores extra context: same call, same result
    grpo = get_estimator("grpo")
    assert torch.equal(grpo(r, g).advantages, grpo(r, g, context={"logprob_mean": torch.zeros(2)}).advantages)
    assert set(est.requires) <= set(CONTEXT_FIELDS)
    check_context_supported(est, {"logprob_mean"}, "engine X")
    with pytest.raises(ValueError, match="estimator: 'unlikeliness' requires context logprob_mean, which engine X"):
        check_context_supported(est, set(), "engine X")
