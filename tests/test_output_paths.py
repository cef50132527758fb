"""Outputs go beside their run: a run that is not its recipe's gets a directory named from its model, task and
estimator (never the default run's ``runs/default``); ``grae report`` of a run writes under the run."""

from __future__ import annotations

import pytest

from grae.cli.eval_cmd import report_dir
from grae.train.output_dir import run_name

pytest.importorskip("trl", reason="the train extra; `make test` installs it")


@pytest.mark.parametrize(("source", "overrides", "expected"), [
    (None, {}, "runs/default"),                                     # the embedded default: its own directory
    (None, {"max_steps": 2, "seed": 3}, "runs/default"),            # the same run, other settings
    (None, {"estimator": "grpo"}, "runs/tiny-two-modes-chain_trace-grpo"),  # the default with another estimator
    (None, {"task.name": "data/mygsm.jsonl"}, "runs/tiny-mygsm-agrae"),
    (None, {"model": "smollm2"}, "runs/smollm2"),                   # the preset recipe's run
    (None, {"model": "smollm2", "task.name": "local:data/mygsm.jsonl"}, "runs/smollm2-mygsm-grpo"),
    ("regime", {}, "runs/regime"),
    ("regime", {"estimator": "nsr"}, "runs/tiny-chain_sum-nsr"),
    (None, {"estimator": "grpo", "output_dir": "runs/mine"}, "runs/mine"),  # named by the user: kept
])
def test_a_run_without_output_dir_goes_to_its_recipes_directory_only_when_it_is_that_run(source, overrides, expected,
                                                                                         tmp_path, monkeypatch):
    from grae.train.config import load_config

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mygsm.jsonl").write_text("".join(f'{{"question": "{a} + 1 =", "answer": "{a + 1}"}}\n'
                                                          for a in range(40)))
    monkeypatch.chdir(tmp_path)
    assert load_config(source, overrides).output_dir == expected


def test_a_users_own_file_without_output_dir_is_named_from_its_run(tmp_path):
    from grae.train.config import load_config

    config = tmp_path / "mine.yaml"
    config.write_text("estimator: rloo\nmax_steps: 2\n")
    assert load_config(str(config), {}).output_dir == "runs/tiny-chain_sum-rloo"
    config.write_text("estimator: rloo\noutput_dir: here\n")
    assert load_config(str(config), {}).output_dir == "here"


def test_run_names_are_file_names():
    assert run_name("/models/Qwen2.5-0.5B/", "hf:openai/gsm8k", "agrae") == "runs/Qwen2.5-0.5B-gsm8k-agrae"
    assert run_name("org/name", "local:/a b/my file.jsonl", "grpo") == "runs/name-my-file-grpo"


def test_grae_report_of_a_run_writes_under_the_run(tmp_path):
    run = tmp_path / "runs" / "r"
    (run / "eval" / "final").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "config.yaml").write_text("model: tiny\n")
    other = tmp_path / "eval" / "x"
    other.mkdir(parents=True)
    assert report_dir([run]) == run / "report"
    assert report_dir([other, run / "eval" / "final"]) == run / "report"  # grae eval RUN_DIR's rows: their run
    assert report_dir([other]) == report_dir([]) == type(run)("report")
