"""Zero learning signal is said when it happens: the first logged step of a streak whose batches had no group with
non-zero advantage mass gets a console line at once, the progress line marks every such step (one line a step);
after N such steps in a row (default 3) ``grae train`` stops with the likely causes and a resumable checkpoint
(with continue_without_signal: one warning, and training goes on). Before step 1, a base whose measured success
rates leave almost no group of G samples disagreeing stops the run. End to end: a tiny-model run whose reward is
always 0."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.engines.learning_signal import (
    MIN_INFORMATIVE_GROUPS,
    NO_SIGNAL_STEPS,
    NoSignalWatch,
    base_diagnosis,
    expected_informative_share,
    likely_causes,
    progress_mark,
    step_without_signal,
)
from timeouts import scaled

STATE = SimpleNamespace(is_world_process_zero=True, global_step=0)
ARGS = SimpleNamespace(max_completion_length=6)


def _logs(mass: float, reward: float = 0.0, **extra) -> dict:
    return {"reward": reward, "grae/adv_pos_mass": mass / 2, "grae/adv_neg_mass": mass / 2, **extra}


def _feed(watch: NoSignalWatch, masses, main: bool = True, **extra) -> list[SimpleNamespace]:
    """Each step's log through ``watch`` until it stops training, as the trainer would; the control of each step
    (what the watch asked the trainer)."""
    controls = []
    for step, mass in enumerate(masses, start=1):
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        watch.on_log(ARGS, SimpleNamespace(is_world_process_zero=main, global_step=step), control,
                     logs=_logs(mass, **extra))
        controls.append(control)
        if control.should_training_stop:
            break
    return controls


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
def test_the_first_step_of_each_streak_is_said_and_each_streak_of_n_warns_once(silent, n):
    lines: list[str] = []
    watch = NoSignalWatch(lines.append, streak_steps=n)
    controls = _feed(watch, [0.0 if s else 0.4 for s in silent])
    said = [line for line in lines if not line.startswith("warning:")]
    firsts = [i + 1 for i, s in enumerate(silent) if s and (i == 0 or not silent[i - 1])]
    assert [int(line.split(":")[0].removeprefix("step ")) for line in said] == firsts
    streaks, run = 0, 0
    for s in silent:
        run = run + 1 if s else 0
        streaks += run == n
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == streaks
    assert all(f"no learning signal for {n} steps in a row" in w for w in warnings)
    assert not any(c.should_training_stop for c in controls) and watch.stopped is None  # stop=False: warns only


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=20), st.integers(1, 5), st.booleans())
def test_with_stop_training_stops_and_saves_at_the_end_of_the_first_streak_of_n_on_every_process(silent, n, main):
    lines: list[str] = []
    watch = NoSignalWatch(lines.append, streak_steps=n, stop=True)
    controls = _feed(watch, [0.0 if s else 0.4 for s in silent], main=main)
    run, end = 0, None
    for step, s in enumerate(silent, start=1):
        run = run + 1 if s else 0
        if run == n:
            end = step
            break
    stops = [step for step, c in enumerate(controls, start=1) if c.should_training_stop]
    assert stops == ([] if end is None else [end])
    assert [step for step, c in enumerate(controls, start=1) if c.should_save] == stops
    assert not any(line.startswith("warning:") for line in lines)  # the stop says it, not a warning
    assert (watch.stopped is None) == (end is None)
    if end is not None:
        assert watch.stopped.startswith(f"no learning signal for {n} steps in a row (steps {end - n + 1}-{end})")
    if not main:
        assert lines == []  # another process of the run stops too, silently


def test_the_warning_comes_right_after_the_nth_step_and_names_the_causes():
    lines: list[str] = []
    _feed(NoSignalWatch(lines.append), [0.3, 0.0, 0.0, 0.0, 0.0], **{"completions/clipped_ratio": 0.1})
    assert NO_SIGNAL_STEPS == 3
    assert lines[0].startswith("step 2: no learning signal: no group had a non-zero advantage")
    warning = lines[1]
    assert warning.startswith("warning: no learning signal for 3 steps in a row (steps 2-4)")
    for cause in ("reward format", "token budget: 10% of completions hit max_completion_length (6)", "task difficulty"):
        assert cause in warning
    assert len(lines) == 2  # step 5 continues the streak: its progress line marks it


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

    assert load_config("chain-sum", {}).no_signal_steps == NO_SIGNAL_STEPS
    assert load_config("chain-sum", {"no_signal_steps": 0}).no_signal_steps == 0
    with pytest.raises(ConfigError, match="no_signal_steps: must be an integer >= 0"):
        load_config("chain-sum", {"no_signal_steps": -1})


def test_a_run_whose_reward_is_always_zero_stops_after_3_steps_with_a_checkpoint_and_resumes_on_request(tmp_path):
    """The tiny model with a reward that is always 0, 10 steps asked, no held-out eval: one console line per step
    (the plain progress line, marked no-signal; the streak's first step explained once), a stop after step 3 with
    the diagnosis, exit 3 and checkpoint-3; ``--resume --continue-without-signal`` trains on from it."""
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.cli.train_cmd import NO_SIGNAL_EXIT
    from tiny_model import build_random_tiny

    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    (tmp_path / "zero_reward.py").write_text("def zero(prompts, completions, **kwargs):\n"
                                             "    return [0.0] * len(completions)\n")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(run),
           "--max-steps", "10", "--task.train_size", "64", "--trl.per_device_train_batch_size", "8",
           "--trl.num_generations", "4", "--trl.max_completion_length", "4", "--eval.enabled", "false",
           "--estimator", "grpo", "--reward_funcs", "zero_reward:zero", "--save_steps", "100"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "400",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=scaled(300), cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == NO_SIGNAL_EXIT == 3, out[-3000:]
    progress = [line for line in out.splitlines() if line.startswith("train step ")]
    assert [line.split()[2] for line in progress] == ["1/10", "2/10", "3/10"]
    assert all(line.endswith(" no-signal") for line in progress)
    steps_said = [line for line in out.splitlines() if ": no learning signal: " in line]
    assert len(steps_said) == 1 and steps_said[0].startswith("step 1: no learning signal")
    said = " ".join(out.split())
    assert "stopped after step 3: no learning signal for 3 steps in a row (steps 1-3)" in said
    assert "reward format: every completion scored 0" in said and "warning:" not in said
    assert f"Saved: checkpoint {run / 'checkpoints' / 'checkpoint-3'}" in said
    assert "--resume --continue-without-signal" in said
    assert (run / "checkpoints" / "checkpoint-3").is_dir() and not (run / "final").exists()
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]

    resumed = subprocess.run([*cmd[:cmd.index("--max-steps") + 1], "5", *cmd[cmd.index("--max-steps") + 2:],
                              "--resume", "--continue-without-signal"],
                             capture_output=True, text=True, env=env, timeout=scaled(300), cwd=tmp_path)
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log[-3000:]
    assert "resuming from" in log and "checkpoint-3" in log
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert (run / "final").is_dir()


def _mixed(p: float, g: int) -> float:
    """P(a group of g draws at success rate p has both outcomes), by enumerating the 2^g outcomes."""
    return sum(p ** sum(o) * (1 - p) ** (g - sum(o)) for o in itertools.product((0, 1), repeat=g) if 0 < sum(o) < g)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=6), st.integers(1, 8))
def test_the_expected_informative_share_is_the_enumerated_probability_of_a_mixed_group(rates, g):
    share = expected_informative_share(rates, g)
    # tol: shares in [0, 1] in float64: the closed form and a sum of at most 2^8 outcome probabilities, or of p
    # against 1 − p (rounded once), differ by a few hundred roundings of 1e-16 at most
    assert share == pytest.approx(sum(_mixed(p, g) for p in rates) / len(rates), abs=1e-12)
    assert share == pytest.approx(expected_informative_share([1 - p for p in rates], g), abs=1e-12)
    assert 0.0 <= share <= 1.0


def test_a_base_right_once_in_512_stops_before_step_1_and_one_right_in_four_does_not():
    problems = [f"q{i}" for i in range(64) for _ in range(8)]
    labels = [i == 0 for i in range(512)]  # 1 right completion, on q0 (p = 1/8 there, 0 elsewhere)
    cut, readable = [False] * 512, [True] * 512
    expected = (1 - (1 / 8) ** 8 - (7 / 8) ** 8) / 64  # 0.0103
    assert expected < MIN_INFORMATIVE_GROUPS == 0.02
    note = base_diagnosis(labels, cut, readable, 256, problems=problems, group_size=8)
    assert note is not None and note.startswith("the base model got 1 of 512 held-out completions right before "
                                                "training (64 problems)")
    assert f"{expected:.1%} on average (below 2%)" in note and "trl.num_generations" in note
    assert "grae data band" in note
    assert base_diagnosis(labels, cut, readable, 256) is None  # without the problems: only the dead-base rule
    quarter = [i % 4 == 0 for i in range(512)]  # p = 1/4 on every problem: 90 % of groups of 8 disagree
    assert base_diagnosis(quarter, cut, readable, 256, problems=problems, group_size=8) is None
    # the dead-base rule still comes first: none right, all cut
    dead = base_diagnosis([False] * 512, [True] * 512, readable, 256, problems=problems, group_size=8)
    assert dead.startswith("the base model scored 0 on all 512 held-out completions before training; 100% were cut")
