"""Hostile and careless input: every case ends in one line that names the field, with
its exit code, before any model loads or any run directory is claimed.

Table-driven: each case is a command line (``{tmp}`` stands for the test's directory), the files it
needs, the expected exit code and a text its first line of output must hold. The CLI runs in-process
(typer's runner), so the whole table takes seconds. Cases that need a model or a training step are
separate tests below the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
    #: called with the test directory before the run (files that are not text)
    setup: Callable[[Path], None] | None = None
    #: environment variables set (a value) or removed (None) for the run; ``{tmp}`` as in ``args``
    env: dict[str, str | None] = field(default_factory=dict)


def _train(*args: str) -> list[str]:
    return ["train", *args, "--output-dir", "{tmp}/run"]


def _study(**keys: str) -> dict[str, str]:
    """A two-method study file (``study.yaml``), training only, with ``keys`` (YAML text) set or replaced."""
    lines = {"base": "chain-sum", "overrides": "{max_steps: 1, eval.enabled: false}", "frontier": "[]",
             "methods": "{grpo: {estimator: grpo}, rloo: {estimator: rloo}}", "seeds": "[0]", "baseline": "grpo",
             "output_dir": "{tmp}/study", **keys}
    return {"study.yaml": "".join(f"{k}: {v}\n" for k, v in lines.items())}


COMPARE = ["compare", "{tmp}/study.yaml"]
GOOD_LINES = '{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n'
NOT_AN_OBJECT = {"d.jsonl": '{"question": "1+1?", "answer": "2"}\n\n[1, 2, 3]\n'}
CONFLICT = {"d.jsonl": GOOD_LINES + '{"question": "  1+1? ", "answer": "3"}\n'}
DUPLICATE_IDS = {"d.jsonl": '{"id": "a", "question": "1+1?", "answer": "2"}\n{"id": "a", "question": "2+2?", "answer": "4"}\n'}
LONG_LINE = {"d.jsonl": GOOD_LINES + json.dumps({"question": "x" * 4096, "answer": "1"}) + "\n"}


def _cut_model(tmp: Path) -> None:
    """A copy of the tiny model whose model.safetensors is cut in half (an interrupted copy)."""
    import shutil

    from grae.presets import tiny_model_path

    shutil.copytree(tiny_model_path(), tmp / "cut")
    weights = tmp / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _tampered_summary(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """A setup writing ``summary.json``: a committed compare report's (gate_r4, exact) with ``change`` applied to
    its ``results`` table."""
    def setup(tmp: Path) -> None:
        data = json.loads((Path(__file__).parents[1] / "studies" / "reports" / "gate_r4" / "summary.json").read_text())
        change(data["results"])
        (tmp / "summary.json").write_text(json.dumps(data))
    return setup


def _first_final(table: dict) -> dict:
    return next(iter(next(iter(table["jobs"].values())).values()))["final"]


REPORT_ONLY = ["compare", "{tmp}/summary.json", "--report-only", "-o", "{tmp}/again"]


def _eval(*args: str) -> list[str]:
    return ["eval", "tiny", *args, "--n", "2", "--max-tokens", "2", "-o", "{tmp}/ev"]

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
    # §1-§2: exact evaluation's candidate limit and the learning-rate bound (tested in depth in test_exact.py
    # and test_divergence.py; here as hostile input: one line before any load)
    Case("exact eval above the candidate limit", ["eval", "tiny", "--tasks", "chain_sum", "--exact", "--task-param",
                                                  "max_digits=4", "-o", "{tmp}/ev"], 2,
         "--exact: task chain_sum has 109,990 candidate answers"),
    Case("learning_rate above the sanity bound", _train("--learning_rate", "10"), 2,
         "trl.learning_rate: 10 is above 1"),
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
    Case("log_completions_hub_repo offline", _train("--log_completions", "--log_completions_hub_repo", "me/logs"), 2,
         "trl.log_completions_hub_repo: cannot push to the hub (HF_HUB_OFFLINE",
         patch={"huggingface_hub.constants:HF_HUB_OFFLINE": True}),
    # §4: grae compare's study file, refused before any job runs
    Case("compare parallel abc", COMPARE, 2, "parallel: expected an integer >= 1", _study(parallel="abc")),
    Case("compare parallel [1]", COMPARE, 2, "parallel: expected an integer >= 1", _study(parallel="[1]")),
    Case("compare parallel 0", COMPARE, 2, "parallel: expected an integer >= 1", _study(parallel="0")),
    Case("compare bootstrap x", COMPARE, 2, "bootstrap: expected an integer >= 1", _study(bootstrap="x")),
    Case("compare scalar under sweep", COMPARE, 2, "methods.agrae.sweep.estimator_params.alpha: expected a non-empty list",
         _study(methods="{grpo: {estimator: grpo}, agrae: {estimator: agrae, sweep: {estimator_params.alpha: 0.5}}}")),
    Case("compare sweep not a mapping", COMPARE, 2, "methods.grpo.sweep: expected a mapping",
         _study(methods="{grpo: {estimator: grpo, sweep: [1, 2]}}")),
    Case("compare method name not text", COMPARE, 2, "methods: method names are text, got 1",
         _study(methods="{grpo: {estimator: grpo}, 1: {estimator: rloo}}")),
    Case("compare unwritable output_dir", COMPARE, 2, "output_dir /proc/grae-x/study: cannot write there",
         _study(output_dir="/proc/grae-x/study")),
    Case("compare unwritable jobs_dir", COMPARE, 2, "jobs_dir /proc/grae-x/jobs: cannot write there",
         _study(jobs_dir="/proc/grae-x/jobs")),
    Case("compare exact eval at temperature 0", COMPARE, 2, "eval.exact: method 'grpo' evaluates at eval.temperature 0.0",
         _study(overrides="{max_steps: 1, eval.temperature: 0}", eval="{exact: true}")),
    # §5: data files: one line naming the file, the line and the fix, before the model loads
    Case("eval JSONL line not an object", _eval("--tasks", "{tmp}/d.jsonl"), 2,
         "{tmp}/d.jsonl:3: expected a JSON object", NOT_AN_OBJECT),
    Case("train JSONL line not an object", _train("--task.name", "{tmp}/d.jsonl"), 2,
         "task: {tmp}/d.jsonl:3: expected a JSON object", NOT_AN_OBJECT),
    Case("eval conflicting gold answers", _eval("--tasks", "{tmp}/d.jsonl"), 2,
         "{tmp}/d.jsonl:3: the question of line 1 again with another gold answer ('3' here, '2' there)", CONFLICT),
    Case("train conflicting gold answers", _train("--task.name", "local:{tmp}/d.jsonl"), 2,
         "task: {tmp}/d.jsonl:3: the question of line 1 again", CONFLICT),
    Case("eval oversized line", _eval("--tasks", "{tmp}/d.jsonl", "--task-param", "max_line_bytes=1000"), 2,
         "{tmp}/d.jsonl:3: line longer than 1,000 bytes", LONG_LINE),
    Case("train oversized line", _train("--task.name", "{tmp}/d.jsonl", "--task.params.max_line_bytes", "1000"), 2,
         "task: {tmp}/d.jsonl:3: line longer than 1,000 bytes", LONG_LINE),
    Case("train missing local file", _train("--task.name", "local:{tmp}/missing.jsonl"), 2,
         "task.name: data file not found: {tmp}/missing.jsonl"),
    Case("eval missing local file", _eval("--tasks", "local:{tmp}/missing.jsonl"), 2,
         "--tasks local:{tmp}/missing.jsonl: no such file"),
    Case("eval NAME=PATH missing", _eval("--tasks", "mine={tmp}/missing.jsonl"), 2,
         "--tasks mine={tmp}/missing.jsonl: {tmp}/missing.jsonl does not exist"),
    Case("eval NAME=DIR for a non-benchmark", _eval("--tasks", "mine={tmp}"), 2, "is not a .jsonl/.ndjson/.json/.parquet"),
    # §6: the rest
    Case("eval --threads -1", _eval("--tasks", "chain_sum", "--threads", "-1"), 2, "--threads must be >= 1"),
    Case("eval a cut model.safetensors", ["eval", "{tmp}/cut", "--tasks", "chain_sum", "-o", "{tmp}/ev"], 2,
         "model: {tmp}/cut/model.safetensors cannot be read", setup=_cut_model),
    Case("train a cut model.safetensors", _train("--model", "{tmp}/cut"), 2,
         "model: {tmp}/cut/model.safetensors cannot be read", setup=_cut_model),
    Case("eval --temperature 1e308", _eval("--tasks", "chain_sum", "--temperature", "1e308"), 2,
         "--temperature must be 0 (greedy) or in [0.01, 10]"),
    Case("train --temperature 1e308", _train("--temperature", "1e308"), 2, "trl.temperature: must be in (0, 10]"),
    Case("train --eval.temperature 1e308", _train("--eval.temperature", "1e308"), 2,
         "eval.temperature: must be 0 (greedy) or in [0.01, 10]"),
    Case("report on an empty rows file", ["report", "{tmp}/rows.jsonl", "-o", "{tmp}/rep"], 1,
         "{tmp}/rows.jsonl: no sample rows or summaries to report", {"rows.jsonl": ""}),
    Case("passk on an empty rows file", ["passk", "{tmp}/rows.jsonl"], 1, "{tmp}/rows.jsonl: no samples to count",
         {"rows.jsonl": ""}),
    Case("passk generation_id seven", ["passk", "{tmp}/rows.jsonl"], 1, "generation_id must be an integer >= 0",
         {"rows.jsonl": '{"question_id": "a", "label": 1, "generation_id": "seven"}\n'}),
    Case("train --resume into a missing directory", [*_train(), "--resume"], 2, "--resume: {tmp}/run does not exist"),
    # numbers out of range or of the wrong type, each refused naming its key
    *[Case(f"train {key} {value}", _train(f"--{key}", value), 2, line) for key, value, line in [
        ("trl.learning_rate", "nan", "trl.learning_rate: must be a finite number"),
        ("trl.learning_rate", "inf", "trl.learning_rate: must be a finite number"),
        ("trl.learning_rate", "abc", "trl.learning_rate: expected float, got 'abc'"),
        ("trl.temperature", "-1", "trl.temperature: must be > 0"),
        ("trl.num_generations", "0", "trl.num_generations: must be >= 1"),
        ("seed", "99999999999999999999", "seed: 99999999999999999999 does not fit in a 64-bit integer"),
        ("peft.r", "-1", "peft.r: must be >= 1"),
        ("task.params.min_terms", "-3", "task: "),
        ("trl.top_p", "2", "trl.top_p: must be in (0, 1]"),
        ("trl.beta", "-1", "trl.beta: must be >= 0"),
        ("estimator_params.alpha", "inf", "estimator: alpha: must be in (0, 1]"),
        ("estimator_params.alpha", "abc", "estimator: "),
        ("trl.per_device_train_batch_size", "abc", "trl.per_device_train_batch_size: expected int, got 'abc'"),
    ]],
    Case("train --model org/name offline", _train("--model", "someorg/some-model"), 2,
         "model: 'someorg/some-model' is not a local directory, not in the hub cache (HF_HUB_OFFLINE is set)",
         patch={"huggingface_hub.constants:HF_HUB_OFFLINE": True}),
    Case("train unwritable --output-dir", ["train", "--output-dir", "/proc/grae-x/run"], 2,
         "--output-dir /proc/grae-x/run: cannot write there"),
    Case("eval unwritable -o", ["eval", "tiny", "-t", "chain_sum", "-o", "/proc/grae-x"], 2,
         "--output /proc/grae-x: cannot write there"),
    Case("eval --task-param bogus=1", _eval("-t", "chain_sum", "--task-param", "bogus=1"), 2, "--task-param {'bogus': 1}"),
    Case("report unwritable -o", ["report", "{tmp}/rows.jsonl", "-o", "/proc/grae-x"], 2,
         "--output /proc/grae-x: cannot write there", {"rows.jsonl": '{"question_id": "a", "label": 1}\n'}),
    Case("report a summary.json that is not JSON", ["report", "{tmp}/r", "-o", "{tmp}/rep"], 1,
         "{tmp}/r/summary.json: not valid JSON", {"r/summary.json": "not json"}),
    Case("data export unwritable", ["data", "export", "chain_sum", "/proc/grae-x/a.parquet"], 2,
         "OUT /proc/grae-x/a.parquet: cannot write there"),
    Case("sim unwritable -o", ["sim", "--steps", "1", "-o", "/proc/grae-x/h.json"], 2,
         "--output /proc/grae-x/h.json: cannot write there"),
    Case("sim --prompts 100000000", ["sim", "--prompts", "100000000"], 2, "prompts: must be at most"),
    Case("passk --n 0", ["passk", "--n", "0", "{tmp}/rows.jsonl"], 2, "--n must be >= 1",
         {"rows.jsonl": '{"question_id": "a", "label": 1}\n'}),
    Case("passk a question_id that is a list", ["passk", "{tmp}/rows.jsonl"], 1,
         "question_id must be a string or an integer", {"rows.jsonl": '{"question_id": ["a"], "label": 1}\n'}),
    Case("compare malformed YAML", COMPARE, 2, "study.yaml: not valid YAML", {"study.yaml": "methods: [\n"}),
    Case("compare --report-only before any job", [*COMPARE, "--report-only"], 2,
         "--report-only: 2 of 2 jobs have not finished", _study()),
    # compare method names that share a job folder
    Case("compare methods a/b and a_b", COMPARE, 2, "methods: 'a/b' and 'a_b' would share the job folder jobs/a_b/",
         _study(methods="{a/b: {estimator: grpo}, a_b: {estimator: rloo}}", baseline="a/b")),
    Case("compare method named '.'", COMPARE, 2, "methods: '.' names no folder of its own",
         _study(methods="{'.': {estimator: grpo}, b: {estimator: rloo}}", baseline="b")),
    Case("compare method named ''", COMPARE, 2, "methods: '' names no folder of its own",
         _study(methods="{'': {estimator: grpo}, b: {estimator: rloo}}", baseline="b")),
    # grae compare SUMMARY.json --report-only checks the table it renders
    Case("report-only a NaN p", REPORT_ONLY, 2, "{tmp}/summary.json: results.jobs.grpo_lr2e-5.200.final.p: expected finite "
         "numbers, got nan", setup=_tampered_summary(lambda t: _first_final(t)["p"].__setitem__(0, float("nan")))),
    Case("report-only a p above 1", REPORT_ONLY, 2, "results.jobs.grpo_lr2e-5.200.final.p: a probability is in [0, 1], got 2.0",
         setup=_tampered_summary(lambda t: _first_final(t)["p"].__setitem__(0, 2.0))),
    Case("report-only a count list cut short", REPORT_ONLY, 2, "results.jobs.grpo_lr2e-5.200.final.mass: 1 values for",
         setup=_tampered_summary(lambda t: _first_final(t).__setitem__("mass", [0.5]))),
    Case("report-only a table without jobs", REPORT_ONLY, 2, "results: not a table grae compare wrote (missing 'jobs')",
         setup=_tampered_summary(lambda t: t.pop("jobs"))),
    Case("report-only jobs that are a list", REPORT_ONLY, 2, "results: not a table grae compare wrote",
         setup=_tampered_summary(lambda t: t.__setitem__("jobs", [1, 2]))),
    # edges
    Case("enumerated TRL key, enum-typed", _train("--lr_scheduler_type", "bogus"), 2,
         "trl.lr_scheduler_type: 'bogus' is not one of linear, cosine"),
    Case("recipe dataset_name offline, not cached", ["train", "{tmp}/recipe.yaml", "--output-dir", "{tmp}/run"], 2,
         "task.name: 'hf:someorg/some-data' reads the hub dataset someorg/some-data, which is not in the cache under "
         "HF_HOME (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set)", {"recipe.yaml": "dataset_name: someorg/some-data\n"},
         patch={"huggingface_hub.constants:HF_HUB_OFFLINE": True}),
    # sampling settings that make the probabilities non-finite, refused up front
    Case("train --temperature 1e-300", _train("--temperature", "1e-300"), 2, "trl.temperature: must be at least 0.01"),
    Case("train --top_p 1e-300", _train("--top_p", "1e-300"), 2, "trl.top_p: must be at least 1e-06"),
    Case("train --eval.temperature 0.001", _train("--eval.temperature", "0.001"), 2,
         "eval.temperature: must be 0 (greedy) or in [0.01, 10]"),
    Case("train --eval.top_p 1e-300", _train("--eval.top_p", "1e-300"), 2, "eval.top_p: must be in [1e-06, 1]"),
    Case("eval --temperature 1e-300", _eval("--tasks", "chain_sum", "--temperature", "1e-300"), 2,
         "--temperature must be 0 (greedy) or in [0.01, 10]"),
    Case("eval --top-p 1e-300", _eval("--tasks", "chain_sum", "--top-p", "1e-300"), 2, "--top-p must be in [1e-06, 1]"),
    Case("eval --exact-memory-mb 1e6",
         _eval("--tasks", "chain_sum", "--task-param", "max_digits=1", "--exact", "--exact-memory-mb", "1e6"), 2,
         "--exact-memory-mb 1e+06 is more than this machine has free"),
    # data and names
    Case("eval two files under one task name", _eval("--tasks", "t={tmp}/a.jsonl,t={tmp}/b.jsonl"), 2,
         "--tasks: t={tmp}/a.jsonl and t={tmp}/b.jsonl are both named 't'",
         {"a.jsonl": GOOD_LINES, "b.jsonl": '{"question": "3+3?", "answer": "6"}\n'}),
    Case("eval duplicate ids", _eval("--tasks", "{tmp}/d.jsonl"), 2,
         "{tmp}/d.jsonl:2: id 'a' again, given to another question at line 1", DUPLICATE_IDS),
    Case("train duplicate ids", _train("--task.name", "{tmp}/d.jsonl"), 2,
         "task: {tmp}/d.jsonl:2: id 'a' again, given to another question at line 1", DUPLICATE_IDS),
    # one setting under two names
    Case("model and model_name_or_path", _train("--model", "tiny", "--model_name_or_path", "tiny"), 2,
         "model: given twice on the command line, as model and as model_name_or_path"),
    Case("learning_rate flat and under trl", _train("--learning_rate", "1e-5", "--trl.learning_rate", "2e-5"), 2,
         "trl.learning_rate: given twice on the command line, as learning_rate and as trl.learning_rate"),
    Case("trl: {learning_rate} and learning_rate in a file", ["train", "{tmp}/c.yaml", "--output-dir", "{tmp}/run"], 2,
         "trl.learning_rate: given twice in {tmp}/c.yaml, as trl.learning_rate and as learning_rate",
         {"c.yaml": "trl: {learning_rate: 1.0e-5}\nlearning_rate: 2.0e-5\n"}),
    Case("model and model_name_or_path in a file", ["train", "{tmp}/c.yaml", "--output-dir", "{tmp}/run"], 2,
         "model: given twice in {tmp}/c.yaml, as model and as model_name_or_path",
         {"c.yaml": "model: tiny\nmodel_name_or_path: tiny\n"}),
    # a tracker that cannot start
    Case("report_to wandb without a key", _train("--trl.report_to", "wandb"), 2,
         "trl.report_to: wandb has no API key here", {"netrc": ""},
         env={"WANDB_API_KEY": None, "WANDB_MODE": None, "NETRC": "{tmp}/netrc"}),
    Case("reward_timeout 0", _train("--reward_timeout", "0"), 2, "reward_timeout: must be > 0 seconds per sample"),
    # what the run would fail on after claiming its directory fails before, in the dry run too
    Case("reward_weights of the wrong length", _train("--reward_weights", "[1, 2]"), 2,
         "trl.reward_weights: 2 weights for 1 reward function (reward_funcs: ['task'])"),
    Case("reward_weights of the wrong length, dry run", _train("--dry-run", "--reward_weights", "[1, 2]"), 2,
         "trl.reward_weights: 2 weights for 1 reward function"),
    Case("lora_target_modules 5 in a TRL recipe", ["train", "{tmp}/c.yaml", "--dry-run", "--output-dir", "{tmp}/run"], 2,
         "peft.target_modules (lora_target_modules in a TRL recipe): expected module names",
         {"c.yaml": "use_peft: true\nlora_target_modules: 5\n"}),
    Case("peft.target_modules empty", _train("--peft.target_modules", "[]"), 2, "peft.target_modules (lora_target_modules"),
    Case("reward_timeout inf", _train("--reward_timeout", "inf"), 2, "reward_timeout: must be a finite number"),
    Case("reward_timeout nan", _train("--reward_timeout", "nan"), 2, "reward_timeout: must be a finite number"),
    Case("dual_clip nan", _train("--dual_clip", "nan"), 2, "dual_clip: must be a finite number"),
    Case("exact memory of 1e-9 MB", ["eval", "tiny", "--tasks", "chain_sum", "--task-param", "max_digits=1", "--exact",
                                     "--exact-memory-mb", "1e-9", "-o", "{tmp}/ev"], 2,
         "--exact-memory-mb must be at least 0.01 (MB"),
    Case("an exact setting without --exact", _eval("--tasks", "chain_sum", "--task-param", "max_digits=1",
                                                   "--exact-memory-mb", "64", "--exact-max-candidates", "10"), 2,
         "--exact-memory-mb and --exact-max-candidates: settings of exact evaluation, which this run does not do"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_ends_in_one_line_naming_the_field(tmp_path, monkeypatch, case):
    import importlib

    for rel, text in case.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text.replace("{tmp}", str(tmp_path)))
    if case.setup is not None:
        case.setup(tmp_path)
    for target, value in case.patch.items():
        module, attribute = target.split(":")
        monkeypatch.setattr(importlib.import_module(module), attribute, value)
    for name, value in case.env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value.replace("{tmp}", str(tmp_path)))
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.args]
    result = CliRunner().invoke(_app(), args)
    output = result.output
    assert result.exit_code == case.exit_code, (output, result.exception)
    assert "Traceback" not in output, output
    first = " ".join(next(line for line in output.splitlines() if line.strip()).split())
    assert case.first_line.replace("{tmp}", str(tmp_path)) in first, output
    assert not (tmp_path / "run").exists(), "refused after the run directory was claimed"


def test_trl_values_are_checked_by_the_declared_types_after_trls_parser_has_run():
    """transformers' HfArgumentParser (TRL's own parser) rewrites GRPOConfig's ``Field.type`` in place
    (``include_num_input_tokens_seen: str | bool`` becomes ``bool``); grae's check reads the class's
    annotations, so a script that built TRL's parser first, or tests in any order, see the same rule."""
    import dataclasses

    from trl import GRPOConfig
    from trl.scripts.grpo import make_parser

    from grae.train.config import ConfigError, load_config

    make_parser()
    assert {f.name: f for f in dataclasses.fields(GRPOConfig)}["include_num_input_tokens_seen"].type is bool
    cfg = load_config("chain-sum", {"trl": {"include_num_input_tokens_seen": "all"}})
    assert cfg.trl["include_num_input_tokens_seen"] == "all"
    with pytest.raises(ConfigError, match=r"^trl\.include_num_input_tokens_seen: 'sometimes' is not one of"):
        load_config("chain-sum", {"trl": {"include_num_input_tokens_seen": "sometimes"}})


