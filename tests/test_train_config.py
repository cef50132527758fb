"""grae train configuration: every recipe validates; bad keys fail early with the fix."""

from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.cli.train_cmd import parse_overrides  # noqa: E402
from grae.train.config import CONFIG_DIR, ConfigError, load_config  # noqa: E402

RECIPES = sorted(CONFIG_DIR.glob("*.yaml"))


def test_recipes_exist_and_root_configs_points_at_them():
    names = {p.stem for p in RECIPES}
    assert {"default", "smollm2", "qwen25math7b_grpo", "qwen25math7b_agrae", "qwen25math7b_w_reinforce",
            "qwen25math7b_drgrpo_agrae", "qwen25math7b_dapo_agrae"} <= names
    root = Path(__file__).resolve().parent.parent / "configs"
    assert root.resolve() == CONFIG_DIR


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_validates(recipe):
    cfg = load_config(recipe)
    assert cfg.max_steps >= 1


def test_default_is_the_embedded_agrae_run():
    cfg = load_config("chain-sum")
    assert cfg.model == "tiny" and cfg.estimator == "agrae" and cfg.eval.n == 64


@pytest.mark.parametrize("overrides,match", [
    ({"max_stepz": 3}, r"max_stepz: unknown key\. Did you mean 'max_steps'\?"),
    ({"trl.learning_rat": 1e-4}, r"trl\.learning_rat: not a trl\.GRPOConfig field\. Did you mean 'learning_rate'"),
    ({"max_steps": "ten"}, r"max_steps: expected int, got 'ten'"),
    ({"estimator": "a_grae"}, r"estimator: unknown estimator 'a_grae'; registered estimators: .*agrae"),
    ({"estimator_params.alpha": 0}, r"estimator: alpha: must be in \(0, 1\]"),
    ({"estimator_params.beta": 2}, r"estimator: .*no parameter\(s\) beta"),
    ({"trl.per_device_train_batch_size": 12, "trl.num_generations": 8}, r"trl: .*divisible"),
    ({"trl.max_steps": 5}, r"trl\.max_steps: set it at the top level"),
    ({"loss_agg_mode": "sum"}, r"loss_agg_mode: unknown 'sum'"),
    ({"eval.nn": 3}, r"eval\.nn: unknown key\. Did you mean 'n'"),
    ({"task.name": "chain_summ"}, r"task: .*chain_sum"),
    ({"task.name": "math", "task.params": {"split": "train"}}, r"task\.params\.split: not a parameter of task 'math'"),
])
def test_bad_config_fails_before_any_model_is_loaded(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("chain-sum", overrides)


def test_unknown_recipe_lists_available():
    with pytest.raises(ConfigError, match="recipes: .*default"):
        load_config("no-such-recipe")


def test_cli_overrides_parse_yaml_scalars():
    assert parse_overrides(["--trl.learning_rate", "3e-4", "--task.name=gcd", "--eval.enabled", "false"]) == {
        "trl.learning_rate": 3e-4, "task.name": "gcd", "eval.enabled": False}
    cfg = load_config("chain-sum", {"max-steps": 7, "estimator_params.alpha": 0.5})
    assert cfg.max_steps == 7 and cfg.estimator_params["alpha"] == 0.5


def test_a_record_from_before_a_key_existed_compares_equal_to_its_defaults():
    """An older run.json / job.yaml lacks keys added since (reward_funcs, eval.*): filled with today's
    defaults they are no change; a key that was recorded with another value still is one."""
    from grae.train.config import TrainConfig, to_dict, with_defaults

    today = to_dict(TrainConfig())
    old = {k: v for k, v in today.items() if k != "reward_funcs"}
    old["eval"] = {k: v for k, v in today["eval"].items() if k != "num_problems"}
    assert with_defaults(old) == today
    changed = dict(old, max_steps=today["max_steps"] + 1)
    assert with_defaults(changed)["max_steps"] != today["max_steps"]
    assert with_defaults(changed)["reward_funcs"] == today["reward_funcs"]
