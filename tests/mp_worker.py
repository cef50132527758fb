"""One multi-process GraeTrainer job for ``tests/test_distributed.py`` (CPU, gloo, the tiny model).

    torchrun --nproc_per_node=2 tests/mp_worker.py SPEC.json OUT_DIR      (or plain python: 1 process)

``SPEC.json`` holds ``{"runs": [run, ...]}``; the runs train one after another in the same process
group. Each rank writes ``OUT_DIR/<run name>/rank<r>.json`` with what it saw — per generation batch
the gathered rewards, the estimator's global result and this rank's slice, the loss normalisers; per
micro-batch the loss; the estimator state; TRL's log history — and rank 0 writes the final parameters
to ``params.pt``. Run keys (all but ``name`` optional):

* ``estimator``, ``estimator_params``, ``trainer`` (extra GraeTrainer kwargs: ``loss_agg_mode``, ...),
  ``config`` (GRPOConfig overrides), ``steps``, ``prompts_per_device`` (prompts per micro-batch per rank).
* ``reward``: ``"parity"`` (deterministic, from the completion text), ``"even_solved"`` (prompts with an
  even first operand always score 1: all-correct groups for dynamic sampling to drop; others parity) or
  ``"disagree"``: per generation batch, the next entry of ``modes`` decides what the ranks disagree
  about (:data:`MODES`).
* ``stand_in``: completions are a deterministic function of (global step, global row index) instead of
  sampled, so a 1-process and a 2-process run see the same batch.
* ``crash_at_step``: ``os._exit`` on every rank when this optimizer step ends (after the checkpoint of
  the step before); ``resume``: continue from the newest complete checkpoint of ``dir``.

A hang fails: ``ddp_timeout`` bounds every collective, and the test bounds the whole process.
"""

from __future__ import annotations

import json
import math
import os
import sys
import zlib

import torch

torch.set_num_threads(1)

from accelerate import PartialState  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from grae.engines.trl import GraeTrainer, latest_complete_checkpoint  # noqa: E402
from grae.tiny import tiny_model_path  # noqa: E402
from timeouts import scaled  # noqa: E402

G = 4

#: what the ranks disagree about in one generation batch (rank 0 is the "good" rank)
MODES = {
    "all_correct_vs_mixed": "rank 0: every reward 1; rank 1: mixed 0/1",
    "missing_on_one_rank": "rank 1: None for a third of its samples; rank 0: all scored",
    "raising_on_one_rank": "rank 1: raises on a third of its samples; rank 0: all scored",
    "all_raising_on_one_rank": "rank 1: raises on every sample; rank 0: all scored",
    "inf_on_one_rank": "rank 1: +inf / -inf / NaN / a string for some samples; rank 0: all scored",
    "all_raising": "both ranks: raises on every sample (the run must stop on every rank)",
}


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def parity(completions, **kwargs):
    return [float(_crc(c) % 2) for c in completions]


def even_solved(completions, prompts, **kwargs):
    return [1.0 if int(p.split()[2]) % 2 == 0 else float(_crc(c) % 2) for p, c in zip(prompts, completions)]


def make_disagreeing_reward(modes: list[str]):
    calls = {"n": 0}

    def disagree(completions, **kwargs):
        rank = PartialState().process_index
        if len(completions) > 1:  # a generation batch's call; the per-sample retries after it keep its mode
            calls["n"] += 1
        mode = modes[min(calls["n"] - 1, len(modes) - 1)]
        scores = parity(completions)
        if mode == "all_correct_vs_mixed":
            return [1.0] * len(completions) if rank == 0 else scores
        if mode == "all_raising" or (mode == "all_raising_on_one_rank" and rank == 1):
            raise ValueError(f"verifier crashed (rank {rank})")
        if rank == 0:
            return scores
        if len(completions) > 1:  # the batch call: every third sample (by position, texts can repeat) is odd
            third = [i % 3 == 0 for i in range(len(completions))]
            calls["retry"] = 0
        else:  # the per-sample retries come in the batch's order
            third = [calls["retry"] % 3 == 0]
            calls["retry"] += 1
        if mode == "missing_on_one_rank":
            return [None if t else s for t, s in zip(third, scores)]
        if mode == "raising_on_one_rank":
            if any(third):
                raise ValueError("verifier crashed on one sample")  # the per-sample retry isolates it
            return scores
        if mode == "inf_on_one_rank":
            bad = [math.inf, -math.inf, math.nan, "n/a"]
            return [bad[i % len(bad)] if t else s for i, (t, s) in enumerate(zip(third, scores))]
        raise ValueError(f"unknown mode {mode!r}")

    return disagree


def jsonable(x):
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