def test_every_enumerated_trl_field_refuses_a_bogus_value_and_takes_its_default():
    """Each enumerated GRPOConfig field (read from TRL's metadata and help) refuses a made-up value in one
    line naming it, and accepts TRL's own default; the documented lists hold at least two values."""
    from grae.train.config import ConfigError, load_config, trl_fields
    from grae.train.trl_values import allowed_values

    fields = trl_fields()
    for key, values in allowed_values().items():
        assert len(values) >= 2 and fields[key].default in values + (None,), (key, values)
        with pytest.raises(ConfigError, match=rf"^trl\.{key}: 'not-a-{key}' is not one of"):
            load_config("chain-sum", {f"trl.{key}": f"not-a-{key}"})
    load_config("chain-sum", {"trl.loss_type": "dr_grpo", "trl.scale_rewards": False, "trl.log_level": "info"})


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
        assert result.exit_code == 1 and lines, (result.output, result.exception)
        assert lines[0].startswith("error: reward function 'broken' failed on all 16 samples"), result.output
        assert "ZeroDivisionError: my reward is broken" in lines[0] and str(run / "error.log") in " ".join(lines)
        assert ("Traceback" in result.output) == debug, result.output
        assert "ZeroDivisionError: my reward is broken" in (run / "error.log").read_text()


