"""TRL's own GRPO recipes load in ``grae train`` as they are.

The fixtures (``tests/fixtures/trl_recipes/``, sources in its README) are TRL's documented ``trl grpo``
configs. Each is parsed by TRL's own parser (``trl/scripts/grpo.py``'s ``make_parser``) and run through
``grae train FILE --dry-run`` — the config checked in full, stopping where the model and the data would
load — and what grae resolved is compared with what TRL's script builds from the same file: the dataset,
the reward functions (TRL's own objects), the model's ``from_pretrained`` arguments and the LoRA config.
One tiny-model run then trains a step with TRL's reward names and ``dtype``/``attn_implementation`` given
the TRL way, and reads them back from the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.data import get_task  # noqa: E402
from grae.data.fields import map_generic_row  # noqa: E402
from grae.data.hub import fields_line, recipe_task  # noqa: E402
from grae.train.config import ConfigError, load_config, lora_config, resolve_rewards  # noqa: E402
from grae.train.trl_recipe import REFUSED, model_load_kwargs, trl_default  # noqa: E402
from grae.train.trl_rewards import TRL_REWARD_NAMES, TrlReward, latex_gold, resolve_reward  # noqa: E402
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

RECIPES = Path(__file__).parent / "fixtures" / "trl_recipes"

#: fixture -> (exit status of `grae train FILE --dry-run`, lines its output must hold)
EXPECTED = {
    "clis_grpo.yaml": (0, ["model  Qwen/Qwen2.5-0.5B (from_pretrained: float32)",
                           "task  hf:HuggingFaceH4/Polaris-Dataset-53K reads HuggingFaceH4/Polaris-Dataset-53K[default]:train",
                           "rewards  accuracy_reward (trl.rewards.accuracy_reward)", "train on  all training problems"]),
    "clis_grpo_num_processes.yaml": (2, ["num_processes: launch it with accelerate: accelerate launch --num_processes N"]),
    "clis_grpo_mixture.yaml": (2, ["datasets: grae trains on one dataset: write dataset_name: ORG/NAME"]),
    "cli_example_config.yaml": (0, ["task  hf:stanfordnlp/imdb reads", "learning rate 0.0001"]),
    "grpo_quickstart.yaml": (0, ["model  Qwen/Qwen2-0.5B-Instruct", "task  hf:trl-lib/DeepMath-103K reads",
                                 "rewards  accuracy_reward (trl.rewards.accuracy_reward)"]),
    "peft_grpo.yaml": (2, ["trl: generation_batch_size (2) must be divisible by num_generations (8); make "
                           "per_device_train_batch_size x steps_per_generation"]),
    "grpo_vlm.yaml": (0, ["(from_pretrained: dtype bfloat16)", "<= 1024 tokens, learning rate 1e-05",
                          "rewards  think_format_reward (trl.rewards.think_format_reward); accuracy_reward "
                          "(trl.rewards.accuracy_reward)", "output  grpo-Qwen2.5-VL-3B-Instruct"]),
    "gsm8k_model_init.yaml": (0, ["(from_pretrained: dtype bfloat16, attn_implementation sdpa)",
                                  "task  gsm8k reads openai/gsm8k[main]:train: problem 'question', gold after '####'",
                                  "accuracy_reward (trl.rewards.accuracy_reward); think_format_reward"]),
}


def _app():
    import typer

    from grae.cli import eval_cmd, train_cmd

    app = typer.Typer()  # two commands: `grae train` / `grae eval` as the CLI mounts them
    for module in (train_cmd, eval_cmd):
        module.register(app)
    return app


def trl_parse(path: Path):
    """What ``trl grpo --config PATH --use_cpu true`` parses: (script args, GRPOConfig, ModelConfig, mixture,
    the strings it hands to accelerate launch)."""
    from trl.scripts.grpo import make_parser

    return make_parser().parse_args_and_config(args=["--config", str(path), "--use_cpu", "true"],
                                              return_remaining_strings=True)


def test_every_fixture_is_listed():
    assert sorted(p.name for p in RECIPES.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_trl_recipe_runs_to_the_point_of_loading(name, monkeypatch):
    import huggingface_hub.constants

    from grae.cli.train_cmd import loading_problem

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the hub's models: cached or not, no probe
    status, lines = EXPECTED[name]
    result = CliRunner().invoke(_app(), ["train", str(RECIPES / name), "--dry-run"])
    out = " ".join(result.output.split())  # rich wraps long lines
    for line in lines:
        assert " ".join(line.split()) in out, (line, result.output)
    if status == 0:  # resolved in full; the verdict: would it load on this machine (its hub models cached)?
        stop = loading_problem(load_config(str(RECIPES / name)))
        assert result.exit_code == (2 if stop else 0), (result.output, result.exception)
        if stop:
            said = [line for line in result.output.splitlines() if line.strip()]
            assert said[0] == said[-1] and said[0].startswith("error: dry run: training here would stop: before "
                                                              "loading: "), result.output
        else:
            assert "dry run: the config is valid and nothing seen here stops the run; nothing was downloaded" in out
    else:  # refused in one line that names the key, nothing else printed
        assert result.exit_code == status, (result.output, result.exception)
        assert len(result.output.strip().splitlines()) == 1, result.output
        assert out.startswith("config error"), result.output


@pytest.mark.parametrize("name", [n for n, (status, _) in EXPECTED.items() if status == 0])
def test_grae_resolves_a_recipe_as_trls_script_does(name):
    """The same file read by TRL's parser and by grae: dataset, reward functions (TRL's own objects), the
    model's from_pretrained arguments and LoRA agree with what trl/scripts/grpo.py builds."""
    import torch
    import trl.rewards
    from trl import get_peft_config

    script, training, model_args, _mixture, _launch = trl_parse(RECIPES / name)
    cfg = load_config(RECIPES / name)
    assert cfg.model == model_args.model_name_or_path
    task = get_task(cfg.task.name, **cfg.task.params)
    source = task.train_source
    assert (source.path, source.split) == (script.dataset_name, script.dataset_train_split)
    assert script.dataset_config is None or source.configs == (script.dataset_config,)
    trl_registry = {"accuracy_reward": trl.rewards.accuracy_reward, "think_format_reward": trl.rewards.think_format_reward}
    funcs = resolve_rewards(cfg, task)
    if script.reward_funcs:
        assert [f.func for f in funcs] == [trl_registry[n] for n in script.reward_funcs]
    load = model_load_kwargs(cfg.trl)
    if "torch_dtype" not in (RECIPES / name).read_text():  # TRL 1.16 reads only dtype (see the fixture)
        assert load["dtype"] == getattr(torch, model_args.dtype)
    assert load.get("attn_implementation") == model_args.attn_implementation
    assert load["trust_remote_code"] == training.trust_remote_code
    assert cfg.trl.get("learning_rate", 1e-6) == training.learning_rate
    theirs = get_peft_config(model_args)
    if theirs is None:
        assert cfg.peft is None
    else:
        ours = lora_config(cfg.peft)
        for key in ("r", "lora_alpha", "lora_dropout", "target_modules", "task_type", "use_rslora", "use_dora"):
            assert getattr(ours, key) == getattr(theirs, key), key


