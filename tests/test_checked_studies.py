"""Studies are checked before they are used: a YAML key written twice is refused naming it, a
summary.json's jobs must be its design's methods × seeds, curve counts are integers with 0 <= c <= n and n > 0,
invocation rows are what grae compare writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from grae.compare.frontier import counts_from_record, curve_path, frontier_steps, rows_path  # noqa: E402
from grae.compare.grid import load_compare_config  # noqa: E402
from grae.compare.report import write_compare_report  # noqa: E402
from grae.train.config import ConfigError, read_yaml  # noqa: E402
from grae.yaml_io import DuplicateKeyError, load_yaml  # noqa: E402
from test_compare_results import exact_study, training_only_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _compare(*args: str):
    from grae.cli import compare_cmd

    app = typer.Typer()
    compare_cmd.register(app)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["compare", *args])
    return result.exit_code, " ".join(result.output.split())


# --- one YAML reader, duplicate keys refused ---------------------------------------------------------------------


def test_every_yaml_grae_reads_goes_through_the_one_loader():
    readers = [f"{p.relative_to(ROOT)}:{i}" for folder in ("src", "studies") for p in (ROOT / folder).rglob("*.py")
               for i, line in enumerate(p.read_text().splitlines(), 1)
               if re.search(r"yaml\.(safe_load|load|full_load|unsafe_load)\(", line) and p.name != "yaml_io.py"]
    assert readers == []


def test_a_design_with_a_method_written_twice_is_refused_naming_it(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("base: chain-sum\nmethods:\n  grpo: {estimator: grpo}\n  rloo: {estimator: rloo}\n"
                    "  grpo: {estimator: rloo}\nseeds: [0, 1]\nbaseline: grpo\n")
    with pytest.raises(ConfigError, match=r"the key 'grpo' is written twice \(lines 3 and 5\)"):
        load_compare_config(path)
    code, out = _compare(str(path))
    assert code == 2 and "the key 'grpo' is written twice" in out


def test_a_train_config_and_a_flag_with_a_key_twice_are_refused(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("model: tiny\ntrl:\n  learning_rate: 1.0e-3\n  learning_rate: 1.0\n")
    with pytest.raises(ConfigError, match="the key 'learning_rate' is written twice"):
        read_yaml(path)
    from grae.cli.train_cmd import split_args

    with pytest.raises(typer.BadParameter, match="--trl: the key 'beta' is written twice"):
        split_args(["--trl", "{beta: 0.1, beta: 0.2}"])
    from grae.cli.data_cmd import parse_params
    from grae.cli.eval_cmd import _parse_params

    with pytest.raises(typer.BadParameter, match="x: the key 'a' is written twice"):
        _parse_params(["x={a: 1, a: 2}"])
    with pytest.raises(typer.BadParameter, match="--param x: the key 'a' is written twice"):
        parse_params(["x={a: 1, a: 2}"])
    with pytest.raises(DuplicateKeyError):
        load_yaml("- {k: 1, k: 2}")
    assert load_yaml("base: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n") == {"base": {"x": 1}, "m": {"x": 2}}  # merge: YAML's


# --- summary.json against its design -----------------------------------------------------------------------------


@pytest.mark.parametrize(("tamper", "said"), [
    (lambda r: r["jobs"]["grpo"].pop("2"), "results.jobs.grpo: seeds [0, 1], the study's are [0, 1, 2] (missing [2])"),
    (lambda r: r["jobs"]["agrae"].__setitem__("3", r["jobs"]["agrae"]["0"]), "(not in it [3])"),
    (lambda r: r["study"].__setitem__("seeds", [0, 1, 2, 3]), "the study's are [0, 1, 2, 3] (missing [3])"),
    (lambda r: r["jobs"].pop("agrae"), "results.jobs: methods ['grpo'], the study's are ['agrae', 'grpo']"),
    (lambda r: r["invocations"].append({"started": "noon", "wall_seconds": 1, "jobs_run": []}),
     "results.invocations: row 1: started is a finite number"),
    (lambda r: r["invocations"].append({"started": 1, "wall_seconds": 1, "jobs_run": ["rloo/seed9"]}),
     "jobs_run names 'rloo/seed9', not a job of this study"),
    (lambda r: r["invocations"].append("junk"), "results.invocations: row 1: expected {started, wall_seconds, jobs_run}"),
])
def test_report_only_refuses_a_summary_whose_jobs_are_not_its_design(tmp_path, tamper, said):
    cfg = load_compare_config(training_only_study(tmp_path))
    write_compare_report(cfg)
    summary = cfg.output_dir / "summary.json"
    data = json.loads(summary.read_text())
    tamper(data["results"])
    summary.write_text(json.dumps(data))
    code, out = _compare(str(summary), "--report-only", "-o", str(tmp_path / "re"))
    assert code == 2 and said in out, out
    assert not (tmp_path / "re").exists()


# --- curve counts and invocations.jsonl ---------------------------------------------------------------------------


@pytest.mark.parametrize(("counts", "exact", "said"), [
    ({"q1": [4, 5]}, None, "c: correct samples are in [0, n], got c = 5"),
    ({"q1": [4, -1]}, None, "c: correct samples are in [0, n], got c = -1"),
    ({"q1": [0, 0]}, None, "n: every problem has at least one sample, got 0"),
    ({"q1": [4, float("nan")]}, None, "c: expected a list of integers"),
    ({"q1": [4, 2.5]}, None, "c: expected a list of integers"),
    ({"q1": [4, True]}, None, "c: expected a list of integers"),
    ({"q1": [4]}, None, "expected {\"counts\": {question id: [n, c]}}"),
    ({}, None, "expected {\"counts\""),
    ({"q1": [4, 2]}, {"q1": [1.5, 0.9]}, "p: a probability is in [0, 1], got 1.5"),
    ({"q1": [4, 2]}, {"q1": [float("nan"), 0.9]}, "p: expected finite numbers"),
    ({"q1": [4, 2]}, {"q2": [0.5, 0.9]}, "exact: expected {question id: [p, mass]}"),
])
def test_a_curve_whose_counts_no_evaluation_writes_is_refused_naming_the_file(counts, exact, said):
    record = {"counts": counts} | ({"exact": exact} if exact is not None else {})
    with pytest.raises(ValueError, match=re.escape(said)) as err:
        counts_from_record(record, "step-4.curve.json")
    assert str(err.value).startswith("step-4.curve.json")


def test_report_only_on_a_tampered_curve_or_junk_invocations_is_one_line(tmp_path):
    path, _ = exact_study(tmp_path)
    cfg = load_compare_config(path)
    job = cfg.jobs()[0]
    curve = curve_path(rows_path(job.output_dir, max(frontier_steps(cfg.train_config(job).max_steps, [1.0]).values())))
    record = json.loads(curve.read_text())
    good = json.dumps(record)
    first = next(iter(record["counts"]))
    record["counts"][first][0] = 0
    curve.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=re.escape(f"{curve}.n: every problem has at least one sample, got 0")):
        write_compare_report(cfg)
    code, out = _compare(str(path), "--report-only")
    assert code == 2 and "every problem has at least one sample" in out and "Traceback" not in out
    curve.write_text(good)
    with open(cfg.output_dir / "invocations.jsonl", "a") as fh:
        fh.write(json.dumps({"started": 1.0, "wall_seconds": -5, "jobs_run": []}) + "\n")
    with pytest.raises(ValueError, match="invocations.jsonl: row 5: wall_seconds is a finite number >= 0, got -5"):
        write_compare_report(cfg)