def _wrong_value(types: tuple[type, ...]):
    """A YAML value of none of ``types`` (a bool counts as none of them unless bool is listed)."""
    for value in ("text", 7, [1], {"a": 1}, True):
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return value
    raise AssertionError(types)


def test_every_study_key_refuses_a_wrong_type_in_one_line(tmp_path):
    """Walks the study-file schema: every key given a value of another type is refused before any job runs,
    in one line that starts with the key, exit 2 (null too, for the required keys)."""
    import yaml

    from grae.compare.grid import REQUIRED, STUDY_SCHEMA

    base = yaml.safe_load(_study()["study.yaml"].replace("{tmp}", str(tmp_path)))
    for key, (types, _) in STUDY_SCHEMA.items():
        for value in [_wrong_value(types), *([None] if key in REQUIRED else [])]:
            (tmp_path / "study.yaml").write_text(yaml.safe_dump({**base, key: value}))
            result = CliRunner().invoke(_app(), ["compare", str(tmp_path / "study.yaml")])
            lines = result.output.strip().splitlines()
            assert result.exit_code == 2 and len(lines) == 1, (key, value, result.output, result.exception)
            assert lines[0].startswith(f"config error {key}: expected"), (key, value, result.output)
    assert not (tmp_path / "study").exists()


def test_a_failed_compare_job_ends_the_study_in_one_line_and_keeps_the_others(tmp_path, monkeypatch):
    """One job of two fails (its grae train exits 3): the study stops with exit 1 and one summary line
    naming the job and its log; the other job's results stay on disk; rerunning retries only the failed one."""
    import sys

    from grae.compare import runner

    ran = []

    def fake_train(job, config_path):  # the job's grae train: rloo fails, grpo finishes (writes its summary)
        ran.append(job.method)
        if job.method == "rloo":
            return [sys.executable, "-c", "print('step 1'); print('error: the reward model crashed'); raise SystemExit(3)"]
        summary = job.output_dir / "eval" / "summary.json"
        return [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(summary)!r}); "
                                      "p.parent.mkdir(parents=True, exist_ok=True); p.write_text('{}')"]

    monkeypatch.setattr(runner, "job_command", fake_train)
    (tmp_path / "study.yaml").write_text(_study()["study.yaml"].replace("{tmp}", str(tmp_path)))
    result = CliRunner().invoke(_app(), ["compare", str(tmp_path / "study.yaml")])
    assert result.exit_code == 1, (result.output, result.exception)
    last = " ".join(result.output.strip().splitlines()[-1].split())
    log = tmp_path / "study" / "jobs" / "rloo" / "seed0" / "train.log"
    assert last.startswith("error: 1 of 2 jobs failed (rloo/seed0); rloo/seed0's log: ") and str(log) in last, last
    assert "last line: error: the reward model crashed" in last and "Traceback" not in result.output
    assert (tmp_path / "study" / "jobs" / "grpo" / "seed0" / "eval" / "summary.json").exists()
    ran.clear()
    CliRunner().invoke(_app(), ["compare", str(tmp_path / "study.yaml")])
    assert ran == ["rloo"]


