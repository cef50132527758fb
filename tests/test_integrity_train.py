"""Run integrity: a result always belongs to the weights it names; one owner per run
directory; bad settings stop before a model loads; signals and a full disk leave a resumable run.

The three cases a result could be mixed up in: ``test_a_second_run_into_a_used_directory_is_refused``
(stale ``after:`` pass@k), ``test_an_extended_run_re_evaluates`` and
``test_resume_never_picks_another_runs_checkpoint`` (mixed runs); ``inf`` rewards are in
``tests/test_trl_engine.py::test_an_inf_reward_is_dropped_and_the_run_goes_on``."""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from cli_flags import with_flags  # noqa: E402
from grae.engines.trl import COMPLETE_MARKER, latest_complete_checkpoint  # noqa: E402
from grae.train.rundir import read_metrics  # noqa: E402
from test_train_run import finish, grae_train  # noqa: E402
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


def tree_digest(root: Path) -> str:
    """Names, sizes and contents of every file under ``root``: equal before/after means untouched."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def identity_of(out: Path, which: str) -> str:
    return json.loads((out / "eval" / f"{which}.run.json").read_text())["identity"]


def test_a_second_run_into_a_used_directory_is_refused(model_dir, tmp_path):
    out = tmp_path / "D"
    finish(grae_train(model_dir, out, "--max-steps", "2"))
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert identity_of(out, "after") == f"{run_id}@step2" and identity_of(out, "before").startswith("sha256:")
    before = tree_digest(out)
    log = finish(grae_train(model_dir, out, "--estimator", "grpo", "--trl.learning_rate", "0.05", "--max-steps", "3"), code=2)
    assert f"holds run {run_id}" in log and "--resume" in log and "--overwrite" in log
    assert len([line for line in log.splitlines() if "error" in line]) == 1
    assert tree_digest(out) == before, "a refused command changed the directory"

    log = finish(grae_train(model_dir, out, "--estimator", "grpo", "--trl.learning_rate", "0.05", "--max-steps", "3",
                            "--overwrite"))
    new_id = json.loads((out / "run.json").read_text())["run_id"]
    assert new_id != run_id and identity_of(out, "after") == f"{new_id}@step3"
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    rows = [json.loads(line) for line in (out / "eval" / "after.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 4  # only the new weights' samples (eval.num_problems × eval.n)


def test_resume_may_change_only_steps_and_eval(model_dir, tmp_path):
    out = tmp_path / "D"
    finish(grae_train(model_dir, out, "--max-steps", "2", "--eval.enabled", "false"))
    before = tree_digest(out)
    log = finish(grae_train(model_dir, out, "--max-steps", "2", "--eval.enabled", "false", "--estimator", "grpo",
                            "--resume"), code=2)
    assert "estimator: 'agrae' → 'grpo'" in log and tree_digest(out) == before
    # a resume cannot shorten a run: the weights, metrics and report would describe 2 steps, the config 1
    log = finish(grae_train(model_dir, out, "--max-steps", "1", "--eval.enabled", "false", "--resume"), code=2)
    assert "max_steps: 1, but run" in log and "has trained 2 steps" in log and tree_digest(out) == before


def test_an_extended_run_re_evaluates(model_dir, tmp_path):
    out = tmp_path / "D"
    finish(grae_train(model_dir, out, "--max-steps", "2", "--save_steps", "1"))
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    log = finish(grae_train(model_dir, out, "--max-steps", "4", "--save_steps", "1", "--resume"))
    assert "evaluating anew" in log
    assert identity_of(out, "after") == f"{run_id}@step4"
    summary = json.loads((out / "eval" / "summary.json").read_text())
    assert summary["steps"] == 4
    rows = [json.loads(line) for line in (out / "eval" / "after.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 4  # eval.num_problems × eval.n of the new weights only


def test_resume_never_picks_another_runs_checkpoint(model_dir, tmp_path):
    other, out = tmp_path / "other", tmp_path / "D"
    finish(grae_train(model_dir, other, "--max-steps", "4", "--save_steps", "2", "--eval.enabled", "false"))
    finish(grae_train(model_dir, out, "--max-steps", "2", "--save_steps", "2", "--eval.enabled", "false"))
    # another run's newer checkpoint left in this run's folder (what TRL's rotation can keep)
    shutil.copytree(other / "checkpoints" / "checkpoint-4", out / "checkpoints" / "checkpoint-4")
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert latest_complete_checkpoint(str(out / "checkpoints")).endswith("checkpoint-4")
    assert latest_complete_checkpoint(str(out / "checkpoints"), run_id).endswith("checkpoint-2")
    log = finish(grae_train(model_dir, out, "--max-steps", "3", "--save_steps", "2", "--eval.enabled", "false", "--resume"))
    assert f"resuming from {out / 'checkpoints' / 'checkpoint-2'}" in log
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    marker = json.loads((out / "checkpoints" / "checkpoint-3" / COMPLETE_MARKER).read_text())
    assert marker["run_id"] == run_id


def test_overwrite_never_clears_a_directory_that_is_not_a_run(model_dir, tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    log = finish(grae_train(model_dir, out, "--max-steps", "1", "--overwrite"), code=2)
    assert "holds no grae run" in log and (out / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize("args, message", [
    (["--trl.learning_rate", "-1"], "trl.learning_rate: must be > 0"),
    (["--trl.learning_rate", "0"], "trl.learning_rate: must be > 0"),
    (["--trl.max_completion_length", "0"], "trl.max_completion_length: must be >= 1"),
    (["--eval.temperature", "-1"], "eval.temperature: must be 0 (greedy) or in [0.01, 10]"),
    (["--model", "./no/such/model"], "model: './no/such/model' does not exist"),
    (["--output-dir", ""], "output_dir: empty"),
    (["--task.train_size", "2"], "task.train_size: 2 prompts, but one generation batch takes 4"),
])
def test_bad_settings_stop_before_a_model_loads(tmp_path, args, message):
    # a case's own key replaces a default's (the command line refuses a key given twice); run in tmp_path, so an
    # empty output_dir that fell back to the default runs/<model>-<task>-<estimator> would show
    defaults = ["--output-dir", str(tmp_path / "r"), "--trl.per_device_train_batch_size", "16", "--trl.num_generations", "4"]
    cmd = [sys.executable, "-m", "grae.cli", "train", *with_flags(defaults, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(120), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1, proc.stdout
    assert not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n must be >= 1"), (["--temperature", "-1"], "--temperature must be 0 (greedy) or in [0.01, 10]"),
    (["--num-problems", "0"], "--num-problems must be >= 1"), (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["-o", ""], "--output must be a directory name"),
])
def test_bad_eval_settings_stop_before_a_model_loads(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "eval", "./no/such/model", "--tasks", "chain_sum", *args],
                          capture_output=True, text=True, timeout=scaled(120), cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stdout, proc.stdout[-2000:]
    missing = subprocess.run([sys.executable, "-m", "grae.cli", "eval", "./no/such/model", "--tasks", "chain_sum"],
                             capture_output=True, text=True, timeout=scaled(120), cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stdout


def test_eval_into_an_output_of_other_weights_is_refused(model_dir, tmp_path):
    other = build_random_tiny(str(tmp_path / "other"), seed=1)
    out = tmp_path / "ev"

    def grae_eval(model, *extra):
        return subprocess.run([sys.executable, "-m", "grae.cli", "eval", model, "--tasks", "chain_sum", "--n", "2",
                               "--num-problems", "2", "-o", str(out), *extra], capture_output=True, text=True,
                              timeout=scaled(300))

    assert grae_eval(model_dir).returncode == 0
    again = grae_eval(model_dir)
    assert again.returncode == 0 and "0 new samples" in again.stdout  # the same weights resume
    before = tree_digest(out)
    refused = grae_eval(other)
    assert refused.returncode == 2 and "identity" in refused.stdout and "--overwrite" in refused.stdout
    assert tree_digest(out) == before
    replaced = grae_eval(other, "--overwrite")
    assert replaced.returncode == 0 and "4 new samples" in replaced.stdout


def _fail_once(module, name, where, error):
    """Replace ``module.name`` by a writer that raises ``error`` for paths containing ``where``."""
    real = getattr(module, name)

    def writer(*args, **kwargs):
        if any(where in str(a) for a in args):
            raise error
        return real(*args, **kwargs)

    return real, writer


@pytest.mark.parametrize("case", ["marker", "torch.save", "final model"])
def test_disk_full_while_checkpointing_is_one_line_and_the_run_resumes(model_dir, tmp_path, monkeypatch, case):
    """Each writer reports a full disk its own way: the completion marker (Python, ENOSPC), the optimizer
    (torch.save: "file write failed", no errno), the final model (safetensors: StorageFull)."""
    import torch
    import transformers.modeling_utils

    import grae.engines.trl.checkpoint as engine
    import grae.train.faults as faults
    from grae.train.config import load_config
    from grae.train.run import DiskFullError, run_train

    cfg = load_config(None, {"model": model_dir, "output_dir": str(tmp_path / "run"), "max_steps": 4, "save_steps": 2,
                             "eval.enabled": False, "report": False, "task.train_size": 200,
                             "trl.per_device_train_batch_size": 16, "trl.num_generations": 4,
                             "trl.max_completion_length": 6,
                             # a random model learns nothing here: without it the run would stop at step 3
                             # (TrainingWithoutSignal) before the disk fills at checkpoint-4 or final/
                             "continue_without_signal": True})
    module, name, where, error, newest = {
        "marker": (engine, "atomic_write_json", "checkpoint-4", OSError(errno.ENOSPC, "No space left on device"),
                   "checkpoint-2"),
        "torch.save": (torch, "save", "checkpoint-4", RuntimeError("[enforce fail at inline_container.cc:672] . "
                       "PytorchStreamWriter failed writing file data/0: file write failed"), "checkpoint-2"),
        "final model": (transformers.modeling_utils, "safe_save_file", "final.partial", Exception(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'),
            "checkpoint-4"),
    }[case]
    real, failing = _fail_once(module, name, where, error)
    monkeypatch.setattr(module, name, failing)
    monkeypatch.setattr(faults, "_free_bytes", lambda path: 0)
    doing = "saving the final model" if case == "final model" else "checkpointing"
    with pytest.raises(DiskFullError, match=f"disk full while {doing}.*{newest}: free space, then rerun with --resume"):
        run_train(cfg, progress=False)
    monkeypatch.setattr(module, name, real)
    assert latest_complete_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith(newest)  # the cut one has no marker
    result = run_train(cfg, resume=True, progress=False)
    assert result.steps == 4 and result.interrupted_by is None and (tmp_path / "run" / "final" / "config.json").exists()
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3, 4]
