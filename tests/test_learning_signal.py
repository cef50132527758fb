"""Zero learning signal is said when it happens: each logged step whose batch had no group with
non-zero advantage mass gets a console line at once and a mark on the progress line; after N such steps in
a row (default 3) one warning names the likely causes. End to end: a tiny-model run whose reward is always 0."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.engines.learning_signal import NO_SIGNAL_STEPS, NoSignalWatch, likely_causes, progress_mark, step_without_signal
from timeouts import scaled

STATE = SimpleNamespace(is_world_process_zero=True, global_step=0)
ARGS = SimpleNamespace(max_completion_length=6)


def _logs(mass: float, reward: float = 0.0, **extra) -> dict:
    return {"reward": reward, "grae/adv_pos_mass": mass / 2, "grae/adv_neg_mass": mass / 2, **extra}


def _feed(watch: NoSignalWatch, masses, **extra) -> None:
    for step, mass in enumerate(masses, start=1):
        watch.on_log(ARGS, SimpleNamespace(is_world_process_zero=True, global_step=step), None,
                     logs=_logs(mass, **extra))


def test_a_step_is_without_signal_exactly_when_no_group_has_advantage_mass():
    assert step_without_signal(_logs(0.0)) is True
    assert step_without_signal(_logs(5e-3)) is False  # one informative group of 8 among 64
    # NGRPO-style: every group's rewards equal (frac_reward_zero_std 1) but all-wrong groups get advantages
    assert step_without_signal({**_logs(0.2), "frac_reward_zero_std": 1.0}) is False
    # stock TRL keys only: TRL's share of groups with equal rewards decides
    assert step_without_signal({"reward": 0.0, "frac_reward_zero_std": 1.0}) is True
    assert step_without_signal({"reward": 0.0, "frac_reward_zero_std": 0.75}) is False
    assert step_without_signal({"reward": 0.0}) is None
    assert progress_mark(_logs(0.0)) == " no-signal" and progress_mark(_logs(0.3)) == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=20), st.integers(1, 5))
def test_every_step_without_signal_is_said_and_each_streak_of_n_warns_once(silent, n):
    lines: list[str] = []
    watch = NoSignalWatch(lines.append, streak_steps=n)
    _feed(watch, [0.0 if s else 0.4 for s in silent])
    said = [line for line in lines if not line.startswith("warning:")]
    assert [int(line.split(":")[0].removeprefix("step ")) for line in said] == [i + 1 for i, s in enumerate(silent) if s]
    streaks, run = 0, 0
    for s in silent:
        run = run + 1 if s else 0
        streaks += run == n
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == streaks
    assert all(f"no learning signal for {n} steps in a row" in w for w in warnings)


def test_the_warning_comes_right_after_the_nth_step_and_names_the_causes():
    lines: list[str] = []
    _feed(NoSignalWatch(lines.append), [0.3, 0.0, 0.0, 0.0, 0.0], **{"completions/clipped_ratio": 0.1})
    assert NO_SIGNAL_STEPS == 3
    assert [line[:30] for line in lines[:3]] == ["step 2: no learning signal: no", "step 3: no learning signal: no",
                                                 "step 4: no learning signal: no"]
    warning = lines[3]
    assert warning.startswith("warning: no learning signal for 3 steps in a row (steps 2-4)")
    for cause in ("reward format", "token budget: 10% of completions hit max_completion_length (6)", "task difficulty"):
        assert cause in warning
    assert len(lines) == 5 and lines[4].startswith("step 5:")


def test_the_most_likely_cause_comes_first():
    assert likely_causes([0.0, 0.0], clipped=[0.9, 1.0]).startswith("token budget: 95% of completions")
    assert likely_causes([0.0, 0.0], clipped=[0.0, 0.1]).startswith("reward format: every completion scored 0")
    assert likely_causes([1.0, 1.0]).startswith("task difficulty: every completion scored 1: the task is too easy")
    assert likely_causes([0.2, 0.4]).startswith("within each group the completions scored alike")


def test_other_processes_and_unlogged_keys_say_nothing():
    lines: list[str] = []
    watch = NoSignalWatch(lines.append, streak_steps=1)
    watch.on_log(ARGS, SimpleNamespace(is_world_process_zero=False, global_step=1), None, logs=_logs(0.0))
    watch.on_log(ARGS, STATE, None, logs={"reward": 0.0})  # nothing to tell signal from
    watch.on_log(ARGS, STATE, None, logs={"loss": 0.0})  # not a training step's log
    assert lines == []


def test_zero_signal_steps_streak_is_configurable_and_validated():
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.train.config import ConfigError, load_config

    assert load_config(None, {}).no_signal_steps == NO_SIGNAL_STEPS
    assert load_config(None, {"no_signal_steps": 0}).no_signal_steps == 0
    with pytest.raises(ConfigError, match="no_signal_steps: must be an integer >= 0"):
        load_config(None, {"no_signal_steps": -1})


def test_a_run_whose_reward_is_always_zero_says_so_at_every_step_and_warns_once(tmp_path):
    """The tiny model with a reward that is always 0, 3 steps, no held-out eval: each step's line on the
    console, the warning after step 3, and the plain progress line marks the steps."""
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from tiny_model import build_random_tiny

    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    (tmp_path / "zero_reward.py").write_text("def zero(prompts, completions, **kwargs):\n"
                                             "    return [0.0] * len(completions)\n")
    cmd = [sys.executable, "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(tmp_path / "run"),
           "--max-steps", "3", "--task.train_size", "64", "--trl.per_device_train_batch_size", "8",
           "--trl.num_generations", "4", "--trl.max_completion_length", "4", "--eval.enabled", "false",
           "--estimator", "grpo", "--reward_funcs", "zero_reward:zero"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=scaled(300), cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    for step in (1, 2, 3):
        assert f"step {step}: no learning signal: no group had a non-zero advantage" in out, out[-3000:]
        assert f"train step {step}/3 " in out and "no-signal" in out.split(f"train step {step}/3 ")[1].splitlines()[0]
    assert out.count("warning: no learning signal for 3 steps in a row (steps 1-3)") == 1
    assert "reward format: every completion scored 0" in out
