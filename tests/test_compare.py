"""`grae compare` on a small grid: report with tables and PNGs; a rerun skips finished jobs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.grid import ConfigError, expand_methods, load_compare_config  # noqa: E402
from grae.compare.stats import paired_vs_baseline, two_level_bootstrap  # noqa: E402
from grae.eval.stats import ProblemCounts  # noqa: E402
from grae.train.rundir import read_metrics  # noqa: E402
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

# the module's studies share one worker under `make test` (-n 2 --dist loadgroup): each runs once
pytestmark = pytest.mark.xdist_group("test_compare")


def study_config(model_dir, output_dir, **study) -> dict:
    """A small study on a random tiny model (2 steps of 8 completions, G = 4, 4 tokens; 4 held-out problems x
    n = 4): 2 methods x 2 seeds unless ``study`` replaces keys."""
    cfg = {
        "base": "chain-sum",
        "overrides": {"model": model_dir, "max_steps": 2, "save_steps": 2, "task": {"train_size": 100},
                      "trl": {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 4},
                      "eval": {"num_problems": 4, "n": 4, "batch_size": 16},
                      "continue_without_signal": True},  # a random model: its base has no signal
        "methods": {"grpo": {"estimator": "grpo"}, "ngrpo": {"estimator": "ngrpo"}},
        "seeds": [0, 1],
        "baseline": "grpo",
        "output_dir": str(output_dir),
        "bootstrap": 200,
        "title": "smoke",
    }
    cfg.update(study)
    return cfg


def write_config(tmp_path, model_dir):
    path = tmp_path / "compare.yaml"
    path.write_text(yaml.safe_dump(study_config(model_dir, tmp_path / "compare")))
    return path


def compare(config, *args) -> subprocess.CompletedProcess:
    """``grae compare CONFIG ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "grae.cli", "compare", str(config), *args], capture_output=True,
                          text=True, timeout=scaled(600))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def small_grid(tmp_path_factory, model_dir):
    """One 2-method x 2-seed study for the module (its tests share the run); the report and summary as the
    first invocation wrote them."""
    root = tmp_path_factory.mktemp("grid")
    config = write_config(root, model_dir)
    first = compare(config)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = root / "compare"
    return SimpleNamespace(root=root, config=config, out=out, report=(out / "report.md").read_text(),
                           summary=json.loads((out / "summary.json").read_text()))


def test_compare_small_grid_reports_methods_and_the_base(small_grid):
    out, report, summary = small_grid.out, small_grid.report, small_grid.summary
    assert "| grpo |" in report and "| ngrpo |" in report and "Paired difference vs grpo" in report
    assert "seeds per method: 2" in report and "training wall time" in report
    assert "over 1 invocation(s), which ran 4 of the 4 jobs" in report
    # the sitting's record: a row as each job finished, then its whole wall time
    rows = [json.loads(line) for line in (out / "invocations.jsonl").read_text().splitlines()]
    assert len({r["started"] for r in rows}) == 1 and [r["jobs_run"] for r in rows][-1] == []
    assert sorted(j for r in rows for j in r["jobs_run"]) == ["grpo/seed0", "grpo/seed1", "ngrpo/seed0", "ngrpo/seed1"]
    assert [r["wall_seconds"] for r in rows] == sorted(r["wall_seconds"] for r in rows)
    device = json.loads((out / "jobs" / "grpo" / "seed0" / "eval" / "summary.json").read_text())["device"]
    assert device.startswith("cpu (") and re.search(r", \d+ threads?\)$", device)
    # each job's device with the machine's load at its end: "- trained by: N on DEVICE, load …; …"
    jobs = [json.loads((out / "jobs" / m / f"seed{s}" / "eval" / "summary.json").read_text())
            for m in ("grpo", "ngrpo") for s in (0, 1)]
    assert all(j["device"] == device and re.fullmatch(r"load \d+\.\d on \d+ CPUs?", j.get("load") or "load 0.0 on 1 CPU")
               for j in jobs)
    trained = Counter(", ".join(filter(None, [j["device"], j.get("load")])) for j in jobs)
    parts = [f"{n} on {d}" for d, n in sorted(trained.items(), key=lambda item: (-item[1], item[0]))]
    assert "- trained by: " + "; ".join(parts) + "\n" in report and sum(trained.values()) == 4
    assert all((out / png).stat().st_size > 0 for png in ("passk.png", "dynamics.png", "passk_vs_baseline.png"))
    assert "![pass@k difference vs baseline](passk_vs_baseline.png)" in report
    assert set(summary["methods"]) == {"grpo", "ngrpo"}
    # method − base model, paired on the problem: pass@1 is the mean label, recomputed here from the rows
    assert "Paired difference vs the base model" in report and "Where the update goes over training" in report
    base_p1 = _per_problem_pass1(out / "base" / "before.jsonl")
    for method in ("grpo", "ngrpo"):
        per_seed = [_per_problem_pass1(out / "jobs" / method / f"seed{s}" / "eval" / "after.jsonl") for s in (0, 1)]
        expected = np.mean([[after[q] - base_p1[q] for q in base_p1] for after in per_seed])
        # tol: a float64 mean of pass@1 differences in [−1, 1]: rounding ≤ 1e-15
        assert summary["vs_base"][method]["1"]["mean"] == pytest.approx(expected, abs=1e-9)
        assert summary["update_allocation"][method]["omega"][-1] >= 0


