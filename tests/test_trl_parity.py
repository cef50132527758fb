"""Parity with stock TRL: ``GraeTrainer(estimator="grpo")`` and ``trl.GRPOTrainer`` side by side.

Same seed, same random stand-in model (a 2-layer Qwen2 on grae's tiny tokenizer), a few steps: every
metric stock TRL logs is logged by GraeTrainer with the same value, and the final parameters agree,
for every ``loss_type`` TRL 1.16 has, with the KL term, with an entropy bonus and with
``multi_objective_aggregation="normalize_then_sum"``; to float32 tolerance with a continuous reward at TRL's
learning rate and with missing (None) rewards, for every ``loss_type`` (TRL's own advantages and TRL's rule
for a missing reward train on GraeTrainer's TRL path; docs/scaling.md "TRL parity"). Then the weight-aware
rescaling of TRL's per-row loss types is checked against grae's own ``seq-mean-*`` losses on a batch that drops samples.
"""

from __future__ import annotations

import math
import zlib

import pytest
import torch

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grae.engines.trl import GraeTrainer  # noqa: E402
from tolerances import assert_close_scaled  # noqa: E402

#: metrics that are wall-clock times or TRL's step counters, not results
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second", "epoch",
               "step", "total_flos"}
STEPS = 3


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """A random 2-layer Qwen2 (hidden 32) with grae's tiny tokenizer: cheap and exactly reproducible."""
    from grae.presets import tiny_model_path

    tok = AutoTokenizer.from_pretrained(tiny_model_path())
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    path = tmp_path_factory.mktemp("standin")
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def crc_reward(completions, **kwargs):
    """Deterministic {0, 1} reward from the completion text: mixed groups without any model skill."""
    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


def length_reward(completions, **kwargs):
    """A second objective on another scale (for normalize_then_sum)."""
    return [float(len(c) % 5) for c in completions]


def score_reward(completions, **kwargs):
    """A continuous score in [0, 1) from the completion text, as a reward model gives: group means and stds
    that are not exact in float32, so the advantages' rounding shows."""
    return [zlib.crc32(c.encode()) % 1000 / 997.0 for c in completions]


def none_reward(completions, **kwargs):
    """Every completion unscorable (TRL: the reward function returns None)."""
    return [None] * len(completions)


def some_none_reward(completions, **kwargs):
    """About one completion in three unscorable (None), the others a continuous score."""
    return [None if zlib.crc32(c.encode()) % 3 == 0 else zlib.crc32(c.encode()) % 1000 / 997.0 for c in completions]


def run(standin, out, cls, *, rewards=(crc_reward,), grae=None, **config):
    """Train ``cls`` for STEPS steps; ``grae``: GraeTrainer's own arguments (default estimator="grpo")."""
    cfg = dict(output_dir=str(out), use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
               max_steps=STEPS, learning_rate=1e-2, per_device_train_batch_size=8, num_generations=4,
               gradient_accumulation_steps=2, max_completion_length=8, temperature=1.0, top_k=0, beta=0.0,
               dataloader_num_workers=0, seed=0)
    cfg.update(config)
    tok = AutoTokenizer.from_pretrained(standin)
    data = Dataset.from_list([{"prompt": f"What is {a} + {a + 1}?\nAnswer:"} for a in range(16)])
    kwargs = {} if cls is GRPOTrainer else {"estimator": "grpo", **(grae or {})}
    trainer = cls(model=Qwen2ForCausalLM.from_pretrained(standin), processing_class=tok, reward_funcs=list(rewards),
                  args=GRPOConfig(**cfg), train_dataset=data, **kwargs)
    trainer.train()
    return trainer


def trl_logs(trainer) -> list[dict]:
    """The log entries without timings and without grae's own metrics (``grae/*`` and the contained reward
    functions' ``<name>/failure_frac``)."""
    return [{k: v for k, v in entry.items()
             if k not in TIMING_KEYS and not k.startswith("grae/") and not k.endswith("/failure_frac")}
            for entry in trainer.state.log_history]


