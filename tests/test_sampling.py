"""Dynamic sampling and prompt selection: the components against hand-computed values and
invariants, then GraeTrainer and ``grae train`` end to end on the tiny model."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.engines.rows import concat_rows, take_rows, trim_padding
from grae.sampling import PromptPosterior, PromptStream, SamplingConfig, group_kinds, informative_groups
from grae.sampling.dynamic import ALL_CORRECT, ALL_WRONG, INFORMATIVE, UNSCORED

NAN = math.nan


# -- which groups carry signal ---------------------------------------------------------------
def test_group_kinds_by_hand():
    rewards = torch.tensor([1, 1, 1, 0, 1, 1, 0, 0, 0, NAN, NAN, NAN, NAN, 1, NAN, 0.3, 0.3, 0.7])
    # groups: [1 1 1] [0 1 1] [0 0 0] [- - -] [- 1 -] [.3 .3 .7]
    assert group_kinds(rewards, 3).tolist() == [ALL_CORRECT, INFORMATIVE, ALL_WRONG, UNSCORED, ALL_CORRECT, INFORMATIVE]
    assert informative_groups(rewards, 3).tolist() == [False, True, False, False, False, True]
    assert informative_groups(rewards, 3, drop="all_correct").tolist() == [False, True, True, False, False, True]
    assert informative_groups(rewards, 3, drop="all_wrong").tolist() == [True, True, False, False, True, True]
    # a continuous reward: the threshold decides what "correct" means
    assert group_kinds(torch.tensor([0.4, 0.4]), 2, success_threshold=0.3).tolist() == [ALL_CORRECT]
    with pytest.raises(ValueError, match="whole number of groups"):
        group_kinds(torch.zeros(5), 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0, 0.5, NAN]), min_size=4, max_size=4), min_size=1, max_size=8))
def test_kept_groups_are_exactly_those_with_reward_variance(groups):
    rewards = torch.tensor([r for group in groups for r in group])
    keep = informative_groups(rewards, 4)
    for group, kept in zip(groups, keep.tolist()):
        scored = [r for r in group if r == r]
        assert kept == (len(set(scored)) > 1)


# -- the Beta posterior (hand-computed) -------------------------------------------------------
def test_posterior_update_and_decay_by_hand():
    post = PromptPosterior(3, prior_alpha=1.0, prior_beta=1.0, decay=0.5)
    post.update([0], [3], [4], step=0)  # α = 1 + 3, β = 1 + 1
    assert post.mean([0], step=0)[0] == pytest.approx(4 / 6)
    # two steps later the evidence (3, 1) has decayed by 0.5² = 0.25: α = 1.75, β = 1.25
    assert post.mean([0], step=2)[0] == pytest.approx(1.75 / 3.0)
    post.update([0, 0], [0, 1], [4, 4], step=2)  # two groups of one prompt: α = 1.75 + 1, β = 1.25 + 7
    assert (post.alpha[0], post.beta[0]) == pytest.approx((2.75, 8.25))
    assert post.mean([1], step=5)[0] == 0.5  # never seen: the prior


def test_selection_prefers_uncertain_prompts_and_is_seeded():
    post = PromptPosterior(40, decay=1.0)
    post.update(range(0, 10), [20] * 10, [40] * 10, step=0)  # p ≈ 0.5, confident: variance ≈ 0.25
    post.update(range(10, 40), [0] * 30, [40] * 30, step=0)  # never solved: variance ≈ 0
    chosen = post.select(10, step=1, rng=np.random.default_rng(0))
    assert sorted(chosen) == list(range(10))
    again = post.select(10, step=1, rng=np.random.default_rng(0))
    assert chosen == again and len(set(chosen)) == 10
    with pytest.raises(ValueError, match="dataset has 40"):
        post.select(41, step=1, rng=np.random.default_rng(0))


def test_posterior_state_round_trip_and_mismatch():
    post = PromptPosterior(5, decay=0.9)
    post.update([1, 3], [2, 0], [4, 4], step=7)
    restored = PromptPosterior(5, decay=0.9)
    restored.load_state_dict(json.loads(json.dumps(post.state_dict())))
    assert np.array_equal(restored.alpha, post.alpha) and np.array_equal(restored.last, post.last)
    with pytest.raises(ValueError, match="same sampling settings"):
        PromptPosterior(5, decay=0.5).load_state_dict(post.state_dict())
    with pytest.raises(ValueError, match="same training set"):
        PromptPosterior(2, decay=0.9).load_state_dict(post.state_dict())


def test_prompt_stream_covers_every_prompt_once_per_epoch_and_resumes():
    stream = PromptStream(10, seed=3)
    first = stream.take(4) + stream.take(4) + stream.take(2)
    assert sorted(first) == list(range(10))
    state = stream.state_dict()
    later = PromptStream(10, seed=3)
    later.load_state_dict(state)
    assert later.take(7) == stream.take(7)


def test_sampling_config_names_the_field():
    for bad, match in [({"drop": "some"}, "sampling.drop"), ({"selection": "top"}, "sampling.selection"),
                       ({"max_gen_batches": 0}, "max_gen_batches"), ({"decay": 0.0}, "sampling.decay"),
                       ({"budget_completions": 0}, "budget_completions")]:
        with pytest.raises(ValueError, match=match):
            SamplingConfig(**bad).check()


# -- rows of several rounds in one batch --------------------------------------------------------
def test_rows_of_different_widths_keep_their_tokens():
    a = {"prompt_ids": torch.tensor([[0, 5], [6, 7]]), "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
         "completion_ids": torch.tensor([[8, 0], [9, 9]]), "completion_mask": torch.tensor([[1, 0], [1, 1]]),
         "old_per_token_logps": torch.tensor([[-1.0, 0.0], [-2.0, -3.0]])}
    b = {"prompt_ids": torch.tensor([[1, 2, 3]]), "prompt_mask": torch.tensor([[1, 1, 1]]),
         "completion_ids": torch.tensor([[4]]), "completion_mask": torch.tensor([[1]]),
         "old_per_token_logps": torch.tensor([[-4.0]])}
    rows = concat_rows([a, b], pad_token_id=0)
    picked = trim_padding(take_rows(rows, torch.tensor([2, 0])))
    assert picked["prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 5]]  # left-padded
    assert picked["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert picked["completion_ids"].tolist() == [[4], [8]]  # the all-padding column is trimmed
    assert picked["old_per_token_logps"].tolist() == [[-4.0], [-1.0]]


# -- GraeTrainer end to end ---------------------------------------------------------------------
pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from grae.engines.trl import SAMPLING_STATE_FILE, GraeTrainer  # noqa: E402
from test_trl_engine import G, make_trainer  # noqa: E402
from timeouts import scaled  # noqa: E402


@pytest.fixture(scope="module")
def model_dir():
    from grae.tiny import tiny_model_path

    return str(tiny_model_path())


def even_solved(completions, prompts, **kwargs):
    """Prompts with an even operand always score 1 (all-correct groups); the others a coin from the text."""
    return [1.0 if int(p.split()[2]) % 2 == 0 else float(zlib.crc32(c.encode()) % 2) for p, c in zip(prompts, completions)]


class Watching(GraeTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.batches.append(dict(groups=self.last_groups, weights=out["grae_weights"].clone(),
                                 advantages=out["advantages"].clone(), completion_ids=out["completion_ids"].clone(),
                                 mask=out["completion_mask"].clone()))
        return out


@pytest.mark.parametrize("selection", ["uniform", "vade"])
def test_dynamic_sampling_trains_only_on_groups_with_reward_variance(model_dir, tmp_path, selection):
    trainer = make_trainer(model_dir, tmp_path, "grpo", steps=3, trainer_cls=Watching, reward=even_solved,
                           sampling=dict(dynamic=True, max_gen_batches=4, selection=selection))
    trainer.train()
    assert len(trainer.batches) == 3
    for batch in trainer.batches:
        trained = [g for g in batch["groups"] if g["trained"]]
        assert all(len(set(g["rewards"])) > 1 for g in trained)
        assert int((batch["weights"] > 0).sum()) == G * len(trained)
        assert bool((batch["mask"][batch["weights"] == 0] == 0).all())  # filler rows train nothing
    assert any(g["round"] > 0 for batch in trainer.batches for g in batch["groups"])  # it had to generate again
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert all("grae/kept_group_frac" in entry and entry["grae/gen_batches"] >= 1 for entry in logged)
    if selection == "vade":
        assert all("grae/selected_p" in entry for entry in logged)
        assert all(g["prompt_index"] is not None for batch in trainer.batches for g in batch["groups"])
    assert trainer.grae_generated_completions == sum(len(b["groups"]) for b in trainer.batches) * G


def test_dynamic_sampling_keeps_all_wrong_groups_when_asked(model_dir, tmp_path):
    def hopeless_for_odd(completions, prompts, **kwargs):
        return [0.0 if int(p.split()[2]) % 2 else float(zlib.crc32(c.encode()) % 2) for p, c in zip(prompts, completions)]

    trainer = make_trainer(model_dir, tmp_path, "nsr", steps=2, trainer_cls=Watching, reward=hopeless_for_odd,
                           sampling=dict(dynamic=True, drop="all_correct"))
    trainer.train()
    kinds = {g["kind"] for batch in trainer.batches for g in batch["groups"] if g["trained"]}
    assert "all_wrong" in kinds and "all_correct" not in kinds


def test_prompt_selection_state_is_checkpointed_and_restored(model_dir, tmp_path):
    sampling = dict(selection="vade", decay=0.9)
    first = make_trainer(model_dir, tmp_path, "grpo", steps=2, reward=even_solved, sampling=sampling,
                         config=dict(save_strategy="steps", save_steps=1))
    first.train()
    checkpoint = tmp_path / "checkpoint-1"
    saved = json.loads((checkpoint / SAMPLING_STATE_FILE).read_text())
    assert saved["generated_completions"] == 2 * G and len(saved["posterior"]["index"]) == 2
    resumed = make_trainer(model_dir, tmp_path / "again", "grpo", steps=2, reward=even_solved, sampling=sampling)
    resumed._load_sampling_state(str(checkpoint))
    assert resumed._posterior.state_dict() == saved["posterior"]
    assert resumed.grae_generated_completions == 2 * G
    other = make_trainer(model_dir, tmp_path / "other", "grpo", steps=2, reward=even_solved, sampling=dict(selection="vade"))
    with pytest.raises(ValueError, match="same sampling settings"):
        other._load_sampling_state(str(checkpoint))


def test_sampling_refuses_what_it_cannot_do(model_dir, tmp_path):
    from datasets import Dataset

    with pytest.raises(ValueError, match="sampling.drop"):
        make_trainer(model_dir, tmp_path, sampling=dict(dynamic=True, drop="none"))
    with pytest.raises(ValueError, match="unknown fields"):
        make_trainer(model_dir, tmp_path, sampling=dict(dynamc=True))
    template = make_trainer(model_dir, tmp_path)
    with pytest.raises(ValueError, match="map-style"):
        GraeTrainer(model=template.model, processing_class=template.processing_class, reward_funcs=[even_solved],
                    args=template.args, train_dataset=Dataset.from_list([{"prompt": "x"}] * 8).to_iterable_dataset(),
                    sampling=dict(dynamic=True))


# -- grae train ---------------------------------------------------------------------------------
def test_grae_train_with_dynamic_sampling_logs_every_step(tmp_path):
    """``grae train --max-steps 3 --sampling.dynamic true``: kept_group_frac and gen_batches in
    metrics.jsonl for every step; every group it trained on (groups.jsonl) had reward variance."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "grae.cli", "train", "--max-steps", "3", "--sampling.dynamic", "true",
           "--sampling.log_groups", "true", "--sampling.budget_completions", "100000", "--eval.enabled", "false",
           "--trl.per_device_train_batch_size", "32", "--output-dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in metrics] == [1, 2, 3]
    assert all(0 < row["kept_group_frac"] <= 1 and row["gen_batches"] >= 1 for row in metrics)
    groups = [json.loads(line) for line in (out / "groups.jsonl").read_text().splitlines()]
    trained = [g for g in groups if g["trained"]]
    assert {g["step"] for g in trained} == {1, 2, 3}
    assert all(len({r for r in g["rewards"] if r is not None}) > 1 for g in trained)
    assert all(len({r for r in g["rewards"] if r is not None}) <= 1 for g in groups if not g["trained"]
               and g["kind"] != "informative")
    for step, row in zip((1, 2, 3), metrics):
        mine = [g for g in groups if g["step"] == step]
        assert row["kept_group_frac"] == pytest.approx(sum(g["trained"] for g in mine) / len(mine))


