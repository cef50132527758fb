"""GraeTrainer in place of trl.GRPOTrainer — your model, dataset and reward function — with A-GRAE,
DAPO dynamic sampling and VADE-style prompt selection.

    python examples/trl/dynamic_sampling.py                 # the tiny model on chain_sum, CPU, ~1 minute
    python examples/trl/dynamic_sampling.py --max-steps 2   # a smoke run

GraeTrainer takes GRPOTrainer's arguments unchanged, plus ``estimator=`` (``estimator_params=``) and
``sampling=`` (docs/sampling.md); drop ``sampling=`` for TRL's own sampler. LoRA: pass ``peft_config=``
as to GRPOTrainer.
"""

from __future__ import annotations

import argparse
import random

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from grae.engines.trl import GraeTrainer  # in place of: from trl import GRPOTrainer
from grae.sampling import SamplingConfig
from grae.tiny import tiny_model_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--output-dir", default="runs/example-dynamic-sampling")
    args = parser.parse_args()

    # your own dataset: a "prompt" column and whatever your reward function reads (here "answer")
    rng = random.Random(0)
    problems = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(2000)]
    dataset = Dataset.from_list([{"prompt": f"State the final answer to the following arithmetic problem: {a} + {b} =\nAnswer:",
                                  "answer": str(a + b)} for a, b in problems])

    def accuracy(completions, answer, **kwargs):  # your own reward function, as for trl.GRPOTrainer
        return [float(completion.strip().split(" ")[0] == gold) for completion, gold in zip(completions, answer)]

    model_dir = str(tiny_model_path())
    trainer = GraeTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=[accuracy],
        args=GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=64,
                        num_generations=8, max_completion_length=8, learning_rate=2e-5, top_k=0, beta=0.0,
                        use_cpu=True, report_to="none", logging_steps=1, save_strategy="no"),
        train_dataset=dataset,
        estimator="agrae",
        # drop groups without reward variance and generate more (DAPO); choose prompts by their posterior (VADE)
        sampling=SamplingConfig(dynamic=True, drop="both", max_gen_batches=4, selection="vade"),
    )
    trainer.train()
    for entry in trainer.state.log_history:
        if "grae/kept_group_frac" in entry:
            print(f"step {entry['step']:>3}: reward {entry['reward']:.3f}  kept_group_frac {entry['grae/kept_group_frac']:.2f}  "
                  f"gen_batches {entry['grae/gen_batches']:.0f}  selected_p {entry['grae/selected_p']:.2f}")
    print(f"generated {trainer.grae_generated_completions} completions in {trainer.state.global_step} steps")


if __name__ == "__main__":
    main()
