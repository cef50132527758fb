"""A diverged run stops at its first non-finite step, keeps its last finite checkpoint and never writes a
non-finite final/ (grae.engines.divergence); a learning rate above 1.0 is refused unless forced."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.engines.divergence import DivergenceError, likely_cause, non_finite_count  # noqa: E402
from grae.train.config import MAX_LEARNING_RATE, ConfigError, load_config  # noqa: E402

#: the shipped tiny model on 4 prompts × 4 completions a step (~0.1 s a step on one thread)
SMALL = ["chain-sum", "--eval.enabled", "false", "--report", "false", "--no-progress", "--task.train_size", "200",
         "--trl.per_device_train_batch_size", "16", "--trl.num_generations", "4", "--save_steps", "1"]


def _app():
    import typer

    from grae.cli import train_cmd

    app = typer.Typer()
    train_cmd.register(app)
    return app


def _train(out, *extra):
    """``grae train`` on SMALL, a key of SMALL given again in ``extra`` taking its place there (the command line
    refuses a key given twice)."""
    base, i = [], 0
    while i < len(SMALL):
        takes_value = i + 1 < len(SMALL) and not SMALL[i + 1].startswith("--")
        if SMALL[i] not in extra:
            base += SMALL[i:i + 1 + takes_value]
        i += 1 + takes_value
    result = CliRunner().invoke(_app(), [*base, "--output-dir", str(out), *extra])
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("grae train:")]
    return result, lines


def _finite_weights(folder) -> bool:
    from safetensors.torch import load_file

    return non_finite_count(load_file(str(folder / "model.safetensors")).values())[0] == 0


def test_a_learning_rate_above_the_bound_is_refused_before_the_run_unless_forced(tmp_path):
    with pytest.raises(ConfigError, match=r"^trl\.learning_rate: 10 is above 1, .*--allow_large_learning_rate$"):
        load_config("chain-sum", {"learning_rate": 10.0})
    assert load_config("chain-sum", {"learning_rate": 10.0, "allow_large_learning_rate": True}).trl["learning_rate"] == 10.0
    assert load_config("chain-sum", {"learning_rate": MAX_LEARNING_RATE}).trl["learning_rate"] == MAX_LEARNING_RATE
    result, lines = _train(tmp_path / "run", "--learning_rate", "10")
    assert result.exit_code == 2 and len(lines) == 1 and "trl.learning_rate: 10 is above 1" in lines[0], result.output
    assert not (tmp_path / "run").exists()  # refused before the claim


def test_a_learning_rate_that_really_diverges_stops_at_its_first_non_finite_step(tmp_path):
    """trl.learning_rate 1e9, forced, no warm-up, no save before step 2: step 1 trains (weights ~1e9, finite),
    step 2's rollouts overflow. Exit 1, one line naming step 2 and the learning rate; no checkpoint, no final/.
    (The tiny model at 10 or 1e6 collapses to reward 0 with finite weights instead: 1e7 is the first power of
    ten whose forward overflows at the full default batch, 1e9 at this small one.)"""
    out = tmp_path / "run"
    result, lines = _train(out, "--learning_rate", "1e9", "--allow_large_learning_rate", "--trl.warmup_steps", "0",
                           "--max-steps", "3", "--save_steps", "10")
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: diverged at step 2: the rollouts' sampling probabilities are non-finite"), lines
    assert "likely cause: the learning rate (trl.learning_rate = 1e+09" in lines[-1]
    assert "no checkpoint was saved before it, no final/ written" in lines[-1]
    assert "Traceback" not in result.output
    assert not list((out / "checkpoints").glob("checkpoint-*")) and not (out / "final").exists()


def test_finite_weights_whose_logits_overflow_are_never_saved(tmp_path):
    """The same rate ending after step 1 leaves finite weights (~1e9) whose evaluation would be a traceback.
    The save's probe forward pass finds the overflow: exit 1, one line naming
    step 1, the largest weight and the learning rate; no checkpoint, no final/."""
    out = tmp_path / "run"
    result, lines = _train(out, "--learning_rate", "1e9", "--allow_large_learning_rate", "--trl.warmup_steps", "0",
                           "--max-steps", "1")
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: diverged at step 1: the model's activations overflow on a probe forward "
                                "pass (hidden states of norm ‖h‖₂ up to "), lines
    assert "its weights are finite, the largest |w| = " in lines[-1]
    assert "likely cause: the learning rate (trl.learning_rate = 1e+09" in lines[-1]
    assert "Traceback" not in result.output
    assert not list((out / "checkpoints").glob("checkpoint-*")) and not (out / "final").exists()


def test_the_probe_leaves_the_run_unchanged_and_sees_overflowing_activations():
    """The probe runs in eval mode without gradients and draws no random numbers: the training mode is
    restored and a sampler after it draws what it would have drawn without it. It finds what one Adam step
    at lr 1e9 leaves (every weight × ~1e9, finite): hidden states ~1e27 whose square overflows the final
    norm, which then outputs 0, so the logits are finite (all 0) and only the activations tell."""
    import torch
    from transformers import AutoModelForCausalLM

    from grae.engines.divergence import OVERFLOWING_ACTIVATION, probe_forward
    from grae.tiny import tiny_model_path

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    model.train()
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    probe = probe_forward(model)
    assert torch.equal(torch.rand(4), expected) and model.training
    assert probe.healthy and probe.largest_weight == max(float(p.detach().abs().max()) for p in model.parameters())
    assert 0 < probe.largest_activation < 1e3
    padded = (torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]))
    assert probe_forward(model, padded).healthy
    rows = (torch.tensor([[1, 2, 5, 6, 7], [3, 4, 5, 6, 7]]), torch.ones(2, 5, dtype=torch.long))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1e9)
        logits = model(input_ids=rows[0], attention_mask=rows[1]).logits
    assert torch.isfinite(logits).all()  # the logits alone would pass (left-padded rows get NaN, not these)
    probe = probe_forward(model, rows)
    assert not probe.healthy and probe.largest_activation > OVERFLOWING_ACTIVATION
    assert "hidden states of norm ‖h‖₂ up to" in probe.describe()
    with torch.no_grad():
        model.model.norm.weight.fill_(3e38)  # infinite logits too
    assert not probe_forward(model).healthy


def test_non_finite_weights_are_never_saved(tmp_path):
    """trl.learning_rate 1e300 makes every weight NaN; the first save finds them: exit 1, no checkpoint, no final/."""
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


@pytest.fixture(scope="module")
def overflowing_model(tmp_path_factory):
    """The shipped tiny model with a final-norm gain of 3e38: every weight finite, every logit not."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.tiny import tiny_model_path

    folder = tmp_path_factory.mktemp("overflowing")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    with torch.no_grad():
        model.model.norm.weight.fill_(3e38)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path()).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("how", [["--n", "4"], ["--exact", "--task-param", "max_digits=1"]], ids=["sampled", "exact"])
