"""grae.sim: one simulated step against grae.theory's Theorems 1 and 2 and a step computed by hand;
exact pass@k against Monte Carlo; the CLI end to end."""

from __future__ import annotations

import math

import pytest
import torch

from grae.advantage import get_estimator
from grae.sim import SimConfig, SimPolicy, build_policy, exact_pass_at_k, run_sim, simulate_step
from grae.theory import behaviour_space_step, grpo_abs_advantage_sum
from tolerances import assert_close_scaled


def one_prompt_policy(base_p=(0.3,), trajectories=12, correct=3, spread=1.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return SimPolicy(torch.tensor(base_p, dtype=torch.float64), trajectories, correct, generator, spread=spread)


def step_delta(policy, estimator_name, sampled, lr=0.7, **params):
    before = policy.logits().detach().clone()
    optimizer = torch.optim.SGD(policy.parameters(), lr=lr)
    out = simulate_step(policy, get_estimator(estimator_name, **params), optimizer, sampled.size(1), sampled=sampled)
    return before, policy.logits().detach() - before, out


@pytest.mark.parametrize("name, params", [("grpo", {}), ("agrae", {"alpha": 1.0}), ("negative_dominant", {"beta": 10.0}),
                                          ("nsr", {}), ("w_reinforce", {"lam": 0.1})])
def test_one_tabular_step_is_theorem_1(name, params):
    """Δh_b = η[Σ_{i: b_i = b} A_i − C π_b] (Theorem 1, Eq. 6), as grae.theory's autograd step computes it."""
    policy = one_prompt_policy()
    sampled = torch.tensor([[0, 0, 4, 5, 5, 7, 9, 1]])  # trajectories 0, 1 (and 2) are in the correct set or not: any
    before, delta, out = step_delta(policy, name, sampled, **params)
    advantages = out["result"].advantages * out["result"].weights
    expected = behaviour_space_step(before[0], sampled[0], advantages.float(), lr=0.7)
    assert_close_scaled(delta[0], expected, rel=1e-5)
    pi = torch.softmax(before[0], dim=0)
    closed = torch.zeros(12).index_add_(0, sampled[0], advantages.float()) - advantages.sum() * pi
    assert_close_scaled(delta[0], 0.7 * closed, rel=1e-5)
    unsampled = torch.ones(12, dtype=torch.bool)
    unsampled[sampled[0]] = False
    C = float(advantages.sum())
    if name == "grpo":  # C = 0: an unsampled trajectory does not move (no exploration)
        assert abs(C) <= 1e-6 * float(advantages.abs().sum())  # float32 rounding of the terms that cancel
        assert_close_scaled(delta[0][unsampled], torch.zeros(int(unsampled.sum())), rel=1e-5, scale=float(delta[0].abs().max()))
    elif C < 0:  # negative mass raises every unsampled trajectory by η|C|π_b
        assert bool((delta[0][unsampled] > 0).all())
        assert_close_scaled(delta[0][unsampled], 0.7 * abs(C) * pi[unsampled], rel=1e-5, scale=float(delta[0].abs().max()))


@pytest.mark.parametrize("correct_count", [1, 2, 4, 6, 7])
def test_grpo_total_update_is_theorem_2(correct_count):
    """Σ_i |A_i| of GRPO on a binary group with c of G correct: 2√(G(G−1))·√(p(1−p)) with grae's unbiased std
    (2G√(p(1−p)) with the population std; ε = 1e-6 aside)."""
    policy = one_prompt_policy(trajectories=10, correct=3)
    right = policy.correct[0].nonzero().flatten()
    wrong = (~policy.correct[0]).nonzero().flatten()
    sampled = torch.cat([right[torch.arange(correct_count) % right.numel()],
                         wrong[torch.arange(8 - correct_count) % wrong.numel()]]).unsqueeze(0)  # [1, 8]
    _, _, out = step_delta(policy, "grpo", sampled)
    assert float(out["rewards"].sum()) == correct_count
    total = float(out["result"].advantages.abs().sum())
    assert total == pytest.approx(grpo_abs_advantage_sum(correct_count / 8, 8, unbiased=True), rel=1e-4)


@pytest.mark.parametrize("correct_count", [1, 4, 7])
def test_dgpo_total_update_is_the_group_size(correct_count):
    """Theorem 2's other half: DGPO's Σ|A| is G for every non-collapsed group (without question weighting)."""
    policy = one_prompt_policy(trajectories=10, correct=3)
    right = policy.correct[0].nonzero().flatten()
    wrong = (~policy.correct[0]).nonzero().flatten()
    sampled = torch.cat([right[torch.arange(correct_count) % right.numel()],
                         wrong[torch.arange(8 - correct_count) % wrong.numel()]]).unsqueeze(0)
    _, _, out = step_delta(policy, "dgpo", sampled, question_weighting=False)
    assert float(out["result"].advantages.abs().sum()) == pytest.approx(8.0, rel=1e-4)


def test_one_step_by_hand():
    """M = 3 equally likely trajectories, trajectory 0 correct; G = 4 samples b = (0, 1, 1, 2), Dr.GRPO, η = 1.

    rewards (1, 0, 0, 0), mean 0.25 → A = (0.75, −0.25, −0.25, −0.25), C = 0, so
    Δh = (0.75, −0.25 − 0.25, −0.25) = (0.75, −0.5, −0.25);
    π' ∝ (e^0.75, e^−0.5, e^−0.25) = (2.1170000, 0.6065307, 0.7788008), sum 3.5023315
    → π'_0 = 0.6044541 = pass@1;  pass@2 = 1 − (1 − 0.6044541)² = 0.8435434.
    """
    policy = SimPolicy(torch.tensor([1 / 3], dtype=torch.float64), 3, 1, torch.Generator().manual_seed(0), spread=0.0)
    policy.correct.zero_()
    policy.correct[0, 0] = True
    policy.base.fill_(math.log(1 / 3))
    _, delta, out = step_delta(policy, "dr_grpo", torch.tensor([[0, 1, 1, 2]]), lr=1.0)
    assert out["result"].advantages.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    # tol: float32 values ≤ 1 from one 3-way softmax step, no long sums: rounding is a few ulps (6e-8); the
    # success probability and pass@k are in [0, 1], written to 7 digits
    assert delta[0].tolist() == pytest.approx([0.75, -0.5, -0.25], abs=1e-6)
    assert float(policy.success()[0]) == pytest.approx(0.6044541, abs=1e-6)
    assert exact_pass_at_k(policy.success(), [1, 2]) == pytest.approx({1: 0.6044541, 2: 0.8435434}, abs=1e-6)


def test_the_base_policy_has_the_drawn_difficulty_and_exact_pass_at_k_matches_sampling():
    cfg = SimConfig(prompts=64, trajectories=16, correct=2, difficulty="ladder:0.05,0.3,0.7")
    policy = build_policy(cfg)
    success = policy.success()
    assert success[:3].tolist() == pytest.approx([0.05, 0.3, 0.7], abs=1e-5)  # tol: probabilities, float32 softmax
    generator = torch.Generator().manual_seed(1)
    draws = torch.multinomial(torch.softmax(policy.logits(), 1).detach(), 4 * 2000, replacement=True, generator=generator)
    hits = policy.correct.gather(1, draws).view(64, 2000, 4).any(dim=2).float().mean()
    # tol: a Monte Carlo mean in [0, 1] of 128,000 seeded draws: sd ≤ 1.4e-3, 0.01 is 7 sd
    assert float(hits) == pytest.approx(exact_pass_at_k(success, [4])[4], abs=0.01)


def test_the_same_seed_gives_the_same_base_for_every_estimator_and_runs_are_reproducible():
    a = run_sim(SimConfig(estimator="grpo", prompts=32, steps=20, eval_every=10))
    b = run_sim(SimConfig(estimator="nsr", prompts=32, steps=20, eval_every=10))
    assert a.base == b.base and a.final != b.final
    assert run_sim(SimConfig(estimator="grpo", prompts=32, steps=20, eval_every=10)).final == a.final
    assert [row["step"] for row in a.history] == [0, 10, 20]
    assert set(a.history[-1]["abs_adv_by_difficulty"]) == set(a.history[-1]["success_by_difficulty"])


def test_lowrank_updates_move_other_prompts():
    """In the low-rank policy a step on one prompt changes another prompt's probabilities (shared V)."""
    cfg = SimConfig(prompts=2, trajectories=8, correct=2, parameterisation="lowrank", optimizer="sgd", lr=0.5)
    policy = build_policy(cfg)
    before = torch.softmax(policy.logits(), 1).detach()
    optimizer = torch.optim.SGD([policy.v], lr=0.5)  # only the shared factor moves
    sampled = torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0]])  # prompt 1's group is collapsed: no advantage of its own
    simulate_step(policy, get_estimator("grpo"), optimizer, 4, sampled=sampled)
    # tol: asserts a difference: the shared factor's SGD step (lr 0.5) moves these probabilities by ≫ 1e-5
    assert not torch.allclose(torch.softmax(policy.logits(), 1).detach()[1], before[1])


def test_bad_settings_name_the_field():
    for bad, match in [({"correct": 0}, "correct"), ({"difficulty": "beta:0,1"}, "difficulty"),
                       ({"parameterisation": "dense"}, "parameterisation"), ({"estimator": "nope"}, "nope")]:
        with pytest.raises((ValueError, KeyError), match=match):
            SimConfig(**bad).check()


def test_grae_sim_prints_a_pass_at_k_table():
    from typer.testing import CliRunner

    from grae.cli import _mount, app

    _mount()
    result = CliRunner().invoke(app, ["sim", "-e", "grpo", "-e", "agrae:alpha=0.5", "--steps", "20", "--prompts", "64"])
    assert result.exit_code == 0, result.output
    assert "@256" in result.output and "@2 " in result.output and "agrae:alpha=0.5" in result.output
    assert "change vs base" in result.output and "base" in result.output
    bad = CliRunner().invoke(app, ["sim", "-e", "agrae:alpha", "--steps", "2"])
    assert bad.exit_code == 2 and "--estimators" in bad.output
    bad = CliRunner().invoke(app, ["sim", "--difficulty", "gauss:1", "--steps", "2"])
    assert bad.exit_code == 2 and "difficulty" in bad.output
