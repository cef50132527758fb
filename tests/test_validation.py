"""Validation before any model loads: every number checked for type, finiteness and
range; TRL's conventions (flat GRPOConfig keys, bare flags, TRL recipe YAML); --help generated from the
schema; one line and exit 2, never a traceback, for bad values in every command."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
import typer  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from grae.advantage import describe, get_estimator, names  # noqa: E402
from grae.cli.train_cmd import split_args  # noqa: E402
from grae.train import config as config_mod  # noqa: E402
from grae.train.config import TRL_RANGES, ConfigError, load_config  # noqa: E402
from grae.train.schema import config_keys, format_keys  # noqa: E402
from timeouts import scaled  # noqa: E402

# -- §1: every listed bad value is refused in one line naming the field ----------------------------


@pytest.mark.parametrize("overrides,match", [
    ({"trl.learning_rate": math.nan}, r"^trl\.learning_rate: must be a finite number"),
    ({"trl.learning_rate": math.inf}, r"^trl\.learning_rate: must be a finite number"),
    ({"trl.learning_rate": "abc"}, r"^trl\.learning_rate: expected float, got 'abc'"),
    ({"trl.temperature": -1}, r"^trl\.temperature: must be > 0"),
    ({"trl.temperature": math.nan}, r"^trl\.temperature: must be a finite number"),
    ({"trl.num_generations": 0}, r"^trl\.num_generations: must be >= 1"),
    ({"trl.top_p": 2}, r"^trl\.top_p: must be in \(0, 1\]"),
    ({"trl.beta": -1}, r"^trl\.beta: must be >= 0"),
    ({"trl.per_device_train_batch_size": "abc"}, r"^trl\.per_device_train_batch_size: expected int, got 'abc'"),
    ({"trl.reward_weights": [1.0, math.nan]}, r"^trl\.reward_weights\[1\]: must be a finite number"),
    ({"seed": 99999999999999999999}, r"^seed: .*64-bit"),
    ({"seed": 2**40}, r"^seed: must be in \[0, 2\*\*32\)"),
    ({"peft.r": -1}, r"^peft\.r: must be >= 1"),
    ({"task.params.min_terms": -3}, r"^task: min_terms must be positive"),
    ({"estimator_params.alpha": "abc"}, r"^estimator: alpha: expected a number"),
    ({"estimator_params.alpha": math.inf}, r"^estimator: alpha: must be in \(0, 1\]"),
    ({"estimator_params.alpha": 1e9}, r"^estimator: alpha: must be in \(0, 1\]"),
    ({"estimator": "avspo", "estimator_params.alpha": 1e9}, r"^estimator: alpha: must be in \(0, 1\]"),
    ({"estimator": "w_reinforce", "estimator_params.lam": 2}, r"^estimator: lam: must be in \[0, 1\]"),
    ({"dual_clip": math.inf}, r"^dual_clip: must be a finite number"),
])
def test_bad_values_are_refused_in_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match) as err:
        load_config("chain-sum", overrides)
    assert "\n" not in str(err.value)


def test_yaml_style_number_strings_are_numbers():
    """YAML 1.1 reads ``1e-5`` as a string; TRL's parser takes it as a float, and so does grae."""
    cfg = load_config("chain-sum", {"trl.learning_rate": "1e-5"})
    assert cfg.trl["learning_rate"] == 1e-5 and isinstance(cfg.trl["learning_rate"], float)


# -- §1: property test over every numeric field --------------------------------------------------

#: grae's numeric keys, generated from the schema (fields added later are fuzzed too)
GRAE_NUMERIC = [k.name for k in config_keys() if not k.name.startswith("trl.")
                and k.type in ("int", "float", "int | None", "float | None")]
#: a representative set of GRPOConfig's numeric fields: every ranged one plus a few unranged
TRL_NUMERIC = [f"trl.{name}" for name in sorted(TRL_RANGES)] + ["trl.num_train_epochs", "trl.eval_steps"]
HOSTILE = [math.nan, math.inf, -math.inf, -1, 0, 10**20, -(10**20), 1e308, "abc", True, 0.5, 3]


def test_numeric_fields_cover_graes_sections():
    assert {"seed", "max_steps", "dual_clip", "task.train_size", "eval.n", "eval.top_p",
            "sampling.success_threshold"} <= set(GRAE_NUMERIC)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(GRAE_NUMERIC + TRL_NUMERIC), value=st.sampled_from(HOSTILE))
