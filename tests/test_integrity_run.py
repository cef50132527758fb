"""Run integrity under concurrency, torn files and machine limits.

Unit tests first (each well under a second), then end-to-end runs of the tiny model (marked slow):
two ``grae train`` processes into one directory, a torn metrics log and a cut checkpoint on
``--resume``, a run that failed before its first step, and a real ``ulimit -f``."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.advantage import get_estimator, names
from grae.advantage.base import REWARD_LIMIT
from grae.train.config import ConfigError
from grae.train.faults import write_failure
from grae.train.rundir import LOCK_FILE, claim, never_trained, release
from timeouts import scaled

# -- write failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("err", "what"), [
    (OSError(errno.EFBIG, "File too large"), "file-size limit reached"),
    (OSError(errno.EROFS, "Read-only file system"), "read-only file system"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk full"),
    (Exception('Error while serializing: IoError(Os { code: 27, kind: FileTooLarge, message: "File too large" })'),
     "file-size limit reached"),
], ids=["EFBIG", "EROFS", "ENOSPC", "safetensors-EFBIG"])
def test_every_write_failure_is_one_line(err, what, tmp_path):
    line = write_failure(err, tmp_path)
    assert line is not None and line.startswith(what) and "\n" not in line and "then rerun" in line


def test_other_errors_are_not_disguised_as_write_failures(tmp_path):
    assert write_failure(OSError(errno.EACCES, "Permission denied"), tmp_path) is None
    assert write_failure(ValueError("bad"), tmp_path) is None


# -- one owner per directory ----------------------------------------------------------------------


def _claim_once(out: str, barrier, results) -> None:
    barrier.wait()  # every process reaches claim() together: a real race
    try:
        results.put(("ok", claim(Path(out), {"max_steps": 1, "seed": 0}, resume=False, overwrite=False)))
    except ConfigError as err:
        results.put(("refused", str(err)))


@pytest.mark.parametrize("round_", range(3))
def test_processes_claiming_one_directory_together_get_one_owner(tmp_path, round_):
    ctx = multiprocessing.get_context("fork")
    barrier, results, n = ctx.Barrier(4), ctx.Queue(), 4
    procs = [ctx.Process(target=_claim_once, args=(str(tmp_path / "D"), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=scaled(30)) for _ in range(n)]
    for p in procs:
        p.join(timeout=scaled(30))
    owners = [value for kind, value in outcomes if kind == "ok"]
    assert len(owners) == 1, outcomes
    assert json.loads((tmp_path / "D" / "run.json").read_text())["run_id"] == owners[0]
    assert all("in use by another grae process" in v or "holds run" in v for k, v in outcomes if k == "refused")


def test_the_lock_is_held_until_released_and_never_counts_as_content(tmp_path):
    out = tmp_path / "D"
    config = {"max_steps": 1}
    claim(out, config, resume=False, overwrite=False)
    child = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from grae.train.rundir import "
                            "claim; claim(Path(sys.argv[1]), {'max_steps': 1}, resume=False, overwrite=True)", str(out)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                           timeout=scaled(120))
    assert child.returncode != 0 and "in use by another grae process" in child.stderr
    release(out)
    assert never_trained(out)  # run.json only: a new claim takes the directory without --overwrite
    assert claim(out, {"max_steps": 2}, resume=False, overwrite=False)
    assert (out / LOCK_FILE).exists()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    release(out)
    with pytest.raises(ConfigError, match="holds run"):
        claim(out, {"max_steps": 2}, resume=False, overwrite=False)
    release(out)


# -- torn metrics, cut checkpoints (no training: files as a run leaves them) -------------------------


def _checkpoint(folder: Path, step: int, run_id: str, history: list[dict]) -> Path:
    from safetensors.torch import save_file

    from grae.engines.trl import COMPLETE_MARKER

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(path / "model.safetensors"))
    torch.save({"step": step}, path / "optimizer.pt")
    (path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (path / COMPLETE_MARKER).write_text(json.dumps({"run_id": run_id}))
    return path


def test_a_cut_checkpoint_is_passed_over_for_the_newest_whole_one(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.engines.trl import COMPLETE_MARKER, checkpoint_damage, latest_complete_checkpoint

    two, four = (_checkpoint(tmp_path, step, "r", []) for step in (2, 4))
    assert latest_complete_checkpoint(str(tmp_path), "r") == str(four) and checkpoint_damage(str(four)) is None
    for name in ("model.safetensors", "optimizer.pt"):
        whole = (four / name).read_bytes()
        (four / name).write_bytes(whole[: len(whole) - 10])
        heard: list[tuple[str, str]] = []
        assert latest_complete_checkpoint(str(tmp_path), "r", on_damaged=lambda c, r, h=heard: h.append((c, r))) == str(two)
        assert heard and heard[0][0] == str(four) and heard[0][1].startswith(name)
        (four / name).write_bytes(whole)
    assert (four / COMPLETE_MARKER).exists()


def test_resume_rebuilds_lost_metrics_rows_from_the_checkpoint(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.train.callbacks import MetricsJsonl, metrics_row
    from grae.train.rundir import read_metrics

    logs = [{"reward": 0.1 * s, "loss": 1.0 / s, "grad_norm": 2.0, "step": s} for s in (1, 2, 3, 4)]
    checkpoint = _checkpoint(tmp_path / "checkpoints", 3, "r", logs[:3])
    rows = [metrics_row(s, {k: v for k, v in logs[s - 1].items() if k != "step"}) for s in (1, 2, 3, 4)]
    lines = [json.dumps(row) + "\n" for row in rows]
    metrics, said = tmp_path / "metrics.jsonl", []
    metrics.write_text(lines[0] + lines[1][:20])  # step 1, then a torn step 2; 3 and 4 gone
    MetricsJsonl(metrics, resume_step=3, checkpoint=str(checkpoint), log=said.append)
    assert read_metrics(metrics) == rows[:3] and metrics.read_text() == "".join(lines[:3])
    assert said == [f"metrics.jsonl: 2 rows missing (steps 2-3) were rebuilt from {checkpoint / 'trainer_state.json'}"]
    metrics.write_text("".join(lines))  # whole, and one step past the checkpoint: that step is retrained
    said.clear()
    MetricsJsonl(metrics, resume_step=3, checkpoint=str(checkpoint), log=said.append)
    assert read_metrics(metrics) == rows[:3] and said == []


# -- huge finite rewards ---------------------------------------------------------------------------


@st.composite
def huge_reward_groups(draw):
    """(rewards [N] float32 within ±REWARD_LIMIT, group_ids [N]): 1-4 groups of 2-6 samples."""
    value = st.one_of(st.floats(-REWARD_LIMIT, REWARD_LIMIT), st.sampled_from([REWARD_LIMIT, -REWARD_LIMIT, 0.0, 1.0]))
    sizes = draw(st.lists(st.integers(2, 6), min_size=1, max_size=4))
    rewards, ids = [], []
    for g, size in enumerate(sizes):
        rewards += draw(st.lists(value, min_size=size, max_size=size))
        ids += [g] * size
    return torch.tensor(rewards, dtype=torch.float32), torch.tensor(ids)


@settings(max_examples=60, deadline=None)
@given(huge_reward_groups())
def test_huge_finite_rewards_give_finite_advantages(batch):
    """Every registered estimator, rewards anywhere in ±1e30 (float32): finite advantages, and a group
    whose rewards differ is never given advantage 0 by grpo/dgpo through a std or MAD that overflowed.
    (Across groups DGPO weights questions by softmax(-mean/T), its paper's equation: with rewards far
    outside [0, 1] an easier group's weight underflows to 0, which its ``dgpo/lambda_min`` metric shows.)"""
    rewards, ids = batch
    for name in names():
        est = get_estimator(name)
        if est.requires_binary:  # pass@k estimators take only 0/1 (their refusal: test_advantage_properties)
            continue
        r = rewards.clamp(0, 1) if est.requires_unit_interval else rewards
        context = {key: torch.zeros(len(r)) for key in est.requires} or None  # e.g. unlikeliness' log-probs
        out = est(r, ids, context=context)
        assert torch.isfinite(out.advantages).all() and torch.isfinite(out.weights).all(), name
        if name in ("grpo", "dgpo"):  # one group at a time: DGPO's softmax over groups' means is its paper's
            for g in ids.unique():
                group = r[ids == g]
                if float(group.double().max() - group.double().min()) > 1e-3:
                    alone = est(group, torch.zeros_like(ids[ids == g])).advantages
                    assert bool((alone != 0).any()), (name, group.tolist())


@pytest.mark.parametrize("value", [1e300, -1e300, 1e31, 10**400])
def test_rewards_beyond_the_limit_are_refused_like_inf(value):
    with pytest.raises(ValueError, match="rewards: contain"):
        get_estimator("rloo")(torch.tensor([float(min(max(value, -1e308), 1e308)), 0.0], dtype=torch.float64),
                              torch.tensor([0, 0]))
    from grae.rewards import safe_reward

    # in training a reward function's huge value is a contained fault (the fallback), as ±inf is
    assert safe_reward(lambda completions, **kw: [value, 0.5], fallback=0.0)(
        prompts=["p"] * 2, completions=["a", "b"]) == [0.0, 0.5]


# -- end to end on the tiny model -----------------------------------------------------------------

QUICK = ["--eval.enabled", "false", "--report", "false"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from tiny_model import build_random_tiny

    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


def _errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "error" in line.lower() or "Traceback" in line]


@pytest.mark.slow
def test_two_trains_started_together_into_one_directory_one_trains(model_dir, tmp_path):
    from grae.train.rundir import read_metrics
    from test_train_run import grae_train

    out = tmp_path / "D"
    procs = [grae_train(model_dir, out, "--max-steps", "1", *QUICK) for _ in range(2)]
    logs = [p.communicate(timeout=scaled(300))[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], logs
    refused = logs[[p.returncode for p in procs].index(2)]
    assert len(_errors(refused)) == 1 and ("in use by another grae process" in refused or "holds run" in refused)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]


@pytest.mark.slow
def test_resume_rebuilds_a_torn_metrics_log_and_passes_over_a_cut_checkpoint(model_dir, tmp_path):
    from grae.train.rundir import read_metrics
    from test_train_run import finish, grae_train

    out = tmp_path / "D"
    keep_two = ("--trl.save_total_limit", "2")  # grae keeps one checkpoint by default; a kept older one is the fallback
    finish(grae_train(model_dir, out, "--max-steps", "3", "--save_steps", "2", *keep_two, *QUICK))
    metrics = out / "metrics.jsonl"
    rows = read_metrics(metrics)
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # step 1, then a torn step 2, steps 3 gone
    weights = out / "checkpoints" / "checkpoint-3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    log = finish(grae_train(model_dir, out, "--max-steps", "4", "--save_steps", "2", *keep_two, *QUICK, "--resume"))
    assert "checkpoint-3 is damaged (model.safetensors" in log and "resuming from" in log and "checkpoint-2" in log
    assert "1 rows missing (steps 2-2) were rebuilt" in log
    resumed = read_metrics(metrics)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert resumed[:2] == rows[:2]  # the rebuilt row is the row that was written


@pytest.mark.slow
def test_a_run_that_failed_before_its_first_step_does_not_hold_its_directory(model_dir, tmp_path):
    from test_train_run import finish, grae_train

    out = tmp_path / "D"
    failed = grae_train(model_dir, out, "--max-steps", "1", *QUICK, "--task.params.min_terms", "-3")
    log, _ = failed.communicate(timeout=scaled(300))
    assert failed.returncode != 0, log
    finish(grae_train(model_dir, out, "--max-steps", "1", *QUICK))  # the corrected rerun, no --overwrite


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_in_train_and_eval(model_dir, tmp_path):
    from test_train_run import SMALL

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    train = [sys.executable, "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(tmp_path / "T"),
             *SMALL, "--max-steps", "1", *QUICK]
    proc = subprocess.run(["bash", "-c", 'ulimit -f 16; exec "$@"', "_", *train], capture_output=True, text=True,
                          env=env, timeout=scaled(300))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "file-size limit reached" in log and "Traceback" not in log, log[-3000:]
    evaluate = [sys.executable, "-m", "grae.cli", "eval", model_dir, "--tasks", "chain_sum", "--n", "4",
                "--num-problems", "4", "--max-tokens", "6", "-o", str(tmp_path / "E")]
    proc = subprocess.run(["bash", "-c", 'ulimit -f 1; exec "$@"', "_", *evaluate], capture_output=True, text=True,
                          env=env, timeout=scaled(300))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "file-size limit reached" in log and "Traceback" not in log, log[-3000:]


def _file_list(checkpoint) -> None:
    """Give ``checkpoint``'s completion marker the file list GraeTrainer writes into it."""
    from grae.engines.trl import COMPLETE_MARKER
    from grae.train.checkpoints import file_sizes

    marker = checkpoint / COMPLETE_MARKER
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "files": file_sizes(str(checkpoint))}))


