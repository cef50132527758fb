"""The compare report on a synthetic exact study (no training): pairing against the format-only oracle,
Holm's adjustment over several arms, the pilot banner below 3 seeds, and the seed checks of the config."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.frontier import counts_record, curve_path, rows_path, step_settings  # noqa: E402
from grae.compare.grid import ConfigError, load_compare_config  # noqa: E402
from grae.compare.report import write_compare_report  # noqa: E402
from grae.compare.stats import holm  # noqa: E402
from grae.eval.stats import ProblemCounts  # noqa: E402

PROBLEMS = 30
STEPS = 4


def write_study(tmp_path, seeds, **extra) -> str:
    raw = {"base": "chain-sum", "overrides": {"max_steps": STEPS, "save_steps": STEPS, "eval": {"enabled": False}},
           "methods": {m: {"estimator": "grpo"} for m in ("grpo", "arm_a", "arm_b")}, "seeds": seeds,
           "baseline": "grpo", "output_dir": str(tmp_path / "study"), "frontier": [],
           "eval": {"exact": True, "num_problems": PROBLEMS}, **extra}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def fill_study(cfg, rng) -> tuple[np.ndarray, np.ndarray, dict]:
    """Exact rows for the base (``base/frontier.jsonl``) and every job's final model, as compare writes
    them; returns the base's p and mass and each job's p."""
    qids = [f"q{i}" for i in range(PROBLEMS)]
    base_p = rng.uniform(0.0, 0.3, PROBLEMS)
    mass = rng.uniform(0.4, 1.0, PROBLEMS)
    (cfg.output_dir / "base").mkdir(parents=True)
    (cfg.output_dir / "base" / "frontier.jsonl").write_text("".join(json.dumps(
        {"question_id": q, "exact": True, "p": float(p), "mass": float(m), "k_max": 64, "near_miss_p": 1 / 41}) + "\n"
        for q, p, m in zip(qids, base_p, mass)))
    shift = {"grpo": 0.05, "arm_a": 0.25, "arm_b": 0.08}
    job_p = {}
    for job in cfg.jobs():
        p = np.clip(base_p / mass * 0.5 + shift[job.method] + rng.normal(0, 0.03, PROBLEMS), 0, 1)
        job_p[job.method, job.seed] = p
        (job.output_dir / "eval").mkdir(parents=True)
        (job.output_dir / "eval" / "summary.json").write_text(json.dumps({"train_seconds": 1.0, "steps": STEPS}))
        (job.output_dir / "metrics.jsonl").write_text("".join(json.dumps(
            {"step": s, "reward_mean": 0.2, "frac_all_wrong": 0.5}) + "\n" for s in range(1, STEPS + 1)))
        counts = ProblemCounts(qids, np.full(PROBLEMS, 64), p * 64, p=p, mass=np.ones(PROBLEMS))
        curve = curve_path(rows_path(job.output_dir, STEPS))
        curve.parent.mkdir(parents=True, exist_ok=True)
        curve.write_text(json.dumps({"step": STEPS, "settings": step_settings(cfg.train_config(job), cfg.eval),
                                     **counts_record(counts)}))
    return base_p, mass, job_p


def test_arms_pair_against_the_oracle_with_holm_over_several_arms(tmp_path):
    cfg = load_compare_config(write_study(tmp_path, [0, 1, 2], paired_against=["base", "oracle"],
                                          verdict="arm_a keeps its lead (test)"))
    base_p, mass, job_p = fill_study(cfg, np.random.default_rng(0))
    report = write_compare_report(cfg).read_text()
    summary = json.loads((cfg.output_dir / "summary.json").read_text())
    assert "## Verdict" in report and "arm_a keeps its lead" in report and "Pilot" not in report
    assert summary["pilot"] is None
    # each seed's per-problem pass@1 minus the oracle's p / mass on the same problem
    oracle = base_p / mass
    for method in ("grpo", "arm_a", "arm_b"):
        expected = np.mean([job_p[method, s] - oracle for s in (0, 1, 2)])
        # tol: float64 means of pass@1 differences in [−1, 1]: rounding ≤ 1e-15
        assert summary["vs_oracle"][method]["1"]["mean"] == pytest.approx(expected, abs=1e-9)
    assert summary["vs_oracle"]["base model"]["1"]["mean"] == pytest.approx(np.mean(base_p - oracle), abs=1e-9)
    assert "## Paired difference vs the format-only oracle" in report and "| reference: near-miss guesser" in report
    # Holm over the trained arms, one family per k: vs grpo (2 arms), vs the base and vs the oracle (3 arms)
    assert set(summary["holm"]) == {"vs_baseline", "vs_base", "vs_oracle"}
    family = summary["holm"]["vs_oracle"]
    plain = [min(1.0, 2 * summary["vs_oracle"][m]["4"]["p_opposite"]) for m in family]
    assert [family[m]["4"]["p_holm"] for m in family] == pytest.approx(holm(plain))
    assert report.count("Holm-adjusted over the") == 3 and "p_holm=" in report
    # no model here was also sampled: the gap is not measured, the mass bound is printed
    assert "## Exact − sampled pass@k" in report and "Not measured in this study" in report
    assert "| base model: bound from the mass outside the set | ≤ " in report


def test_fewer_than_three_seeds_is_a_pilot_without_a_verdict(tmp_path):
    cfg = load_compare_config(write_study(tmp_path, [0, 1]))
    fill_study(cfg, np.random.default_rng(1))
    report = write_compare_report(cfg).read_text()
    assert "> **Pilot: no verdict.** 2 seed(s) per method, fewer than 3" in report and "## Verdict" not in report
    assert "covered 90–93 %" in report  # why: the 2-seed interval's measured coverage
    assert json.loads((cfg.output_dir / "summary.json").read_text())["pilot"].startswith("2 seed(s)")
    with pytest.raises(ConfigError, match=r"verdict: a study with 2 seed\(s\) is a pilot"):
        load_compare_config(write_study(tmp_path, [0, 1], verdict="arm_a narrows"))


def test_a_confirmation_refuses_the_seeds_that_selected_its_candidate(tmp_path):
    pilot = tmp_path / "pilot.yaml"
    pilot.write_text(yaml.safe_dump({"seeds": [0]}))
    with pytest.raises(ConfigError, match=r"seeds: \[0\] also selected the candidate .* seeds: \[5, 1, 2, 3, 4\]"):
        load_compare_config(write_study(tmp_path, [0, 1, 2, 3, 4], selected_by="pilot.yaml"))
    with pytest.raises(ConfigError, match=r"seeds: \[1, 2\] also selected"):
        load_compare_config(write_study(tmp_path, [1, 2, 3], selected_by=[1, 2]))
    assert load_compare_config(write_study(tmp_path, [1, 2, 3], selected_by="pilot.yaml")).selected_by == [0]
    with pytest.raises(ConfigError, match="selected_by: no file 'gone.yaml'"):
        load_compare_config(write_study(tmp_path, [1, 2, 3], selected_by="gone.yaml"))
    with pytest.raises(ConfigError, match="paired_against: oracle needs the base's exact rows"):
        load_compare_config(write_study(tmp_path, [0, 1, 2], paired_against="oracle", eval=None))
    with pytest.raises(ConfigError, match=r"paired_against: expected one of \['base', 'oracle', 'temperature_frontier'\]"):
        load_compare_config(write_study(tmp_path, [0, 1, 2], paired_against=["guesser"]))


def test_exact_minus_sampled_where_the_same_models_were_also_sampled(tmp_path):
    """Jobs and the base that were also sampled (``eval/after.jsonl``, ``base/before.jsonl``): the report
    gives exact − sampled per k from the same problems; here at pass@1, from 8 samples per problem."""
    cfg = load_compare_config(write_study(tmp_path, [0, 1, 2]))
    rng = np.random.default_rng(2)
    base_p, _, job_p = fill_study(cfg, rng)
    qids = [f"q{i}" for i in range(PROBLEMS)]

    def sampled(path, p):
        labels = rng.random((PROBLEMS, 8)) < p[:, None]
        path.write_text("".join(json.dumps({"question_id": q, "generation_id": g, "label": bool(labels[i, g])}) + "\n"
                                for i, q in enumerate(qids) for g in range(8)))
        return labels.mean(axis=1)

    base_sampled = sampled(cfg.output_dir / "base" / "before.jsonl", base_p)
    arm_gaps = [job_p["arm_a", job.seed] - sampled(job.output_dir / "eval" / "after.jsonl", job_p["arm_a", job.seed])
                for job in cfg.jobs() if job.method == "arm_a"]
    report = write_compare_report(cfg).read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in report.splitlines()
            if ": exact − sampled |" in line}
    assert set(rows) == {"base model: exact − sampled", "arm_a: exact − sampled"} and "Not measured" not in report
    assert rows["base model: exact − sampled"].startswith(f"{100 * np.mean(base_p - base_sampled):+.1f} [")
    assert rows["arm_a: exact − sampled"].startswith(f"{100 * np.mean(arm_gaps):+.1f} [")
    # sampled n = 8: no gap beyond k = 8
    gap_line = next(line for line in report.splitlines() if line.startswith("| arm_a: exact − sampled |"))
    assert gap_line.rstrip(" |").endswith("| –")


@pytest.mark.parametrize("shared, where", [
    (True, " (this study's jobs_dir is shared: other studies run jobs there too)"),
    (False, " (rows brought from another machine, or a sitting stopped before it recorded its jobs)"),
    (None, "")])
def test_the_budget_says_which_jobs_no_recorded_sitting_ran(shared, where):
    from grae.compare.report_budget import invocations_line

    rows = [{"started": 1.0, "wall_seconds": 600.0, "jobs_run": ["a/seed0", "a/seed1"]},  # a sitting of old
            {"started": 9.0, "wall_seconds": 60.0, "jobs_run": ["b/seed0"]}]  # one stopped after a job
    assert invocations_line(rows, 3, shared) == "- compare wall time: 11.0 min over 2 invocation(s), which ran 3 of the 3 jobs"
    assert invocations_line(rows, 5, shared) == ("- compare wall time: 11.0 min over 2 invocation(s), which ran 3 of "
                                                 f"the 5 jobs; the other 2 were finished outside these invocations{where}")


def test_the_held_out_table_says_where_pass_at_k_cannot_show_narrowing_or_is_at_its_ceiling():
    """At each k > 1 where a reference with no computation lies within 15 points of the base, the
    report says "cannot show narrowing" (the format-only oracle, the base renormalised, is not such a reference);
    where the base reaches 99, that k is at its ceiling."""
    from grae.compare.report_tables import large_k_lines
    from grae.compare.results import StudyResults
    from grae.compare.stats import Interval

    def exact(p):
        p = np.full(4, p, dtype=float)
        return ProblemCounts([f"q{i}" for i in range(4)], np.full(4, 16), p * 16, p=p, mass=np.ones(4))

    base = {1: Interval(0.16, 0.1, 0.2), 2: Interval(0.40, 0.3, 0.5), 4: Interval(0.70, 0.6, 0.8)}
    guess_p = 0.2  # pass@k = 0.2, 0.36, 0.5904: 20.0, 4.0 and 10.96 points below the base at k = 1, 2, 4
    results = StudyResults(None, {}, references={"format-only oracle": exact(0.16), "near-miss guesser (w = 3)":
                                                 exact(guess_p)})
    (line,) = [line for line in large_k_lines(results, base, [1, 2, 4]) if line]  # the base is below its ceiling
    assert line.startswith("**pass@k cannot show narrowing at k = 2, 4**")
    assert "k = 2: base 40.0, near-miss guesser (w = 3) 36.0; k = 4: base 70.0, near-miss guesser (w = 3) 59.0" in line
    results.references = {"format-only oracle": exact(0.16), "near-miss guesser (w = 3)": exact(0.01)}
    assert large_k_lines(results, base, [1, 2, 4]) == []
    base[4] = Interval(0.994, 0.99, 0.998)  # at its ceiling (the fair A-GRAE test's pass@16: 99.4)
    assert large_k_lines(results, base, [1, 2, 4])[1] == ("**pass@k is at its ceiling at k = 4**: the base reaches 99.4 "
                                                          "there (≥ 99), so no method can rise above it and an interval "
                                                          "that holds a margin there says little.")


@pytest.mark.parametrize("train, logged, counted", [(100.0, 300.0, 300.0), (100.0, 90.0, 100.0), (100.0, None, 100.0)])
def test_a_run_resumed_before_grae_counted_its_earlier_process_counts_its_logged_steps(train, logged, counted):
    """The budget's training time: a run whose logged step times (every process's) exceed its train_seconds was
    resumed before grae added the earlier process's time; its logged time is counted, and said so."""
    from grae.compare.report_budget import budget_lines
    from grae.compare.results import JobResult, StudyInfo, StudyResults

    job = JobResult(final=None, metrics={}, train_seconds=train, steps=8, generated=None, logged_seconds=logged)
    assert job.counted_seconds == counted and job.resumed_uncounted == (counted != train)
    info = StudyInfo(title="t", notes="", verdict="", source="s.yaml", methods=["grpo"], seeds=[0], baseline="grpo",
                     bootstrap=1, eval=None, frontier=[], paired_against=[], heldout=False, num_jobs=2, per_step=8,
                     group_size=8)
    other = JobResult(final=None, metrics={}, train_seconds=60.0, steps=8, generated=None)
    line = next(x for x in budget_lines(StudyResults(info, {"grpo": {0: job, 1: other}}), []) if "training wall" in x)
    assert line.startswith(f"- training wall time: {(counted + 60) / 60:.1f} min summed over runs")
    assert ("1 run resumed before grae counted an earlier process's time" in line) == (counted != train)


