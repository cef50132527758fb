"""A config says each thing once and means it: a key given twice in any spelling is refused naming both; a key that
is not a name and a file that is not text get one line naming the field; restating a file's own task or estimator
keeps its parameters (another one drops them with a note naming them); a reward listed twice, a share outside
[0, 1] and more threads than the machine has cores are refused or capped with a note."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.train.config import ConfigError, load_config  # noqa: E402
from grae.train.threads import choose_threads  # noqa: E402


def _app():
    import typer

    from grae.cli import train_cmd

    app = typer.Typer()
    train_cmd.register(app)
    app.command("unused")(lambda: None)  # two commands: "train" stays a subcommand
    return app


def _refused(*args: str) -> str:
    result = CliRunner().invoke(_app(), ["train", *args, "--dry-run"])
    assert result.exit_code == 2, (args, result.output)
    return " ".join(result.output.replace("│", " ").split())


@pytest.mark.parametrize(("args", "names"), [
    (["--seed", "1", "--seed", "2"], ["--seed", "1, 2"]),
    (["--max-steps", "3", "--max_steps", "5"], ["--max-steps", "--max_steps"]),
    (["--max_steps", "3", "--max-steps", "5"], ["--max-steps", "--max_steps"]),
    (["--estimator", "grpo", "--estimator", "rloo"], ["--estimator", "grpo, rloo"]),
    (["--threads", "1", "--threads", "2"], ["--threads", "1, 2"]),
    (["--trl.learning_rate", "1e-4", "--trl.learning_rate=2e-4"], ["--trl.learning_rate", "given twice"]),
    (["--task-name", "gcd", "--task_name", "chain_sum"], ["--task-name", "--task_name"]),
    (["--eval.n", "4", "--eval.n", "8"], ["eval.n", "given twice"]),
])
def test_a_key_given_twice_on_the_command_line_is_refused_naming_both(args, names):
    out = _refused(*args)
    assert "given twice" in out, out
    for name in names:
        assert name in out, (name, out)


@pytest.mark.parametrize(("text", "key"), [("1: 2\n", "1"), ("~: 3\n", "None"), ("trl:\n  5: x\n", "5"),
                                           ("true: 1\n", "True")])
def test_a_yaml_key_that_is_not_a_name_is_one_line(tmp_path, text, key):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "\n" not in message and f"the key {key}" in message and "is not a name" in message, message
    assert str(path) in message


def test_a_yaml_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_bytes(b"seed: \xff\xfe\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_train_subset_that_is_not_utf8_is_one_line_naming_the_field(tmp_path):
    band = tmp_path / "band.jsonl"
    band.write_bytes(b"\xff\xfe" + json.dumps({"grae_band": {}}).encode() + b"\n")
    with pytest.raises(ConfigError) as err:
        load_config("chain-sum", {"task.train_subset": str(band)})
    message = str(err.value)
    assert message.startswith("task.train_subset:") and "not UTF-8" in message and "\n" not in message, message


def _file(tmp_path, task: str, params: dict, estimator: str = "grpo", estimator_params: dict | None = None):
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"task": {"name": task, "params": params}, "estimator": estimator,
                                "estimator_params": estimator_params or {}}))
    return path


def test_restating_the_files_task_or_estimator_keeps_its_parameters(tmp_path):
    path = _file(tmp_path, "chain_sum", {"min_terms": 3, "max_terms": 3}, "agrae", {"alpha": 0.5})
    cfg = load_config(path, {"task.name": "chain_sum", "estimator": "agrae"})
    assert cfg.task.params == {"min_terms": 3, "max_terms": 3}
    assert cfg.estimator_params == {"alpha": 0.5}
    assert not any("dropped" in note for note in cfg.notes)
    default = load_config("chain-sum", {"task.name": "chain_sum", "estimator": "agrae"})  # the chain-sum recipe's own
    assert default.task.params["prompt_style"] == "plain" and default.estimator_params == {"alpha": 1.0}


def test_another_task_or_estimator_starts_from_nothing_with_a_note_naming_the_keys_dropped(tmp_path):
    path = _file(tmp_path, "chain_sum", {"min_terms": 3, "max_terms": 3, "prompt_style": "chat"}, "agrae",
                 {"alpha": 0.5})
    cfg = load_config(path, {"task.name": "gcd", "estimator": "grpo"})
    assert cfg.task.params == {} and cfg.estimator_params == {}
    task_note = next(note for note in cfg.notes if note.startswith("task.params:"))
    assert "'gcd'" in task_note and "'chain_sum'" in task_note and "(max_terms, min_terms, prompt_style)" in task_note
    estimator_note = next(note for note in cfg.notes if note.startswith("estimator_params:"))
    assert "'grpo'" in estimator_note and "'agrae'" in estimator_note and "(alpha)" in estimator_note
    kept = load_config(path, {"task.name": "gcd", "task.params.prompt_style": "chat"})  # given again: not dropped
    assert kept.task.params == {"prompt_style": "chat"}
    assert any("(max_terms, min_terms)" in note for note in kept.notes), kept.notes
    assert load_config(None, {"task.name": "gcd"}).notes == ()  # the tiny base's parameters: no word


@pytest.mark.parametrize("rewards", [["task", "task"], "task,task", ["task", "format", "task"]])
def test_a_reward_listed_twice_is_refused(rewards):
    with pytest.raises(ConfigError, match=r"reward_funcs: 'task' listed twice"):
        load_config("chain-sum", {"reward_funcs": rewards})


@pytest.mark.parametrize("value", [2, -0.1, 1.5, float("nan")])
def test_a_share_outside_zero_one_is_refused(value):
    with pytest.raises(ConfigError, match=r"^sampling.success_threshold: (a share of the reward in \[0, 1\]|must be "
                                          r"a finite number)"):
        load_config("chain-sum", {"sampling.success_threshold": value})
    assert load_config("chain-sum", {"sampling.success_threshold": 1}).sampling.success_threshold == 1


def test_more_threads_than_cores_are_capped_with_a_note():
    from grae.train.threads import machine_cores

    cores = machine_cores()
    threads, why = choose_threads(100_000, cuda=False, environ={})
    assert threads == cores and why == f"--threads 100000 capped at this machine's {cores} core" + \
        ("s" if cores != 1 else "")
    threads, why = choose_threads(None, cuda=False, environ={"OMP_NUM_THREADS": str(cores + 7)})
    assert threads == cores and "OMP_NUM_THREADS" in why and "capped" in why
    assert choose_threads(1, cuda=False, environ={}) == (1, "--threads")