def assert_same_run(stock, grae, *, rel=1e-4, atol=1e-6):
    """Every key stock TRL logs, and no other but grae's own, with the same value (``None`` where stock
    logs ``None``) at every step; the same final parameters. A logged scalar within ``rel`` of itself or
    ``atol`` (the loss and KL are sums of terms of size ≈ |advantage| that cancel to ≈ 0: their rounding scales
    with the terms, not with the sum); each parameter tensor within ``rel`` of its largest magnitude
    (tests/tolerances.py). ``rel=0, atol=0``: bit for bit."""
    stock_logs, grae_logs = trl_logs(stock), trl_logs(grae)
    assert len(stock_logs) == len(grae_logs) == STEPS + 1  # one entry per step and the summary
    for step, (a, b) in enumerate(zip(stock_logs, grae_logs), start=1):
        assert set(a) == set(b), f"step {step}: keys only stock {set(a) - set(b)}, only grae {set(b) - set(a)}"
        for key, value in a.items():
            other = b[key]
            if value is None or isinstance(value, str):
                assert other == value, f"step {step} {key}: {value} vs {other}"
            elif isinstance(value, float) and math.isnan(value):
                assert isinstance(other, float) and math.isnan(other), f"step {step} {key}: {value} vs {other}"
            else:
                # tol: the loss and KL sum terms of size ≈ |advantage| ≤ √G that cancel to ≈ 0: atol is the rounding
                # of those bounded terms (see the docstring); every other logged number is held by rel
                assert other == pytest.approx(value, rel=rel, abs=atol), f"step {step} {key}: {value} vs {other}"
    for (name, p), (_, q) in zip(stock.model.named_parameters(), grae.model.named_parameters()):
        assert_close_scaled(q, p, rel=rel, msg=f"final parameter {name}")


LOSS_TYPES = ["dapo", "bnpo", "grpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"]


def test_every_trl_loss_type_is_covered():
    """The parametrisation below lists exactly the loss types TRL 1.16 documents."""
    import inspect

    from trl.trainer import grpo_trainer

    source = inspect.getsource(grpo_trainer.GRPOTrainer._compute_loss)
    for loss_type in LOSS_TYPES:
        assert f'"{loss_type}"' in source
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    assert all(f"'{t}'" in help_text or f"`{t}`" in help_text or t in help_text for t in LOSS_TYPES)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_grae_grpo_reproduces_stock_trl(standin, tmp_path, loss_type):
    # epsilon_high 5 is TRL's cispo setting (a ratio cap); the others keep TRL's defaults
    extra = {"epsilon_high": 5.0} if loss_type == "cispo" else {}
    stock = run(standin, tmp_path / "stock", GRPOTrainer, loss_type=loss_type, **extra)
    grae = run(standin, tmp_path / "grae", GraeTrainer, loss_type=loss_type, **extra)
    assert_same_run(stock, grae)


#: float32 tolerance: TRL's own advantages train on GraeTrainer's TRL path, so the runs agree to rounding
FLOAT32 = dict(rel=1e-6, atol=1e-7)  # tol: atol for the loss/KL near 0, terms ≈ |advantage| (assert_same_run)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_grae_grpo_logs_stock_trls_numbers_with_continuous_rewards(standin, tmp_path, loss_type):
    """A continuous reward at TRL's own test learning rate (0.1): grae's float64 estimate of the GRPO advantage
    differs from TRL's float32 one in the last bits and Adam amplifies that (luspo's grad_norm 27.4 vs 17.8
    after 10 steps on TRL's test); GraeTrainer trains TRL's own advantages there, so every logged number
    agrees to float32 tolerance."""
    extra = {"epsilon_high": 5.0} if loss_type == "cispo" else {}
    if loss_type == "luspo":
        extra["importance_sampling_level"] = "sequence"  # TRL's luspo setting
    config = dict(loss_type=loss_type, rewards=(score_reward,), learning_rate=0.1, **extra)
    stock = run(standin, tmp_path / "stock", GRPOTrainer, **config)
    grae = run(standin, tmp_path / "grae", GraeTrainer, **config)
    assert_same_run(stock, grae, **FLOAT32)
    assert grae.grae_trl_algorithm


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("reward", [none_reward, some_none_reward], ids=["all-none", "some-none"])
def test_grae_grpo_logs_stock_trls_numbers_when_rewards_are_missing(standin, tmp_path, loss_type, reward):
    """Unscorable completions (None): TRL gives them advantage 0 and keeps their tokens in the loss's counts,
    the entropy and the clip ratios; so does GraeTrainer on TRL's algorithm (with every reward None it
    logged entropy 0 and no clip_ratio values before)."""
    extra = {"epsilon_high": 5.0} if loss_type == "cispo" else {}
    config = dict(loss_type=loss_type, rewards=(reward,), learning_rate=0.1, **extra)
    stock = run(standin, tmp_path / "stock", GRPOTrainer, **config)
    # every reward None: GraeTrainer would stop this short run (missing_reward_steps, tested in
    # test_integrity_units.py and test_trl_engine.py); 0 turns the stop off to compare its numbers with stock TRL's
    grae = run(standin, tmp_path / "grae", GraeTrainer, grae={"missing_reward_steps": 0} if reward is none_reward else None,
               **config)
    assert_same_run(stock, grae, **FLOAT32)
    entropy = [e["entropy"] for e in trl_logs(grae) if "entropy" in e]
    assert len(entropy) == STEPS and all(value > 1 for value in entropy)  # the random model's, not 0


