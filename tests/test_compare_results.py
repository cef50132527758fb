"""A study's table (grae.compare.results.StudyResults): gathered once from the run directory, carried in
``summary.json``, and rendered again from it to the same bytes — for every committed compare report that
has one, and for synthetic studies with every section (frontier, oracle, exact − sampled, memorisation,
training-only). Committed compare reports without a table are listed with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
import yaml
from hypothesis import given

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.frontier import counts_record, curve_path, frontier_steps, rows_path, step_settings  # noqa: E402
from grae.compare.grid import load_compare_config  # noqa: E402
from grae.compare.report import render, write_compare_report  # noqa: E402
from grae.compare.results import counts_from_json, counts_to_json, from_summary, gather  # noqa: E402
from grae.eval.exact import NEAR_MISS_W  # noqa: E402
from grae.eval.stats import ProblemCounts  # noqa: E402

REPORTS = Path(__file__).resolve().parents[1] / "studies" / "reports"
#: the files a compare report writes that are compared byte for byte (PNGs: see :func:`assert_same_png`)
TEXT_FILES = ("report.md", "summary.json", "frontier.json")
PNG_FILES = ("passk.png", "dynamics.png", "passk_vs_baseline.png", "frontier.png")

_BOOTSTRAP_ERA = ("written with the two-level bootstrap that the crossed interval replaced (studies/README.md); its "
                  "per-problem rows were never committed, so neither its intervals nor a table can be recomputed")
_BEFORE_TABLE = ("written by grae compare before summary.json carried the table; its jobs' rows stayed "
                 "in runs/ on the machine that ran them (not committed), so there is nothing to gather it from")
_TRAINING_ONLY = ("a training-only study: compare's report is kept as compare_report.md beside the study's own "
                  "README, without its summary.json; the jobs' metrics.jsonl are not committed")
#: committed reports written by grae compare that carry no table, and why they cannot be regenerated
NO_TABLE = {
    **dict.fromkeys(("main", "exp1", "exp2", "pilot", "sampling", "regime", "regime_sweep"), _BOOTSTRAP_ERA),
    **dict.fromkeys(("smollm2_real", "gate", "passk_pilot_r1", "pkpo_candidate_r1"), _BEFORE_TABLE),
    **dict.fromkeys(("agrae_collapse_r1", "agrae_collapse_r1_5e5"), _TRAINING_ONLY),
}


def compare_reports() -> list[Path]:
    """Every folder under studies/reports/ holding a report written by grae compare (its budget says
    'reproduce: `grae compare …`')."""
    return sorted({md.parent for md in REPORTS.rglob("*.md") if "- reproduce: `grae compare " in md.read_text()})


def has_table(folder: Path) -> bool:
    path = folder / "summary.json"
    return path.exists() and "results" in json.loads(path.read_text())


def assert_same_png(made: Path, committed: Path) -> None:
    """Same bytes when this matplotlib wrote the committed PNG (its ``Software`` text chunk names the
    version); under another matplotlib, whose rasteriser may differ, the same pixel size."""
    import matplotlib
    from PIL import Image

    with Image.open(committed) as old, Image.open(made) as new:
        if old.info.get("Software", "").startswith(f"Matplotlib version{matplotlib.__version__},"):
            assert made.read_bytes() == committed.read_bytes(), f"{committed.name} drifted"
        else:
            assert new.size == old.size, f"{committed.name}: {new.size} != {old.size} ({old.info.get('Software')})"


def assert_same_report(made: Path, reference: Path) -> None:
    """Every file of a compare report in ``reference`` was written again in ``made``, the same."""
    compared = 0
    for name in TEXT_FILES + PNG_FILES:
        if (reference / name).exists():
            assert (made / name).exists(), f"{name} was not rendered"
            if name.endswith(".png"):
                assert_same_png(made / name, reference / name)
            else:
                assert (made / name).read_text() == (reference / name).read_text(), f"{reference / name} drifted"
            compared += 1
    assert compared >= 3


@pytest.mark.parametrize("folder", compare_reports(), ids=lambda p: str(p.relative_to(REPORTS)))
def test_every_committed_compare_report_regenerates_from_its_summary(folder, tmp_path):
    name = str(folder.relative_to(REPORTS))
    if name in NO_TABLE:
        assert not has_table(folder), f"{name} now carries a table: remove it from NO_TABLE"
        return
    assert has_table(folder), (f"{name}: a compare report without a table in summary.json; commit the summary "
                               "grae compare writes now, or list it in NO_TABLE with the reason")
    render(from_summary(folder / "summary.json"), tmp_path)
    assert_same_report(tmp_path, folder)


def test_the_list_of_reports_without_a_table_names_only_compare_reports():
    assert set(NO_TABLE) <= {str(p.relative_to(REPORTS)) for p in compare_reports()}
    assert "gate_r4" in {p.name for p in compare_reports() if has_table(p)}  # at least one committed table is checked


# ---- synthetic studies: gathered from rows vs rendered from summary.json ---------------------------------

PROBLEMS, STEPS = 24, 8
QIDS = [f"q{i}" for i in range(PROBLEMS)]


def _sampled_rows(rng, p: np.ndarray, n: int) -> str:
    labels = rng.random((len(p), n)) < p[:, None]
    return "".join(json.dumps({"question_id": q, "generation_id": g, "label": bool(labels[i, g]),
                               "pred_answer": str(int(rng.integers(0, 50)))}) + "\n"
                   for i, q in enumerate(QIDS) for g in range(n))


def _metrics(rng, agrae: bool) -> str:
    rows = []
    for s in range(1, STEPS + 1):
        row = {"step": s, "reward_mean": float(rng.uniform()), "frac_all_wrong": float(rng.uniform()),
               "entropy": float(rng.uniform(0, 2)), "acr": float(rng.uniform()), "frac_all_correct": 0.0,
               "omega": float(rng.uniform()), "grae/adv_abs_sum_p[0.00,0.25)": float(rng.uniform(0, 3)) if s % 3 else 0.0,
               "grae/adv_abs_sum_p[0.75,1.00)": float(rng.uniform(0, 3))}
        rows.append(row | ({"agrae/suppression": float(rng.uniform())} if agrae else {}))
    return "".join(json.dumps(r) + "\n" for r in rows)


def exact_study(tmp_path: Path, seed: int = 0) -> tuple[Path, dict]:
    """An exact study (3 arms × 3 seeds) with a frontier at 25/50/100 %, the oracle, the base also sampled and
    two arms also sampled: every section of a held-out report. Returns its config path and each job's p."""
    raw = {"base": "chain-sum", "overrides": {"max_steps": STEPS, "save_steps": STEPS, "eval": {"enabled": False}},
           "methods": {m: {"estimator": "grpo"} for m in ("grpo", "arm_a", "arm_b")}, "seeds": [0, 1, 2],
           "baseline": "grpo", "output_dir": str(tmp_path / "study"), "frontier": [0.25, 0.5, 1.0],
           "eval": {"exact": True, "num_problems": PROBLEMS}, "paired_against": ["base", "oracle"],
           "title": "synthetic", "notes": "notes"}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_compare_config(path)
    rng = np.random.default_rng(seed)
    base_p, mass = rng.uniform(0.0, 0.3, PROBLEMS), rng.uniform(0.4, 1.0, PROBLEMS)
    (cfg.output_dir / "base").mkdir(parents=True)
    (cfg.output_dir / "base" / "frontier.jsonl").write_text("".join(json.dumps(
        {"question_id": q, "exact": True, "p": float(p), "mass": float(m), "k_max": 64, "near_miss_p": 1 / 41}) + "\n"
        for q, p, m in zip(QIDS, base_p, mass)))
    (cfg.output_dir / "base" / "before.jsonl").write_text(_sampled_rows(rng, base_p, 8))
    shift = {"grpo": 0.05, "arm_a": 0.25, "arm_b": 0.08}
    finals = {}
    for job in cfg.jobs():
        (job.output_dir / "eval").mkdir(parents=True)
        device = {0: "cpu (Test CPU, 1 threads)", 1: "cuda (Test GPU)"}.get(job.seed)  # seed 2: not recorded
        (job.output_dir / "eval" / "summary.json").write_text(json.dumps(
            {"train_seconds": 3.0, "steps": STEPS, "generated_completions": 512} | ({"device": device} if device else {})))
        (job.output_dir / "metrics.jsonl").write_text(_metrics(rng, job.method == "arm_a"))
        for f, step in frontier_steps(STEPS, [0.25, 0.5, 1.0]).items():
            p = np.clip(base_p / mass * 0.5 + f * shift[job.method] + rng.normal(0, 0.03, PROBLEMS), 0, 1)
            counts = ProblemCounts(QIDS, np.full(PROBLEMS, 64), p * 64, p=p, mass=np.full(PROBLEMS, 0.9))
            curve = curve_path(rows_path(job.output_dir, step))
            curve.parent.mkdir(parents=True, exist_ok=True)
            curve.write_text(json.dumps({"step": step, "settings": step_settings(cfg.train_config(job), cfg.eval),
                                         **counts_record(counts)}))
        finals[job.method, job.seed] = p
        if job.method != "grpo":
            (job.output_dir / "eval" / "after.jsonl").write_text(_sampled_rows(rng, p, 8))
    # two sittings: one stopped after its second job (no closing row), one that ran to its end
    (cfg.output_dir / "invocations.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [
        {"started": 10.0, "wall_seconds": 60.0, "jobs_run": ["grpo/seed0"]},
        {"started": 10.0, "wall_seconds": 120.0, "jobs_run": ["arm_a/seed0"]},
        {"started": 500.0, "wall_seconds": 30.0, "jobs_run": ["grpo/seed1"]},
        {"started": 500.0, "wall_seconds": 90.0, "jobs_run": []}]))
    return path, finals