def test_trl_refuses_the_recipe_grae_refuses():
    """peft_integration.md's command fails in TRL 1.16 itself: grae's line is TRL's, with what to change."""
    with pytest.raises(ValueError, match=r"generation_batch_size \(2\) must be divisible by num_generations \(8\)"):
        trl_parse(RECIPES / "peft_grpo.yaml")
    *_, launch = trl_parse(RECIPES / "clis_grpo_num_processes.yaml")
    assert launch == ["--num_processes", "4"]  # TRL hands it to accelerate launch: grae names that command


def test_hub_dataset_names_map_to_tasks():
    assert recipe_task("openai/gsm8k") == ("gsm8k", {})
    assert recipe_task("openai/gsm8k", config="main", test_split="test") == ("gsm8k", {})
    assert recipe_task("openai/gsm8k", config="socratic") == ("hf:openai/gsm8k", {"config": "socratic"})
    assert recipe_task("openai/gsm8k", split="test") == ("hf:openai/gsm8k", {"split": "test"})
    assert recipe_task("org/data", test_split="test") == ("hf:org/data", {"heldout_split": "test"})
    # hf:openai/gsm8k reads gsm8k's own way (config main, gold after ####); a named field falls back to the guesses
    own = get_task("hf:openai/gsm8k")
    assert own.train_source.configs == ("main",) and "gold after '####' in 'answer'" in fields_line(own)
    named = get_task("hf:openai/gsm8k", answer_field="answer")
    assert "gold 'answer'" in fields_line(named)
    with pytest.raises(ValueError, match=r"unknown task 'openai/gsm8k'; a Hugging Face Hub dataset is named "
                                         r"hf:openai/gsm8k"):
        get_task("openai/gsm8k")
    with pytest.raises(ConfigError, match=r"^task: unknown task 'openai/gsm8k'; .*hf:openai/gsm8k"):
        load_config("chain-sum", {"task.name": "openai/gsm8k"})
    # TRL's conversational prompt-only rows (trl-lib/DeepMath-103K): prompt = chat messages, solution = "$gold$"
    row = {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 1/3 of 1?"}],
           "solution": "$\\frac{1}{3}$"}
    assert map_generic_row(row) == {"question": "What is 1/3 of 1?", "answer": "\\frac{1}{3}", "id": None}
    with pytest.raises(ValueError, match="no gold answer"):  # a worked solution without a box is not a gold
        map_generic_row({"problem": "p", "solution": "First, 2 + 2 = 4.\nSo it is four."})


