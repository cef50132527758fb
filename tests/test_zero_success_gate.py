"""Zero-success gating (Yuan et al. 2026, arXiv:2606.15455, the abstract's intervention): hand-computed values,
the gate's invariants (hypothesis), its refusals, and the engines' refusal of a sampler that would starve it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grae.advantage import get_estimator
from strategies import reward_batches
from tolerances import assert_close_scaled

NAN = math.nan


def zero_success_groups(r: torch.Tensor, g: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """``[N]`` bool, written from the definition: the sample's group has a valid sample and none above the threshold."""
    out = torch.zeros_like(g, dtype=torch.bool)
    for gid in g.unique():
        member = g == gid
        valid = r[member][~torch.isnan(r[member])]
        out[member] = valid.numel() > 0 and bool((valid <= threshold).all())
    return out


# -- hand-computed values -------------------------------------------------------------------------
# groups: [0 0 0] no success · [1 0 0] one success · [nan 0] one valid sample, no success · [.3 .2] graded, none > 0.5
REWARDS = torch.tensor([0.0, 0, 0, 1, 0, 0, NAN, 0, 0.3, 0.2])
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 3, 3])


def test_default_gate_by_hand():
    out = get_estimator("zero_success_gate")(REWARDS, GROUPS)
    assert out.advantages.tolist() == [-1, -1, -1, 0, 0, 0, 0, -1, -1, -1]
    assert out.weights.tolist() == [1, 1, 1, 0, 0, 0, 0, 1, 1, 1]
    assert out.metrics["zero_success_gate/groups_zero_success"] == 3.0
    assert out.metrics["zero_success_gate/frac_groups_zero_success"] == 0.75


def test_ngrpo_base_by_hand():
    """NGRPO adds one virtual reward 1 to each kept group's mean and unbiased std (ε = 1e-6):
    [0 0 0 | 1] μ' = 1/4, σ' = 1/2 → −1/2;  [0 | 1] μ' = 1/2, σ' = 1/√2 → −1/√2;
    [.3 .2 | 1] μ' = 1/2, σ' = √(0.38/2) → −0.2/σ', −0.3/σ'."""
    out = get_estimator("zero_success_gate", base="ngrpo")(REWARDS, GROUPS)
    sigma = math.sqrt(0.38 / 2)
    expected = [-0.5, -0.5, -0.5, 0, 0, 0, 0, -1 / math.sqrt(2), -0.2 / sigma, -0.3 / sigma]
    # tol: float32 advantages ≤ 1 against float64 closed forms: float32 rounding (6e-8) and the std's ε
    # (1e-6 / σ ≤ 3e-6) are all that may differ; a wrong normaliser or group size moves them by ≥ 1e-2
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-5)
    for group_size in (4, 8):  # the module docstring's −1/√(G+1): −0.4472 and −1/3
        all_wrong = get_estimator("zero_success_gate", base="ngrpo")(torch.zeros(group_size), torch.zeros(group_size))
        assert all_wrong.advantages.tolist() == pytest.approx([-1 / math.sqrt(group_size + 1)] * group_size, abs=1e-5)


def test_gate_off_with_grpo_is_grpo_by_hand():
    out = get_estimator("zero_success_gate", base="grpo", gate=False)(REWARDS, GROUPS)
    s, t = 1 / math.sqrt(3) + 1e-6, math.sqrt(0.005) + 1e-6  # unbiased stds of [1 0 0] and [.3 .2], + ε
    expected = [0, 0, 0, (2 / 3) / s, -(1 / 3) / s, -(1 / 3) / s, 0, 0, 0.05 / t, -0.05 / t]
    # tol: float32 rewards 0.3, 0.2 (stored to 1e-8) over t ≈ 0.07: ≤ 3e-7 abs on values ≤ 1.2
    assert out.advantages.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_the_threshold_is_shared_with_the_base():
    """correct_threshold = 0.25: group [.3 .2] now has a success (dropped); NSR's own threshold moves with it."""
    out = get_estimator("zero_success_gate", correct_threshold=0.25)(REWARDS, GROUPS)
    assert out.advantages.tolist() == [-1, -1, -1, 0, 0, 0, 0, -1, 0, 0]
    assert get_estimator("zero_success_gate", correct_threshold=0.25, gate=False)(REWARDS, GROUPS).advantages[8] == 0