class Recorder(GraeTrainer):
    """GraeTrainer that records what each rank sees; optionally a deterministic stand-in for generation."""

    def __init__(self, *args, stand_in=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.stand_in = stand_in
        self.record = {"generations": [], "losses": []}

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if not self.stand_in:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        n, rank = len(prompt_ids), self.accelerator.process_index
        vocab, eos = len(self.processing_class), self.processing_class.eos_token_id
        completions = []
        for j in range(n):
            seed = _crc(f"{self.state.global_step}/{rank * n + j}")  # global row index: same on any world size
            length = 1 + seed % self.max_completion_length
            ids = [4 + (seed // (7 + t)) % (vocab - 4) for t in range(length)]
            if seed % 3 == 0:
                ids[-1] = eos
            completions.append(ids)
        return completions, None

    def _generate_and_score_completions(self, inputs):
        state_before = jsonable(self.estimator.state_dict())
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            result = self.last_advantage_result
            self.record["generations"].append(jsonable({
                "step": self.state.global_step,
                "prompts": [x["prompt"] for x in inputs],
                "rewards": self._last_rewards_per_func[:, 0],  # [N_global], NaN = missing
                "advantages": result.advantages, "weights": result.weights,  # global
                "local_advantages": out["advantages"], "local_weights": out["grae_weights"],
                "local_row_tokens": out["completion_mask"].sum(1),
                "num_items_in_batch": float(out["num_items_in_batch"]),
                "num_samples": float(out["grae_num_samples"]),
                "trl_algorithm": self.grae_trl_algorithm,  # a missing reward keeps its tokens (advantage 0)
                "state_before": state_before, "state_after": self.estimator.state_dict(),
                "metrics": result.metrics,
                "groups": self.last_groups if self.sampling.active else None,
                "sampling_state": self._sampling_state(),
            }))
        return out

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        if self.model.training:
            self.record["losses"].append({"step": self.state.global_step, "loss": loss.item()})
        return loss


class CrashAt(TrainerCallback):
    def __init__(self, step, flush):
        self.step, self.flush = step, flush

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.flush()
            os._exit(17)


def run(spec: dict, out_root: str) -> None:
    out = os.path.join(out_root, spec["name"])
    os.makedirs(out, exist_ok=True)
    model_dir = str(tiny_model_path())
    config = dict(
        output_dir=os.path.join(out_root, spec.get("dir", spec["name"]), "trainer"), use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", logging_steps=1, max_steps=spec.get("steps", 2),
        learning_rate=1e-3, per_device_train_batch_size=spec.get("prompts_per_device", 2) * G, num_generations=G,
        max_completion_length=6, temperature=1.0, top_k=0, beta=0.0, gradient_checkpointing=False,
        dataloader_num_workers=0, seed=0, ddp_timeout=round(scaled(spec.get("ddp_timeout", 60))),
    )
    config.update(spec.get("config", {}))
    kind = spec.get("reward", "parity")
    reward = {"parity": parity, "even_solved": even_solved}.get(kind) or make_disagreeing_reward(spec["modes"])
    # equal-length prompts: left padding (which shifts positions) is then the same on any world size
    data = Dataset.from_list([{"prompt": f"What is {a} + {a + 1}?\nAnswer:"} for a in range(10, 74)])
    trainer = Recorder(
        model=AutoModelForCausalLM.from_pretrained(model_dir), processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=[reward], args=GRPOConfig(**config), train_dataset=data, stand_in=spec.get("stand_in", False),
        estimator=spec.get("estimator", "grpo"), estimator_params=spec.get("estimator_params"), **spec.get("trainer", {}),
    )
    rank = trainer.accelerator.process_index  # the process group exists once the trainer is built
    path = os.path.join(out, f"rank{rank}.json")

    def flush(**extra):
        record = {**trainer.record, "final_state": jsonable(trainer.estimator.state_dict()),
                  "log_history": jsonable(trainer.state.log_history), "world_size": trainer.accelerator.num_processes,
                  **extra}
        with open(path, "w") as f:
            json.dump(record, f)

    if spec.get("crash_at_step"):
        trainer.add_callback(CrashAt(spec["crash_at_step"], flush))
    resume = latest_complete_checkpoint(config["output_dir"]) if spec.get("resume") else None
    try:
        trainer.train(resume_from_checkpoint=resume)
    except Exception as exc:  # noqa: BLE001 - recorded for the test, which decides whether it was expected
        flush(error=f"{type(exc).__name__}: {exc}", resumed_from=resume)
        return
    flush(resumed_from=resume)
    if rank == 0:
        params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
        torch.save(params, os.path.join(out, "params.pt"))


def main() -> None:
    spec_path, out_root = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        runs = json.load(f)["runs"]
    for spec in runs:
        if os.environ.get("RANK", "0") == "0":
            print(f"[mp_worker] run {spec['name']}", flush=True)
        run(spec, out_root)


if __name__ == "__main__":
    main()
