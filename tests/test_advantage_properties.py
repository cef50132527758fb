"""Invariants every estimator must satisfy (hypothesis), and the shared input policy."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grae.advantage import describe, get_estimator, names
from strategies import general_names, reward_batches
from tolerances import assert_close_scaled

REQUIRED = ["grpo", "dr_grpo", "rloo", "agrae", "positive_dominant", "negative_dominant", "hard_focused",
            "easy_focused", "psr", "nsr", "w_reinforce", "avspo", "ngrpo", "dgpo"]


def is_binary(r: torch.Tensor) -> bool:
    valid = r[~torch.isnan(r)]
    return bool(((valid == 0) | (valid == 1)).all())


def names_for(r: torch.Tensor) -> list[str]:
    """Every estimator that takes these rewards: pass@k estimators need 0/1 rewards (refusal tested below);
    context-needing estimators have their own tests."""
    return [n for n in names()
            if not get_estimator(n).requires and (is_binary(r) or not get_estimator(n).requires_binary)]


def all_estimators(r: torch.Tensor):
    return [get_estimator(name) for name in names_for(r)]


def test_registry_has_every_required_estimator():
    assert set(REQUIRED) <= set(names())


@given(reward_batches())
def test_finite_in_finite_out(batch):
    r, g = batch
    for est in all_estimators(r):
        out = est(r, g)
        assert out.advantages.shape == r.shape == out.weights.shape
        assert torch.isfinite(out.advantages).all() and torch.isfinite(out.weights).all(), est.name
        assert all(math.isfinite(v) for v in out.metrics.values()), est.name
        assert ((out.weights == 0) <= (out.advantages == 0)).all(), f"{est.name}: dropped sample has an advantage"


@given(reward_batches(), st.randoms(use_true_random=False))
def test_permuting_samples_permutes_advantages(batch, rnd):
    r, g = batch
    perm = torch.tensor(rnd.sample(range(len(r)), len(r)))
    for name in names_for(r):
        a = get_estimator(name)(r, g)
        b = get_estimator(name)(r[perm], g[perm])
        assert_close_scaled(a.advantages[perm], b.advantages, rel=1e-9, msg=name)
        assert torch.equal(a.weights[perm], b.weights), name


@given(reward_batches(), st.randoms(use_true_random=False))
def test_relabelling_groups_changes_nothing(batch, rnd):
    r, g = batch
    old = g.unique().tolist()
    new = rnd.sample(range(-10**9, 10**9), len(old))
    relabelled = torch.tensor([new[old.index(x)] for x in g.tolist()])
    for name in names_for(r):
        a, b = get_estimator(name)(r, g), get_estimator(name)(r, relabelled)
        assert_close_scaled(a.advantages, b.advantages, rel=1e-9, msg=name)


@given(reward_batches(min_size=2))
def test_grpo_group_level_symmetry(batch):
    """Eq. 5: positive and negative advantages cancel exactly within every group."""
    r, g = batch
    a = get_estimator("grpo")(r, g).advantages
    for gid in g.unique():
        in_group = a[g == gid]
        assert abs(float(in_group.sum())) <= 1e-9 * float(in_group.abs().sum())  # float64 rounding of its terms


@given(reward_batches(nan=True))
def test_nan_rewards_are_excluded(batch):
    r, g = batch
    missing = torch.isnan(r)
    for name in names_for(r):
        out = get_estimator(name)(r, g)
        assert (out.advantages[missing] == 0).all() and (out.weights[missing] == 0).all(), name
        assert out.metrics["n_missing_rewards"] == float(missing.sum())
        if (~missing).any():
            clean = get_estimator(name)(r[~missing], g[~missing])
            assert_close_scaled(out.advantages[~missing], clean.advantages, rel=1e-9, msg=name)


def test_results_keep_the_reward_dtype():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float32)
    out = get_estimator("grpo")(r, torch.tensor([0, 0, 1, 1]))
    assert out.advantages.dtype == torch.float32 and out.weights.dtype == torch.float32


def test_plain_python_and_numpy_inputs_with_none():
    out = get_estimator("grpo")([1.0, None, 0.0, 1.0], np.array([0, 0, 0, 1]))
    assert out.weights.tolist() == [1.0, 0.0, 1.0, 1.0]
    assert out.metrics["n_missing_rewards"] == 1.0


@given(reward_batches(binary=False, min_size=2))
def test_pass_at_k_estimators_refuse_graded_rewards(batch):
    r, g = batch
    for name in names():
        if get_estimator(name).requires_binary and not is_binary(r):
            with pytest.raises(ValueError, match="rewards: .*pass/fail rewards"):
                get_estimator(name)(r, g)


def test_empty_batch():
    for name in general_names():
        out = get_estimator(name)(torch.zeros(0), torch.zeros(0, dtype=torch.long))
        assert out.advantages.numel() == 0 and out.weights.numel() == 0


def test_singleton_groups_get_zero_for_centred_estimators():
    r, g = torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 1, 2])
    for name in ["grpo", "dr_grpo", "rloo", "agrae", "hard_focused", "easy_focused", "dgpo"]:
        assert get_estimator(name)(r, g).advantages.abs().max() == 0, name


def _release_singleton_advantage(reward: float, eps: float = 1e-6) -> float:
    """The unlikeliness release's (verl's ``compute_grpo_outcome_advantage``) advantage of a one-sample group,
    written from its rule: such a group's mean is taken as 0 and its std as 1; the sample's rank is 0 (factor 1)."""
    return (reward - 0.0) / (1.0 + eps)


def test_unlikeliness_gives_a_one_sample_group_zero_where_the_release_gives_r():
    """A documented departure (grae/advantage/unlikeliness.py): a group with one valid sample — a
    group of one, or NaN rewards leaving one — has no group-relative baseline, so grae gives it advantage 0 (every
    mean-centred estimator's rule); the release, like verl's GRPO, gives (r − 0)/(1 + ε) = 0.999999 for r = 1."""
    # tol: Python floats round the same on every CPU; 1 / (1 + 1e-6) = 0.999999000001, within 1e-11 of 0.999999
    assert _release_singleton_advantage(1.0) == pytest.approx(0.999999, abs=1e-11)
    estimator = get_estimator("unlikeliness")
    nan = float("nan")
    for rewards, groups, logp in [([1.0, 0.0, 1.0], [0, 1, 2], [-0.5, -1.0, -2.0]),  # groups of one
                                  ([1.0, nan, nan, 0.0, 1.0], [0, 0, 0, 1, 1], [-0.5, -0.1, -0.2, -1.0, -2.0])]:
        out = estimator(torch.tensor(rewards), torch.tensor(groups), context={"logprob_mean": torch.tensor(logp)})
        valid = [r == r for r in rewards]  # NaN != NaN
        singles = [i for i, g in enumerate(groups)
                   if valid[i] and sum(valid[j] for j, h in enumerate(groups) if h == g) == 1]
        assert singles and all(out.advantages[i] == 0 for i in singles), (rewards, out.advantages)
        assert all(_release_singleton_advantage(rewards[i]) != 0 for i in singles if rewards[i] > 0)
    mixed = estimator(torch.tensor([1.0, nan, nan, 0.0, 1.0]), torch.tensor([0, 0, 0, 1, 1]),
                      context={"logprob_mean": torch.tensor([-0.5, -0.1, -0.2, -1.0, -2.0])}).advantages
    assert mixed[3] < 0 < mixed[4]  # the group with two valid samples still learns


@pytest.mark.parametrize("rewards,group_ids,match", [
    (torch.tensor([1.0, float("inf")]), torch.tensor([0, 0]), "rewards: contain ±inf"),
    (torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.long), "rewards: expected a 1-D"),
    (torch.ones(3), torch.zeros(2, dtype=torch.long), "group_ids: shape"),
    (torch.ones(2), torch.tensor([0.5, 1.0]), "group_ids: must be integers"),
    (torch.ones(2), torch.tensor([True, False]), "group_ids: expected integer"),
    (["a", 1.0], [0, 0], "rewards"),
])
def test_bad_inputs_name_the_field(rewards, group_ids, match):
    with pytest.raises(ValueError, match=match):
        get_estimator("grpo")(rewards, group_ids)


def test_integral_float_group_ids_are_accepted():
    out = get_estimator("grpo")(torch.tensor([1.0, 0.0]), torch.tensor([3.0, 3.0]))
    assert out.advantages.tolist() == pytest.approx([0.7071, -0.7071], abs=1e-3)  # tol: ±1/√2 written to 4 digits


@pytest.mark.parametrize("name", ["agrae", "hard_focused", "easy_focused"])
def test_unit_interval_estimators_refuse_out_of_range_rewards(name):
    with pytest.raises(ValueError, match=r"rewards: .*\[0, 1\]"):
        get_estimator(name)(torch.tensor([1.5, 0.0]), torch.tensor([0, 0]))


def test_other_estimators_accept_any_finite_reward():
    r, g = torch.tensor([5.0, -3.0, 2.0, 2.0]), torch.tensor([0, 0, 1, 1])
    for name in ["grpo", "dr_grpo", "rloo", "ngrpo", "dgpo", "avspo", "w_reinforce", "psr", "nsr"]:
        assert torch.isfinite(get_estimator(name)(r, g).advantages).all()


def test_unknown_name_lists_valid_ones():
    with pytest.raises(KeyError, match="registered estimators: .*agrae.*grpo"):
        get_estimator("a-grae")


def test_unknown_param_lists_the_estimators_params():
    with pytest.raises(TypeError, match=r"no parameter\(s\) beta.*alpha=1.0"):
        get_estimator("agrae", beta=2)


@pytest.mark.parametrize("name,params,field", [
    ("agrae", {"alpha": 0}, "alpha"), ("grpo", {"scale": "global"}, "scale"), ("grpo", {"eps": -1}, "eps"),
    ("avspo", {"tau_init": 0.95}, "tau_init"), ("dgpo", {"temperature": 0}, "temperature"),
    ("w_reinforce", {"lam": -0.1}, "lam"), ("ngrpo", {"num_virtual": 0}, "num_virtual"),
    ("agrae", {"sample_level": False, "group_level": False}, "sample_level/group_level"),
])
def test_out_of_range_params_name_the_field(name, params, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        get_estimator(name, **params)


def test_stateless_estimators_refuse_foreign_state():
    est = get_estimator("grpo")
    assert est.state_dict() == {}
    est.load_state_dict({})
    with pytest.raises(ValueError, match="stateless"):
        est.load_state_dict({"tau": 0.3})


def test_describe_and_params():
    d = describe("agrae")
    assert d["defaults"]["alpha"] == 1.0 and "A-GRAE" in d["summary"]
    assert get_estimator("w_reinforce", lam=0.2).params == {"lam": 0.2, "correct_threshold": 0.5}


@pytest.mark.parametrize("name", ["grpo", "agrae", "avspo", "ngrpo", "negative_dominant", "hard_focused"])
@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan"), float("inf")])
def test_eps_must_be_positive_and_finite(name, eps):
    """eps = 0 turns a collapsed group's 0/0 into NaN advantages: refused, naming eps."""
    with pytest.raises(ValueError, match="eps: must be (> 0 and finite|a finite number)"):
        get_estimator(name, eps=eps)


def test_avspo_state_never_stores_nan():
    est = get_estimator("avspo", eta=0.5)
    est(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    kept = est.state_dict()
    out = est(torch.full((4,), float("nan")), torch.tensor([0, 0, 1, 1]))  # every reward missing
    state = est.state_dict()
    assert state["tau"] == kept["tau"] and state["prev_reward_mean"] == kept["prev_reward_mean"]
    assert state["step"] == kept["step"] + 1 and (out.weights == 0).all()
    with pytest.raises(ValueError, match="prev_reward_mean"):
        est.load_state_dict({**state, "prev_reward_mean": float("nan")})