# ---- the measured budget: what the jobs trained, not what the config asks --------------------------------

MEASURED_SEEDS = [0, 1, 2]


def measured_table(title: str, trained: dict[int, int], configured: int | None, device: str | None = None):
    """A held-out study table (exact counts, a frontier, training logs) whose jobs trained ``trained[seed]`` steps
    under a config asking ``configured`` (None: a table from before grae recorded it); 128 completions per step
    per process, G = 8."""
    from grae.compare.results import DYNAMICS_KEYS, FrontierCheckpoint, JobResult, StudyInfo, StudyResults
    from grae.compare.stats import Interval

    def exact(p):
        p = np.full(8, p, dtype=float)
        return ProblemCounts([f"q{i}" for i in range(8)], np.full(8, 16), p * 16, p=p, mass=np.ones(8))

    info = StudyInfo(title=title, notes="", verdict="", source="study.yaml", methods=["grpo", "arm"],
                     seeds=MEASURED_SEEDS, baseline="grpo", bootstrap=1, eval={"exact": True}, frontier=[0.5, 1.0],
                     paired_against=["base"], heldout=True, num_jobs=6, per_step=128, group_size=8)
    jobs = {m: {s: JobResult(final=exact(p + 0.01 * s), train_seconds=1.0, steps=trained[s], generated=None,
                             metrics={key: [0.2 + 0.01 * i + 0.001 * s for i in range(trained[s])]
                                      for key in DYNAMICS_KEYS},
                             max_steps=configured, device=device)
                for s in MEASURED_SEEDS} for m, p in (("grpo", 0.3), ("arm", 0.35))}
    frontier = {m: {f: FrontierCheckpoint(dict.fromkeys(MEASURED_SEEDS, 16), MEASURED_SEEDS,
                                          {1: Interval(x, x - 0.01, x + 0.01), 16: Interval(y, y - 0.01, y + 0.01)})
                    for f, x, y in ((0.5, 0.25, 0.8), (1.0, 0.3 + d, 0.85))} for m, d in (("grpo", 0), ("arm", 0.05))}
    return StudyResults(info, jobs, {"frontier.jsonl": exact(0.2)}, frontier=frontier)