def training_only_study(tmp_path: Path) -> Path:
    raw = {"base": "chain-sum", "overrides": {"max_steps": STEPS, "save_steps": STEPS, "eval": {"enabled": False}},
           "methods": {"grpo": {"estimator": "grpo"}, "agrae": {"estimator": "agrae"}}, "seeds": [0, 1, 2],
           "baseline": "grpo", "output_dir": str(tmp_path / "study"), "frontier": []}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw))
    rng = np.random.default_rng(3)
    for job in load_compare_config(path).jobs():
        (job.output_dir / "eval").mkdir(parents=True)
        (job.output_dir / "eval" / "summary.json").write_text(json.dumps({"train_seconds": 2.0, "steps": STEPS}))
        (job.output_dir / "metrics.jsonl").write_text(_metrics(rng, job.method == "agrae"))
    return path


def test_a_report_rendered_from_summary_json_is_the_report_rendered_from_the_rows(tmp_path):
    path, finals = exact_study(tmp_path)
    cfg = load_compare_config(path)
    report = write_compare_report(cfg).read_text()
    for section in ("## Checkpoint frontier", "## Paired difference vs the format-only oracle",
                    "## Exact − sampled pass@k", "## Memorisation diagnostics", "## Where the update goes"):
        assert section in report
    results = from_summary(cfg.output_dir / "summary.json")
    # the table holds what the rows say: each final model's exact p, the base's mass, the training log
    assert results.jobs["arm_a"][2].final.p.tolist() == finals["arm_a", 2].tolist()
    assert results.base.mass.tolist() == [json.loads(line)["mass"] for line in
                                          (cfg.output_dir / "base" / "frontier.jsonl").read_text().splitlines()]
    assert set(results.jobs["grpo"][0].metrics) >= {"reward_mean", "omega", "adv_abs_sum_p[0.00,0.25)"}
    assert "agrae/suppression" not in results.jobs["grpo"][0].metrics  # never logged: not kept
    assert results.jobs["grpo"][0].memorisation is None and results.jobs["arm_b"][0].sampled is not None
    assert set(results.references) == {"format-only oracle", f"near-miss guesser (w = {NEAR_MISS_W})"}
    assert sorted(results.frontier["grpo"]) == [0.25, 0.5, 1.0]
    assert [results.jobs["arm_b"][s].device for s in (0, 1, 2)] == ["cpu (Test CPU, 1 threads)", "cuda (Test GPU)", None]
    # each sitting counts once, at its longest wall time: (120 + 90) s; the stopped one keeps its two jobs
    assert ("- compare wall time: 3.5 min over 2 invocation(s), which ran 3 of the 9 jobs; the other 6 were "
            "finished outside these invocations (rows brought from another machine, or a sitting stopped before it "
            "recorded its jobs)") in report
    assert "- trained by: 3 on cpu (Test CPU, 1 threads); 3 on cuda (Test GPU); 3 not recorded" in report
    render(results, tmp_path / "again")
    assert_same_report(tmp_path / "again", cfg.output_dir)


