"""A-GRAE's ``omega_samples``: ω of Eqs. 12–13 over the most recent N samples across steps.

Against the loop references in tests/reference_estimators.py (``agrae`` with a given ω, ``recent_mean``
written sample by sample), plus the invariants: None is Eq. 11 exactly and stateless; N ≥ everything
seen is the running mean; the window survives a JSON state round trip and does not depend on the order
of samples in a batch (an engine's gathered batch from N processes).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_estimators as ref
from grae.advantage import get_estimator
from strategies import reward_batches
from tolerances import assert_close_scaled

runs = st.lists(reward_batches(binary=None, min_size=1, max_size=6, max_groups=4, nan=True), min_size=1, max_size=4)


def close(a, b, tol=1e-6):
    # tol: float64 advantages of rewards in [0, 1] are at most ~10 (√ factors of ω); rounding is ~1e-15 of that
    return all(math.isclose(x, y, rel_tol=tol, abs_tol=tol) for x, y in zip(a, b, strict=True))


@settings(max_examples=60, deadline=None)
@given(runs, st.integers(1, 40), st.sampled_from([1.0, 0.5]))
def test_each_step_matches_the_reference_with_omega_over_the_last_n_samples(steps, n, alpha):
    est = get_estimator("agrae", alpha=alpha, omega_samples=n)
    history = []
    for r, g in steps:
        history.append(r.tolist())
        omega = ref.recent_mean(history, n)
        out = est(r, g)
        if math.isnan(omega):  # nothing valid seen yet: every sample is missing, every advantage 0
            assert not bool(out.advantages.any())
            continue
        assert out.metrics["agrae/omega"] == pytest.approx(omega, abs=1e-12)  # tol: a mean of [0, 1] rewards, float64
        assert close(out.advantages.tolist(), ref.agrae(r.tolist(), g.tolist(), alpha=alpha, omega=omega))


@settings(max_examples=40, deadline=None)
@given(runs)
def test_none_is_the_papers_batch_omega_and_stateless(steps):
    est = get_estimator("agrae")
    assert est.omega_samples is None
    for r, g in steps:
        if bool(torch.isnan(r).all()):
            continue
        out = est(r, g)
        batch = r[~torch.isnan(r)]
        assert out.metrics["agrae/omega"] == pytest.approx(float(batch.mean()), abs=1e-12)  # tol: [0, 1] rewards: float64 mean
        assert close(out.advantages.tolist(), ref.agrae(r.tolist(), g.tolist()))
        assert est.state_dict() == {} and "agrae/omega_batch" not in out.metrics


@settings(max_examples=40, deadline=None)
@given(runs)
def test_a_window_larger_than_the_run_is_the_mean_over_all_history(steps):
    est = get_estimator("agrae", omega_samples=10**6)
    seen = []
    for r, g in steps:
        seen += [x for x in r.tolist() if not math.isnan(x)]
        out = est(r, g)
        if seen:
            # tol: ω is a mean of rewards in [0, 1] in float64
            assert out.metrics["agrae/omega"] == pytest.approx(sum(seen) / len(seen), abs=1e-12)
            assert out.metrics["agrae/omega_window_samples"] == len(seen)


def test_worked_window():
    """Batches of 16 with means 0.25, 0.75, 0.5 and N = 20: ω = 0.25, (12 + 4·4/16)/20 = 0.65, (8 + 4·12/16)/20 = 0.55;
    a batch of ≥ N samples alone gives its own mean."""
    g = torch.arange(16) // 4
    est = get_estimator("agrae", omega_samples=20)
    omegas = [est(torch.tensor(row * 4), g).metrics["agrae/omega"]
              for row in ([1.0, 0, 0, 0], [1.0, 1, 1, 0], [1.0, 1, 0, 0])]
    assert omegas == pytest.approx([0.25, 0.65, 0.55], abs=1e-12)  # tol: means of 0/1 rewards in float64
    assert est.state_dict() == {"omega_window": [[12.0, 16], [8.0, 16]]}  # the first step is out of reach
    small = get_estimator("agrae", omega_samples=8)
    small(torch.tensor([1.0, 1, 1, 1] * 4), g)
    assert small(torch.tensor([1.0, 0, 0, 0] * 4), g).metrics["agrae/omega"] == pytest.approx(0.25)


@settings(max_examples=30, deadline=None)
@given(runs, st.integers(1, 30), st.integers(0, 3))
def test_state_round_trip_through_json_continues_identically(steps, n, cut):
    """Save after ``cut`` steps, load into a fresh estimator (as GraeTrainer's checkpoint and verl's state file do),
    continue: every later step is the same as without the break."""
    whole = get_estimator("agrae", omega_samples=n)
    expected = [whole(r, g).advantages for r, g in steps]
    first = get_estimator("agrae", omega_samples=n)
    for r, g in steps[:cut]:
        first(r, g)
    resumed = get_estimator("agrae", omega_samples=n)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert resumed.state_dict() == first.state_dict()
    for (r, g), want in zip(steps[cut:], expected[cut:]):
        assert torch.equal(resumed(r, g).advantages, want)
    assert resumed.state_dict() == whole.state_dict()


@settings(max_examples=30, deadline=None)
@given(runs, st.integers(1, 30), st.data())
def test_the_window_does_not_depend_on_sample_order(steps, n, data):
    """Every engine calls the estimator on the batch gathered from all processes; a batch in another order (another
    split across ranks) gives the same ω, the same state and the permuted advantages."""
    a, b = get_estimator("agrae", omega_samples=n), get_estimator("agrae", omega_samples=n)
    for r, g in steps:
        perm = torch.tensor(data.draw(st.permutations(range(len(r)))))
        out_a, out_b = a(r, g), b(r[perm], g[perm])
        # tol: ω is a mean of rewards in [0, 1] in float64
        assert out_a.metrics["agrae/omega"] == pytest.approx(out_b.metrics["agrae/omega"], abs=1e-12, nan_ok=True)
        assert_close_scaled(out_a.advantages[perm], out_b.advantages, rel=1e-9)
    assert [count for _, count in a.state_dict()["omega_window"]] == [count for _, count in b.state_dict()["omega_window"]]
    assert close([total for total, _ in a.state_dict()["omega_window"]], [total for total, _ in b.state_dict()["omega_window"]])


@pytest.mark.parametrize("params, message", [
    ({"omega_samples": 0}, r"^omega_samples: must be None .* or an integer >= 1"),
    ({"omega_samples": -8}, r"^omega_samples: must be None"),
    ({"omega_samples": 8.0}, r"^omega_samples: must be None"),
    ({"omega_samples": True}, r"^omega_samples: must be None"),
    ({"omega_samples": "8192"}, r"^omega_samples: must be None"),
    ({"omega_samples": 64, "omega_ema": 0.9}, r"^omega_samples: and omega_ema both replace"),
])
def test_bad_omega_samples_name_the_field(params, message):
    with pytest.raises(ValueError, match=message):
        get_estimator("agrae", **params)


@pytest.mark.parametrize("state", [{}, {"omega_window": [[3.0, 0]]}, {"omega_window": [[5.0, 4]]},
                                   {"omega_window": [[1.0, 2]], "omega_avg": 0.5}, {"omega_window": [["x", 2]]}])
def test_a_bad_window_state_is_refused(state):
    with pytest.raises(ValueError, match=r"^state_dict"):
        get_estimator("agrae", omega_samples=16).load_state_dict(state)


def test_the_window_survives_a_grae_trainer_checkpoint_and_resume(tmp_path):
    """GraeTrainer writes the window into each checkpoint (grae_estimator_state.json) and restores it: a run resumed
    from checkpoint-1 ends with the window of the uninterrupted run (8 samples a step, N = 20: the third step's window
    reaches back into the first, which only the restored state holds)."""
    from grae.engines.trl import STATE_FILE
    from grae.tiny import tiny_model_path
    from test_trl_engine import make_trainer

    model_dir = str(tiny_model_path())
    kw = dict(estimator_params={"omega_samples": 20}, config=dict(save_strategy="steps", save_steps=1))
    full = make_trainer(model_dir, tmp_path / "run", "agrae", steps=3, **kw)
    full.train()
    saved = json.load(open(tmp_path / "run" / "checkpoint-1" / STATE_FILE))
    assert saved["estimator"] == "agrae" and [count for _, count in saved["state"]["omega_window"]] == [8]
    assert [count for _, count in full.estimator.state_dict()["omega_window"]] == [8, 8, 8]
    resumed = make_trainer(model_dir, tmp_path / "run", "agrae", steps=3, **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    assert resumed.estimator.state_dict() == full.estimator.state_dict()


@pytest.mark.parametrize("estimator, params, message", [
    ("agrae", {"omega_samples": 0}, r"^estimator: omega_samples: must be None"),
    ("agrae", {"omega_samples": 8192, "omega_ema": 0.9}, r"^estimator: omega_samples: and omega_ema"),
    ("unlikeliness", {"rank_over": "correct_only"}, r"^estimator: rank_over: must be one of \('group', 'correct'\)"),
])
def test_grae_train_refuses_bad_new_params_in_one_line(estimator, params, message):
    from grae.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config("chain-sum", {"estimator": estimator, "estimator_params": params})
    # the default recipe trains agrae: restating it on the command line keeps its parameters, beside the new one
    default = load_config("chain-sum")
    assert default.estimator == "agrae"
    assert load_config("chain-sum", {"estimator": "agrae", "estimator_params": {"omega_samples": 8192}}).estimator_params == \
        {**default.estimator_params, "omega_samples": 8192}
