"""Gate v3 design 3 (studies/gate_v3_d3.py): its parsing and guessers, and its committed tables reproduce from their
committed arrays by the rules of studies/design/gate_v3_two_modes_d3.yaml."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "studies"))
import gate_v3_d3 as d3  # noqa: E402

from grae.compare.stats import crossed_interval  # noqa: E402
from grae.eval.identity import weights_fingerprint  # noqa: E402
from grae.yaml_io import load_yaml  # noqa: E402

REPORT = ROOT / "studies" / "reports" / "gate_v3" / "two_modes_d3"
DESIGN = load_yaml((ROOT / "studies" / "design" / "gate_v3_two_modes_d3.yaml").read_text())


def test_parse_line_reads_marked_lines_of_integers_only():
    assert d3.parse_line(" L 11 23 12 -6\nmore") == ("L", [11, 23, 12, -6])
    assert d3.parse_line("G 23 29 -6") == ("G", [23, 29, -6])
    for bad in ("11 23 12", "L", "L 1 x 3", "X 1 2", "", "G 1.5 2 3"):
        assert d3.parse_line(bad) is None, bad


def test_near_miss_is_the_product_of_uniform_windows():
    assert d3.near_miss([5, 7, 9], [1, 2, 0]) == pytest.approx(1 / 3 * 1 / 5 * 1)  # tol: three float divisions
    assert d3.near_miss([5], [3, 3]) == pytest.approx(1 / 7)  # tol: one float division


def test_passk_is_exact_per_problem():
    p = np.array([0.0, 0.5, 1.0])
    got = d3.passk(p, [1, 2])
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got, [[0, 0], [50, 75], [100, 100]], rtol=0, atol=1e-12)  # tol: float64 powers


def test_base_checks_reproduce_from_the_committed_parts_and_the_shipped_base_is_the_passing_build():
    checks = json.loads((REPORT / "base_checks.json").read_text())
    rules = DESIGN["base_checks"]
    held = json.loads((REPORT / "heldout_strata.json").read_text())
    exc = np.array([s == "totals=excursion" for s in held["strata"]])
    inn = ~exc
    for seed, row in checks["builds"].items():
        parts = np.load(REPORT / f"base_check_parts_s{seed}.npy")
        p = parts.sum(axis=1)
        # tol: the same float64 arithmetic on the same committed numbers
        assert row["excursion_pass64"] == pytest.approx(float(d3.passk(p[exc], [64]).mean()), rel=1e-12)
        lo, hi = rules["excursion_rare_band"]
        assert row["excursion_rare"] == int(((p[exc] >= lo) & (p[exc] <= hi)).sum())
        assert row["in_range_pass1"] == pytest.approx(100 * p[inn].mean(), rel=1e-12)  # tol: as above
        assert row["passes"] == (row["excursion_pass64"] >= rules["excursion_pass64_min"]
                                 and row["excursion_rare"] >= rules["excursion_rare_min"]
                                 and abs(row["in_range_pass1"] - rules["in_range_pass1_ref"])
                                 <= rules["in_range_pass1_tolerance"]
                                 and row["mass"]["totals=in_range"]["L"] > row["mass"]["totals=in_range"]["G"])
    shipped = checks["shipped_seed"]
    deviation = DESIGN.get("shipped_by_deviation")
    if deviation is None:  # the rule: the first build seed that passes
        assert shipped is not None and checks["builds"][shipped]["passes"]
        assert all(not checks["builds"][s]["passes"] for s in checks["builds"] if int(s) < int(shipped))
    else:  # a deviation the design records: only where no build passes
        assert not any(row["passes"] for row in checks["builds"].values())
        assert shipped == str(deviation["seed"]) and checks["deviation"] == deviation
    assert weights_fingerprint(ROOT / "src" / "grae" / "assets" / "tiny-two-modes") == \
        checks["builds"][shipped]["fingerprint"]


def test_pregate_intervals_and_the_frozen_arm_follow_the_committed_rule():
    table = json.loads((REPORT / "pregate_band.json").read_text())
    cache = json.loads((REPORT / "pregate_band_p.json").read_text())
    spec = DESIGN["pregate"]
    base = np.array(cache["base"])
    last = str(spec["checkpoints"][-1])
    for arm, row in table["arms"].items():
        for step in spec["checkpoints"]:
            d = np.stack([100 * (np.array(cache[f"{arm}_s{s}@{step}"]) - base) for s in spec["seeds"]])
            (iv,) = crossed_interval(d[:, :, None])
            # tol: the same float64 arithmetic on the same committed numbers
            assert row[str(step)]["lo"] == pytest.approx(iv.lo, rel=1e-9, abs=1e-9)
            assert row[str(step)]["mean"] == pytest.approx(iv.mean, rel=1e-9, abs=1e-9)  # tol: as above
        assert row["certified"] == (row[last]["lo"] > spec["lower_bound_min"])
    if table["complete"]:
        pool = table["certified"] or list(table["arms"])
        assert table["frozen"] == max(pool, key=lambda a: table["arms"][a][last]["lo"])
