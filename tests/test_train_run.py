"""`grae train` end to end on a throw-away tiny model: run directory, report, Ctrl-C, kill -9 + resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from cli_flags import with_flags  # noqa: E402
from grae.train.rundir import read_metrics  # noqa: E402
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

SMALL = ["--task.train_size", "200", "--trl.per_device_train_batch_size", "16", "--trl.num_generations", "4",
         "--trl.max_completion_length", "6", "--eval.num_problems", "4", "--eval.n", "4", "--eval.batch_size", "16",
         "--no-progress", "--continue-without-signal"]  # a random model: its base has no signal


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


def grae_train(model_dir, out, *extra, **popen):
    """``grae train`` on :data:`SMALL`; a key ``extra`` gives replaces SMALL's (grae train refuses a key given twice)."""
    cmd = [sys.executable, "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(out),
           *with_flags(SMALL, extra)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **popen.pop("env", {})}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **popen)


def finish(proc, timeout=300, code=0):
    out, _ = proc.communicate(timeout=scaled(timeout))
    assert proc.returncode == code, out[-3000:]
    return out


def wait_for_steps(metrics, steps: int, timeout: float = 240, proc=None) -> None:
    """Until ``metrics`` (a run's metrics.jsonl) holds ``steps`` rows, ``proc`` (the run) has exited, or
    ``timeout`` seconds."""
    deadline = time.time() + scaled(timeout)
    while (not metrics.exists() or len(metrics.read_text().splitlines()) < steps) and time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return
        time.sleep(0.05)


def test_run_directory_and_report(model_dir, tmp_path):
    out = tmp_path / "run"
    log = finish(grae_train(model_dir, out, "--max-steps", "3", "--save_steps", "2", "--estimator", "ngrpo"))
    assert "pass@1" in log and "change" in log  # the final summary table
    for name in ["config.yaml", "metrics.jsonl", "report.md", "training.png", "passk.png", "eval/before.jsonl",
                 "eval/after.jsonl", "eval/summary.json", "final/config.json",
                 "checkpoints/checkpoint-3/grae_checkpoint_complete", "checkpoints/checkpoint-3/grae_estimator_state.json"]:
        assert (out / name).exists(), name
    # disk: the last resumable checkpoint only (save_total_limit 1), its weights and final/'s stored once
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["checkpoint-3"]
    assert os.path.samefile(out / "final" / "model.safetensors", out / "checkpoints" / "checkpoint-3" / "model.safetensors")
    from grae.train.disk import directory_size, human_bytes

    assert f"run directory: {out}, {human_bytes(directory_size(out))} (final/ shares" in " ".join(log.split())
    assert "1 torch thread (OMP_NUM_THREADS)" in log  # the header says what computes
    assert "Loading weights" not in log  # transformers' bars stay out of a pipe (grae.cli.quiet)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ["reward_mean", "omega", "acr", "entropy", "adv_pos_mass", "adv_neg_mass"]:
        assert all(r[key] is not None for r in rows), key
    assert rows[0]["adv_neg_mass"] > 0  # NGRPO: all-wrong groups still get negative advantages
    summary = json.loads((out / "eval" / "summary.json").read_text())
    assert set(summary["before"]) == {"1", "2", "4"} and summary["steps"] == 3
    assert "Held-out pass@k" in (out / "report.md").read_text()