def test_grae_estimators_other_than_trls_drop_missing_rewards_from_the_loss(standin, tmp_path):
    """The TRL path is grpo with TRL's settings only: grae's registry ε (1e-6) or any other estimator keeps
    grae's rule, a missing reward's sample leaves the loss (mask and counts), as docs/scaling.md says."""
    seen = []

    class Seeing(GraeTrainer):
        def _compute_loss(self, model, inputs):
            seen.append((self.last_advantage_result.weights.clone(), inputs["num_items_in_batch"].item(),
                         inputs["completion_mask"].sum().item()))
            return super()._compute_loss(model, inputs)

    # every reward None: missing_reward_steps 0 turns off the stop such a run meets (tested in test_integrity_units.py)
    for grae in ({"estimator": "grpo", "estimator_params": {"eps": 1e-6}, "missing_reward_steps": 0},
                 {"estimator": "rloo", "missing_reward_steps": 0}):
        seen.clear()
        trainer = run(standin, tmp_path / grae["estimator"], Seeing, rewards=(none_reward,), grae=grae)
        assert not trainer.grae_trl_algorithm
        assert seen and all(num_items == 0 and mask == 0 for _, num_items, mask in seen)


@pytest.mark.parametrize("config", [
    dict(loss_type="dapo", beta=0.1),
    dict(loss_type="grpo", beta=0.1, entropy_coef=0.01),
    # the estimator's group mean of a sum of group z-scores is 0 up to rounding (TRL subtracts the batch mean):
    # equal to float precision, which Adam amplifies in near-zero gradient coordinates; SGD keeps it at rounding
    dict(loss_type="dapo", multi_objective_aggregation="normalize_then_sum", rewards=(crc_reward, length_reward),
         optim="sgd"),
    dict(loss_type="grpo", num_iterations=2, steps_per_generation=4, importance_sampling_level="sequence"),
], ids=["kl", "grpo-kl-entropy", "normalize_then_sum", "iterations-sequence"])
def test_grae_grpo_reproduces_stock_trl_options(standin, tmp_path, config):
    stock = run(standin, tmp_path / "stock", GRPOTrainer, **config)
    grae = run(standin, tmp_path / "grae", GraeTrainer, **config)
    assert_same_run(stock, grae)


@pytest.mark.parametrize("loss_type, agg", [("grpo", "seq-mean-token-mean"), ("dr_grpo", "seq-mean-token-sum-norm")])
def test_trls_per_row_losses_drop_samples_exactly(standin, tmp_path, loss_type, agg):
    """PSR drops every wrong sample. TRL's per-row loss × N / N_kept is grae's weight-aware loss with the
    global normaliser: the same loss and parameters as grae's own seq-mean mode (tested on the same run)."""
    runs = [run(standin, tmp_path / name, GraeTrainer, loss_type=loss_type, grae=dict(estimator="psr", **kw))
            for name, kw in [("trl", {}), ("grae", {"loss_agg_mode": agg})]]
    assert runs[0].grae_loss_agg_mode is None and runs[1].grae_loss_agg_mode == agg
    dropped = [e["grae/frac_dropped"] for e in runs[0].state.log_history if "grae/frac_dropped" in e]
    assert any(0 < d < 1 for d in dropped), dropped  # the runs really drop samples
    losses = [[e["loss"] for e in r.state.log_history if "loss" in e] for r in runs]
    # tol: the loss sums terms of size ≈ |advantage| ≤ √G that cancel to ≈ 0: abs is their float32 rounding
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-7)
    for (name, p), (_, q) in zip(runs[0].model.named_parameters(), runs[1].model.named_parameters()):
        assert_close_scaled(q, p, rel=1e-4, msg=f"final parameter {name}")


@pytest.mark.parametrize("loss_type, agg", [("grpo", "seq-mean-token-mean"), ("dr_grpo", "seq-mean-token-sum-norm"),
                                            ("dapo", "token-mean")])
def test_grae_loss_path_logs_trls_metrics_and_matches_trl(standin, tmp_path, loss_type, agg):
    """grae's own loss (loss_agg_mode) on TRL's objective, nothing dropped, with the KL term (TRL's
    bias-corrected k3), an entropy bonus and two iterations per generation (the ratio is not 1): TRL's
    metric keys and values (policy_loss, entropy_coef, clip_ratio/low_min, clip_ratio/high_max, kl, ...)
    and the same parameters."""
    config = dict(loss_type=loss_type, beta=0.1, entropy_coef=0.01, num_iterations=2, steps_per_generation=4)
    stock = run(standin, tmp_path / "stock", GRPOTrainer, **config)
    ours = run(standin, tmp_path / "ours", GraeTrainer, grae={"loss_agg_mode": agg}, **config)
    assert ours.grae_loss_agg_mode == agg
    assert_same_run(stock, ours)