def test_resume_passes_over_only_what_loses_nothing_trained(tmp_path):
    """With an older whole checkpoint kept: a newer one whose save never finished, or whose weights
    are cut, is passed over in one line; one whose weights are whole but whose optimizer state is cut or gone is
    not trained over (resuming from the older one would rotate its weights away): refused, naming both."""
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.engines.trl import COMPLETE_MARKER
    from grae.train.resume import resume_checkpoint

    folder = tmp_path / "checkpoints"
    two, four = (_checkpoint(folder, step, "r", []) for step in (2, 4))
    for checkpoint in (two, four):
        _file_list(checkpoint)
    _checkpoint(folder, 6, "another run", [])  # another run's newer checkpoint is neither resumed nor a reason
    assert resume_checkpoint(tmp_path, "r") == (str(four), [])
    whole = {name: (four / name).read_bytes() for name in ("model.safetensors", "optimizer.pt", COMPLETE_MARKER)}

    def restore():
        for name, data in whole.items():
            (four / name).write_bytes(data)

    (four / COMPLETE_MARKER).unlink()
    checkpoint, notes = resume_checkpoint(tmp_path, "r")
    assert checkpoint == str(two) and len(notes) == 1 and f"{four} is unfinished (no completion marker" in notes[0]
    restore()
    os.truncate(four / "model.safetensors", 100)
    checkpoint, notes = resume_checkpoint(tmp_path, "r")
    assert checkpoint == str(two) and "damaged (model.safetensors: 100 bytes" in notes[0]
    assert "its weights are not whole" in notes[0]
    restore()
    for damage in (lambda: os.truncate(four / "optimizer.pt", 100), lambda: (four / "optimizer.pt").unlink()):
        damage()
        with pytest.raises(ConfigError, match=f"{four} is damaged \\(optimizer.pt: .*but its weights are whole.*"
                                              f"--model {four}.*delete {four} to resume from {two}.*--overwrite"):
            resume_checkpoint(tmp_path, "r")
        restore()
    assert resume_checkpoint(tmp_path, "r") == (str(four), [])


def test_resume_refuses_a_run_that_logged_steps_but_saved_no_checkpoint(tmp_path):
    """Nothing to resume, but training steps on record: never a new start from step 0 over the run's metrics."""
    from grae.train.resume import resume_checkpoint

    assert resume_checkpoint(tmp_path, "r") == (None, [])  # trained nothing: nothing to lose
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    with pytest.raises(ConfigError, match="logged 2 training steps but saved no checkpoint.*--overwrite"):
        resume_checkpoint(tmp_path, "r")


def test_a_legacy_marker_without_a_file_list_still_finds_missing_weights_and_optimizer_state(tmp_path):
    from grae.train.checkpoints import checkpoint_problem

    four = _checkpoint(tmp_path, 4, "r", [])
    torch.save({}, four / "scheduler.pt")  # a full (not model-only) checkpoint: its optimizer state belongs
    assert checkpoint_problem(str(four)) is None
    (four / "optimizer.pt").unlink()
    assert checkpoint_problem(str(four)) == "optimizer.pt: missing"
    assert checkpoint_problem(str(four), weights_only=True) is None
    (four / "model.safetensors").unlink()
    assert checkpoint_problem(str(four), weights_only=True) == "model.safetensors: missing"