def test_a_rerun_skips_finished_jobs(small_grid):
    mtimes = {p: p.stat().st_mtime for p in small_grid.out.glob("jobs/*/seed*/eval/summary.json")}
    assert len(mtimes) == 4
    second = compare(small_grid.config)
    assert second.returncode == 0
    assert "4 of 4 jobs already finished; running 0" in second.stdout
    assert all(p.stat().st_mtime == t for p, t in mtimes.items())


def test_a_second_study_on_the_same_job_pool_reuses_its_runs(small_grid):
    """A second study on the same job pool reuses the finished grpo runs and says so in its budget."""
    other = yaml.safe_load(small_grid.config.read_text())
    other.update(output_dir=str(small_grid.root / "other"), jobs_dir=str(small_grid.out / "jobs"),
                 methods={"grpo": {"estimator": "grpo"}})
    other_path = small_grid.root / "other.yaml"
    other_path.write_text(yaml.safe_dump(other))
    third = compare(other_path)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "2 of 2 jobs already finished; running 0" in third.stdout
    assert "not recorded (no invocation ran a job)" in (small_grid.root / "other" / "report.md").read_text()


def test_a_training_only_study_reports_from_its_training_logs(tmp_path, model_dir):
    """Jobs with eval.enabled false and no study ``eval`` key: the report is the training logs' and the
    checkpoint frontier's (both stopped on a missing eval/after.jsonl after every job had trained); eval
    on for some methods only is refused before anything runs. The frontier evaluates with the jobs' own
    eval settings, kept small here (4 problems x n = 4; with the default's 200 x 64 this test took 149 s alone
    on the shared 2-core machine, 4 min 8 s in a CI run)."""
    raw = yaml.safe_load(write_config(tmp_path, model_dir).read_text())
    raw["overrides"]["eval"]["enabled"] = False
    raw.update(seeds=[0], frontier=[0.5, 1.0], methods={"grpo": {"estimator": "grpo"}, "agrae": {"estimator": "agrae"}})
    config = tmp_path / "train_only.yaml"
    config.write_text(yaml.safe_dump(raw))
    run = compare(config)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = tmp_path / "compare"
    report = (out / "report.md").read_text()
    assert "held-out: none (training-only study" in report and "Not computed: a training-only study" in report
    assert "| grpo | pass@1 |" in report and "| agrae | pass@1 |" in report  # pass@k on the training batches
    assert (out / "dynamics.png").stat().st_size > 0 and not (out / "passk.png").exists()
    # the frontier evaluates every checkpoint with the jobs' own settings, the final one too (no after.jsonl to reuse)
    assert "## Checkpoint frontier" in report and set(json.loads((out / "frontier.json").read_text())["methods"]) == {
        "grpo", "agrae"}
    for step in (1, 2):  # 50 % and 100 % of 2 steps
        curve = json.loads((out / "jobs" / "grpo" / "seed0" / "eval" / "frontier" / f"step-{step}.curve.json").read_text())
        assert curve["settings"] == {"num_problems": 4, "n": 4, "exact": False}
        assert len(curve["counts"]) == 4 and all(n == 4 for n, _ in curve["counts"].values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout"] is False and set(summary["update_allocation"]) == {"grpo", "agrae"}
    omega = [r["omega"] for r in read_metrics(out / "jobs" / "agrae" / "seed0" / "metrics.jsonl")]
    # tol: the summary rounds ω (in [0, 1]) to 4 decimals (grae.compare.training)
    assert summary["update_allocation"]["agrae"]["omega"][-1] == pytest.approx(omega[-1], abs=1e-4)

    raw["methods"]["agrae"]["eval.enabled"] = True
    raw["output_dir"] = str(tmp_path / "mixed")
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"eval.enabled: false for \['grpo'\] but true for \['agrae'\]"):
        load_compare_config(config)


