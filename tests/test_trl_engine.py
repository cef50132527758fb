"""GraeTrainer end to end on a tiny random model: every estimator trains, the loss sees the
registry's advantages, weights drop samples, estimator state survives checkpoint/resume."""

from __future__ import annotations

import json
import math
import zlib

import pytest
import torch

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from grae.advantage import get_estimator  # noqa: E402
from grae.engines.trl import STATE_FILE, GraeTrainer, trl_default_params  # noqa: E402
from strategies import general_names  # noqa: E402
from tolerances import assert_close_scaled  # noqa: E402

G = 4
PROMPTS = 2


@pytest.fixture(scope="module")
def model_dir():
    """The embedded tiny model grae ships (3.5M parameters)."""
    from grae.tiny import tiny_model_path

    return str(tiny_model_path())


def parity_reward(completions, **kwargs):
    """Deterministic pseudo-reward in {0, 1} from the completion text (mixed groups, no model skill)."""
    return [float(zlib.crc32(c.encode()) % 2) for c in completions]


def make_trainer(model_dir, out, estimator="grpo", *, steps=2, trainer_cls=GraeTrainer, seed=0, reward=parity_reward, **kw):
    cfg_kw = dict(
        output_dir=str(out), use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
        max_steps=steps, learning_rate=1e-3, per_device_train_batch_size=PROMPTS * G, num_generations=G,
        max_completion_length=6, temperature=1.0, top_k=0, beta=0.0, gradient_checkpointing=False,
        dataloader_num_workers=0, seed=seed,
    )
    cfg_kw.update(kw.pop("config", {}))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": f"What is {a} + {a + 1}?\nAnswer:"} for a in range(16)])
    return trainer_cls(model=model, processing_class=tok, reward_funcs=[reward], args=GRPOConfig(**cfg_kw),
                       train_dataset=data, estimator=estimator, **kw)