def test_evaluating_a_model_whose_logits_overflow_is_one_line(overflowing_model, tmp_path, how):
    """Such a model's evaluation, where torch would raise a multinomial traceback (sampled) or `'p' must lie in
    [0, 1]` (exact), is one line naming the cause, exit 1, no rows."""
    import typer

    from grae.cli import eval_cmd

    app = typer.Typer()
    eval_cmd.register(app)
    result = CliRunner().invoke(app, ["eval", str(overflowing_model), "--tasks", "chain_sum", "--num-problems", "2",
                                      "--output", str(tmp_path / "eval"), *how])
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]  # a loading bar may share its line (no newline of its own)
    assert "error: the model's next-token probabilities are non-finite while " in last, result.output
    assert "Traceback" not in result.output and not list(tmp_path.glob("eval/*.jsonl"))


def test_training_from_a_model_whose_logits_overflow_is_one_line(overflowing_model, tmp_path):
    """The base's held-out evaluation names the same cause (exit 1), not a traceback."""
    result = CliRunner().invoke(_app(), ["--model", str(overflowing_model), "--output-dir", str(tmp_path / "run"),
                                         "--max-steps", "1", "--eval.num_problems", "2", "--eval.n", "2",
                                         # budgets inside the test model's 256-token context (else refused first)
                                         "--trl.max_completion_length", "16", "--eval.max_tokens", "16",
                                         "--no-progress"])
    assert result.exit_code == 1, result.output
    assert ("error: held-out evaluation: the model's next-token probabilities are non-finite while sampling"
            in result.output.strip().splitlines()[-1]), result.output


def test_a_model_the_probe_cannot_run_is_said_and_counts_as_finite(caplog):
    """A model that needs more than token ids (a VLM whose image token is among the probe's ids) cannot run
    the probe: one warning (once per model class), counted as healthy (its weights are still checked), its
    training mode restored."""
    import torch

    from grae.engines.divergence import Probe, probe_forward

    class NeedsPixels(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(2, 2)
            self.proj.weight.data.fill_(-4.0)

        def forward(self, input_ids, pixel_values=None, **kwargs):
            raise ValueError("Image features and image tokens do not match")

    model = NeedsPixels().train()
    with caplog.at_level("WARNING", logger="grae.engines.divergence"):
        assert probe_forward(model) == Probe(True, 4.0, 0.0)
        assert probe_forward(model) == Probe(True, 4.0, 0.0)  # the next save: not said again
    assert model.training
    assert [r.getMessage() for r in caplog.records] == [
        "divergence check: the probe forward pass cannot run on this model (ValueError: Image features and image "
        "tokens do not match); only its weights are checked at saves"]


def test_the_probe_checks_each_positions_norm_against_the_float32_limit():
    """RMSNorm sums a position's H squares in float32, so it overflows once ‖h‖₂ passes
    sqrt(float32 max) ≈ 1.84e19 although every |h| is √H times smaller. A tiny Llama (H = 512) whose hidden
    states are ±9e17 (‖h‖₂ = 9e17·√512 ≈ 2.0e19) gives all-zero logits; the probe must call it unhealthy,
    and ±7e17 (‖h‖₂ ≈ 1.6e19, whose squares sum to a finite float32) healthy."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from grae.engines.divergence import OVERFLOWING_ACTIVATION, probe_forward

    assert OVERFLOWING_ACTIVATION == pytest.approx(float(torch.finfo(torch.float32).max) ** 0.5, rel=1e-12)  # tol: its definition
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=512, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=16))
    signs = torch.where(torch.arange(512) % 2 == 0, 1.0, -1.0)  # [H]
    with torch.no_grad():  # the residual stream is the embedding: the layer adds nothing to it
        model.model.layers[0].self_attn.o_proj.weight.zero_()
        model.model.layers[0].mlp.down_proj.weight.zero_()
    rows = (torch.tensor([[1, 2, 3, 4]]), torch.ones(1, 4, dtype=torch.long))
    for size, healthy in [(9e17, False), (7e17, True)]:
        with torch.no_grad():
            model.model.embed_tokens.weight.copy_(size * signs.expand(32, 512))
            logits = model(input_ids=rows[0], attention_mask=rows[1]).logits
        assert torch.isfinite(logits).all()  # finite logits: they alone do not tell
        assert bool((logits == 0).all()) == (not healthy)  # the overflowed final norm outputs 0
        probe = probe_forward(model, rows)
        assert probe.healthy == healthy, (size, probe)
        assert probe.largest_activation == pytest.approx(size * 512 ** 0.5, rel=1e-6)  # tol: float32 inputs, float64 norm