def test_kill_9_then_resume_matches_an_uninterrupted_run(model_dir, tmp_path):
    args = ("--max-steps", "8", "--save_steps", "2", "--estimator", "avspo", "--eval.enabled", "false")
    reference = tmp_path / "reference"
    finish(grae_train(model_dir, reference, *args))

    crashed = tmp_path / "crashed"
    proc = grae_train(model_dir, crashed, *args)
    # killed once checkpoint-4 or -6 is complete: one checkpoint is kept, so a single name (checkpoint-4 alone)
    # was there only for two steps, which a poller starved under load could miss (it failed so, once)
    markers = [crashed / "checkpoints" / f"checkpoint-{step}" / "grae_checkpoint_complete" for step in (4, 6)]
    deadline = time.time() + scaled(240)
    while not any(m.exists() for m in markers) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert any(m.exists() for m in markers) and proc.poll() is None, "run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (crashed / "eval" / "summary.json").exists()

    finish(grae_train(model_dir, crashed, *args, "--resume"))
    a, b = read_metrics(reference / "metrics.jsonl"), read_metrics(crashed / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6, 7, 8]
    for ra, rb in zip(a, b):
        for key in ["reward_mean", "entropy", "loss", "adv_neg_mass", "acr"]:
            # tol: the loss sums terms of size ≈ |advantage| ≤ √G that cancel to ≈ 0: abs is their float32
            # rounding; the other metrics are held by rel
            assert ra[key] == pytest.approx(rb[key], rel=1e-4, abs=1e-6), (ra["step"], key)
    state_a = json.loads((reference / "checkpoints" / "checkpoint-8" / "grae_estimator_state.json").read_text())
    state_b = json.loads((crashed / "checkpoints" / "checkpoint-8" / "grae_estimator_state.json").read_text())
    assert state_a == state_b and state_a["state"]["step"] == 8
    # the summary's training time also counts the steps the killed process trained (their logged step times)
    summary = json.loads((crashed / "eval" / "summary.json").read_text())
    assert summary["train_seconds"] >= sum(r["step_time"] for r in b)
    assert summary["device"].startswith("cpu (") and re.search(r", \d+ threads?\)$", summary["device"])


def test_a_resumed_runs_training_time_adds_the_logged_steps_before_its_checkpoint(tmp_path):
    from grae.train.run import _seconds_before

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(row) + "\n" for row in [
        {"step": 1, "step_time": 1.5}, {"step": 2, "step_time": 2.0}, {"step": 3}, {"step": 4, "step_time": 4.0},
        {"note": "not a step"}]) + '{"step": 5, "step_ti')  # the torn line of a killed writer
    assert _seconds_before(metrics, None) == 0.0 and _seconds_before(metrics, 0) == 0.0
    assert _seconds_before(metrics, 2) == 3.5 and _seconds_before(metrics, 4) == 7.5


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_leaves_a_resumable_checkpoint(model_dir, tmp_path, sig, code):
    """Ctrl-C or a scheduler's SIGTERM: the step finishes, a checkpoint is saved, and the exit status is
    128 + the signal — never 0, so a pre-empted job never looks finished."""
    out = tmp_path / "run"
    proc = grae_train(model_dir, out, "--max-steps", "50", "--save_steps", "100", "--eval.enabled", "false")
    wait_for_steps(out / "metrics.jsonl", 2)
    proc.send_signal(sig)
    log = finish(proc, code=code)
    assert "continue with --resume" in log
    saved = sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))
    assert len(saved) == 1 and (out / "checkpoints" / saved[0] / "grae_checkpoint_complete").exists()
    step = int(saved[0].split("-")[1])
    assert 2 <= step < 50


def test_config_errors_fail_before_loading_a_model(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "train", "--estimator", "agrea", "--model", "/does/not/exist"],
                          capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == 2
    assert "unknown estimator 'agrea'" in proc.stdout and "agrae" in proc.stdout


