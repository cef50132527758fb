"""Gate v3's committed tables reproduce from their committed arrays (studies/gate_v3.py)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "studies"))
import gate_v3  # noqa: E402

REPORTS = ROOT / "studies" / "reports" / "gate_v3"
PREGATES = sorted(p.parent for p in REPORTS.glob("*/pregate.json"))


def test_paired_is_the_mean_difference_with_a_t_interval_over_problems():
    from scipy.stats import t

    diff = np.array([1.0, 2.0, 3.0, 6.0])
    iv = gate_v3.paired(diff)
    half = t.ppf(0.975, 3) * diff.std(ddof=1) / 2
    assert iv["mean"] == 3.0 and iv["n"] == 4
    assert iv["lo"] == pytest.approx(3.0 - half, rel=1e-12) and iv["hi"] == pytest.approx(3.0 + half, rel=1e-12)


def test_merged_replaces_leaves_and_keeps_what_an_arm_does_not_name():
    base = {"trl": {"learning_rate": 1e-5, "num_generations": 8}, "max_steps": 100}
    arm = {"trl": {"learning_rate": 5e-6}, "sampling": {"dynamic": True}}
    assert gate_v3.merged(base, arm) == {"trl": {"learning_rate": 5e-6, "num_generations": 8}, "max_steps": 100,
                                         "sampling": {"dynamic": True}}
    assert base["trl"]["learning_rate"] == 1e-5  # the design's own mapping is not changed


@pytest.mark.parametrize("report", PREGATES, ids=lambda p: p.name)
def test_every_committed_pregate_delta_reproduces_from_the_committed_p(report):
    """Each arm's Δ at each checkpoint (held-out, on the problems the rule certifies on) and on the band hold-out is
    the mean of the committed per-problem exact p's differences, and the certification follows the committed rule."""
    table = json.loads((report / "pregate.json").read_text())
    p = json.loads((report / "pregate_p.json").read_text())
    assert table["arms"], "a committed pre-gate with no arm"
    base_h, base_b = np.array(p["base"]["heldout"]), np.array(p["base"]["band"])
    for arm, row in table["arms"].items():
        steps = sorted(int(s) for s in row if s.isdigit())
        for step in steps:
            held = 100 * (np.array(p[f"{arm}@{step}"]["heldout"]) - base_h)
            band = 100 * (np.array(p[f"{arm}@{step}"]["band"]) - base_b)
            # tol: the same float64 sum of the same committed numbers, in the same order
            assert row[str(step)]["strata"]["all"]["mean"] == pytest.approx(held.mean(), rel=1e-12, abs=1e-12)
            assert row[str(step)]["band"]["mean"] == pytest.approx(band.mean(), rel=1e-12, abs=1e-12)  # tol: as above
        first, last = row[str(steps[0])]["heldout"]["mean"], row[str(steps[-1])]["heldout"]["mean"]
        assert row["certified"] == (last > 1 and last > first)
    assert table["certified"] == [a for a, r in table["arms"].items() if r["certified"]]
