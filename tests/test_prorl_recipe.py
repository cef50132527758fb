"""The ProRL recipe (configs/prorl.yaml): KL to a reference that TRL hard-resets to the policy every
ref_model_sync_steps; the config validates, reaches TRL's GRPOConfig, and GraeTrainer really resets."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from trl.trainer.callbacks import SyncRefModelCallback  # noqa: E402

from grae.train.config import ConfigError, grpo_config, load_config  # noqa: E402
from test_trl_engine import make_trainer, model_dir  # noqa: E402, F401  (fixture)

PRORL_KNOBS = {"beta": 0.04, "sync_ref_model": True, "ref_model_sync_steps": 100, "ref_model_mixup_alpha": 1.0}


def test_prorl_recipe_is_r1_plus_the_kl_and_reset_knobs(tmp_path):
    cfg, r1 = load_config("prorl"), load_config("regime")
    args = grpo_config(cfg, output_dir=str(tmp_path))
    assert {k: getattr(args, k) for k in PRORL_KNOBS} == PRORL_KNOBS
    assert {k: v for k, v in cfg.trl.items() if k not in PRORL_KNOBS} == {k: v for k, v in r1.trl.items() if k != "beta"}
    assert (cfg.estimator, cfg.max_steps, cfg.task, cfg.eval) == (r1.estimator, r1.max_steps, r1.task, r1.eval)


@pytest.mark.parametrize("overrides,match", [
    ({"trl.beta": 0.0}, r"^trl\.sync_ref_model: there is no reference model to reset with trl\.beta = 0"),
    ({"peft": {"r": 4}}, r"^trl\.sync_ref_model: TRL cannot reset the reference model of a LoRA"),
    ({"trl.ref_model_mixup_alpha": 1.5}, r"^trl\.ref_model_mixup_alpha: must be in \[0, 1\]"),
])
def test_prorl_misconfigurations_fail_before_the_model_loads(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        grpo_config(load_config("prorl", overrides), output_dir=str(tmp_path))



def test_grae_trainer_hard_resets_the_reference_every_sync_step(model_dir, tmp_path):  # noqa: F811
    knobs = dict(beta=0.04, sync_ref_model=True, ref_model_sync_steps=2, ref_model_mixup_alpha=1.0)
    trainer = make_trainer(model_dir, tmp_path, "grpo", steps=3, config=knobs)
    assert any(isinstance(cb, SyncRefModelCallback) for cb in trainer.callback_handler.callbacks)
    before = [p.detach().clone() for p in trainer.ref_model.parameters()]
    gaps = []

    from transformers import TrainerCallback

    class Gap(TrainerCallback):  # registered after TRL's sync callback: sees the reference after the reset
        def on_step_end(self, args, state, control, **kwargs):
            gaps.append(max((p - q).abs().max().item()
                            for p, q in zip(trainer.model.parameters(), trainer.ref_model.parameters())))

    trainer.add_callback(Gap())
    trainer.train()
    assert gaps[0] > 0  # step 1: the policy moved away from the reference (lr 1e-3)
    assert gaps[1] == 0  # step 2: reset, π_ref ← π_θ exactly (α = 1)
    assert gaps[2] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.ref_model.parameters()))
    assert any(entry.get("kl", 0) > 0 for entry in trainer.state.log_history)  # the KL term is on