def test_data_file_limits_and_names(tmp_path):
    """The line limit is the user's to raise; NAME=PATH works with any name (the rows are the file's, under
    that name); the same question with the same answer written two ways is one problem, not a conflict."""
    from grae.data import get_task
    from grae.data.local import DEFAULT_MAX_LINE_BYTES
    from grae.eval.tasks import resolve_task

    path = tmp_path / "d.jsonl"
    path.write_text(LONG_LINE["d.jsonl"])
    assert DEFAULT_MAX_LINE_BYTES > 4200 and len(get_task(str(path), eval_only=True).heldout()) == 3
    with pytest.raises(ValueError, match=r"d\.jsonl:3: line longer than 4,000 bytes"):
        get_task(str(path), eval_only=True, max_line_bytes=4000).heldout()
    path.write_text(GOOD_LINES + '{"question": "2+2?", "answer": "4.0"}\n')
    task = resolve_task(f"anything={path}")
    assert task.name == "anything" and [e["answer"] for e in task.heldout()] == ["2", "4"]


def test_library_calls_refuse_or_answer_correctly():
    """§6 in the library: a bare number is its own answer; complex rewards are refused, not cast; an
    estimator's load_state_dict refuses a state that is not a mapping, naming state_dict."""
    import numpy as np
    import torch

    from grae.advantage import get_estimator, names
    from grae.rewards import verify_math, verify_math_batch

    assert verify_math(42, "42") == 1.0 and verify_math(np.int64(42), "42") == 1.0 and verify_math(0.5, "1/2") == 1.0
    assert verify_math(43, "42") == 0.0 and verify_math(True, "1") == 0.0 and verify_math(float("nan"), "1") == 0.0
    assert verify_math_batch([42, 43, 42.0], ["42", "42", "42"]) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match=r"^rewards: expected real numbers, got dtype torch.complex64"):
        get_estimator("grpo")(torch.tensor([1 + 0j, 0j, 1 + 2j, 0j]), torch.tensor([0, 0, 1, 1]))
    for name in names():
        estimator = get_estimator(name)
        with pytest.raises(ValueError, match=r"^state_dict: expected the mapping"):
            estimator.load_state_dict(None)
        estimator.load_state_dict(estimator.state_dict())


