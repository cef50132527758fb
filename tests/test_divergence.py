"""A diverged run stops at its first non-finite step, keeps its last finite checkpoint and never writes a
non-finite final/ (grae.engines.divergence, issue 32 §2); a learning rate above 1.0 is refused unless forced."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.engines.divergence import DivergenceError, likely_cause, non_finite_count  # noqa: E402
from grae.train.config import MAX_LEARNING_RATE, ConfigError, load_config  # noqa: E402

#: the shipped tiny model on 4 prompts × 4 completions a step (~0.1 s a step on one thread)
SMALL = ["--eval.enabled", "false", "--report", "false", "--no-progress", "--task.train_size", "200",
         "--trl.per_device_train_batch_size", "16", "--trl.num_generations", "4", "--save_steps", "1"]


def _app():
    import typer

    from grae.cli import train_cmd

    app = typer.Typer()
    train_cmd.register(app)
    return app


def _train(out, *extra):
    result = CliRunner().invoke(_app(), [*SMALL, "--output-dir", str(out), *extra])
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("grae train:")]
    return result, lines


def _finite_weights(folder) -> bool:
    from safetensors.torch import load_file

    return non_finite_count(load_file(str(folder / "model.safetensors")).values())[0] == 0


def test_a_learning_rate_above_the_bound_is_refused_before_the_run_unless_forced(tmp_path):
    with pytest.raises(ConfigError, match=r"^trl\.learning_rate: 10 is above 1, .*--allow_large_learning_rate$"):
        load_config(None, {"learning_rate": 10.0})
    assert load_config(None, {"learning_rate": 10.0, "allow_large_learning_rate": True}).trl["learning_rate"] == 10.0
    assert load_config(None, {"learning_rate": MAX_LEARNING_RATE}).trl["learning_rate"] == MAX_LEARNING_RATE
    result, lines = _train(tmp_path / "run", "--learning_rate", "10")
    assert result.exit_code == 2 and len(lines) == 1 and "trl.learning_rate: 10 is above 1" in lines[0], result.output
    assert not (tmp_path / "run").exists()  # refused before the claim


def test_a_learning_rate_that_really_diverges_stops_at_its_first_non_finite_step(tmp_path):
    """trl.learning_rate 1e9, forced, no warm-up: step 1 trains (weights ~1e9, finite: checkpoint-1), step 2's
    rollouts overflow. Exit 1, one line naming step 2 and the learning rate; checkpoint-1 kept, no final/.
    (The tiny model at 10 or 1e6 collapses to reward 0 with finite weights instead: 1e7 is the first power of
    ten whose forward overflows at the full default batch, 1e9 at this small one.)"""
    out = tmp_path / "run"
    result, lines = _train(out, "--learning_rate", "1e9", "--allow_large_learning_rate", "--trl.warmup_steps", "0",
                           "--max-steps", "3")
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: diverged at step 2: the rollouts' sampling probabilities are non-finite"), lines
    assert "likely cause: the learning rate (trl.learning_rate = 1e+09" in lines[-1]
    assert f"the last finite checkpoint is {out / 'checkpoints' / 'checkpoint-1'}" in lines[-1]
    assert "Traceback" not in result.output
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["checkpoint-1"]
    assert (out / "checkpoints" / "checkpoint-1" / "grae_checkpoint_complete").exists()
    assert _finite_weights(out / "checkpoints" / "checkpoint-1") and not (out / "final").exists()


def test_non_finite_weights_are_never_saved(tmp_path):
    """The issue's case: trl.learning_rate 1e300 made every weight NaN and exited 0 with them in final/. Now
    the first save finds them: exit 1, no checkpoint, no final/."""
    out = tmp_path / "run"
    result, lines = _train(out, "--learning_rate", "1e300", "--allow_large_learning_rate", "--trl.warmup_steps", "0",
                           "--max-steps", "1")
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: diverged at step 1: 3,541,248 of the model's 3,541,248 weights are non-finite")
    assert "no checkpoint was saved before it, no final/ written" in lines[-1]
    assert not list((out / "checkpoints").glob("checkpoint-*")) and not (out / "final").exists()


def test_a_huge_reward_scale_stops_at_the_gradient_norm_before_the_weights_move(tmp_path, monkeypatch):
    """Unscaled rewards of 1e20 (grpo with scale none): the loss is finite, its gradient norm overflows; the
    step stops before the optimizer, and the line names the reward scale first."""
    (tmp_path / "huge_reward.py").write_text(
        "def huge(prompts, completions, **kwargs):\n    return [1e20 if len(str(c)) % 2 else 0.0 for c in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result, lines = _train(tmp_path / "run", "--reward_funcs", "huge_reward:huge", "--estimator", "grpo",
                           "--estimator_params.scale", "none", "--max-steps", "2")
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: diverged at step 1: the gradient norm is inf (the loss was finite); likely "
                                "cause: the reward scale (rewards up to |r| = 1e+20"), lines


def test_likely_cause_and_counts():
    assert likely_cause(2e-5, 1e6).startswith("the reward scale (rewards up to |r| = 1e+06")
    assert likely_cause(10.0, 1.0).startswith("the learning rate (trl.learning_rate = 10; lower it")
    assert "or the reward scale (|r| <= 1)" in likely_cause(1e-5, 1.0)
    torch = pytest.importorskip("torch")
    assert non_finite_count([torch.tensor([1.0, float("nan")]), torch.tensor([float("-inf"), 2.0, 3.0])]) == (2, 5)
    err = DivergenceError(3, "the loss is nan", "x", note="kept")
    assert str(err) == "diverged at step 3: the loss is nan; likely cause: x; kept" and err.step == 3


def test_a_non_finite_loss_stops_the_step_before_the_optimizer(tmp_path, monkeypatch):
    """An injected NaN in the loss (what an overflowing loss term gives): exit 1 at step 1 naming the loss."""
    from grae.engines.trl import GraeTrainer

    compute_loss = GraeTrainer._compute_loss
    monkeypatch.setattr(GraeTrainer, "_compute_loss", lambda self, model, inputs: compute_loss(self, model, inputs)
                        * float("nan"))
    result, lines = _train(tmp_path / "run", "--max-steps", "2")
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: diverged at step 1: the loss is nan; likely cause: the learning rate "
                                "(trl.learning_rate = 2e-05) or the reward scale (|r| <= 1)"), lines