# -- invariants ----------------------------------------------------------------------------------
@given(reward_batches(nan=True))
def test_groups_with_any_success_get_nothing(batch):
    r, g = batch
    out = get_estimator("zero_success_gate")(r, g)
    kept = zero_success_groups(r, g) & ~torch.isnan(r)
    assert (out.advantages[~kept] == 0).all() and (out.weights[~kept] == 0).all()
    assert (out.advantages[kept] == -1).all() and (out.weights[kept] == 1).all()  # NSR's −1 on every kept sample


@given(reward_batches(nan=True))
def test_the_gate_is_its_base_restricted_to_zero_success_groups(batch):
    r, g = batch
    kept = zero_success_groups(r, g)
    for base in ("nsr", "w_reinforce", "ngrpo"):
        gated = get_estimator("zero_success_gate", base=base)(r, g)
        plain = get_estimator(base)(r, g)
        assert torch.equal(gated.advantages, torch.where(kept, plain.advantages, 0.0)), base
        assert torch.equal(gated.weights, torch.where(kept, plain.weights, 0.0)), base


@given(reward_batches(nan=True))
def test_with_the_gate_off_it_equals_grpo(batch):
    r, g = batch
    off, grpo = get_estimator("zero_success_gate", base="grpo", gate=False)(r, g), get_estimator("grpo")(r, g)
    assert torch.equal(off.advantages, grpo.advantages) and torch.equal(off.weights, grpo.weights)


@given(reward_batches(binary=True, nan=True))
def test_on_pass_fail_rewards_it_updates_exactly_where_grpo_cannot(batch):
    """0/1 rewards: the gate's support is the all-wrong groups, where GRPO's advantage is exactly 0; every group
    GRPO learns from (a mixed one) the gate drops."""
    r, g = batch
    gate, grpo = get_estimator("zero_success_gate")(r, g), get_estimator("grpo")(r, g)
    assert (grpo.advantages[gate.weights > 0] == 0).all()
    assert (gate.weights[grpo.advantages != 0] == 0).all()


# -- refusals and state ----------------------------------------------------------------------------
@pytest.mark.parametrize("params, match", [
    ({"base": "grpo"}, "base: 'grpo' gives a group with no success advantage 0"),
    ({"base": "passk"}, "base: 'passk' gives a group with no success advantage 0"),
    ({"base": "agrae"}, "base: 'agrae' gives a group with no success advantage 0"),
    ({"base": "psr"}, "base: 'psr' gives a group with no success advantage 0"),
    ({"base": "unlikeliness"}, "base: 'unlikeliness' requires estimator context"),
    ({"base": "nope"}, "base: unknown estimator 'nope'"),
    ({"base": "zero_success_gate"}, "base: must be another estimator"),
    ({"gate": "yes"}, "gate: must be True or False"),
    ({"correct_threshold": float("nan")}, "correct_threshold: must be a finite number"),
])
def test_bad_parameters_name_the_field(params, match):
    with pytest.raises(ValueError, match=match):
        get_estimator("zero_success_gate", **params)


def test_the_base_input_policy_applies():
    """Gate off over ``passk``: graded rewards are refused as ``passk`` refuses them."""
    with pytest.raises(ValueError, match="rewards: .*pass/fail rewards"):
        get_estimator("zero_success_gate", base="passk", gate=False)(torch.tensor([0.5, 1.0]), torch.tensor([0, 0]))