def _reward(completions, **kwargs):
    return [0.0] * len(completions)


#: GraeTrainer's own arguments, each refused by name before anything is built
TRAINER_ARGUMENTS = {
    "estimator_params=[1]": ({"estimator_params": [1]}, TypeError, "estimator_params: expected a mapping"),
    "dual_clip='3'": ({"dual_clip": "3"}, TypeError, "dual_clip: expected a number > 1"),
    "dual_clip=nan": ({"dual_clip": float("nan")}, ValueError, "dual_clip: must be a finite number > 1"),
    "dual_clip=1": ({"dual_clip": 1}, ValueError, "dual_clip: must be > 1"),
    "reward_timeout=nan": ({"reward_timeout": float("nan")}, ValueError, "reward_timeout: must be a finite number"),
    "reward_timeout=inf": ({"reward_timeout": float("inf")}, ValueError, "reward_timeout: must be a finite number"),
    "reward_timeout='5'": ({"reward_timeout": "5"}, TypeError, "reward_timeout: expected a number of seconds"),
    "reward_timeout=0": ({"reward_timeout": 0}, ValueError, "reward_timeout: must be > 0 seconds"),
    "reward_funcs=[42]": ({"reward_funcs": [_reward, 42]}, TypeError, "reward_funcs[1]: expected a reward function"),
    "reward_funcs=None": ({"reward_funcs": None}, ValueError, "reward_funcs: none given"),
    "reward_fallback=inf": ({"reward_fallback": float("inf")}, ValueError, "reward_fallback: must be a finite number"),
    "reward_fallback=1e31": ({"reward_fallback": 1e31}, ValueError, "reward_fallback: 1e+31 is beyond ±1e+30"),
    "contain_reward_faults='no'": ({"contain_reward_faults": "no"}, TypeError,
                                   "contain_reward_faults: expected True or False, got 'no'"),
}