def test_sweeps_expand_and_bad_configs_fail(tmp_path):
    methods = expand_methods({"agrae": {"estimator": "agrae", "sweep": {"estimator_params.alpha": [0.25, 1.0]}}})
    assert methods == {"agrae[alpha=0.25]": {"estimator": "agrae", "estimator_params.alpha": 0.25},
                       "agrae[alpha=1.0]": {"estimator": "agrae", "estimator_params.alpha": 1.0}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"base": "chain-sum", "methods": {"x": {"estimator": "nope"}}, "seeds": [0],
                                   "baseline": "x", "output_dir": str(tmp_path)}))
    with pytest.raises(ConfigError, match="method 'x': estimator: unknown estimator 'nope'"):
        load_compare_config(bad)


def test_two_level_bootstrap_and_pairing():
    rng = np.random.default_rng(0)
    values = rng.random((5, 40, 2))
    (iv, _) = two_level_bootstrap(values, draws=500)
    assert iv.lo <= values[..., 0].mean() <= iv.hi
    counts = {s: ProblemCounts([f"q{i}" for i in range(10)], np.full(10, 4), rng.integers(0, 5, 10)) for s in range(3)}
    same = paired_vs_baseline(counts, counts, [1, 4], draws=200)
    assert all(v.mean == 0 and v.lo == 0 and v.hi == 0 for v in same.values())


def _per_problem_pass1(path) -> dict[str, float]:
    labels: dict[str, list[bool]] = {}
    for line in filter(None, path.read_text().split("\n")):  # JSONL rows end at "\n" only: a response may hold U+0085
        row = json.loads(line)
        labels.setdefault(row["question_id"], []).append(bool(row["label"]))
    return {q: float(np.mean(v)) for q, v in labels.items()}


