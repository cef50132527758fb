"""A GraeTrainer run raises no warning of grae's own: the README's snippet, on the fast path (grae's decoding)
and with LoRA, prints nothing from grae's modules but its own log lines."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import grae

GRAE_DIR = Path(grae.__file__).resolve().parent


def _snippet_run(tmp_path: Path, lora: bool) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from grae.engines.trl import GraeTrainer
    from grae.tiny import tiny_model_path

    model_dir = str(tiny_model_path())
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": f"State the final answer to the following arithmetic problem: {a} + {b} "
                                         "=\nAnswer:", "answer": str(a + b)} for a in range(10) for b in range(10)])

    def reward(completions, answer, **kwargs):
        return [float(c.strip().split(" ")[0] == gold) for c, gold in zip(completions, answer)]

    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=16,
                      num_generations=8, max_completion_length=8, report_to="none",
                      use_cpu=not torch.cuda.is_available(), save_strategy="steps", save_steps=2)
    extra = {}
    if lora:
        from peft import LoraConfig

        extra["peft_config"] = LoraConfig(r=16, target_modules="all-linear")
    trainer = GraeTrainer(model=model, processing_class=tokenizer, reward_funcs=[reward], args=args,
                          train_dataset=data, estimator="agrae", estimator_params={"alpha": 1.0}, **extra)
    trainer.train()
    assert trainer.state.global_step == 2


@pytest.mark.parametrize("lora", [False, True], ids=["fast-path", "lora"])
def test_a_graetrainer_run_raises_no_warning_from_grae(tmp_path, lora):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _snippet_run(tmp_path, lora)
    ours = [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught
            if Path(w.filename).resolve().is_relative_to(GRAE_DIR)]
    assert ours == []