@pytest.mark.parametrize("case", list(TRAINER_ARGUMENTS))
def test_trainer_arguments_are_refused_by_name_before_anything_is_built(case):
    """The checks run first in ``GraeTrainer.__init__`` (no model is even needed to be refused), with the
    functions ``grae train`` checks its config keys with (grae.engines.trl.arguments)."""
    import re

    from grae.engines.trl import GraeTrainer

    given, error, message = TRAINER_ARGUMENTS[case]
    with pytest.raises(error, match="^" + re.escape(message)):
        GraeTrainer(model=None, **{"reward_funcs": [_reward], **given})


def test_a_meta_device_tensor_into_any_estimator_is_refused_by_name():
    import torch

    from grae.advantage import get_estimator, names, with_reward_correction

    group_ids = torch.tensor([0, 0, 1, 1])
    estimators = [get_estimator(name) for name in names()]
    estimators.append(with_reward_correction(get_estimator("grpo"), mode="backward", rho0=0.1, rho1=0.1))
    for estimator in estimators:
        with pytest.raises(ValueError, match="^rewards: a tensor on the meta device has a shape but no values"):
            estimator(torch.zeros(4, device="meta"), group_ids)
    with pytest.raises(ValueError, match="^group_ids: a tensor on the meta device"):
        get_estimator("grpo")(torch.zeros(4), group_ids.to("meta"))
    unlikeliness = get_estimator("unlikeliness")
    with pytest.raises(ValueError, match="^context.logprob_mean: a tensor on the meta device"):
        unlikeliness(torch.zeros(4), group_ids, context={"logprob_mean": torch.zeros(4, device="meta")})


def test_trls_all_none_warning_is_held_back_until_grae_decides(caplog):
    """GraeTrainer holds TRL's "All reward functions returned None" record while it checks for a reward
    function that failed everywhere (whose line must come first), and lets every other record through."""
    import logging

    from grae.engines.trl import _held_records

    logger = logging.getLogger("trl.trainer.grpo_trainer")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        with _held_records(logger, "All reward functions returned None") as held:
            logger.warning("[RANK 0] All reward functions returned None for the following kwargs: …")
            logger.warning("something else")
        assert [r.getMessage() for r in caplog.records] == ["something else"] and len(held) == 1
        logger.warning("[RANK 0] All reward functions returned None again")  # the filter is gone afterwards
    assert len(caplog.records) == 2