def test_study_eval_key_validates_and_round_trips_exact_counts(tmp_path):
    from grae.compare.frontier import counts_from_record, counts_record
    from grae.compare.runner import frontier_command

    study = {"base": "regime2", "methods": {"grpo": {"estimator": "grpo"}}, "seeds": [0], "baseline": "grpo",
             "output_dir": str(tmp_path / "s"), "frontier": [0.25, 0.5], "eval": {"exact": True, "num_problems": 96}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    cfg = load_compare_config(path)
    assert cfg.evaluated_fractions() == [0.25, 0.5, 1.0]  # with eval, the final model is evaluated too
    command = frontier_command(cfg, cfg.jobs()[0].output_dir / "job.yaml", cfg.jobs()[0])
    assert command[-5:] == ["0.25", "0.5", "1.0", "--exact", "--num-problems=96"]
    for bad, match in (({"exact": "yes"}, "eval: expected"), ({"k": 1}, "eval: expected"), ({}, "changes nothing")):
        path.write_text(yaml.safe_dump({**study, "eval": bad}))
        with pytest.raises(ConfigError, match=match):
            load_compare_config(path)
    path.write_text(yaml.safe_dump({**study, "frontier_eval": {"n": 4}}))
    with pytest.raises(ConfigError, match="eval and frontier_eval: choose one"):
        load_compare_config(path)
    path.write_text(yaml.safe_dump({**study, "base": "chain-sum", "overrides": {"task": {"name": "gcd"}}}))
    with pytest.raises(ConfigError, match="eval.exact: task 'gcd' declares no finite answer set"):
        load_compare_config(path)
    exact = ProblemCounts(["a", "b"], np.array([256, 256]), np.array([25.6, 0.0]), p=np.array([0.1, 0.0]),
                          mass=np.array([0.9, 0.5]))
    back = counts_from_record(json.loads(json.dumps(counts_record(exact))))
    assert back.question_ids == ["a", "b"] and back.p.tolist() == [0.1, 0.0] and back.mass.tolist() == [0.9, 0.5]
    sampled = counts_from_record(counts_record(ProblemCounts(["a"], np.array([4]), np.array([3]))))
    assert sampled.p is None and sampled.c.tolist() == [3]


def test_frontier_methods_evaluate_only_their_checkpoints_and_keep_the_baseline(tmp_path):
    from grae.compare.runner import frontier_command

    study = {"base": "regime2", "methods": {"grpo": {"estimator": "grpo"}, "nsr": {"estimator": "nsr"}},
             "seeds": [3, 1], "baseline": "grpo", "output_dir": str(tmp_path / "s"), "frontier": [0.25, 0.5],
             "frontier_methods": ["grpo"], "eval": {"exact": True, "num_problems": 96}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    cfg = load_compare_config(path)
    by_method = {job.method: job for job in cfg.jobs()}
    assert cfg.evaluated_fractions(by_method["grpo"]) == [0.25, 0.5, 1.0]
    assert cfg.evaluated_fractions(by_method["nsr"]) == [1.0]  # the final model only
    assert frontier_command(cfg, path, by_method["nsr"])[-3:] == ["1.0", "--exact", "--num-problems=96"]
    assert cfg.train_config(by_method["nsr"]).keep_steps == cfg.train_config(by_method["grpo"]).keep_steps
    for bad, match in ((["nsr"], "the baseline 'grpo' is missing"), (["grpo", "ppo"], r"\['ppo'\] are not methods"),
                       ([], "non-empty list")):
        path.write_text(yaml.safe_dump({**study, "frontier_methods": bad}))
        with pytest.raises(ConfigError, match=match):
            load_compare_config(path)
    without_eval = {k: v for k, v in study.items() if k != "eval"}
    path.write_text(yaml.safe_dump(without_eval))
    cfg = load_compare_config(path)
    assert cfg.evaluated_fractions(next(j for j in cfg.jobs() if j.method == "nsr")) == []


def test_pending_jobs_run_seed_by_seed(tmp_path, monkeypatch):
    """A study cut short holds whole seeds: the runner takes every method's job of a seed before the next seed."""
    from grae.compare import runner

    study = {"base": "regime2", "methods": {"grpo": {"estimator": "grpo"}, "nsr": {"estimator": "nsr"}},
             "seeds": [3, 1], "baseline": "grpo", "output_dir": str(tmp_path / "s"), "frontier": []}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    cfg = load_compare_config(path)
    order = []

    class Recorder:
        def __init__(self, max_workers):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, fn, jobs):
            order.extend((j.method, j.seed) for j in jobs)
            return []

    monkeypatch.setattr(runner, "ThreadPoolExecutor", Recorder)
    monkeypatch.setattr(runner, "share_base_evaluation", lambda *a, **k: None)
    with pytest.raises(runner.JobsFailed):
        runner.run_jobs(cfg, log=lambda line: None)
    assert order == [("grpo", 3), ("nsr", 3), ("grpo", 1), ("nsr", 1)]


def check_gate_v2_design(path, builds: str, scratch) -> None:
    """A gate v2 design: its keys, seeds and train config validate, up to a base that a committed design
    builds (``-o runs/...``) and a fresh clone lacks."""
    design = yaml.safe_load(path.read_text())
    assert {"name", "train", "seeds", "rule"} <= set(design) and len(design["seeds"]) >= 4, path
    check_design_train(path, design["name"], design["train"], builds, scratch)


def check_gate_v3_design(path, builds: str, scratch) -> None:
    """A gate v3 design (studies/gate_v3.py): a pre-gate's every arm (its settings over the design's train
    config) or a gate's train config validates, up to a base that a committed design builds."""
    import sys

    sys.path.insert(0, str(path.parents[1]))
    from gate_v3 import merged

    design = yaml.safe_load(path.read_text())
    if isinstance(design.get("pregate"), dict):  # design 3: its pre-gate's arms and its gate in one file
        assert len(design["pregate"]["seeds"]) >= 2 and len(design["gate"]["seeds"]) >= 4, path
        configs = {arm: merged(design["train"], over or {}) for arm, over in design["pregate"]["arms"].items()}
    elif "pregate" in design:  # a gate: its pre-gate design exists and it names its seeds
        assert (path.parents[2] / design["pregate"]).exists() and len(design["seeds"]) >= 4, path
        configs = {"train": design["train"]}
    else:
        assert {"name", "train", "arms", "checkpoints", "band", "seed"} <= set(design), path
        configs = {arm: merged(design["train"], over or {}) for arm, over in design["arms"].items()}
    for name, cfg in configs.items():
        check_design_train(path, name, cfg, builds, scratch)


def check_design_train(path, name: str, cfg: dict, builds: str, scratch) -> None:
    from grae.train.config import load_config
    from grae.train.errors import ConfigError as TrainConfigError

    train = scratch / f"{path.stem}-{name}.yaml"
    train.write_text(yaml.safe_dump(cfg))
    try:
        load_config(train)
    except TrainConfigError as err:
        built = re.search(r"(runs/gate_v[23]/[A-Za-z0-9_]+)", str(err))
        assert built and f"-o {built.group(1)}" in builds, (path, name, err)


def test_committed_studies_validate(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "studies"
    studies = sorted(root.glob("*.yaml"))
    assert len(studies) >= 3
    for path in studies:
        cfg = load_compare_config(path)
        assert len(cfg.seeds) >= 5 and cfg.baseline in cfg.methods
    # design sweeps (fewer seeds, to choose a testbed) validate too; a gate attempt whose base is built by its
    # own step 1 (`grae tiny build ... -o runs/...`) validates up to that base, which a fresh clone lacks
    designs = sorted((root / "design").glob("*.yaml"))
    builds = " ".join(path.read_text() for path in designs)
    for path in designs:
        if "rule: issue-45-gate-v2" in path.read_text():  # a gate v2 design: studies/gate_v2.py reads it
            check_gate_v2_design(path, builds, tmp_path)
            continue
        if re.search(r"^(arms|pregate):", path.read_text(), flags=re.M):  # a gate v3 design: studies/gate_v3.py
            check_gate_v3_design(path, builds, tmp_path)
            continue
        try:
            cfg = load_compare_config(path)
        except ConfigError as err:
            built = re.match(r"model: '(runs/[^']+)' does not exist", str(err))
            assert built and f"-o {built.group(1)}" in path.read_text(), (path, err)
            continue
        assert cfg.baseline in cfg.methods


def _pooled_study(tmp_path, name, overrides):
    """A one-job chain-sum study named ``name`` whose jobs live in the shared pool ``tmp_path/jobs``."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"base": "chain-sum", "overrides": overrides, "seeds": [0], "baseline": "grpo",
                                    "methods": {"grpo": {"estimator": "grpo"}},
                                    "output_dir": str(tmp_path / name), "jobs_dir": str(tmp_path / "jobs")}))
    return path


def test_shared_jobs_dir_reuses_same_config_and_refuses_a_different_one(tmp_path):
    from grae.train.config import to_dict

    study = partial(_pooled_study, tmp_path)
    first = load_compare_config(study("a", {"max_steps": 7}))
    (job,) = first.jobs()
    assert job.output_dir == tmp_path / "jobs" / "grpo" / "seed0"
    job.output_dir.mkdir(parents=True)
    (job.output_dir / "job.yaml").write_text(yaml.safe_dump(to_dict(first.train_config(job)), sort_keys=False))
    (again,) = load_compare_config(study("b", {"max_steps": 7})).jobs()
    assert again.output_dir == job.output_dir
    with pytest.raises(ConfigError, match=r"method 'grpo' seed 0: .* holds a run with a different config"):
        load_compare_config(study("c", {"max_steps": 8}))


def test_a_job_trained_with_the_no_signal_stop_armed_is_reused_when_the_study_turns_it_off(tmp_path):
    """continue_without_signal false → true leaves the job's steps as they were (the flag only stops training), so
    its folder is reused; true → false is another run (it may have trained through a stretch the stop ends)."""
    from grae.train.config import to_dict

    study = partial(_pooled_study, tmp_path)
    armed = load_compare_config(study("armed", {"max_steps": 7}))
    (job,) = armed.jobs()
    job.output_dir.mkdir(parents=True)
    recorded = to_dict(armed.train_config(job))
    assert recorded["continue_without_signal"] is False
    (job.output_dir / "job.yaml").write_text(yaml.safe_dump(recorded, sort_keys=False))
    (off,) = load_compare_config(study("off", {"max_steps": 7, "continue_without_signal": True})).jobs()
    assert off.output_dir == job.output_dir

    (job.output_dir / "job.yaml").write_text(yaml.safe_dump({**recorded, "continue_without_signal": True}))
    with pytest.raises(ConfigError, match=r"method 'grpo' seed 0: .* holds a run with a different config"):
        load_compare_config(study("armed_again", {"max_steps": 7}))
    with pytest.raises(ConfigError, match=r"method 'grpo' seed 0: .* holds a run with a different config"):
        load_compare_config(study("off_longer", {"max_steps": 8, "continue_without_signal": True}))