def test_every_numeric_field_is_accepted_finite_or_refused_in_one_line(key, value):
    try:
        cfg = load_config("chain-sum", {key: value})
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message
        leaf = key.split(".")[-1]
        assert leaf in message or message.startswith(("trl:", "task:", "sampling", "eval")), message
        return
    section, _, leaf = key.rpartition(".")
    node = cfg.trl if section == "trl" else cfg
    for part in ([] if section in ("", "trl") else section.split(".")):
        node = getattr(node, part)
    accepted = node[leaf] if isinstance(node, dict) else getattr(node, leaf)
    assert not isinstance(accepted, (str, bool)) or isinstance(value, bool)
    if isinstance(accepted, float):
        assert math.isfinite(accepted)
    elif isinstance(accepted, int):
        assert abs(accepted) < 2**63


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(names()), value=st.sampled_from(HOSTILE))
def test_every_numeric_estimator_parameter_is_checked(name, value):
    numeric = [k for k, d in describe(name)["defaults"].items()
               if isinstance(d, (int, float)) and not isinstance(d, bool)]
    for key in numeric:
        try:
            get_estimator(name, **{key: value})
        except (TypeError, ValueError) as err:
            assert key in str(err).split(":")[0] and "\n" not in str(err), str(err)
            continue
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- §3: TRL's conventions -------------------------------------------------------------------------


def test_flat_grpo_keys_go_to_the_trl_section():
    flat = load_config("chain-sum", {"learning_rate": 1e-5, "max-completion-length": 8})
    dotted = load_config("chain-sum", {"trl.learning_rate": 1e-5, "trl.max_completion_length": 8})
    assert flat == dotted and flat.trl["learning_rate"] == 1e-5


def test_ambiguous_key_names_both_spellings(monkeypatch):
    import grae.train.resolve

    real = config_mod.trl_fields()
    monkeypatch.setattr(grae.train.resolve, "trl_fields", lambda: {**real, "estimator": real["learning_rate"]})
    with pytest.raises(ConfigError, match=r"estimator: ambiguous.*--estimator.*--trl\.estimator"):
        load_config("chain-sum", {"estimator": "grpo"})


def test_bare_flags_are_true_and_values_still_parse():
    config, overrides = split_args(["recipe.yaml", "--trl.bf16", "--max-steps", "3", "--report"])
    assert config == "recipe.yaml" and overrides == {"trl.bf16": True, "max-steps": 3, "report": True}
    with pytest.raises(ConfigError, match=r"^max_steps: expected int, got True"):
        load_config("chain-sum", split_args(["--max-steps"])[1])


def test_trl_recipe_yaml_is_read_as_it_is(tmp_path):
    recipe = tmp_path / "grpo.yaml"
    recipe.write_text("model_name_or_path: tiny\ndataset_name: chain_sum\nlearning_rate: 1.0e-05\n"
                      "num_generations: 8\nper_device_train_batch_size: 16\nmax_completion_length: 8\n"
                      "use_peft: true\nlora_r: 8\nseed: 3\nmax_steps: 5\noutput_dir: out\nbf16: false\n")
    cfg = load_config(recipe)
    assert (cfg.model, cfg.task.name, cfg.seed, cfg.max_steps, cfg.output_dir) == ("tiny", "chain_sum", 3, 5, "out")
    given = {"learning_rate": 1e-5, "num_generations": 8, "per_device_train_batch_size": 16,
             "max_completion_length": 8, "bf16": False}
    assert {key: cfg.trl[key] for key in given} == given
    # the tiny model's recipe is the base, as under --model_name_or_path tiny (grae.train.resolve)
    assert cfg.trl["lr_scheduler_type"] == "constant_with_warmup" and cfg.task.params == {}  # task named: its defaults
    assert cfg.peft == {"r": 8, "lora_alpha": 32, "lora_dropout": 0.05}  # TRL's ModelConfig LoRA defaults
    recipe.write_text("model_name_or_path: tiny\ndataset_config: main\n")  # a config of no dataset
    with pytest.raises(ConfigError, match=r"^dataset_config: goes with a hub dataset_name; add dataset_name: ORG/NAME"):
        load_config(recipe)


def test_help_lists_every_key_from_the_schema():
    from trl import GRPOConfig

    text = format_keys()
    for key in ["--model", "--task.name", "--estimator_params", "--eval.n", "--sampling.dynamic",
                "--trl.learning_rate", "--trl.beta", "--trl.loss_type"]:
        assert f"\n  {key}  (" in text, key
    assert "The initial learning rate for AdamW." in text  # TRL's own field help
    assert "trl.output_dir" not in text  # grae sets it from output_dir
    assert len([k for k in config_keys() if k.name.startswith("trl.")]) == len(
        __import__("dataclasses").fields(GRPOConfig)) - len(config_mod.MANAGED_TRL_KEYS)


# -- §1 on the command line: exit 2, one line, no traceback ---------------------------------------


def _app():
    from grae.cli import compare_cmd, data_cmd, eval_cmd, sim_cmd, train_cmd

    app = typer.Typer()
    for module in (train_cmd, eval_cmd, sim_cmd, data_cmd, compare_cmd):
        module.register(app)
    return app