def _stoppable_job(job_dir: Path) -> list[str]:
    """A stand-in for a job's ``grae train``: holds the job folder's lock as grae train does, says its pid, and on
    SIGINT/SIGTERM writes ``stopped`` (its checkpoint) and exits 128 + the signal."""
    import sys

    script = ("import fcntl, os, pathlib, signal, sys, time\n"
              f"d = pathlib.Path({str(job_dir)!r}); lock = open(d / '.grae.lock', 'a')\n"
              "fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
              "def stop(sig, frame):\n"
              "    (d / 'stopped').write_text(str(sig)); sys.exit(128 + sig)\n"
              "signal.signal(signal.SIGINT, stop); signal.signal(signal.SIGTERM, stop)\n"
              "(d / 'pid').write_text(str(os.getpid()))\n"
              "time.sleep(60)\n")
    return [sys.executable, "-c", script]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_compare_sitting_as_a_whole(tmp_path, monkeypatch, signum):
    """Ctrl-C or SIGTERM to grae compare stops the sitting, not one job: the running job is passed
    the signal once (it checkpoints and exits), no further job starts, compare waits for it and exits 130/143 in
    one line; no job process is left holding its folder, so an immediate rerun runs both jobs (none "in use")."""
    import os
    import signal
    import sys
    import threading
    import time

    from grae.compare import runner

    sig = getattr(signal, signum)
    ran: list[str] = []
    stop = threading.Event()

    def stoppable(job, config_path):
        ran.append(job.method)
        return _stoppable_job(job.output_dir)

    def send_when_running():
        pid = tmp_path / "study" / "jobs" / "grpo" / "seed0" / "pid"
        while not pid.exists() and not stop.is_set():
            time.sleep(0.05)
        if pid.exists():
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(runner, "job_command", stoppable)
    (tmp_path / "study.yaml").write_text(_study()["study.yaml"].replace("{tmp}", str(tmp_path)))
    sender = threading.Thread(target=send_when_running)
    sender.start()
    try:
        result = CliRunner().invoke(_app(), ["compare", str(tmp_path / "study.yaml")])
    finally:
        stop.set()
        sender.join()
    job = tmp_path / "study" / "jobs" / "grpo" / "seed0"
    assert result.exit_code == {"SIGINT": 130, "SIGTERM": 143}[signum], (result.output, result.exception)
    last = " ".join(result.output.strip().splitlines()[-1].split())
    assert last.startswith(f"interrupted: {signum}: the sitting stopped as a whole, 1 running job (grpo/seed0) "
                           "stopped"), result.output
    assert ran == ["grpo"] and (job / "stopped").read_text() == str(int(sig)), "the job got the signal once, rloo never ran"
    with pytest.raises(ProcessLookupError):
        os.kill(int((job / "pid").read_text()), 0)  # no job process outlives the sitting

    def finishing(job, config_path):
        ran.append(job.method)
        summary = job.output_dir / "eval" / "summary.json"
        return [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(summary)!r}); "
                                      "p.parent.mkdir(parents=True, exist_ok=True); p.write_text('{}')"]

    ran.clear()
    monkeypatch.setattr(runner, "job_command", finishing)
    result = CliRunner().invoke(_app(), ["compare", str(tmp_path / "study.yaml")])
    assert ran == ["grpo", "rloo"] and "FAILED" not in result.output and "in use" not in result.output, result.output


def _tiny_run(tmp_path: Path, name: str, *args: str):
    """One tiny training step (16 completions, no held-out evaluation) through the CLI, in-process."""
    small = ["--max-steps", "1", "--eval.enabled", "false", "--no-progress", "--task.train_size", "16",
             "--trl.per_device_train_batch_size", "16", "--output-dir", str(tmp_path / name)]
    return CliRunner().invoke(_app(), ["train", *small, *args])


def test_scale_rewards_none_trains_a_scale_estimator_on_its_unscaled_advantage(tmp_path):
    """``--trl.scale_rewards none`` with an estimator that has ``scale`` (grpo, agrae, …) is TRL's Dr. GRPO
    setting, and the dry run and the run agree on it. The rule
    (documented in grae.engines.trl): scale_rewards is the estimator's scale, in grae train as in GraeTrainer."""
    from grae.engines.trl import scale_from_trl

    assert scale_from_trl({"scale": "group", "eps": 1e-6}, {}, "none", "sum_then_normalize") == {"scale": "none"}
    assert scale_from_trl({"scale": "group"}, {}, "group", "sum_then_normalize") == {}
    assert scale_from_trl({"scale": "group"}, {"scale": "group"}, "none", "sum_then_normalize") == {}  # refused earlier
    assert scale_from_trl({"scale": "group"}, {}, "group", "normalize_then_sum") == {"scale": "batch"}
    assert scale_from_trl({"eps": 1e-6}, {}, "none", "sum_then_normalize") == {}  # no scale: refused by validate
    result = _tiny_run(tmp_path, "run", "--estimator", "grpo", "--trl.scale_rewards", "none")
    assert result.exit_code == 0, (result.output, result.exception)
    assert (tmp_path / "run" / "final" / "config.json").exists()


def test_a_reward_that_exits_or_hangs_ends_the_run_in_one_line(tmp_path, monkeypatch):
    """A reward function calling ``sys.exit(0)``, and one that never returns (GraeTrainer's reward_timeout
    bounds it), are both the reward's failure: on every sample, exit 1 with the RewardFunctionError line naming
    it; nothing is written as final."""
    (tmp_path / "hostile_exit.py").write_text(
        "import sys, time\n"
        "def leaves(prompts, completions, **kwargs):\n    sys.exit(0)\n"
        "def hangs(prompts, completions, **kwargs):\n    time.sleep(3600)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, args, why in [("exits", ["--reward_funcs", "hostile_exit:leaves"], "SystemExit: 0"),
                            ("hangs", ["--reward_funcs", "hostile_exit:hangs", "--reward_timeout", "0.05"],
                             "(16 timed out); first failure: timed out after 0.05s")]:
        result = _tiny_run(tmp_path, name, *args)
        lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("grae train:")]
        assert result.exit_code == 1 and lines, (name, result.output, result.exception)
        first = " ".join(" ".join(lines).split())
        assert first.startswith("error: reward function ") and "failed on all 16 samples" in first, (name, first)
        assert why in first, (name, first)
        assert not (tmp_path / name / "final").exists()