def render_capturing_titles(results, out, monkeypatch) -> tuple[list[str], dict[str, str]]:
    """Render ``results`` into ``out``; the report's lines and the titles its figures were drawn with (passk.png's title,
    frontier.png's and passk_vs_baseline.png's notes as the plotting functions got them, dynamics.png's from its
    figure)."""
    import grae.compare.report as report_module
    from grae.compare.report import render
    from grae.compare.training import dynamics_figure

    titles: dict[str, str] = {}

    def passk(curves, path, title=None, **kw):
        titles["passk"] = title
        return plot_passk(curves, path, title, **kw)

    def frontier(*args, note=None, **kw):
        titles["frontier"] = note
        return plot_frontier(*args, note=note, **kw)

    def differences(*args, note=None, **kw):
        titles["differences"] = note
        return plot_differences(*args, note=note, **kw)

    plot_passk, plot_frontier = report_module.plot_passk_curves, report_module.plot_frontier
    plot_differences = report_module.plot_differences
    monkeypatch.setattr(report_module, "plot_passk_curves", passk)
    monkeypatch.setattr(report_module, "plot_frontier", frontier)
    monkeypatch.setattr(report_module, "plot_differences", differences)
    lines = render(results, out).read_text().splitlines()
    fig = dynamics_figure(results)
    titles["dynamics"] = fig._suptitle.get_text() if fig._suptitle is not None else ""
    titles["dynamics_x"] = fig.axes[0].get_xlabel()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return lines, titles