class Recording(GraeTrainer):
    """Records each generation batch's rewards, advantages, weights and what the loss receives."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generations, self.loss_inputs = [], []

    def _generate_and_score_completions(self, inputs):
        state_before = json.loads(json.dumps(self.estimator.state_dict()))
        out = super()._generate_and_score_completions(inputs)
        rpf = self._last_rewards_per_func
        self.generations.append(dict(rewards=rpf.sum(1).clone(), state=state_before,
                                     advantages=out["advantages"].clone(), weights=out["grae_weights"].clone(),
                                     mask=out["completion_mask"].clone()))
        return out

    def _compute_loss(self, model, inputs):
        self.loss_inputs.append(dict(advantages=inputs["advantages"].clone(), mask=inputs["completion_mask"].clone(),
                                     num_items=inputs["num_items_in_batch"].clone()))
        return super()._compute_loss(model, inputs)


@pytest.mark.parametrize("name", general_names())
def test_every_estimator_trains_and_the_loss_sees_registry_advantages(model_dir, tmp_path, name):
    trainer = make_trainer(model_dir, tmp_path, name, trainer_cls=Recording)
    trainer.train()
    assert len(trainer.generations) == 2
    reference = get_estimator(name, **(trl_default_params(name, None) or {}))  # grpo: TRL's eps 1e-4 in GraeTrainer
    for gen, seen in zip(trainer.generations, trainer.loss_inputs):
        reference.load_state_dict(gen["state"])
        expected = reference(gen["rewards"], torch.arange(len(gen["rewards"])) // G)
        assert_close_scaled(gen["advantages"], expected.advantages.float(), rel=1e-6)
        assert torch.equal(gen["weights"], expected.weights.float())
        # the loss gets the same batch, shuffled by TRL
        assert_close_scaled(seen["advantages"].sort().values, expected.advantages.float().sort().values, rel=1e-6)
    logged = {k for entry in trainer.state.log_history for k in entry}
    for key in ["grae/omega", "grae/acr", "grae/adv_pos_mass", "grae/adv_neg_mass", "grae/frac_all_correct", "entropy", "reward"]:
        assert key in logged, key
    assert_close_scaled(list(trainer._logs["advantages"])[-PROMPTS * G:], trainer.generations[-1]["advantages"].tolist(),
                        rel=1e-6)


def test_dropped_samples_leave_the_token_normaliser(model_dir, tmp_path):
    trainer = make_trainer(model_dir, tmp_path, "psr", trainer_cls=Recording, steps=3)
    trainer.train()
    for gen, seen in zip(trainer.generations, trainer.loss_inputs):
        dropped = gen["weights"] == 0
        assert (gen["mask"][dropped] == 0).all()
        assert seen["num_items"].item() == gen["mask"].sum().item()


def test_grae_loss_path_with_dual_clip_and_seq_mean(model_dir, tmp_path):
    for mode in ["seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-mean"]:
        trainer = make_trainer(model_dir, tmp_path / mode, "w_reinforce", loss_agg_mode=mode, dual_clip=3.0,
                               config=dict(epsilon=0.2, epsilon_high=0.28, importance_sampling_level="sequence"))
        trainer.train()
        assert any("grae/dual_clipfrac" in e for e in trainer.state.log_history)


def test_bad_trainer_options_name_the_field(model_dir, tmp_path):
    with pytest.raises(KeyError, match="registered estimators"):
        make_trainer(model_dir, tmp_path, "grpoo")
    with pytest.raises(ValueError, match="loss_agg_mode"):
        make_trainer(model_dir, tmp_path, "grpo", loss_agg_mode="mean")
    with pytest.raises(ValueError, match="top_entropy_quantile"):
        make_trainer(model_dir, tmp_path, "grpo", loss_agg_mode="token-mean", config=dict(top_entropy_quantile=0.2))
    with pytest.raises(ValueError, match="normalize_then_sum': estimator 'rloo' reads rewards as scores"):
        make_trainer(model_dir, tmp_path, "rloo", config=dict(multi_objective_aggregation="normalize_then_sum"))
    with pytest.raises(ValueError, match="normalize_then_sum': dynamic sampling"):
        make_trainer(model_dir, tmp_path, "grpo", sampling={"dynamic": True},
                     config=dict(multi_objective_aggregation="normalize_then_sum"))


def test_estimator_state_is_checkpointed_and_restored(model_dir, tmp_path):
    params = dict(eta=0.3, tau_init=0.2)
    full = make_trainer(model_dir, tmp_path / "full", "avspo", steps=4, estimator_params=params,
                        config=dict(save_strategy="steps", save_steps=2))
    full.train()
    saved = json.load(open(tmp_path / "full" / "checkpoint-2" / STATE_FILE))
    assert saved["estimator"] == "avspo" and saved["state"]["step"] == 2

    resumed = make_trainer(model_dir, tmp_path / "full", "avspo", steps=4, estimator_params=params,
                           config=dict(save_strategy="steps", save_steps=2))
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert resumed.estimator.state_dict() == full.estimator.state_dict()
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert_close_scaled(a, b, rel=1e-5)


def flaky_reward(completions, **kwargs):
    """Raises on every completion whose checksum is divisible by 3 (about a third of the batch)."""
    out = []
    for c in completions:
        if zlib.crc32(c.encode()) % 3 == 0:
            raise RuntimeError("verifier crashed")
        out.append(float(zlib.crc32(c.encode()) % 2))
    return out


def broken_reward(completions, **kwargs):
    raise RuntimeError("always broken")


def test_a_flaky_reward_function_is_contained(model_dir, tmp_path):
    trainer = make_trainer(model_dir, tmp_path, "grpo", trainer_cls=Recording, steps=2, reward=flaky_reward)
    trainer.train()
    missing = [m for e in trainer.state.log_history for k, m in e.items() if k == "grae/n_missing_rewards"]
    assert sum(missing) > 0  # failed samples became missing rewards, excluded by the estimator
    for gen in trainer.generations:
        assert (gen["weights"][torch.isnan(gen["rewards"])] == 0).all()


def test_a_reward_function_failing_everywhere_stops_the_run(model_dir, tmp_path):
    from grae.rewards import RewardFunctionError

    trainer = make_trainer(model_dir, tmp_path, "grpo", steps=1, reward=broken_reward)
    with pytest.raises(RewardFunctionError, match="broken_reward"):
        trainer.train()
    unwrapped = make_trainer(model_dir, tmp_path, "grpo", steps=1, reward=broken_reward, contain_reward_faults=False)
    with pytest.raises(RuntimeError, match="always broken"):
        unwrapped.train()


def test_resuming_a_stateful_estimator_without_its_state_fails_loudly(model_dir, tmp_path):
    run = make_trainer(model_dir, tmp_path / "run", "avspo", steps=2, config=dict(save_strategy="steps", save_steps=2))
    run.train()
    (tmp_path / "run" / "checkpoint-2" / STATE_FILE).unlink()
    resumed = make_trainer(model_dir, tmp_path / "run", "avspo", steps=3, config=dict(save_strategy="steps", save_steps=2))
    with pytest.raises(FileNotFoundError, match="grae_estimator_state.json"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))


# -- settings that would silently change meaning --------------------------------------------------
def test_scale_rewards_is_the_estimators_scale(model_dir, tmp_path):
    trainer = make_trainer(model_dir, tmp_path / "none", "grpo", trainer_cls=Recording, steps=1,
                           config=dict(scale_rewards="none"))
    assert trainer.estimator.params["scale"] == "none"
    trainer.train()
    gen = trainer.generations[0]
    centred = gen["rewards"] - gen["rewards"].view(-1, G).mean(1).repeat_interleave(G)  # Dr. GRPO: no std
    assert_close_scaled(gen["advantages"], centred.float(), rel=1e-6)
    batch = make_trainer(model_dir, tmp_path / "batch", "agrae", config=dict(scale_rewards="batch"))
    assert batch.estimator.params["scale"] == "batch"
    # TRL's untouched default defers to an explicit estimator parameter
    assert make_trainer(model_dir, tmp_path / "d", "grpo", estimator_params={"scale": "none"}).estimator.params["scale"] == "none"


@pytest.mark.parametrize("estimator, params, scale, match", [
    ("grpo", {"scale": "group"}, "none", "contradicts the estimator's scale='group'"),
    ("rloo", None, "none", "estimator 'rloo' has no reward-scaling option"),
    ("dgpo", None, "batch", "estimator 'dgpo' has no reward-scaling option"),
])
def test_scale_rewards_that_cannot_mean_anything_is_refused(model_dir, tmp_path, estimator, params, scale, match):
    with pytest.raises(ValueError, match=f"scale_rewards='{scale}'.*{match}"):
        make_trainer(model_dir, tmp_path, estimator, estimator_params=params, config=dict(scale_rewards=scale))


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "sapo", "luspo", "dapo", "bnpo", "cispo", "vespo"])
def test_every_trl_loss_type_trains_with_dropped_samples(model_dir, tmp_path, loss_type):
    """PSR drops the wrong samples; every TRL loss type runs on TRL's own loss (the per-row ones rescaled to
    kept rows: tests/test_trl_parity.py checks that against grae's seq-mean losses)."""
    trainer = make_trainer(model_dir, tmp_path, "psr", trainer_cls=Recording, steps=2, config=dict(loss_type=loss_type))
    assert trainer.grae_loss_agg_mode is None
    trainer.train()
    assert all(math.isfinite(e["loss"]) for e in trainer.state.log_history if "loss" in e)