def test_trl_reward_names_are_trls_functions_fed_grae_columns():
    import trl.rewards

    accuracy = resolve_reward("accuracy_reward")
    assert isinstance(accuracy, TrlReward) and accuracy.func is trl.rewards.accuracy_reward
    assert accuracy.__name__ == "accuracy_reward"  # TRL logs rewards/accuracy_reward/mean
    # plain-text completions and grae's `answer` column, as a grae task gives them
    assert accuracy(completions=["so \\boxed{72}", "so \\boxed{71}", "\\boxed{\\frac{1}{2}}"],
                    answer=["72", "72", "0.5"], prompts=["q"] * 3) == [1.0, 0.0, 1.0]
    # and TRL's own form, conversational with a solution column, unchanged
    assert accuracy(completions=[[{"role": "assistant", "content": "\\boxed{3}"}]], solution=["$3$"]) == [1.0]
    think = resolve_reward("think_format_reward")
    assert think(completions=["<think>a</think>b", "no tags"]) == [1.0, 0.0]
    overlong = resolve_reward("get_soft_overlong_punishment")  # grpo.py's 1280 / 256
    assert overlong(completions=["x"] * 3, completion_ids=[[0] * 1000, [0] * 1152, [0] * 1300]) == [0.0, -0.5, -1.0]
    assert overlong.__name__ == "soft_overlong_punishment_reward"
    assert set(TRL_REWARD_NAMES) == {"accuracy_reward", "reasoning_accuracy_reward", "think_format_reward",
                                     "get_soft_overlong_punishment"}
    assert resolve_reward("trl.rewards.think_format_reward").func is trl.rewards.think_format_reward
    assert [latex_gold(a) for a in ("42", "$x$", "True", None)] == ["$42$", "$x$", "True", ""]
    with pytest.raises(ValueError, match=r"^'accuracy_rewrd' is not a reward function\. Did you mean 'accuracy_reward'"):
        resolve_reward("accuracy_rewrd")


def test_an_unknown_reward_name_fails_before_anything_loads():
    with pytest.raises(ConfigError, match=r"^reward_funcs: 'format_reward' is not a reward function.*think_format_reward"):
        load_config("chain-sum", {"reward_funcs": "format_reward"})
    cfg = load_config("chain-sum", {"reward_funcs": "accuracy_reward,think_format_reward"})  # trl grpo's list, one flag
    assert cfg.reward_funcs == ["accuracy_reward", "think_format_reward"]


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_key_grae_cannot_honour_is_refused_in_one_line_unless_at_trls_default(key):
    value = {"env": {"A": "1"}, "datasets": [{"path": "a/b"}], "num_processes": 4, "accelerate_config": "zero2",
             "config_file": "x.yaml", "bnb_4bit_quant_type": "fp4", "bnb_4bit_quant_storage": "uint8",
             "reward_model_name_or_path": "org/rm", "test_split_size": 0.1}.get(key, True)
    with pytest.raises(ConfigError, match=rf"^{key}: .*(drop|write|launch|list)") as err:
        load_config("chain-sum", {key: value})
    assert "\n" not in str(err.value)
    default = trl_default(key)
    assert (type(default) is object) == (key in ("env", "accelerate_config", "config_file"))  # no default: always refused
    if type(default) is not object:
        load_config("chain-sum", {key: default})  # TRL's default does nothing in TRL either: accepted


