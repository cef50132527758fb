"""Labels say what runs: the dry run's batch in prompts × samples, the shortest reply in the form of the extraction
in use, and one torch-thread default for grae train and grae eval."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grae.data.answers import AnswerExtraction
from grae.train.threads import DEFAULT_CPU_THREADS, choose_threads


@pytest.mark.parametrize(("gold", "number"), [("\\boxed{23}", "23"), ("23", "23"), ("1,200", "1200"), ("-4", "-4")])
def test_last_number_offers_the_number_it_reads_as_the_shortest_reply(gold, number):
    extraction = AnswerExtraction.of("last_number", None)
    assert extraction.shortest(gold) == number
    assert extraction.stating(gold) == f"So the answer is {number}"
    assert extraction.score(extraction.shortest(gold), gold, None) == 1.0
    assert AnswerExtraction.of("boxed", None).shortest("23") == "\\boxed{23}"


def test_the_batch_line_counts_prompts_times_samples_per_optimizer_step():
    from grae.train.dry_run import batch_line

    smollm2 = SimpleNamespace(per_device_train_batch_size=4, gradient_accumulation_steps=4, num_generations=8,
                              world_size=1)
    assert batch_line(smollm2) == ("2 prompts × 8 samples per step (4 completions per device micro-batch × 4 "
                                   "accumulation steps)")
    two = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=1, num_generations=8, world_size=2)
    assert batch_line(two) == ("2 prompts × 8 samples per step (8 completions per device micro-batch × 1 accumulation "
                               "step × 2 processes)")


def test_the_smollm2_recipes_dry_run_says_its_batch_in_prompts_times_samples():
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.train.config import load_config
    from grae.train.dry_run import plan_lines

    rows = dict(plan_lines(load_config("smollm2", {"eval.enabled": False})))
    assert rows["steps"].startswith("40, 2 prompts × 8 samples per step (4 completions per device micro-batch × 4 "
                                    "accumulation steps), <= 48 tokens")


def test_grae_eval_samples_with_grae_trains_thread_default_and_says_it(tmp_path):
    import os
    import subprocess
    import sys

    from timeouts import scaled

    assert choose_threads(None, cuda=False, environ={}) == (DEFAULT_CPU_THREADS, "grae's CPU default; --threads N to "
                                                                                 "change")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "COLUMNS")}
    done = subprocess.run([sys.executable, "-m", "grae.cli", "eval", "tiny", "--tasks", "chain_sum", "--n", "1",
                           "--num-problems", "1", "--max-tokens", "4", "--device", "cpu", "--output",
                           str(tmp_path / "e")], capture_output=True, text=True, env=env, timeout=scaled(300))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert f"; {DEFAULT_CPU_THREADS} torch thread (grae's CPU default; --threads N to change)" in out
