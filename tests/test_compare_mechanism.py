"""The mechanism rows of a compare report (study key ``mechanism``): per-stratum pass@k and Δ_F against the
stratum's own temperature frontier, strategy mass, the collapse ratio and advantage mass, on synthetic tables whose
numbers are computed here by hand; the table's JSON round trip; the key's refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from scipy.stats import t as student_t

from grae.compare.mechanism import Mechanism, Probe, mechanism_from_json, mechanism_to_json
from grae.compare.mechanism_report import (
    BAND,
    collapse_lines,
    mechanism_section,
    strategy_mass_lines,
    stratum_lines,
    training_lines,
)
from grae.compare.results import JobResult, StudyInfo, StudyResults
from grae.compare.temperature_frontier import PREFIX, exact_counts

SEEDS = [0, 1, 2]
QIDS = [f"q{i}" for i in range(6)]
STRATA = {"totals=excursion": ["q1", "q3", "q5"], "totals=in_range": ["q0", "q2", "q4"]}
BAND_IDS = ["b0", "b1"]
RNG = np.random.default_rng(7)
#: [S, P, J] gold-completion probabilities of each method's final model (L column, G column) and the base's [P, J]
PARTS = {"grpo": RNG.uniform(0.0, 0.3, (3, 6, 2)), "arm": RNG.uniform(0.0, 0.3, (3, 6, 2))}
BAND_PARTS = {"grpo": RNG.uniform(0.0, 0.4, (3, 2, 2)), "arm": RNG.uniform(0.0, 0.4, (3, 2, 2))}
BASE_PARTS, BASE_BAND = RNG.uniform(0.0, 0.2, (6, 2)), RNG.uniform(0.0, 0.2, (2, 2))
#: the base's exact p per problem at each temperature: colder sharpens the in-range problems and loses excursions
BASE_T = {0.1: np.array([0.5, 0.001, 0.6, 0.002, 0.55, 0.0]), 0.5: np.array([0.35, 0.02, 0.4, 0.03, 0.38, 0.01]),
          1.0: np.array([0.2, 0.05, 0.25, 0.06, 0.22, 0.04])}
ACR = {"grpo": [[0.4, 0.5, 0.6, 0.5], [0.3, 0.3, 0.5, 0.4], [0.6, 0.6, 0.4, 0.4]],
       "arm": [[0.2, 0.2, 0.3, 0.3], [0.2, 0.1, 0.2, 0.3], [0.3, 0.4, 0.2, 0.1]]}
POS = {"grpo": [[0.1, 0.2, 0.3, 0.4]] * 3, "arm": [[0.5, 0.5, 0.5, 0.5], [0.4, 0.4, 0.4, 0.4], [0.6, 0.6, 0.6, 0.6]]}
K_MAX = 256


def table() -> StudyResults:
    info = StudyInfo(title="t", notes="", verdict="", source="s.yaml", methods=["grpo", "arm"], seeds=SEEDS,
                     baseline="grpo", bootstrap=2000, eval={"exact": True, "n": K_MAX}, frontier=[0.5, 1.0],
                     paired_against=["base", "temperature_frontier"], heldout=True, num_jobs=6, per_step=16,
                     group_size=8)
    jobs = {m: {s: JobResult(final=exact_counts(PARTS[m][s].sum(1), QIDS, K_MAX),
                             metrics={"acr": ACR[m][s], "adv_neg_mass": [0.2, 0.2, 0.3, 0.3], "omega": [0.3] * 4},
                             train_seconds=1.0, steps=4, generated=None) for s in SEEDS} for m in PARTS}
    base_files = {"frontier.jsonl": exact_counts(BASE_PARTS.sum(1), QIDS, K_MAX),
                  **{PREFIX + repr(t): exact_counts(p, QIDS, K_MAX) for t, p in BASE_T.items()}}
    mech = Mechanism(steps=[0, 2, 4], ks=[1, 16, 256], labels=["L", "G"], question_ids=QIDS, strata=STRATA,
                     band_ids=BAND_IDS, base=Probe(BASE_PARTS, BASE_BAND),
                     jobs={m: {s: {2: Probe(PARTS[m][s] * 0.5, BAND_PARTS[m][s] * 0.5),
                                   4: Probe(PARTS[m][s], BAND_PARTS[m][s])} for s in SEEDS} for m in PARTS},
                     adv_pos_mass={m: {s: POS[m][s] for s in SEEDS} for m in PARTS})
    return StudyResults(info, jobs, base_files, mechanism=mech)


def passk(p, k):
    return 1 - (1 - np.asarray(p)) ** k


def test_each_stratum_and_the_band_holdout_by_hand():
    results = table()
    _, summary = stratum_lines(results, results.mechanism)
    assert list(summary) == ["totals=excursion", "totals=in_range", BAND]
    for label, ids in STRATA.items():
        rows = [QIDS.index(q) for q in ids]
        for k in (1, 16, 256):
            for m in PARTS:
                by_hand = passk(PARTS[m][:, rows].sum(-1), k).mean()
                # tol: float64 means of the same numbers in another order
                assert summary[label]["methods"][m][str(k)]["mean"] == pytest.approx(by_hand, rel=1e-12)
            diff = (passk(PARTS["arm"][:, rows].sum(-1), k) - passk(PARTS["grpo"][:, rows].sum(-1), k)).mean()
            assert summary[label]["vs_baseline"]["arm"][str(k)]["mean"] == pytest.approx(diff, rel=1e-12, abs=1e-15)
    band_pass1 = BAND_PARTS["arm"].sum(-1).mean()  # the final step's probe: p = Σ over the gold completions
    assert summary[BAND]["methods"]["arm"]["1"]["mean"] == pytest.approx(band_pass1, rel=1e-12)
    assert summary[BAND]["base"]["1"]["mean"] == pytest.approx(BASE_BAND.sum(-1).mean(), rel=1e-12)
    assert "delta_F" not in summary[BAND]  # the band problems have no traced temperature frontier


def frontier_by_hand(p_by_t: dict[float, np.ndarray], k: int, x: float) -> float:
    """F(x): the Pareto points (pass@1, pass@k) over temperatures, linear between them, flat beyond."""
    pts = [(float(p.mean()), float(passk(p, k).mean())) for p in p_by_t.values()]
    front = sorted(p for p in pts if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts))
    return float(np.interp(x, [a for a, _ in front], [b for _, b in front]))


def test_delta_f_is_against_each_strata_own_frontier_never_the_pooled_one():
    results = table()
    _, summary = stratum_lines(results, results.mechanism)
    for label, ids in STRATA.items():
        rows = [QIDS.index(q) for q in ids]
        own = {t: p[rows] for t, p in BASE_T.items()}
        for k in (16, 256):
            p = PARTS["arm"][:, rows].sum(-1)
            by_hand = passk(p, k).mean() - frontier_by_hand(own, k, p.mean())
            pooled = passk(p, k).mean() - frontier_by_hand(BASE_T, k, p.mean())
            got = summary[label]["delta_F"]["arm"][str(k)]["mean"]
            # tol: the interpolation's float64 arithmetic (the interval's centre is exactly the point distance)
            assert got == pytest.approx(by_hand, abs=1e-12)
            assert abs(got - pooled) > 1e-3  # the pooled frontier would give another number here
    assert summary["totals=in_range"]["frontier_best_T"] == 0.1


def test_strategy_mass_and_its_change_against_the_base_by_hand():
    results = table()
    lines, summary = strategy_mass_lines(results, results.mechanism)
    rows = [QIDS.index(q) for q in STRATA["totals=excursion"]]
    for step, scale in ((2, 0.5), (4, 1.0)):
        for j, label in enumerate(["L", "G"]):
            cell = summary["totals=excursion"]["methods"]["arm"][str(step)]
            mass = (scale * PARTS["arm"][:, rows, j]).mean()
            assert cell["mass"][label]["mean"] == pytest.approx(mass, rel=1e-12)
            delta = mass - BASE_PARTS[rows, j].mean()
            # tol: masses in [0, 0.3] in float64: a difference of two means rounds at ~1e-16; abs holds a delta near 0
            assert cell["delta_vs_base"][label]["mean"] == pytest.approx(delta, rel=1e-12, abs=1e-15)
            assert cell["mass"][label]["lo"] <= mass <= cell["mass"][label]["hi"]
    assert summary[BAND]["methods"]["grpo"]["4"]["mass"]["G"]["mean"] == pytest.approx(BAND_PARTS["grpo"][:, :, 1].mean())
    assert summary["all held-out"]["base"]["L"]["mean"] == pytest.approx(BASE_PARTS[:, 0].mean(), rel=1e-12)
    assert any(line.startswith("| arm | 2 |") for line in lines)


def test_collapse_ratio_by_hand():
    results = table()
    _, summary = collapse_lines(results)
    logs = [math.log(np.mean(ACR["arm"][s]) / np.mean(ACR["grpo"][s])) for s in SEEDS]
    half = student_t.ppf(0.975, 2) * np.std(logs, ddof=1) / math.sqrt(3)
    assert summary["arm"]["ratio"] == pytest.approx(math.exp(np.mean(logs)), rel=1e-12)
    assert summary["arm"]["lo"] == pytest.approx(math.exp(np.mean(logs) - half), rel=1e-9)
    assert summary["arm"]["hi"] == pytest.approx(math.exp(np.mean(logs) + half), rel=1e-9)
    assert summary["arm"]["seeds"] == 3 and "grpo" not in summary


def test_the_collapse_table_counts_the_steps_a_gated_estimator_acted():
    results = table()
    _, plain = collapse_lines(results)
    assert "acted" not in plain["arm"]
    gates = [[0, 0, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]]
    for s, gate in zip(SEEDS, gates):
        results.jobs["arm"][s].metrics["avspo/active"] = gate
    lines, summary = collapse_lines(results)
    assert (summary["arm"]["acted"], summary["arm"]["logged"]) == (3, 12)
    row = next(line for line in lines if line.startswith("| arm |"))
    assert row.endswith("| 3 of 12 steps |"), row
    for s in SEEDS:  # a gate that never opened: the row says so
        results.jobs["arm"][s].metrics["avspo/active"] = [0.0] * 4
    lines, summary = collapse_lines(results)
    assert summary["arm"]["acted"] == 0
    assert next(line for line in lines if line.startswith("| arm |")).endswith("| 0 of 12 steps |")


def test_advantage_mass_over_training_by_hand():
    results = table()
    _, summary = training_lines(results, results.mechanism)
    # 4 logged steps: each fraction's window is its last step (10 % of 4 rounds to 1)
    assert summary["arm"]["adv_pos_mass"]["mean"] == pytest.approx([0.5] * 4, rel=1e-12)
    assert summary["grpo"]["adv_pos_mass"]["mean"] == pytest.approx([0.1, 0.2, 0.3, 0.4], rel=1e-12)
    assert summary["arm"]["acr"]["mean"] == pytest.approx(np.mean(ACR["arm"], axis=0), rel=1e-12)
    lo, hi = summary["arm"]["adv_pos_mass"]["lo"][0], summary["arm"]["adv_pos_mass"]["hi"][0]
    assert 0 < lo < 0.5 < hi


def test_the_table_round_trips_through_json():
    results = table()
    before = mechanism_section(results)
    results.mechanism = mechanism_from_json(json.loads(json.dumps(mechanism_to_json(results.mechanism))))
    assert mechanism_section(results) == before
    bad = mechanism_to_json(table().mechanism)
    bad["base"]["heldout"][0][0] = 1.5
    with pytest.raises(ValueError, match=r"results.mechanism.base.heldout: expected one row of probabilities"):
        mechanism_from_json(bad)


def test_no_mechanism_no_section():
    results = table()
    results.mechanism = None
    assert mechanism_section(results) == ([], None)


# -- the study key --------------------------------------------------------------------------------------------
TASK = {"name": "chain_trace", "params": {"generator": "chain_range", "min_terms": 2, "max_terms": 3, "max_value": 9,
                                          "prompt_style": "plain", "strategies": "two"}}


def _study(tmp_path, **extra) -> dict:
    study = {"base": "chain-sum",
             "overrides": {"model": "tiny", "max_steps": 4, "save_steps": 4, "task": TASK,
                           "eval": {"enabled": False, "num_problems": 4, "n": 16, "temperature": 1.0}},
             "methods": {"grpo": {"estimator": "grpo"}, "bbg": {"estimator": "bbg"}}, "seeds": [0],
             "baseline": "grpo", "output_dir": str(tmp_path / "c"), "frontier": [0.5, 1.0],
             "eval": {"exact": True, "n": 64, "num_problems": 4}}
    study.update(extra)
    return study


@pytest.mark.parametrize(("extra", "match"), [
    ({"mechanism": {"step": [0]}}, r"mechanism: unknown key\(s\) \['step'\]"),
    ({"mechanism": {}, "eval": {"n": 64}}, "mechanism: needs the teacher-forced exact p"),
    ({"mechanism": {"steps": [0, 1, 4]}},
     r"mechanism.steps: \[1\] are not kept by method '\w+' \(its snapshots: \[2\]\); add the fraction\(s\) \[0.25\]"),
    ({"mechanism": {"steps": [0, 5]}}, r"mechanism.steps: expected distinct training steps in \[0, 4\]"),
    ({"mechanism": {"ks": [1, 256]}}, r"mechanism.ks: expected distinct k in \[1, 64\].*n: 256 reaches pass@256"),
    ({"mechanism": {"band_holdout": "nope.jsonl"}}, "mechanism.band_holdout: task.train_subset: 'nope.jsonl' is not a"),
    ({"eval": {"exact": True, "heldout_params": []}}, "eval.heldout_params: expected a non-empty mapping"),
])
def test_the_key_is_refused_in_one_line(tmp_path, extra, match):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import ConfigError, load_compare_config

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_study(tmp_path, **extra)))
    with pytest.raises(ConfigError, match=match):
        load_compare_config(path)


def test_a_band_holdout_needs_a_training_band(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import ConfigError, load_compare_config
    from grae.data import get_task
    from grae.data.band import band_rows, write_band

    pool = get_task(TASK["name"], **TASK["params"]).train(20, seed=1)
    header = {"task": TASK["name"], "params": TASK["params"], "pool": 20, "pool_seed": 1}
    write_band(tmp_path / "held.jsonl", header, band_rows(pool[:4], [0.5] * 4, 0.0, 1.0))
    write_band(tmp_path / "train.jsonl", header, band_rows(pool[2:], [0.5] * 18, 0.0, 1.0))
    path = tmp_path / "s.yaml"
    study = _study(tmp_path, mechanism={"band_holdout": str(tmp_path / "held.jsonl")})
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match=r"method '\w+' trains without task.train_subset"):
        load_compare_config(path)
    study["overrides"]["task"] = {**TASK, "train_subset": str(tmp_path / "train.jsonl"), "train_size": None}
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match=r"2 of its problems are in method '\w+'"):
        load_compare_config(path)
    write_band(tmp_path / "train.jsonl", header, band_rows(pool[4:], [0.5] * 16, 0.0, 1.0))
    cfg = load_compare_config(path)
    assert cfg.mechanism == {"steps": [0, 4], "ks": [1, 64], "band_holdout": str(tmp_path / "held.jsonl")}