def test_a_study_that_trained_fewer_steps_than_its_config_says_so_under_its_title_and_in_its_figures(tmp_path,
                                                                                                      monkeypatch):
    """The config asks 50 steps and the title says 50; the jobs trained 10. The title stays as the study wrote it,
    the line under it and every figure's title say what ran, the budget counts what ran, and summary.json keeps
    both numbers, so --report-only renders the same report."""
    from grae.compare.report import passk_title, render
    from grae.compare.results import from_summary

    title = "Pilot: grpo vs arm (50 steps, 3 seeds)"
    results = measured_table(title, dict.fromkeys(MEASURED_SEEDS, 10), 50)
    lines, titles = render_capturing_titles(results, tmp_path, monkeypatch)
    assert lines[:4] == [f"# {title}", "", "**Trained:** 10 steps per job (the study's config asks 50); 16 prompts × "
                         "8 samples = 128 completions per step.", ""]
    assert lines[4].startswith("- **Run:**")
    assert "- steps per run: 10; 128 completions per step (G = 8); 1,280 training samples per run" in lines
    note = "trained 10 steps per job (the study's config asks 50)"
    assert titles["passk"] == passk_title(results) == f"{title}\n{note}"
    assert titles["dynamics"] == titles["frontier"] == titles["differences"] == note and titles["dynamics_x"] == "step"
    assert any("fractions of the 50 steps the study's config asks, not of the 10 the jobs trained" in x for x in lines)
    table = json.loads((tmp_path / "summary.json").read_text())["results"]
    assert {(j["steps"], j["max_steps"]) for by_seed in table["jobs"].values() for j in by_seed.values()} == {(10, 50)}
    render(from_summary(tmp_path / "summary.json"), tmp_path / "again")
    assert (tmp_path / "again" / "report.md").read_text() == (tmp_path / "report.md").read_text()

    # jobs that trained different numbers of steps: the range
    results = measured_table(title, {0: 10, 1: 50, 2: 30}, 50)
    lines, titles = render_capturing_titles(results, tmp_path / "range", monkeypatch)
    assert lines[2] == ("**Trained:** 10–50 steps per job (the study's config asks 50); 16 prompts × 8 samples = 128 "
                        "completions per step.")
    assert "- steps per run: 10–50; 128 completions per step (G = 8); 1,280–6,400 training samples per run" in lines
    assert titles["dynamics"] == "trained 10–50 steps per job (the study's config asks 50)"