def test_a_stateful_base_keeps_its_state():
    """AVSPO's τ adapts across steps: the gate checkpoints and restores its base's state."""
    est, plain = get_estimator("zero_success_gate", base="avspo"), get_estimator("avspo")
    for rewards in ([0.0, 0, 0, 0, 0, 0, 0, 0], [1.0, 0, 0, 0, 0, 0, 0, 0], [1.0, 1, 1, 1, 0, 0, 0, 0]):
        est(torch.tensor(rewards), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
        plain(torch.tensor(rewards), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    state = est.state_dict()
    assert state == plain.state_dict() != get_estimator("avspo").state_dict()  # τ moved as the ungated base's
    again = get_estimator("zero_success_gate", base="avspo")
    again.load_state_dict(state)
    assert again.state_dict() == state


def test_trl_dynamic_sampling_that_drops_all_wrong_groups_is_refused():
    from grae.engines.trl.sampling import SamplingRounds
    from grae.sampling import SamplingConfig

    def check(drop, **params):
        host = SimpleNamespace(sampling=SamplingConfig(dynamic=True, drop=drop), multi_objective_aggregation="sum",
                               estimator=get_estimator("zero_success_gate", **params), train_dataset=None)
        return SamplingRounds._check_sampling(host)

    for drop in ("both", "all_wrong"):
        with pytest.raises(ValueError, match=f"sampling.drop: '{drop}' drops the all-wrong groups, the only groups"):
            check(drop)
    for drop, params in (("all_correct", {}), ("both", {"gate": False})):  # past the gate's check: the next one
        with pytest.raises(ValueError, match="map-style"):
            check(drop, **params)


def test_vade_prompt_selection_with_the_gate_is_refused_by_the_trainer_and_before_the_model_loads():
    """VADE scores a prompt by p(1 − p) of its Beta posterior: a prompt never solved has its posterior mean driven to
    0 and its score with it, so VADE steers the batch away from the groups the gate trains on. Refused in GraeTrainer
    and by grae train's config check (before any model loads), naming the field; gate=False (the base) is fine."""
    from grae.engines.trl.sampling import SamplingRounds
    from grae.sampling import PromptPosterior, SamplingConfig
    from grae.train.config import ConfigError, load_config

    posterior = PromptPosterior(2, decay=1.0)
    posterior.update([0, 1], [0, 4], [8, 8], step=0)  # prompt 0: never solved; prompt 1: half the time
    mean = posterior.mean([0, 1], step=1)
    assert (mean * (1 - mean)).tolist()[0] < 0.1 < (mean * (1 - mean)).tolist()[1]  # the never-solved prompt loses

    def check(estimator, **sampling):
        host = SimpleNamespace(sampling=SamplingConfig(**sampling), multi_objective_aggregation="sum",
                               estimator=estimator, train_dataset=None)
        return SamplingRounds._check_sampling(host)

    with pytest.raises(ValueError, match="^sampling.selection: 'vade' picks prompts by p.1 − p. and so steers away"):
        check(get_estimator("zero_success_gate"), selection="vade")
    with pytest.raises(ValueError, match="^sampling.selection: 'vade'"):
        check(get_estimator("zero_success_gate"), selection="vade", dynamic=True, drop="all_correct")
    with pytest.raises(ValueError, match="map-style"):  # past the gate's check: the next one
        check(get_estimator("zero_success_gate", gate=False), selection="vade")
    with pytest.raises(ConfigError, match="^sampling.selection: 'vade' .* estimator 'zero_success_gate' trains on"):
        load_config("chain-sum", {"estimator": "zero_success_gate", "sampling.selection": "vade"})
    with pytest.raises(ConfigError, match="^sampling.drop: 'both' drops the all-wrong groups"):
        load_config("chain-sum", {"estimator": "zero_success_gate", "sampling.dynamic": True})
    assert load_config("chain-sum", {"estimator": "zero_success_gate", "sampling.dynamic": True,
                              "sampling.drop": "all_correct"}).sampling.drop == "all_correct"


@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=8, max_size=8))
def test_the_samplers_all_correct_and_the_gates_success_agree_on_binary_rewards(rewards):
    """The dynamic sampler calls a flat group all-correct when its reward is >= success_threshold (0.5); the gate
    calls a sample a success when its reward is > correct_threshold (0.5). On 0/1 rewards the two agree: a group
    the gate trains on (no success) is never one the sampler drops as all-correct (with drop: all_correct)."""
    from grae.sampling import group_kinds, informative_groups
    from grae.sampling.dynamic import ALL_CORRECT

    r = torch.tensor(rewards).view(2, 4).flatten()
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    weights = get_estimator("zero_success_gate")(r, groups).weights.view(2, 4)
    gated = weights[:, 0] > 0  # [2] the groups the gate trains on
    kept = informative_groups(r, 4, drop="all_correct")
    assert not (gated & ~kept).any()  # nothing the gate trains on is dropped
    assert ((group_kinds(r, 4) == ALL_CORRECT) == (r.view(2, 4) > 0.5).all(dim=1)).all()