@pytest.mark.parametrize("args,match", [
    (["train", "--trl.temperature", "nan"], "trl.temperature: must be a finite number"),
    (["train", "--output-dir", "/proc/grae-x/run"], "--output-dir /proc/grae-x/run: cannot write there"),
    (["eval", "tiny", "-t", "chain_sum", "--task-param", "bogus=1", "-o", "{tmp}/ev"], "--task-param {'bogus': 1}: "),
    (["eval", "tiny", "-t", "chain_sum", "-o", "/proc/grae-x"], "--output /proc/grae-x: cannot write there"),
    (["report", "{tmp}/badsum", "-o", "/proc/grae-x"], "--output /proc/grae-x: cannot write there"),
    (["passk", "--n", "0", "{tmp}/rows.jsonl"], "--n must be >= 1"),
    (["sim", "--prompts", "100000000"], "prompts: must be at most"),
    (["sim", "--steps", "1", "-o", "/proc/grae-x/h.json"], "--output /proc/grae-x/h.json: cannot write there"),
    (["data", "export", "chain_sum", "/proc/grae-x/a.parquet"], "OUT /proc/grae-x/a.parquet: cannot write there"),
    (["compare", "{tmp}/bad.yaml"], "not valid YAML"),
    (["compare", "{tmp}/study.yaml", "--report-only"], "--report-only: 2 of 2 jobs have not finished"),
])
def test_cli_refuses_in_one_line_with_exit_2(tmp_path, args, match):
    (tmp_path / "badsum").mkdir()
    (tmp_path / "badsum" / "summary.json").write_text("{}")
    (tmp_path / "rows.jsonl").write_text('{"question_id": "a", "label": 1}\n')
    (tmp_path / "bad.yaml").write_text("methods: [\n")
    (tmp_path / "study.yaml").write_text(f"base: chain-sum\nmethods: {{grpo: {{estimator: grpo}}}}\nseeds: [0, 1]\n"
                                         f"baseline: grpo\noutput_dir: {tmp_path}/study\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert match.replace("{tmp}", str(tmp_path)) in " ".join(result.output.split()), result.output
    assert len(result.output.strip().splitlines()) <= 2 and "Traceback" not in result.output


def test_a_directory_another_process_creates_meanwhile_is_writable(tmp_path, monkeypatch):
    """The writability probe on a directory that another process (another rank of the same launch)
    creates between the check and the mkdir: writable, not "File exists" (the rank exited 2)."""
    from pathlib import Path

    from grae.cli.output import unwritable

    target = tmp_path / "out" / "run"
    real_mkdir = Path.mkdir

    def racing_mkdir(self, *args, **kwargs):
        real_mkdir(self, *args, **kwargs)  # the other process's mkdir …
        return real_mkdir(self, *args, **kwargs)  # … then ours: FileExistsError

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    assert unwritable(target) is None
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")
    assert unwritable(tmp_path / "file" / "run") == f"{tmp_path / 'file'} is not a directory"


def test_bad_rows_and_summaries_name_the_file(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question_id": ["a"], "label": 1}\n{"question_id": "b", "label": 0}\n')
    result = CliRunner().invoke(_app(), ["passk", str(rows)])
    assert result.exit_code == 1 and "question_id must be a string or an integer" in result.output
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("not json")
    result = CliRunner().invoke(_app(), ["report", str(tmp_path / "run"), "-o", str(tmp_path / "rep")])
    assert result.exit_code == 1 and f"{tmp_path / 'run' / 'summary.json'}: not valid JSON" in " ".join(
        result.output.split())


def test_real_process_one_line_no_traceback_version_and_wide_tables(tmp_path):
    """The installed entry point: exit 2 with one line; --version; a table in a pipe cuts no word
    (tests/test_pipe_tables.py reads each value whole)."""
    run = [sys.executable, "-m", "grae.cli"]
    proc = subprocess.run([*run, "train", "--learning_rate", "inf", "--output-dir", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert "trl.learning_rate: must be a finite number, got inf" in proc.stdout
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=scaled(60))
    assert version.returncode == 0 and version.stdout.startswith("grae ")
    table = subprocess.run([*run, "estimators"], capture_output=True, text=True, timeout=scaled(60),
                           env={k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"})
    assert table.returncode == 0 and "…" not in table.stdout


def test_no_grae_key_shadows_a_grpo_field():
    """A grae key that is also a GRPOConfig field (other than those grae sets for TRL) would be refused as
    ambiguous on every use: a new field must take another name."""
    import dataclasses

    from grae.train.config import TrainConfig

    grae_keys = {f.name for f in dataclasses.fields(TrainConfig)}
    assert grae_keys & set(config_mod.trl_fields()) == set(config_mod.MANAGED_TRL_KEYS)