def test_a_study_that_trained_what_its_config_asks_reads_as_before(tmp_path, monkeypatch):
    """Measured = configured = the title's number: no line under the title, the figures' titles are the study's."""
    title = "Pilot: grpo vs arm (50 steps, 3 seeds)"
    lines, titles = render_capturing_titles(measured_table(title, dict.fromkeys(MEASURED_SEEDS, 50), 50), tmp_path,
                                            monkeypatch)
    assert lines[:2] == [f"# {title}", ""] and lines[2].startswith("- **Run:**")
    assert not any("Trained:" in x or "the study's config asks" in x for x in lines)
    assert "- steps per run: 50; 128 completions per step (G = 8); 6,400 training samples per run" in lines
    assert titles == {"passk": title, "frontier": None, "differences": None, "dynamics": "", "dynamics_x": "step"}
    untitled = measured_table("", dict.fromkeys(MEASURED_SEEDS, 50), 50)
    assert render_capturing_titles(untitled, tmp_path / "untitled", monkeypatch)[1]["passk"] == (
        "held-out pass@k after training")


@pytest.mark.parametrize("title, trained, configured, device, line", [
    # the title's number is stale, the config's is what ran
    ("A vs B (200 steps)", 100, 100, None,
     "**Trained:** 100 steps per job; 16 prompts × 8 samples = 128 completions per step. The title's 200 steps is not "
     "what ran."),
    # a table from before grae recorded the config's max_steps: only the title can disagree
    ("A vs B (200 steps)", 100, None, None,
     "**Trained:** 100 steps per job; 16 prompts × 8 samples = 128 completions per step. The title's 200 steps is not "
     "what ran."),
    ("A vs B", 100, None, None, None),
    ("A vs B, 1,024 problems, 2 epochs", 100, 100, None, None),
    # two processes trained each job: twice the config's per-process batch per step
    ("A vs B", 100, 100, "cuda (NVIDIA H100 80GB HBM3) × 2 processes",
     "**Trained:** 100 steps per job; 32 prompts × 8 samples = 256 completions per step (128 per process, as the "
     "config asks)."),
])
def test_the_line_under_the_title_states_the_measured_budget_where_it_is_not_what_was_asked(title, trained, configured,
                                                                                          device, line):
    from grae.compare.report_budget import budget_lines, trained_line

    results = measured_table(title, dict.fromkeys(MEASURED_SEEDS, trained), configured, device)
    assert trained_line(results) == line
    if device:
        assert f"- steps per run: {trained}; 256 completions per step (G = 8); {256 * trained:,} training samples per " \
               "run" in budget_lines(results, [])


def test_a_committed_summary_without_the_configured_steps_renders_its_heading_as_before():
    """studies/reports/gate_r4/summary.json records each job's steps but not its config's max_steps: read
    gracefully, its heading unchanged (tests/test_compare_results.py re-renders the whole report)."""
    from pathlib import Path

    from grae.compare.report_header import title_lines
    from grae.compare.results import from_summary

    path = Path(__file__).resolve().parents[1] / "studies" / "reports" / "gate_r4" / "summary.json"
    results = from_summary(path)
    jobs = [j for by_seed in results.jobs.values() for j in by_seed.values()]
    assert {j.steps for j in jobs} == {512} and {j.max_steps for j in jobs} == {None}
    assert title_lines(results) == [f"# {results.study.title}", ""]
    assert path.read_text().splitlines()[0] == "{"