def test_at_exactly_the_threshold_the_sampler_and_the_gate_differ_as_documented():
    """A graded reward equal to the threshold: the sampler's all-correct is >= 0.5, the gate's success is > 0.5. A
    group scoring 0.5 everywhere is all-correct to the sampler (drop: all_correct drops it) and has no success for the
    gate (it would train on it). docs/estimators.md states it; give success_threshold slightly above the gate's
    correct_threshold (e.g. 0.5 + 1e-9) to make them agree on such rewards."""
    from grae.sampling import group_kinds, informative_groups
    from grae.sampling.dynamic import ALL_CORRECT

    r = torch.full((4,), 0.5)
    assert group_kinds(r, 4).tolist() == [ALL_CORRECT] and informative_groups(r, 4, drop="all_correct").tolist() == [False]
    assert get_estimator("zero_success_gate")(r, torch.zeros(4, dtype=torch.long)).weights.tolist() == [1.0] * 4
    assert informative_groups(r, 4, drop="all_correct", success_threshold=0.5 + 1e-9).tolist() == [True]  # agree


def test_verl_filter_groups_that_drop_all_wrong_groups_are_refused():
    from grae.engines.verl.main import check_config

    def config(metric, enable=True, **grae):
        return SimpleNamespace(algorithm={"adv_estimator": "grae_zero_success_gate", "grae": grae,
                                          "filter_groups": {"enable": enable, "metric": metric}})

    for metric in ("acc", "score", "grae_all_wrong_filter"):
        with pytest.raises(ValueError, match=f"algorithm.filter_groups.metric='{metric}' drops the all-wrong groups"):
            check_config(config(metric))
    check_config(config("grae_all_correct_filter"))
    check_config(config("acc", enable=False))
    check_config(config("acc", gate=False))


def test_one_simulated_step_moves_only_the_prompt_without_a_success():
    """grae.sim, tabular SGD: the prompt whose group holds a correct trajectory does not move; the all-wrong
    prompt takes Theorem 1's step Δh_b = η[Σ_{i: b_i = b} A_i − C π_b] with A = −1 (C = −G), so the sampled
    wrong trajectories fall and every unsampled trajectory, the correct ones included, rises by η|C|π_b."""
    from grae.sim import SimPolicy, simulate_step
    from grae.theory import behaviour_space_step

    policy = SimPolicy(torch.tensor([0.2, 0.2], dtype=torch.float64), 12, 3, torch.Generator().manual_seed(0))
    wrong0, wrong1 = torch.nonzero(~policy.correct[0]).flatten(), torch.nonzero(~policy.correct[1]).flatten()
    right1 = torch.nonzero(policy.correct[1]).flatten()
    sampled = torch.stack([wrong0[[0, 0, 1, 2]], torch.cat([right1[:1], wrong1[:3]])])  # [P=2, G=4]
    before = policy.logits().detach().clone()
    out = simulate_step(policy, get_estimator("zero_success_gate"), torch.optim.SGD(policy.parameters(), lr=0.5), 4,
                        sampled=sampled)
    delta = policy.logits().detach() - before
    assert out["result"].weights.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert torch.equal(delta[1], torch.zeros(12))
    expected = behaviour_space_step(before[0], sampled[0], torch.full((4,), -1.0), lr=0.5)
    assert_close_scaled(delta[0], expected, rel=1e-5, scale=float(delta[0].abs().max()))
    unsampled = torch.ones(12, dtype=torch.bool)
    unsampled[sampled[0]] = False
    pi = torch.softmax(before[0], 0)
    # η|C|π_b > 0: correct ones too
    assert_close_scaled(delta[0][unsampled], 0.5 * 4 * pi[unsampled], rel=1e-5, scale=float(delta[0].abs().max()))