def test_lora_run_without_held_out_evaluation(tmp_path):
    """``--peft.r 4 --eval.enabled false``: a LoRA adapter in final/, no empty pass@k table, and a report
    that does not claim held-out samples it never drew."""
    import subprocess
    import sys

    out = tmp_path / "lora"
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "train", "--max-steps", "1", "--eval.enabled", "false",
                           "--peft.r", "4", "--trl.per_device_train_batch_size", "16", "--output-dir", str(out)],
                          capture_output=True, text=True, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "held-out evaluation off" in proc.stdout and "pass@" not in proc.stdout
    assert (out / "final" / "adapter_config.json").exists()
    report = (out / "report.md").read_text()
    assert "not evaluated" in report and "200 problems" not in report
    bad = subprocess.run([sys.executable, "-m", "grae.cli", "train", "--peft.rr", "4", "--output-dir", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=scaled(300))
    assert bad.returncode == 2 and "peft:" in bad.stdout + bad.stderr


def test_resume_from_a_model_only_checkpoint_continues_the_lr_schedule(model_dir, tmp_path):
    """``save_only_model`` (the smollm2 recipe's disk saver) keeps no scheduler state: a resumed run must
    not restart a decaying lr schedule at its peak, and says what does restart."""
    args = ("--trl.save_only_model", "true", "--trl.lr_scheduler_type", "linear", "--trl.warmup_steps", "0",
            "--trl.learning_rate", "1e-3",
            "--save_steps", "2", "--eval.enabled", "false")
    reference = tmp_path / "reference"
    finish(grae_train(model_dir, reference, "--max-steps", "4", *args))
    resumed = tmp_path / "resumed"
    finish(grae_train(model_dir, resumed, "--max-steps", "2", *args))
    assert not (resumed / "checkpoints" / "checkpoint-2" / "scheduler.pt").exists()
    log = finish(grae_train(model_dir, resumed, "--max-steps", "4", *args, "--resume"))
    lr_ref = {r["step"]: r["learning_rate"] for r in read_metrics(reference / "metrics.jsonl")}
    lr_res = {r["step"]: r["learning_rate"] for r in read_metrics(resumed / "metrics.jsonl")}
    assert lr_ref[4] < lr_ref[3] < lr_ref[1]          # the schedule decays
    assert lr_res[3] == pytest.approx(lr_ref[3]) and lr_res[4] == pytest.approx(lr_ref[4])
    assert "save_only_model" in log and "AdamW's moments" in log


def test_tensorboard_gets_the_estimator_and_held_out_pass_at_k_beside_trls_own_logs(model_dir, tmp_path):
    """``--trl.report_to tensorboard``: grae's config as text and held-out pass@k before and
    after training go into the event files TRL writes, under the run, not elsewhere."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, cwd = tmp_path / "run", tmp_path / "cwd"
    cwd.mkdir()
    finish(grae_train(model_dir, out, "--max-steps", "2", "--trl.report_to", "tensorboard", "--estimator", "ngrpo",
                      cwd=cwd))
    assert not any(cwd.iterdir())  # nothing written outside the run directory
    summary = json.loads((out / "eval" / "summary.json").read_text())
    scalars, texts = {}, []
    for log_dir in {events.parent for events in out.rglob("events.out.tfevents.*")}:
        acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0, "scalars": 0}).Reload()
        scalars.update({tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]})
        texts += [t.tensor_proto.string_val[0].decode() for tag in acc.Tags()["tensors"] if tag.startswith("grae/config")
                  for t in acc.Tensors(tag)]
    assert any(tag.startswith("train/") for tag in scalars)  # TRL's own logs, same event files
    assert len(texts) == 1 and '"estimator": "ngrpo"' in texts[0]
    for which in ("before", "after"):
        for k, value in summary[which].items():
            assert scalars[f"heldout/{which}/pass@{k}"] == [pytest.approx(value)]


def test_the_device_label_names_the_accelerator_and_the_processes(monkeypatch):
    import torch

    from grae.train.run import device_label

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert device_label(SimpleNamespace(device="cuda:0", world_size=1)) == "cuda (NVIDIA H100 80GB HBM3)"
    assert device_label(SimpleNamespace(device="cuda:0", world_size=8)) == "cuda (NVIDIA H100 80GB HBM3) × 8 processes"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr("grae.train.run.cpu_name", lambda: "Test CPU")
    assert device_label(SimpleNamespace(device="cpu", world_size=1)) == "cpu (Test CPU, 1 thread)"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert device_label(SimpleNamespace(device="cpu", world_size=2)) == "cpu (Test CPU, 4 threads) × 2 processes"


@pytest.fixture(scope="module")
def two_step_run(model_dir, tmp_path_factory):
    """A finished 2-step run (one checkpoint kept, the disk rule) to damage copies of."""
    out = tmp_path_factory.mktemp("two_steps") / "run"
    finish(grae_train(model_dir, out, "--max-steps", "2", "--eval.enabled", "false"))
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["checkpoint-2"]
    return out


#: each damage of the only checkpoint, and whether its weights survive it
DAMAGE = {
    "cut optimizer.pt": ("optimizer.pt", "truncate", "damaged (optimizer.pt: 100 bytes", True),
    "missing optimizer.pt": ("optimizer.pt", "remove", "damaged (optimizer.pt: missing)", True),
    "cut model.safetensors": ("model.safetensors", "truncate", "damaged (model.safetensors: 100 bytes", False),
    "missing model.safetensors": ("model.safetensors", "remove", "damaged (model.safetensors: missing)", False),
    "missing completion marker": ("grae_checkpoint_complete", "remove", "unfinished (no completion marker", True),
    # the same size, other bytes: only the content (the marker's sha256 of every file) tells
    "0xff in model.safetensors": ("model.safetensors", "0xff", "damaged (model.safetensors: its content is not what "
                                  "was saved", False),
    "zeroes in optimizer.pt": ("optimizer.pt", "zeroes", "damaged (optimizer.pt: its content is not what was saved",
                               True),
    # a marker that no longer lists what every checkpoint of the run holds is damaged, not trusted
    "optimizer.pt deleted and unlisted": ("optimizer.pt", "unlist", "damaged (optimizer.pt: not in the completion "
                                          "marker's list", True),
    "empty file list": ("grae_checkpoint_complete", "empty list", "damaged (the completion marker lists no weight "
                        "file", False),
}


def _damage(checkpoint, name: str, how: str) -> None:
    """Damage file ``name`` of ``checkpoint`` as :data:`DAMAGE` says (``how``)."""
    path = checkpoint / name
    marker = checkpoint / "grae_checkpoint_complete"
    if how == "truncate":
        os.truncate(path, 100)
    elif how == "remove":
        path.unlink()
    elif how in ("0xff", "zeroes"):  # in place, the size kept: 64 KiB of 0xff into the weights, 4 KiB of zeroes
        data = bytearray(path.read_bytes())
        length = min(64 * 1024 if how == "0xff" else 4096, len(data) // 4)  # the test model's weights: 94 KiB
        fill = (b"\xff" if how == "0xff" else b"\0") * length
        # tensor data clear of the first and last eighth (a safetensors header, a zip directory) that the fill
        # changes: the AdamW moments of a run without learning signal are zeroes already
        start = next((i for i in range(len(data) // 8, len(data) - len(data) // 8 - length, 512)
                      if data[i:i + length] != fill), None)
        assert start is not None, f"no {length} bytes of {name} that the fill would change"
        data[start:start + length] = fill
        path.write_bytes(bytes(data))
    else:
        record = json.loads(marker.read_text())
        if how == "unlist":
            path.unlink()
            record["files"].pop(name)
            record["sha256"].pop(name)
        else:
            record["files"], record["sha256"] = {}, {}
        marker.write_text(json.dumps(record))


@pytest.mark.parametrize("case", list(DAMAGE))
def test_resume_over_a_damaged_only_checkpoint_refuses_and_changes_nothing(model_dir, two_step_run, tmp_path, case):
    """The only checkpoint (one kept) damaged: ``--resume`` refuses in one line naming it, what is wrong and
    the choices; it never trains from step 0, never rewrites metrics.jsonl, never rotates the checkpoint away."""
    import shutil

    name, how, said, weights_whole = DAMAGE[case]
    out = tmp_path / "run"
    shutil.copytree(two_step_run, out)
    checkpoint = out / "checkpoints" / "checkpoint-2"
    _damage(checkpoint, name, how)
    before = {p.name: p.read_bytes() for p in checkpoint.iterdir()}
    metrics, listing = (out / "metrics.jsonl").read_text(), sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    log = finish(grae_train(model_dir, out, "--max-steps", "4", "--eval.enabled", "false", "--resume"), code=2)
    lines = [line for line in log.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and f"{checkpoint} is {said}" in " ".join(log.split()), log[-2000:]
    assert "no whole checkpoint before it" in log and "--overwrite" in log and "nothing was changed" in log
    assert ("--model " + str(checkpoint) in " ".join(log.split())) == weights_whole  # offered only where they are whole
    assert {p.name: p.read_bytes() for p in checkpoint.iterdir()} == before  # nothing deleted, rotated or rewritten
    assert (out / "metrics.jsonl").read_text() == metrics
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == listing


HOSTILE_REWARDS = """
import os


def exits_the_process(completions, **kwargs):
    os._exit(0)


def forks_the_trainer(completions, **kwargs):
    os.fork()
    return [0.0] * len(completions)
"""


@pytest.mark.parametrize("reward, said", [
    ("exits_the_process", "the run did not finish: the training process ended with exit status 0 while reward "
                          "function 'exits_the_process' ran"),
    ("forks_the_trainer", "reward function 'forks_the_trainer' forked the training process (os.fork()) and the copy"),
], ids=["os._exit(0)", "os.fork()"])
def test_a_reward_that_exits_or_forks_ends_the_run_non_zero_naming_it(model_dir, tmp_path, reward, said):
    """``os._exit(0)`` in a reward, or a reward that forks copies of ``grae train`` training on and ignoring
    SIGTERM: under the supervisor (grae.supervision) both
    end the run with exit 1 and one line naming the reward function; no final/, no process left behind."""
    (tmp_path / "hostile_rewards.py").write_text(HOSTILE_REWARDS)
    out = tmp_path / "run"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    log = finish(grae_train(model_dir, out, "--max-steps", "2", "--eval.enabled", "false",
                            "--reward_funcs", f"hostile_rewards:{reward}", env=env), code=1)
    errors = [line for line in log.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and said in " ".join(errors[0].split()), log[-3000:]
    assert not (out / "final").exists() and not (out / "eval" / "summary.json").exists()
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                left += [pid] if str(out).encode() in f.read() else []
        except OSError:
            pass
    assert left == [], "a grae train process outlived the run"


MISBEHAVING_REWARDS = """
import os
import threading
import time

CALLS = []


def _once(completions):
    CALLS.append(1)
    return len(CALLS) == 1


def leaves_a_thread(completions, **kwargs):
    if _once(completions):
        threading.Thread(target=time.sleep, args=(3600,), name="left-poller").start()
    return [0.0] * len(completions)


def closes_inherited_descriptors(completions, **kwargs):
    if _once(completions):  # as a daemonising library does: every descriptor above stderr that is a pipe
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    os.close(fd)
            except OSError:
                pass
    return [0.0] * len(completions)


def raises_keyboard_interrupt(completions, **kwargs):
    raise KeyboardInterrupt


def never_scores(completions, **kwargs):
    return [float("nan")] * len(completions)


def changes_directory(completions, **kwargs):
    os.chdir(os.environ["ELSEWHERE"])
    return [0.0] * len(completions)
"""


def _misbehaving_run(model_dir, tmp_path, reward, *extra, code, out=None, cwd=None):
    """``grae train`` with reward function ``reward`` of :data:`MISBEHAVING_REWARDS` beside the task's verifier, 2 steps
    without held-out evaluation unless ``extra`` says otherwise."""
    (tmp_path / "misbehaving_rewards.py").write_text(MISBEHAVING_REWARDS)
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "ELSEWHERE": str(tmp_path / "elsewhere")}
    args = with_flags(["--max-steps", "2", "--eval.enabled", "false",
                       "--reward_funcs", f"[task, misbehaving_rewards:{reward}]"], extra)
    log = finish(grae_train(model_dir, out or tmp_path / "run", *args, env=env, cwd=cwd), code=code)
    return log, [line for line in log.splitlines() if line.startswith(("error", "warning", "note"))]


def test_a_thread_a_reward_left_running_does_not_hold_the_finished_run(model_dir, tmp_path):
    """The run trains, writes final/ and report.md, then ends (exit 0) although a thread that is not a daemon still
    runs: the thread named in one line."""
    log, lines = _misbehaving_run(model_dir, tmp_path, "leaves_a_thread", code=0)
    assert (tmp_path / "run" / "final" / "model.safetensors").exists() and (tmp_path / "run" / "report.md").exists()
    assert [line for line in lines if "left-poller" in line] == [lines[-1]], log[-3000:]
    assert lines[-1].startswith("warning: grae train ended (exit 0) but thread 'left-poller' begun in reward function "
                                "'leaves_a_thread' still ran")


def test_a_reward_closing_the_supervision_pipe_does_not_make_a_finished_run_unfinished(model_dir, tmp_path):
    """All steps trained and final/ written: exit 0, a note that the end was read from the run directory, and
    every checkpoint file is what was saved (no supervisor line went into a file that took the pipe's number)."""
    from grae.train.checkpoints import checkpoint_problem

    out = tmp_path / "run"
    log, lines = _misbehaving_run(model_dir, tmp_path, "closes_inherited_descriptors", code=0)
    assert (out / "final" / "model.safetensors").exists() and [r["step"] for r in read_metrics(out / "metrics.jsonl")] \
        == [1, 2]
    assert len(lines) == 1 and lines[0].startswith("note: user code closed grae train's supervision pipe"), log[-3000:]
    assert f"the run's end (exit 0) was read from {out}" in " ".join(lines[0].split())
    assert checkpoint_problem(str(out / "checkpoints" / "checkpoint-2"), content=True, saves_optimizer=True) is None


def test_a_keyboard_interrupt_raised_in_a_reward_is_that_rewards_error(model_dir, tmp_path):
    log, lines = _misbehaving_run(model_dir, tmp_path, "raises_keyboard_interrupt", code=1)
    assert len(lines) == 1 and lines[0].startswith("error: reward function 'raises_keyboard_interrupt' raised "
                                                   "KeyboardInterrupt while no stop signal had arrived"), log[-3000:]
    assert "interrupted" not in log and "--resume" not in log and not (tmp_path / "run" / "final").exists()


def test_a_reward_that_never_scores_stops_the_run_naming_it(model_dir, tmp_path):
    """NaN on every sample (None alike: TRL reads both as "no reward") for missing_reward_steps scored batches in a
    row: exit 1, one line naming the function, no final/ and no report of a run that learnt nothing from it."""
    out = tmp_path / "run"
    log, lines = _misbehaving_run(model_dir, tmp_path, "never_scores", "--max-steps", "5", "--missing_reward_steps",
                                  "3", code=1)
    assert len(lines) == 1 and lines[0].startswith("error: reward function 'never_scores' gave no reward (None or "
                                                   "NaN) on any sample of 3 scored batches in a row"), log[-3000:]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]  # stopped scoring step 3's batch
    assert not (out / "final").exists() and not (out / "report.md").exists()


def test_a_reward_that_changes_directory_does_not_move_the_run(model_dir, tmp_path):
    """A relative --output-dir is made absolute before the first reward is called: checkpoints, metrics, eval,
    final/ and report.md stay in the run directory the command named."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    _misbehaving_run(model_dir, tmp_path, "changes_directory", "--eval.enabled", "true", code=0, out="run", cwd=cwd)
    out = cwd / "run"
    for name in ["checkpoints/checkpoint-2/grae_checkpoint_complete", "metrics.jsonl", "eval/after.jsonl",
                 "eval/summary.json", "final/model.safetensors", "report.md"]:
        assert (out / name).exists(), name
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


def test_a_trainer_killed_before_its_run_directory_exists_promises_no_resume(model_dir, tmp_path):
    """SIGKILL of the training process while it still imports (no run directory claimed): the supervisor's line
    says to rerun the same command, never ``--resume`` (which would refuse: there is no run to continue)."""
    out = tmp_path / "run"
    proc = grae_train(model_dir, out, "--max-steps", "2", "--eval.enabled", "false")
    deadline = time.time() + scaled(60)
    while not _children(proc.pid) and time.time() < deadline:
        time.sleep(0.01)
    os.kill(_children(proc.pid)[0], signal.SIGKILL)
    log = finish(proc, code=128 + signal.SIGKILL)
    assert not (out / "run.json").exists()
    lines = [line for line in log.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and "killed by SIGKILL" in lines[0] and "rerun the same command" in lines[0], log[-2000:]
    assert "--resume" not in log