# ---- studies/study_rows.py: every archive checked before anything is written ----------------
def _study_rows():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "studies" / "study_rows.py"
    spec = importlib.util.spec_from_file_location("study_rows", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tar(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """A .tgz of ``(name, data, link target)`` members (a link when the target is given)."""
    import gzip
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


def _rows_study(tmp: Path, with_eval: bool = True):
    import yaml

    from grae.compare.grid import load_compare_config
    from grae.train.config import to_dict

    study = {"base": "regime2", "methods": {"grpo": {"estimator": "grpo"}, "nsr": {"estimator": "nsr"}}, "seeds": [5],
             "baseline": "grpo", "output_dir": str(tmp / "runs" / "s"), "frontier": [],
             **({"eval": {"exact": True, "num_problems": 96}} if with_eval else {})}
    path = tmp / "studies" / "design" / "s.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(study))
    cfg = load_compare_config(path)
    job = cfg.jobs()[0]
    good = {"job.yaml": yaml.safe_dump(to_dict(cfg.train_config(job))).encode(), "config.yaml": b"x: 1\n",
            "run.json": b"{}", "metrics.jsonl": b'{"step": 1}\n', "eval/summary.json": b"{}"}
    return cfg, job, good


def _other_config(good: dict[str, bytes]) -> dict[str, bytes]:
    import yaml

    return {**good, "job.yaml": yaml.safe_dump({**yaml.safe_load(good["job.yaml"]), "max_steps": 7}).encode()}


UNPACK_CASES = {
    "another configuration": (lambda g: _tar([(k, v, None) for k, v in _other_config(g).items()]),
                              "packed from another configuration of this job (max_steps: 7"),
    "cut in half": (lambda g: (lambda b: b[: len(b) // 2])(_tar([(k, v, None) for k, v in g.items()])),
                    "cannot be read whole"),
    "a symlink": (lambda g: _tar([*[(k, v, None) for k, v in g.items() if k != "run.json"], ("run.json", None, "/etc/passwd")]),
                  "unexpected member 'run.json' (a link"),
    "a ../ member": (lambda g: _tar([*[(k, v, None) for k, v in g.items()], ("eval/../../escape.json", b"{}", None)]),
                     "unexpected member 'eval/../../escape.json'"),
    "rows that do not parse": (lambda g: _tar([(k, b"not json\n" if k == "metrics.jsonl" else v, None) for k, v in g.items()]),
                               "metrics.jsonl does not parse"),
    "a file it does not carry": (lambda g: _tar([*[(k, v, None) for k, v in g.items()], ("final/model.safetensors", b"w", None)]),
                                 "unexpected member 'final/model.safetensors'"),
}


@pytest.mark.parametrize("case", list(UNPACK_CASES))
def test_unpack_checks_every_archive_before_writing_anything(tmp_path, capsys, case):
    """Each bad archive: one line naming it (exit 2); nothing written — not the study's archive either, and the
    unfinished job already in the folder keeps its run.json and metrics.jsonl byte for byte."""
    rows = _study_rows()
    cfg, job, good = _rows_study(tmp_path)
    make, line = UNPACK_CASES[case]
    target = tmp_path / "studies" / "rows" / "s"
    target.mkdir(parents=True)
    (target / "study.tgz").write_bytes(_tar([("invocations.jsonl", b'{"wall_seconds": 1}\n', None)]))
    (target / "grpo-seed5.tgz").write_bytes(make(good))
    from grae.train.config import to_dict
    from grae.train.rundir import claim, release

    claim(job.output_dir, to_dict(cfg.train_config(job)), resume=False, overwrite=False)  # an unfinished run here
    release(job.output_dir)
    (job.output_dir / "metrics.jsonl").write_text('{"step": 1, "mine": true}\n')
    before = sorted((p.relative_to(tmp_path), p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    code = rows.main(["unpack", str(tmp_path / "studies" / "design" / "s.yaml"), "--rows", str(tmp_path / "studies" / "rows")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {target / 'grpo-seed5.tgz'}: ") and line in err[0], err
    assert sorted((p.relative_to(tmp_path), p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()) == before
    assert not (tmp_path / "escape.json").exists()


def test_unpack_never_overwrites_a_run_of_another_configuration(tmp_path, capsys):
    """A good archive, but the job folder holds an unfinished run of another configuration: refused, untouched;
    the folder of an unfinished run of the same job is completed, as documented. (The study's loader refuses the
    folder first; ``check_job_folder`` refuses it again for a caller of ``unpack`` itself.)"""
    from grae.train.config import to_dict
    from grae.train.rundir import claim, release

    rows = _study_rows()
    cfg, job, good = _rows_study(tmp_path)
    target = tmp_path / "studies" / "rows" / "s"
    target.mkdir(parents=True)
    (target / "grpo-seed5.tgz").write_bytes(_tar([(k, v, None) for k, v in good.items()]))
    config = to_dict(cfg.train_config(job))
    claim(job.output_dir, {**config, "seed": 9}, resume=False, overwrite=False)
    release(job.output_dir)
    record = (job.output_dir / "run.json").read_bytes()
    args = ["unpack", str(tmp_path / "studies" / "design" / "s.yaml"), "--rows", str(tmp_path / "studies" / "rows")]
    assert rows.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: method 'grpo' seed 5: ") and "with a different config (seed: 9 → 5)" in err, err
    assert (job.output_dir / "run.json").read_bytes() == record and not (job.output_dir / "eval").exists()
    with pytest.raises(rows.RowsError, match="holds a run of another configuration"):
        rows.check_job_folder(job.output_dir, config)
    import shutil

    shutil.rmtree(job.output_dir)
    claim(job.output_dir, config, resume=False, overwrite=False)  # an unfinished run of this very job
    release(job.output_dir)
    assert rows.main(args) == 0 and job.done


def test_pack_refuses_a_study_whose_report_reads_sample_rows(tmp_path, capsys):
    """A study without a study-level eval: reads each job's eval/after.jsonl, which archives do not carry: pack
    refuses it in one line rather than packing jobs that count as finished and cannot render."""
    rows = _study_rows()
    _rows_study(tmp_path, with_eval=False)
    code = rows.main(["pack", str(tmp_path / "studies" / "design" / "s.yaml"), "--rows", str(tmp_path / "studies" / "rows")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no study-level eval:, so the report reads each job's sample rows" in err[0]
    assert not (tmp_path / "studies" / "rows").exists()
