"""GraeTrainer on 2 processes (torchrun, gloo, CPU, the shipped tiny model).

Each launch runs ``tests/mp_worker.py`` under a hard wall-clock bound: a deadlock between ranks is a
test failure naming the run that hung, never a stuck CI. What the ranks disagree about, per test:

* ``test_ranks_that_disagree[<estimator>-<mode>]`` — every registered estimator, one generation batch
  per mode of ``mp_worker.MODES``: one rank all-correct and the other mixed; a missing reward on one
  rank only; a reward function raising on some samples of one rank only; ±inf, NaN and a string from
  one rank only. Both ranks must see the same gathered rewards and estimator result,
  equal to the registry estimator's, and keep their own slice of it.
* ``test_total_reward_failure_stops_every_rank`` — a function failing on every sample of both ranks
  stops both ranks with the same error (no rank left waiting); ``test_reward_failing_on_every_sample_of_one_rank_...``
  — failing on every sample of rank 1 alone stops both ranks too, with a line naming rank 1.
* ``test_one_and_two_processes_agree[...]`` — the same prompts and completions (a deterministic
  stand-in for generation) on 1 process and on 2: the same advantages, weights, per-step loss and
  final parameters to 1e-6, with gradient accumulation > 1, ``steps_per_generation`` > 1,
  ``num_iterations`` = 2, TRL's and grae's loss paths, KL, and estimators that drop samples (the ranks
  then disagree about which rows train).
* ``test_avspo_state_is_identical_on_every_rank_through_kill_and_resume`` — AVSPO's τ after N steps
  is identical on both ranks, and after a kill at step 3 + resume equals the uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")

from grae.advantage import get_estimator  # noqa: E402
from grae.engines.trl import trl_default_params  # noqa: E402
from mp_worker import MODES, G  # noqa: E402
from strategies import general_names  # noqa: E402
from timeouts import scaled  # noqa: E402

# both torchrun modules share one xdist group: one worker runs them one after another (tests/conftest.py)
pytestmark = [pytest.mark.distributed, pytest.mark.xdist_group("multiprocess")]
WORKER = Path(__file__).with_name("mp_worker.py")
DISAGREEMENTS = ["all_correct_vs_mixed", "missing_on_one_rank", "raising_on_one_rank", "inf_on_one_rank"]
TOL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp: Path, runs: list[dict], nproc: int, *, timeout: float, expect_exit: int = 0) -> dict[str, list[dict]]:
    """Run ``runs`` on ``nproc`` processes; ``{run name: [rank 0 record, rank 1 record, ...]}``."""
    tmp.mkdir(parents=True, exist_ok=True)
    spec, out = tmp / "spec.json", tmp / "out"
    spec.write_text(json.dumps({"runs": runs}))
    if nproc == 1:
        cmd = [sys.executable, str(WORKER), str(spec), str(out)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--master_port={_free_port()}", str(WORKER), str(spec), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    timeout = scaled(timeout)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        started = [line for line in log.splitlines() if line.startswith("[mp_worker] run")]
        pytest.fail(f"{nproc}-process launch hung (no exit within {timeout:.0f}s); last run started: "
                    f"{started[-1] if started else 'none'}\n{log[-3000:]}")
    assert proc.returncode == expect_exit, f"exit {proc.returncode}, expected {expect_exit}\n{log[-6000:]}"
    return {run["name"]: [json.loads((out / run["name"] / f"rank{r}.json").read_text()) for r in range(nproc)]
            for run in runs if (out / run["name"] / "rank0.json").exists()}


def nan(values: list) -> torch.Tensor:
    return torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float64)


def assert_close(a, b, what: str, tol: float = TOL) -> None:
    """Within ``tol`` × the larger of 1 and ``b``'s largest magnitude: advantages, weights and the loss (terms of
    size ≈ |advantage| that cancel to ≈ 0) are of order 1 in float32; parameters may be larger."""
    a, b = nan(a) if isinstance(a, list) else a, nan(b) if isinstance(b, list) else b
    assert a.shape == b.shape, f"{what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}"
    scale = max(1.0, float(b.nan_to_num().abs().max())) if b.numel() else 1.0
    assert torch.allclose(a, b, atol=tol * scale, rtol=0, equal_nan=True), \
        f"{what}: max diff {(a - b).abs().nan_to_num().max():.3g}"


# -- every estimator, ranks that disagree --------------------------------------------------------
#: one generation serves several optimizer steps (steps_per_generation > gradient accumulation > 1) and
#: is reused (num_iterations = 2), on TRL's loss and on grae's; the ranks disagree as above
ACCUMULATION = {
    "psr-trl_dapo-accum2-spg4-iter2": dict(estimator="psr"),
    "dgpo-grae_seq_mean-accum2-spg4-iter2": dict(estimator="dgpo", trainer=dict(loss_agg_mode="seq-mean-token-mean")),
}
GENERATE_EVERY = 4  # optimizer steps per generation batch: spg × iterations / accumulation = 4 × 2 / 2


@pytest.fixture(scope="module")
def disagreeing(tmp_path_factory):
    modes = dict(reward="disagree", modes=DISAGREEMENTS)
    runs = [{"name": name, "estimator": name, "steps": len(DISAGREEMENTS), **modes} for name in general_names()]
    runs += [{"name": name, "steps": GENERATE_EVERY * len(DISAGREEMENTS), **spec, **modes,
              "config": dict(gradient_accumulation_steps=2, steps_per_generation=4, num_iterations=2)}
             for name, spec in ACCUMULATION.items()]
    for stopping in ["all_raising", "all_raising_on_one_rank"]:
        runs.append({"name": stopping, "estimator": "psr", "reward": "disagree", "modes": [stopping], "steps": 2})
    return launch(tmp_path_factory.mktemp("disagree"), runs, 2, timeout=480)


@pytest.mark.timeout(scaled(600))
@pytest.mark.parametrize("mode", DISAGREEMENTS)
@pytest.mark.parametrize("name", general_names())
def test_ranks_that_disagree(disagreeing, name, mode):
    check_disagreeing_ranks(disagreeing[name], name, name, mode)


@pytest.mark.timeout(scaled(600))
@pytest.mark.parametrize("run", list(ACCUMULATION))
def test_accumulation_and_reuse_with_disagreeing_ranks(disagreeing, run):
    ranks = disagreeing[run]
    assert len(ranks[0]["losses"]) == 2 * GENERATE_EVERY * len(DISAGREEMENTS)  # micro-batches: every one trained
    for mode in DISAGREEMENTS:
        check_disagreeing_ranks(ranks, run, ACCUMULATION[run]["estimator"], mode)


def check_disagreeing_ranks(ranks: list[dict], run: str, name: str, mode: str) -> None:
    """Both ranks saw the same gathered batch and result (the registry's), each kept its own slice, and
    the loss normalisers count exactly the kept samples of every rank. On TRL's own algorithm (``grpo``
    with TRL's ε: ``trl_algorithm``) a missing reward's sample is kept with advantage 0, as stock TRL."""
    assert all("error" not in r for r in ranks), [r.get("error") for r in ranks]
    step = DISAGREEMENTS.index(mode)
    seen = [r["generations"][step] for r in ranks]
    about = f"{run}, {MODES[mode]}"
    for key in ["rewards", "advantages", "weights", "state_after"]:
        assert seen[0][key] == seen[1][key], f"{about}: ranks differ in the gathered {key}"

    rewards = nan(seen[0]["rewards"])  # [N_global]
    n_local = len(seen[0]["local_advantages"])
    assert rewards.numel() == 2 * n_local
    if mode != "all_correct_vs_mixed":
        assert rewards[n_local:].isnan().any() and not rewards[:n_local].isnan().any(), \
            f"{about}: rank 1 alone has missing rewards"
    reference = get_estimator(name, **(trl_default_params(name, None) or {}))  # grpo: TRL's eps 1e-4 in GraeTrainer
    reference.load_state_dict(seen[0]["state_before"])
    expected = reference(rewards, torch.arange(rewards.numel()) // G)
    assert_close(seen[0]["advantages"], expected.advantages, f"{about}: advantages vs the registry")
    assert_close(seen[0]["weights"], expected.weights, f"{about}: weights vs the registry")
    assert (expected.weights[rewards.isnan()] == 0).all(), f"{about}: a missing reward must be dropped"

    assert seen[0]["trl_algorithm"] == seen[1]["trl_algorithm"] == (name == "grpo")
    in_loss = (expected.weights > 0) | (rewards.isnan() if seen[0]["trl_algorithm"] else False)  # [N_global]
    kept_tokens = 0
    for rank, gen in enumerate(seen):
        local = slice(rank * n_local, (rank + 1) * n_local)
        assert_close(gen["local_advantages"], expected.advantages[local].float().double(), f"{about}: rank {rank} slice")
        assert_close(gen["local_weights"], expected.weights[local], f"{about}: rank {rank} weights")
        tokens = torch.tensor(gen["local_row_tokens"])
        assert (tokens[~in_loss[local]] == 0).all(), f"{about}: rank {rank} trains on a dropped sample"
        assert (tokens[in_loss[local]] > 0).all(), f"{about}: rank {rank} drops a sample it should train on"
        kept_tokens += int(tokens.sum())
    for gen in seen:
        assert gen["num_items_in_batch"] == kept_tokens, f"{about}: token normaliser is not the global kept count"
        assert gen["num_samples"] == float(in_loss.sum())
    assert ranks[0]["final_state"] == ranks[1]["final_state"], f"{run}: estimator state differs between ranks"


@pytest.mark.timeout(scaled(600))
def test_total_reward_failure_stops_every_rank(disagreeing):
    errors = [r.get("error", "") for r in disagreeing["all_raising"]]
    assert all(e.startswith("RewardFunctionError") and "failed on all 16 samples" in e for e in errors), errors


@pytest.mark.timeout(scaled(600))
def test_reward_failing_on_every_sample_of_one_rank_stops_every_rank(disagreeing):
    """Rank 1's verifier works on none of its 8 samples, rank 0's on all: every rank stops with one error
    naming rank 1 (not training on rank 0's half with exit 0); rank 1's line carries its own first failure."""
    ranks = disagreeing["all_raising_on_one_rank"]
    errors = [r.get("error", "") for r in ranks]
    head = "RewardFunctionError: reward function 'disagree' failed on every sample of rank 1 of 2 (8 on rank 1)"
    assert all(e.startswith(head) for e in errors), errors
    assert "first failure: ValueError: verifier crashed (rank 1)" in errors[1], errors[1]
    assert "first failure: in rank 1's log" in errors[0], errors[0]
    assert all(r["losses"] == [] for r in ranks), "a step trained before the stop"


# -- 1 process vs 2 processes ----------------------------------------------------------------------
EQUIVALENCE = {
    "grpo-trl_dapo": dict(estimator="grpo", steps=3),
    "psr-trl_dapo-accum2-spg2": dict(estimator="psr", steps=3,
                                     config=dict(gradient_accumulation_steps=2, steps_per_generation=2)),
    "agrae-grae_token_mean-kl-accum2-spg2-iter2": dict(
        estimator="agrae", steps=4, trainer=dict(loss_agg_mode="token-mean"),
        config=dict(gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2, beta=0.04)),
    # ω over the newest 24 samples: each 16-sample batch plus half the one before, the window is state
    "agrae_omega_samples-trl_dapo": dict(estimator="agrae", estimator_params={"omega_samples": 24}, steps=3),
    "dgpo-trl_grpo_rescaled-accum2-spg2": dict(estimator="dgpo", steps=3, config=dict(
        loss_type="grpo", gradient_accumulation_steps=2, steps_per_generation=2)),
    "avspo-trl_dr_grpo_rescaled-accum2-iter2": dict(estimator="avspo", steps=4, config=dict(
        loss_type="dr_grpo", gradient_accumulation_steps=2, num_iterations=2)),
    "w_reinforce-seq_mean_token_sum-dual_clip-accum2": dict(
        estimator="w_reinforce", steps=2, trainer=dict(loss_agg_mode="seq-mean-token-sum", dual_clip=3.0),
        config=dict(gradient_accumulation_steps=2, epsilon_high=0.28)),
}


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    def runs(prompts_per_device):
        return [{"name": name, "stand_in": True, "prompts_per_device": prompts_per_device,
                 **{**spec, "config": {"optim": "sgd", "learning_rate": 0.002, **spec.get("config", {})}}}
                for name, spec in EQUIVALENCE.items()]

    root = tmp_path_factory.mktemp("equivalence")
    one = launch(root / "one", runs(4), 1, timeout=300)
    two = launch(root / "two", runs(2), 2, timeout=420)
    return one, two, root


def step_losses(ranks: list[dict]) -> list[float]:
    """The objective of each optimizer step: Σ over its micro-batches, averaged over ranks (as DDP does)."""
    totals: dict[int, float] = {}
    for rank in ranks:
        for entry in rank["losses"]:
            totals[entry["step"]] = totals.get(entry["step"], 0.0) + entry["loss"] / len(ranks)
    return [totals[k] for k in sorted(totals)]


@pytest.mark.timeout(scaled(900))
@pytest.mark.parametrize("name", list(EQUIVALENCE))
def test_one_and_two_processes_agree(one_and_two, name):
    one, two, root = one_and_two
    single, pair = one[name][0], two[name]
    assert all("error" not in r for r in [single, *pair]), [r.get("error") for r in [single, *pair]]
    assert len(single["generations"]) == len(pair[0]["generations"]) >= 2
    for i, gen in enumerate(single["generations"]):
        both = [rank["generations"][i] for rank in pair]
        assert gen["prompts"] == both[0]["prompts"] + both[1]["prompts"], f"{name}: generation {i} saw other prompts"
        for key in ["rewards", "advantages", "weights"]:
            assert_close(gen[key], both[0][key], f"{name}: generation {i} {key}, 1 vs 2 processes")
        assert gen["num_items_in_batch"] == both[0]["num_items_in_batch"] == both[1]["num_items_in_batch"]
        assert gen["num_samples"] == both[0]["num_samples"]
    assert_close(torch.tensor(step_losses([single])), torch.tensor(step_losses(pair)), f"{name}: per-step loss")
    assert single["final_state"] == pair[0]["final_state"] == pair[1]["final_state"]
    p1 = torch.load(root / "one" / "out" / name / "params.pt")
    p2 = torch.load(root / "two" / "out" / name / "params.pt")
    assert_close(p1.double(), p2.double(), f"{name}: parameters after training")


@pytest.mark.timeout(scaled(900))
def test_agrae_omega_window_is_the_same_state_on_one_and_two_processes(one_and_two):
    """The ω window spans steps (16 samples a step, N = 24) and every rank of both runs holds it, step by step;
    ω is the reference's mean of the newest 24 gathered rewards."""
    import reference_estimators as ref

    one, two, _ = one_and_two
    name = "agrae_omega_samples-trl_dapo"
    windows = [[g["state_after"]["omega_window"] for g in rank["generations"]] for rank in [one[name][0], *two[name]]]
    assert windows[0] == windows[1] == windows[2]
    assert [len(w) for w in windows[0]] == [1, 2, 2]  # the first step is out of reach by the third
    history = [g["rewards"] for g in one[name][0]["generations"]]
    for rank in [one[name][0], *two[name]]:
        for step, gen in enumerate(rank["generations"]):
            # tol: ω is a mean of rewards in [0, 1]
            assert gen["metrics"]["agrae/omega"] == pytest.approx(ref.recent_mean(history[:step + 1], 24), abs=1e-6)


# -- stateful AVSPO through kill + resume --------------------------------------------------------
@pytest.mark.timeout(scaled(600))
def test_avspo_state_is_identical_on_every_rank_through_kill_and_resume(tmp_path):
    common = dict(estimator="avspo", stand_in=True, steps=5, reward="parity",
                  config=dict(save_strategy="steps", save_steps=1))
    full = launch(tmp_path / "a", [{"name": "full", **common}], 2, timeout=300)["full"]
    # every rank dies abruptly when step 3 ends: checkpoint-2 is the newest complete one
    launch(tmp_path / "b", [{"name": "crash", "dir": "resumed", "crash_at_step": 3, **common}], 2, timeout=300,
           expect_exit=1)
    resumed = launch(tmp_path / "b", [{"name": "resume", "dir": "resumed", "resume": True, **common}], 2,
                     timeout=300)["resume"]

    assert all("error" not in r for r in [*full, *resumed]), [r.get("error") for r in [*full, *resumed]]
    assert full[0]["final_state"] == full[1]["final_state"], "AVSPO state differs between ranks"
    assert all(r["resumed_from"].endswith("checkpoint-2") for r in resumed), [r["resumed_from"] for r in resumed]
    assert resumed[0]["final_state"] == resumed[1]["final_state"], "AVSPO state differs between ranks after resume"
    assert resumed[0]["final_state"] == full[0]["final_state"], "resume did not restore AVSPO's state"
    taus = [g["state_after"] for g in full[0]["generations"]]
    assert len({json.dumps(t, sort_keys=True) for t in taus}) > 1, "τ never moved: the test would not see a lost state"


# -- dynamic sampling and prompt selection on 2 processes ------------------------------------------
SAMPLING_RUNS = {
    "dynamic+vade": dict(trainer=dict(sampling=dict(dynamic=True, selection="vade", max_gen_batches=3))),
    "dynamic-spg2-accum2": dict(trainer=dict(sampling=dict(dynamic=True, max_gen_batches=3)),
                                config=dict(gradient_accumulation_steps=2, steps_per_generation=2), steps=4),
}


def test_dynamic_sampling_and_selection_decide_alike_on_two_processes(tmp_path):
    """Both ranks draw the same prompts, keep the same groups, hold the same posterior; every trained
    group has reward variance; each rank trains on its slice of the estimator's global result."""
    runs = [{"name": name, "reward": "even_solved", "steps": 3, **spec} for name, spec in SAMPLING_RUNS.items()]
    ranks = launch(tmp_path, runs, 2, timeout=300)
    for name in SAMPLING_RUNS:
        rank0, rank1 = ranks[name]
        assert len(rank0["generations"]) == len(rank1["generations"]) >= 2, name
        for gen0, gen1 in zip(rank0["generations"], rank1["generations"]):
            assert gen0["groups"] == gen1["groups"], f"{name}: the ranks chose different groups"
            assert gen0["sampling_state"] == gen1["sampling_state"], f"{name}: the ranks' sampling state differs"
            trained = [group for group in gen0["groups"] if group["trained"]]
            assert trained and all(len(set(group["rewards"])) > 1 for group in trained), name
            assert any(not group["trained"] for group in gen0["groups"]) or len(trained) == len(gen0["groups"])
            kept = sum(w > 0 for w in gen0["weights"])
            assert kept == G * len(trained), f"{name}: {kept} weighted samples for {len(trained)} groups"
            n_local = len(gen0["local_advantages"])
            for rank, gen in enumerate((gen0, gen1)):
                assert_close(gen["local_advantages"], gen0["advantages"][rank * n_local:(rank + 1) * n_local],
                             f"{name}: rank {rank}'s slice")
        assert any(group["round"] > 0 for gen in rank0["generations"] for group in gen["groups"]), \
            f"{name}: no step needed a second generation round; the test exercises nothing"
        logged = [entry for entry in rank0["log_history"] if "grae/kept_group_frac" in entry]
        assert len(logged) == len([e for e in rank0["log_history"] if "loss" in e]), name
        assert all(entry["grae/gen_batches"] >= 1 for entry in logged)