def test_model_keys_and_their_refusals(tmp_path):
    cfg = load_config(None, {"torch_dtype": "bfloat16", "attn_implementation": "eager", "model_revision": "v1"})
    assert cfg.trl["model_init_kwargs"] == {"dtype": "bfloat16", "attn_implementation": "eager", "revision": "v1"}
    cfg.trl["model_init_kwargs"].pop("revision")  # a local model has no revisions
    for overrides, match in [({"dtype": "float64"}, r"^dtype: 'float64' is not one of auto, bfloat16"),
                             ({"attn_implementation": "fast"}, r"^attn_implementation: 'fast' is not one transformers knows"),
                             ({"attn_implementation": "flash_attention_2"}, r"needs a CUDA GPU; on this machine use sdpa"),
                             ({"dtype": "bfloat16", "torch_dtype": "bfloat16"}, r"dtype is given twice"),
                             ({"trl.model_init_kwargs": {"device_map": "auto"}}, r"model_init_kwargs\.device_map: grae places"),
                             ({"dataset_name": "chain_sum", "dataset_config": "main"}, r"^dataset_config: only for a hub"),
                             ({"task.name": "chain_sum", "task.train_size": None}, r"^task\.train_size: null .* give a number")]:
        if "flash" in str(overrides) and __import__("torch").cuda.is_available():
            continue  # the refusal is for a machine without CUDA
        with pytest.raises(ConfigError, match=match):
            load_config("chain-sum", overrides)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(build_random_tiny(str(tmp_path / "tiny")), **model_load_kwargs(cfg.trl))
    assert next(loaded.parameters()).dtype == __import__("torch").bfloat16 and loaded.config._attn_implementation == "eager"
    for typo, meant in [("torch_dtyp", "torch_dtype"), ("dataset_nme", "dataset_name"), ("learnng_rate", "trl.learning_rate")]:
        with pytest.raises(ConfigError, match=rf"^{typo}: unknown key\. Did you mean '{meant}'\?"):  # not trl.torch_compile
            load_config("chain-sum", {typo: "x"})
    no_peft = load_config("chain-sum", {"lora_r": 8})  # as in TRL, lora_* without use_peft train no adapter
    assert no_peft.peft is None
    sized = load_config("chain-sum", {"dataset_name": "org/data", "task.train_size": 50})  # a given size is kept
    assert (sized.task.name, sized.task.train_size) == ("hf:org/data", 50)


def test_trl_reward_names_and_model_kwargs_reach_a_training_run(tmp_path):
    """One step on a random tiny model, configured the TRL way: dtype and attn_implementation reach the
    loaded model, TRL's accuracy_reward and think_format_reward score grae's plain-text completions."""
    model = build_random_tiny(str(tmp_path / "tiny"))
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a} + {b} =", "answer": str(a + b)}) + "\n"
                            for a in range(10) for b in range(10)))
    config = tmp_path / "recipe.yaml"
    config.write_text(f"model_name_or_path: {model}\ndataset_name: {data}\ndtype: bfloat16\nattn_implementation: eager\n"
                      "reward_funcs: [accuracy_reward, think_format_reward]\nper_device_train_batch_size: 4\n"
                      "num_generations: 4\nmax_completion_length: 4\nmax_steps: 1\nsave_steps: 1\n"
                      "task: {params: {prompt_style: plain, heldout_size: 10}, train_size: 8}\n"
                      "eval: {enabled: false}\nreport: false\n")
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "train", str(config), "--output-dir", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=scaled(600), env=env, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert "rewards/accuracy_reward/mean" in row and "rewards/think_format_reward/mean" in row, sorted(row)
    saved = json.loads((out / "final" / "config.json").read_text())
    assert saved.get("dtype", saved.get("torch_dtype")) == "bfloat16", saved