def test_a_training_only_report_renders_again_from_its_summary(tmp_path):
    cfg = load_compare_config(training_only_study(tmp_path))
    write_compare_report(cfg)
    render(from_summary(cfg.output_dir / "summary.json"), tmp_path / "again")
    assert_same_report(tmp_path / "again", cfg.output_dir)
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["heldout"] is False


def test_the_table_is_gathered_once_from_the_rows(tmp_path):
    """Rendering reads no row file: with every job's folder and the base's rows gone, the gathered table
    still renders the whole report."""
    cfg = load_compare_config(exact_study(tmp_path)[0])
    results = gather(cfg)
    shutil.rmtree(cfg.output_dir / "jobs")
    shutil.rmtree(cfg.output_dir / "base")
    assert "## Checkpoint frontier" in render(results, tmp_path / "out").read_text()


def test_compare_rerenders_a_summary_from_the_command_line(tmp_path):
    import typer
    from typer.testing import CliRunner

    from grae.cli import compare_cmd

    app = typer.Typer()
    compare_cmd.register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps the command name
    cfg = load_compare_config(training_only_study(tmp_path))
    write_compare_report(cfg)
    summary = str(cfg.output_dir / "summary.json")
    result = CliRunner().invoke(app, ["compare", summary, "--report-only", "-o", str(tmp_path / "re")])
    assert result.exit_code == 0, result.output
    assert_same_report(tmp_path / "re", cfg.output_dir)
    result = CliRunner().invoke(app, ["compare", summary])
    assert result.exit_code == 2 and "can only be re-rendered; add --report-only" in " ".join(result.output.split())
    (tmp_path / "old.json").write_text(json.dumps({"heldout": True}))
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "old.json"), "--report-only"])
    assert result.exit_code == 2 and "no 'results' table" in " ".join(result.output.split())


@given(st.lists(st.tuples(st.integers(1, 300), st.floats(0, 1), st.floats(0.01, 1)), min_size=1, max_size=20),
       st.booleans(), st.booleans())
def test_counts_survive_their_json_form(rows, exact, other_ids):
    ids = [f"p{i}" for i in range(len(rows))]
    n = np.array([r[0] for r in rows])
    p = np.array([r[1] for r in rows])
    counts = (ProblemCounts(ids, n, p * n, p=p, mass=np.array([r[2] for r in rows])) if exact
              else ProblemCounts(ids, n, np.floor(p * n).astype(np.int64)))
    table_ids = ids[::-1] if other_ids else ids
    back = counts_from_json(json.loads(json.dumps(counts_to_json(counts, table_ids))), table_ids)
    assert back.question_ids == ids and back.n.tolist() == n.tolist() and back.c.tolist() == counts.c.tolist()
    assert (back.p is None) == (not exact)
    if exact:
        assert back.p.tolist() == p.tolist() and back.mass.tolist() == counts.mass.tolist()
