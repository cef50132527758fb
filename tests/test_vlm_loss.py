"""Images reach the training forward on every GraeTrainer loss path.

With the shipped tiny VLM and one generated batch of count_shapes scenes, each loss path — TRL's own
loss for every ``loss_type`` (the per-row ones rescaled by grae), grae's loss under ``loss_agg_mode``
and under ``dual_clip`` — is run on the batch with its images and with the images blanked: the loss
and the gradients must differ. A path that dropped ``pixel_values`` would give the same numbers twice.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
pytest.importorskip("PIL", reason="the visual tasks render with Pillow (a transformers dependency)")
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grae.engines.trl import MODEL_INPUT_KEYS, GraeTrainer, model_input_kwargs  # noqa: E402

G = 2
PATHS = {
    # name: (loss_type, GraeTrainer's own arguments)
    "trl-dapo": ("dapo", {}),
    "trl-bnpo": ("bnpo", {}),
    "trl-grpo": ("grpo", {}),
    "trl-dr_grpo": ("dr_grpo", {}),
    "trl-sapo": ("sapo", {}),
    "trl-luspo": ("luspo", {}),
    "trl-cispo": ("cispo", {}),
    "trl-vespo": ("vespo", {}),
    "grae-loss_agg_mode": ("grpo", {"loss_agg_mode": "seq-mean-token-sum"}),
    "grae-dual_clip": ("dapo", {"dual_clip": 3.0}),
}


def test_every_model_input_trls_loss_passes_is_collected():
    """The keys TRL's _compute_loss hands to the log-prob function are exactly what grae's loss collects."""
    source = inspect.getsource(GRPOTrainer._compute_loss)
    start = source.index("self._get_per_token_logps_and_entropies(")
    source = source[start:source.index("\n        )", start)]  # the call's arguments
    passed = set(re.findall(r"(\w+)=inputs\.get\(\"(\w+)\"\)", source))
    assert passed and all(arg == key for arg, key in passed)
    assert {arg for arg, _ in passed} == set(MODEL_INPUT_KEYS)
    assert {"pixel_values", "image_grid_thw", "pixel_attention_mask", "image_sizes", "token_type_ids"} <= set(MODEL_INPUT_KEYS)
    assert model_input_kwargs({"pixel_values": 1})["pixel_values"] == 1


def reward(completions, **kwargs):
    return [float(i % 2) for i in range(len(completions))]


@pytest.fixture(scope="module")
def vlm_batch(tmp_path_factory):
    """The tiny VLM, its processor, one generated batch (2 scenes × 2 completions) and the blank images."""
    from datasets import Dataset
    from PIL import Image

    from grae.data import get_task
    from grae.eval.backends import load_hf

    model, _, processor = load_hf("tiny-vlm", device="cpu")
    examples = get_task("count_shapes").train(2, seed=0)
    data = Dataset.from_list([{"prompt": e["prompt"], "image": e["image"]} for e in examples])
    trainer = make(model, processor, data, tmp_path_factory.mktemp("gen"), "dapo", {})
    trainer.model.train()
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions([data[i] for i in range(len(data)) for _ in range(G)])
    assert inputs["pixel_values"] is not None and inputs["completion_mask"].sum() > 0
    blank_images = [Image.new("RGB", e["image"].size, (255, 255, 255)) for e in examples for _ in range(G)]
    blank = processor.image_processor(images=blank_images, return_tensors="pt")["pixel_values"]
    assert blank.shape == inputs["pixel_values"].shape and not torch.equal(blank, inputs["pixel_values"])
    # A fixed reference policy and fixed advantages: the loss value then depends on the new log-probs
    # (ratio ≠ 1), so a forward without the image shows in the loss as well as in the gradients.
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), inputs["completion_ids"].size(1),
            **model_input_kwargs(inputs))
    inputs["old_per_token_logps"] = logps - 0.05
    inputs["advantages"] = torch.tensor([1.0, -1.0] * G)
    return model, processor, data, inputs, blank


def make(model, processor, data, out, loss_type, grae_kwargs):
    args = GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      per_device_train_batch_size=2 * G, num_generations=G, max_completion_length=4, temperature=1.0,
                      top_k=0, beta=0.0, loss_type=loss_type, dataloader_num_workers=0, seed=0,
                      epsilon_high=5.0 if loss_type == "cispo" else None)
    return GraeTrainer(model=model, processing_class=processor, reward_funcs=[reward], args=args, train_dataset=data,
                       estimator="grpo", **grae_kwargs)


def loss_and_grads(trainer, inputs):
    trainer.model.train()
    trainer.model.zero_grad()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, dict(inputs))
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return loss.item(), grads


@pytest.mark.parametrize("path", list(PATHS))
def test_images_reach_every_loss_path(vlm_batch, tmp_path, path):
    model, processor, data, inputs, blank = vlm_batch
    loss_type, grae_kwargs = PATHS[path]
    trainer = make(model, processor, data, tmp_path, loss_type, grae_kwargs)
    assert (trainer.grae_loss_agg_mode is not None) == path.startswith("grae-")
    loss, grads = loss_and_grads(trainer, inputs)
    again, grads_again = loss_and_grads(trainer, inputs)
    assert loss == again and torch.equal(grads, grads_again)  # deterministic, so a difference below is the image
    blank_loss, blank_grads = loss_and_grads(trainer, {**inputs, "pixel_values": blank})
    # tol: asserts a difference (the run is deterministic, above): any change the image makes is beyond these
    assert blank_loss != pytest.approx(loss, rel=1e-6, abs=1e-9)
    assert not torch.allclose(blank_grads, grads, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("overrides, match", [
    ({"model": "tiny-vlm", "sampling.dynamic": True}, r"sampling: dynamic sampling and prompt selection do not carry "
                                                     r"images yet \(task '\w+' is visual\)"),
    ({"model": "tiny-vlm", "sampling.selection": "vade"}, r"do not carry images yet"),
    ({"estimator": "rloo", "trl.multi_objective_aggregation": "normalize_then_sum"},
     r"normalize_then_sum': estimator 'rloo' reads rewards as scores"),
])
def test_configurations_grae_cannot_train_are_refused_before_load(overrides, match):
    """Sampling on a visual task (the one path that drops images) and normalize_then_sum with a score-reading
    estimator: one line from the config check, before any model loads."""
    from grae.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)