def test_grae_train_stops_at_the_completion_budget(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "grae.cli", "train", "--max-steps", "50", "--sampling.budget_completions", "40",
           "--eval.enabled", "false", "--trl.per_device_train_batch_size", "16", "--output-dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "eval" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["generated_completions"] == 48  # 16 per step: 48 >= 40 after step 3
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=scaled(600))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert json.loads((out / "eval" / "summary.json").read_text())["steps"] == 3  # spent: no further step


def test_a_later_round_asks_for_the_shortfall_not_a_full_batch():
    from types import SimpleNamespace

    def trainer(world):
        return SimpleNamespace(args=SimpleNamespace(generation_batch_size=128), num_generations=8,
                               accelerator=SimpleNamespace(num_processes=world))

    size = GraeTrainer._round_size
    assert size(trainer(1), shortfall=3, kept=13, generated=16) == 4  # ceil(3 / (13/16))
    assert size(trainer(2), shortfall=3, kept=13, generated=16) == 4  # 4 × 8 rows split evenly over 2
    assert size(trainer(3), shortfall=3, kept=13, generated=16) == 6  # whole rows on 3 processes: multiples of 3
    assert size(trainer(1), shortfall=16, kept=0, generated=16) == 16  # nothing kept yet: a full batch
    assert size(trainer(1), shortfall=15, kept=1, generated=16) == 16  # never more than a full batch


def test_the_dynamic_sampling_example_runs(tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "trl" / "dynamic_sampling.py"
    proc = subprocess.run([sys.executable, str(example), "--max-steps", "1", "--output-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "kept_group_frac" in proc.stdout and "generated" in proc.stdout