def test_a_reward_function_failing_everywhere_stops_on_the_gathered_batch(model_dir, tmp_path):
    trainer = make_trainer(model_dir, tmp_path, "grpo", steps=1, reward=broken_reward)
    wrapped = trainer.reward_funcs[0]
    assert wrapped.raise_on_total_failure is False  # the trainer decides, on every rank at once
    from grae.rewards import RewardFunctionError

    with pytest.raises(RewardFunctionError, match="failed on all 8 samples"):
        trainer.train()


def test_an_inf_reward_is_dropped_and_the_run_goes_on(model_dir, tmp_path):
    """One ``inf`` reward is dropped before the estimator, so training goes on past step 1."""
    def inf_once(completions, **kwargs):
        return [math.inf if i == 0 else float(zlib.crc32(c.encode()) % 2) for i, c in enumerate(completions)]

    trainer = make_trainer(model_dir, tmp_path, "agrae", trainer_cls=Recording, steps=2, reward=inf_once)
    trainer.train()
    for gen in trainer.generations:
        assert torch.isnan(gen["rewards"][0]) and gen["weights"][0] == 0
    assert [e["inf_once/failure_frac"] for e in trainer.state.log_history if "inf_once/failure_frac" in e] == [1 / 8] * 2


def test_a_step_with_every_reward_missing_says_so(model_dir, tmp_path, caplog):
    def nothing(completions, **kwargs):
        return [None] * len(completions)

    from grae.rewards import RewardFunctionError

    # each such step says so; a 5-step run stops once missing_reward_steps (3) scored batches in a row had none, not
    # at the first (the watch itself: test_integrity_units.py)
    trainer = make_trainer(model_dir, tmp_path, "grpo", steps=5, reward=nothing, missing_reward_steps=3)
    with caplog.at_level("WARNING", logger="grae.engines.trl"), \
            pytest.raises(RewardFunctionError, match="'nothing' gave no reward .* of 3 scored batches in a row"):
        trainer.train()
    assert "step 1: every reward of the batch is missing (8 samples)" in caplog.text
    assert "step 2: every reward of the batch is missing (8 samples)" in caplog.text
    assert "step 3:" not in caplog.text  # stopped on its rewards, before its advantages
