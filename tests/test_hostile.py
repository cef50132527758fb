"""Hostile and careless input (issue 32 §3-§6): every case ends in one line that names the field, with
its exit code, before any model loads or any run directory is claimed.

Table-driven: each case is a command line (``{tmp}`` stands for the test's directory), the files it
needs, the expected exit code and a text its first line of output must hold. The CLI runs in-process
(typer's runner), so the whole table takes seconds. Cases that need a model or a training step are
separate tests below the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402


def _app() -> typer.Typer:
    from grae.cli import compare_cmd, data_cmd, eval_cmd, sim_cmd, train_cmd

    app = typer.Typer()
    for module in (train_cmd, eval_cmd, sim_cmd, data_cmd, compare_cmd):
        module.register(app)
    return app


@dataclass
class Case:
    """One hostile command line: its exit code and what its first line must name."""

    name: str
    args: list[str]
    exit_code: int
    first_line: str
    #: files written before the run: path relative to the test directory -> text
    files: dict[str, str] = field(default_factory=dict)
    #: environment (module attributes) patched for the run: "module:attribute" -> value
    patch: dict[str, object] = field(default_factory=dict)


def _train(*args: str) -> list[str]:
    return ["train", *args, "--output-dir", "{tmp}/run"]


CASES = [
    # §3: TRL's enumerations, checked against the installed TRL / transformers before anything loads
    Case("report_to bogus", _train("--report_to", "bogus"), 2, "trl.report_to: 'bogus' is not an integration"),
    Case("report_to list with bogus", _train("--trl.report_to", "[tensorboard, bogus]"), 2, "trl.report_to: 'bogus'"),
    Case("report_to none in a list", _train("--trl.report_to", "[none, tensorboard]"), 2,
         "trl.report_to: 'none' stands alone"),
    Case("loss_type bogus", _train("--loss_type", "bogus"), 2, "trl.loss_type: 'bogus' is not one of"),
    Case("scale_rewards bogus", _train("--scale_rewards", "bogus"), 2, "trl.scale_rewards: 'bogus' is not one of"),
    Case("importance_sampling_level bogus", _train("--importance_sampling_level", "tok"), 2,
         "trl.importance_sampling_level: 'tok'"),
    Case("log_level bogus (metadata choices)", _train("--log_level", "loud"), 2, "trl.log_level: 'loud'"),
    Case("scale_rewards for an estimator without scale", _train("--estimator", "rloo", "--scale_rewards", "batch"), 2,
         "trl.scale_rewards='batch': estimator 'rloo' has no reward-scaling option"),
    Case("scale_rewards against the estimator's own scale",
         _train("--estimator", "grpo", "--estimator_params.scale", "group", "--scale_rewards", "batch"), 2,
         "trl.scale_rewards='batch' contradicts"),
    # §3: estimator × engine feature combinations
    Case("context estimator with dynamic sampling", _train("--estimator", "unlikeliness", "--sampling.dynamic", "true"),
         2, "sampling: dynamic sampling and prompt selection do not supply estimator context"),
    Case("outcome_explore with prompt selection", _train("--estimator", "outcome_explore", "--sampling.selection", "vade"),
         2, "sampling: "),
    Case("sim with unlikeliness", ["sim", "-e", "unlikeliness", "--steps", "1"], 2,
         "estimator: 'unlikeliness' requires context logprob_mean, which grae sim"),
    Case("sim with outcome_explore", ["sim", "-e", "outcome_explore", "--steps", "1"], 2,
         "estimator: 'outcome_explore' requires context answer_id, prompt_key, which grae sim"),
    # §3: hub actions offline
    Case("push_to_hub offline", _train("--push_to_hub"), 2, "trl.push_to_hub: cannot push to the hub (HF_HUB_OFFLINE",
         patch={"huggingface_hub.constants:HF_HUB_OFFLINE": True}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_ends_in_one_line_naming_the_field(tmp_path, monkeypatch, case):
    import importlib

    for rel, text in case.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for target, value in case.patch.items():
        module, attribute = target.split(":")
        monkeypatch.setattr(importlib.import_module(module), attribute, value)
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.args]
    result = CliRunner().invoke(_app(), args)
    output = result.output
    assert result.exit_code == case.exit_code, (output, result.exception)
    assert "Traceback" not in output, output
    first = " ".join(next(line for line in output.splitlines() if line.strip()).split())
    assert case.first_line.replace("{tmp}", str(tmp_path)) in first, output
    assert not (tmp_path / "run").exists(), "refused after the run directory was claimed"


def test_every_enumerated_trl_field_refuses_a_bogus_value_and_takes_its_default():
    """Each enumerated GRPOConfig field (read from TRL's metadata and help) refuses a made-up value in one
    line naming it, and accepts TRL's own default; the documented lists hold at least two values."""
    from grae.train.config import ConfigError, load_config, trl_fields
    from grae.train.trl_values import allowed_values

    fields = trl_fields()
    for key, values in allowed_values().items():
        assert len(values) >= 2 and fields[key].default in values + (None,), (key, values)
        with pytest.raises(ConfigError, match=rf"^trl\.{key}: 'not-a-{key}' is not one of"):
            load_config(None, {f"trl.{key}": f"not-a-{key}"})
    load_config(None, {"trl.loss_type": "dr_grpo", "trl.scale_rewards": False, "trl.log_level": "info"})


def test_a_reward_function_that_always_raises_prints_its_line_first(tmp_path, monkeypatch):
    """One tiny training step with a reward function that raises on every sample: exit 1, the first line
    is grae's RewardFunctionError line (naming the function, the failure and error.log), no traceback
    unless --debug; the traceback is in the run's error.log."""
    (tmp_path / "hostile_reward.py").write_text(
        "def broken(prompts, completions, **kwargs):\n    raise ZeroDivisionError('my reward is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    small = ["--reward_funcs", "hostile_reward:broken", "--max-steps", "1", "--eval.enabled", "false", "--no-progress",
             "--task.train_size", "16", "--trl.per_device_train_batch_size", "16"]
    for debug in (False, True):
        run = tmp_path / f"run-{debug}"
        result = CliRunner().invoke(_app(), ["train", *small, "--output-dir", str(run), *(["--debug"] if debug else [])])
        lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("grae train:")]
        assert result.exit_code == 1, result.output
        assert lines[0].startswith("error: reward function 'broken' failed on all 16 samples"), result.output
        assert "ZeroDivisionError: my reward is broken" in lines[0] and str(run / "error.log") in " ".join(lines)
        assert ("Traceback" in result.output) == debug, result.output
        assert "ZeroDivisionError: my reward is broken" in (run / "error.log").read_text()
