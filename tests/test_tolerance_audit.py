"""Every fixed absolute tolerance in the tests scales with the values compared or says why it need not
(the rule is in tests/tolerance_audit.py's docstring)."""

import os
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from tolerance_audit import audit_source, audit_tree  # noqa: E402

TESTS = Path(__file__).resolve().parent


def test_every_fixed_tolerance_in_the_tests_is_scaled_or_explained():
    hits = audit_tree(TESTS)
    if hits:
        pytest.fail("fixed absolute tolerances without a reason: scale them (tests/tolerances.py "
                    "assert_close_scaled) or add `# tol: <why it means the same on every CPU>`:\n"
                    + "\n".join(map(str, hits)), pytrace=False)


def lines_flagged(source: str) -> list[int]:
    return [hit.line for hit in audit_source(textwrap.dedent(source))]


@pytest.mark.parametrize("comparison", [
    "torch.allclose(a, b, atol=1e-5)",
    "torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-5)",
    "np.testing.assert_allclose(a, b, atol=TOL)",
    "x == pytest.approx(0.5, abs=1e-9)",
    "math.isclose(x, y, abs_tol=tol)",
    "torch.allclose(a, b)",  # default atol 1e-8
    "torch.allclose(a, b, rtol=1e-4)",  # rtol given, atol still the default 1e-8
    "np.allclose(a, b)",
    "torch.testing.assert_close(a, b)",  # default atol 1e-5 in float32
    "abs(a - b) < 1e-6",
    "(a - b).abs().max() < tol",
    "(a - b).abs().max().item() <= 1e-5",
    "1e-6 > abs(a - b)",
    "np.max(np.abs(a - b)) < 1e-9",
    "torch.linalg.norm(a - b) <= eps",
    "abs(float(adv.sum())) < 1e-8",  # a deviation from 0
    "torch.allclose(a, b, atol=2 * TOL)",  # multiplying constants is no scale
])
def test_a_bare_fixed_tolerance_is_flagged(comparison):
    assert lines_flagged(f"x = 1\nassert {comparison}\n") == [2]


@pytest.mark.parametrize("source", [
    "assert torch.allclose(a, b, atol=1e-5)  # tol: probabilities in [0, 1], float64\n",
    "# tol: exact rationals, float64\nassert abs(a - b) < 1e-12\n",
    "# tol: order-1 closed forms in float64\nassert x == pytest.approx(1.5, abs=1e-12)\nassert abs(a - b) < 1e-12\n",
    "assert torch.allclose(\n    a,\n    b, atol=1e-5,  # tol: values rounded to 4 digits\n)\n",
    "TOL = 1e-9  # tol: float64 probabilities\nassert torch.allclose(a, b, atol=TOL)\n",
    "for x in xs:\n    # tol: pass@k in [0, 1] in float64\n    assert x == pytest.approx(0.25, abs=1e-12)\n",
])
def test_a_tol_comment_explains_a_fixed_tolerance(source):
    assert lines_flagged(source) == []


def test_a_tol_comment_covers_its_block_only():
    source = """\
    # tol: exact rationals in float64
    assert abs(a - b) < 1e-12
    assert abs(c - d) < 1e-12

    assert abs(e - f) < 1e-12
    """
    assert lines_flagged(source) == [5]


def test_an_empty_tol_comment_explains_nothing():
    assert lines_flagged("assert abs(a - b) < 1e-12  # tol:\n") == [1]


@pytest.mark.parametrize("comparison", [
    "assert_close_scaled(a, b, rel=1e-5)",
    "torch.allclose(a, b, atol=1e-6 * scale)",
    "torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * b.abs().max())",
    "x == pytest.approx(y, abs=1e-9 * max(1.0, abs(y)))",
    "abs(a - b) < 1e-6 * abs(b)",
    "torch.allclose(a, b, rtol=1e-5, atol=0)",  # rtol-only
    "np.testing.assert_allclose(a, b, rtol=1e-7)",  # default atol 0
    "math.isclose(x, y, rel_tol=1e-9)",  # default abs_tol 0
    "x == pytest.approx(y, rel=1e-6)",
    "torch.equal(a, b)",  # exact equality is no tolerance
    "abs(x) < 2 ** 63",  # a range check, not a float tolerance
])
def test_scaled_exact_and_rtol_only_comparisons_pass(comparison):
    assert lines_flagged(f"assert {comparison}\n") == []
