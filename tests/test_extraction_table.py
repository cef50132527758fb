"""Extraction pays only the right answer: the adversarial table, each row with its expected score in
its answer-extraction mode, checked against math-verify where it reads the same text; and the invariant that no mode
scores 1 on a completion whose number differs from the gold."""

from __future__ import annotations

import logging
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grae.data.answers import AnswerExtraction
from grae.rewards.numbers import last_number, read_number

T = 5.0

# (mode, completion, gold, grae's score, math-verify's verdict on the same text or None where it does not apply)
# math-verify parses the whole completion (it has no modes); its verdict is given where it reads what grae reads,
# and where it differs the row says why grae departs from it.
TABLE = [
    # --- answers a lenient extraction would pay
    ("last_number", "The ratio is 3/2", "2", 0.0, False),
    ("last_number", "\\boxed{\\frac{1}{2}}", "2", 0.0, False),
    ("last_number", "answer .5", "5", 0.0, False),
    ("last_number", "answer .5", "0.5", 1.0, True),
    ("last_number", "Answer: 12 km/h^2", "2", 0.0, False),
    ("last_number", "Answer: 12 km/h^2", "12", 1.0, True),
    ("last_number", "answer: 1/2", "0.5", 1.0, True),
    ("last_number", "1.5e-3", "0.0015", 1.0, False),  # math-verify reads 1.5 (and $1.5e-3$ as 1.5·e − 3)
    ("last_number", "10-12", "-12", 0.0, False),  # a range or a difference: refused, never −12
    ("last_number", "10-12", "12", 0.0, None),
    ("marker", "#### 4 2", "42", 0.0, False),
    # --- fractions, decimals, exponents, ranges, percents, units, expressions
    ("last_number", "x = -12", "-12", 1.0, True),
    ("last_number", "so it is -12", "-12", 1.0, True),
    ("last_number", "5 - 3 = 2", "2", 1.0, None),
    ("last_number", "She pays 1,234.50 dollars", "1234.5", 1.0, None),
    ("last_number", "1.5 \\times 10^{-3}", "0.0015", 1.0, None),
    ("last_number", "2^{10}", "1024", 1.0, None),
    ("last_number", "2^{10}", "10", 0.0, None),
    ("last_number", "The discount is 50%", "50", 1.0, None),  # a percent is the number written (GSM8K golds)
    ("last_number", "The discount is 50%", "0.5", 0.0, None),
    ("last_number", "The angle is 90^\\circ", "90", 1.0, None),
    ("last_number", "The area is 12 m^2", "2", 0.0, None),
    ("last_number", "The time is 12:30", "30", 0.0, None),
    ("last_number", "It is 3 * 4", "4", 0.0, None),
    ("last_number", "The answer is 2\\pi", "2", 0.0, True),  # math-verify reads the 2 out of the text
    ("last_number", "x = 3\\sqrt{2}", "2", 0.0, None),
    ("last_number", "x = \\sqrt{2}", "2", 0.0, None),
    ("last_number", "x = \\frac{a}{2}", "2", 0.0, None),
    ("last_number", "dates: 2024-01-15", "15", 0.0, None),
    ("last_number", "made of CO2, 3 atoms", "3", 1.0, None),
    ("last_number", "the answer is **-7**", "-7", 1.0, None),
    ("last_number", "1/0", "0", 0.0, None),
    ("last_number", "no number here", "0", 0.0, None),
    ("last_number", "version 1.2.3", "3", 0.0, None),
    ("last_number", "x = " + "9" * 50, "9", 0.0, None),  # more than 40 digits: no number, never its last 40
    ("last_number", "1,2345", "2345", 0.0, None),
    ("boxed", "\\boxed{4 2}", "42", 0.0, False),  # math-verify reads 4 2 as a product; grae refuses
    ("boxed", "\\boxed{.5}", "5", 0.0, False),
    ("boxed", "\\boxed{.5}", "0.5", 1.0, True),
    ("boxed", "\\boxed{1.5e-3}", "0.0015", 1.0, False),  # math-verify: 1.5·e − 3
    ("boxed", "\\boxed{3/2}", "2", 0.0, False),
    ("boxed", "\\boxed{\\frac{1}{2}}", "2", 0.0, False),
    ("boxed", "\\boxed{50\\%}", "50", 1.0, False),  # math-verify reads $\\boxed{50\\%}$ as 50, not this
    ("boxed", "\\boxed{1,000}", "1000", 1.0, None),
    ("boxed", "\\boxed{1\\,000}", "1000", 1.0, None),
    ("marker", "#### 42", "42", 1.0, True),
    ("marker", "#### 1,200", "1200", 1.0, True),
    ("marker", "#### .5", "5", 0.0, False),
    ("marker", "#### 3/2", "2", 0.0, False),
    ("marker", "#### 1 000", "1000", 0.0, None),
    ("exact", "4 2", "42", 0.0, None),
    ("exact", " 42 \n", "42", 1.0, None),
    ("exact", "0.5", "1/2", 0.0, None),  # exact is text equality, by definition
]


def _math_verify(completion: str, gold: str) -> bool:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return bool(verify(parse(f"${gold}$", parsing_timeout=None), parse(completion, parsing_timeout=None),
                       timeout_seconds=None))


@pytest.mark.parametrize(("mode", "completion", "gold", "score", "mv"), TABLE,
                         ids=[f"{m}:{c}:{g}" for m, c, g, _, _ in TABLE])
def test_the_adversarial_table_scores_as_expected(mode, completion, gold, score, mv):
    extraction = AnswerExtraction.of(mode, None)
    assert extraction.score(completion, gold, T) == score
    assert extraction.score_batch([completion], [gold], T) == [score]
    if mv is not None:
        assert _math_verify(completion, gold) is mv


def test_the_issue_cases_read_what_they_write():
    assert last_number("The ratio is 3/2") == "3/2"
    assert last_number("answer .5") == ".5"
    assert last_number("Answer: 12 km/h^2") == "12"
    assert last_number("1.5e-3") == "1.5e-3"
    assert last_number("10-12") is None
    assert read_number("1.5e-3") == Fraction(3, 2000)
    assert read_number("-\\frac{1}{2}") == Fraction(-1, 2)
    assert read_number("4 2") is None


def _written(value: Fraction, form: int) -> str:
    """``value`` written one of several ways a completion writes a number."""
    sign = "-" if value < 0 else ""
    a = abs(value)
    if form == 0 or a.denominator == 1:
        return f"{sign}{a.numerator}/{a.denominator}" if a.denominator != 1 else f"{sign}{a.numerator}"
    if form == 1:
        return f"{sign}\\frac{{{a.numerator}}}{{{a.denominator}}}"
    return f"{sign}{a.numerator}/{a.denominator}"


NUMBERS = st.fractions(min_value=-10**6, max_value=10**6, max_denominator=50)
FORMS = st.integers(0, 2)
PREFIX = st.text(alphabet="abc xyz.,:!?\n", max_size=30)
SUFFIX = st.sampled_from(["", ".", " apples", " km/h^2", " m^2", "%", "**", "$", " (final)"])


def _state(mode: str, prefix: str, earlier: str, number: str, suffix: str) -> str:
    if mode == "boxed":
        return f"{prefix} we get {earlier}, so \\boxed{{{number}}}{suffix}"
    if mode == "marker":
        return f"{prefix} we get {earlier}\n#### {number}{suffix}"
    return f"{prefix} we get {earlier}, so {number}{suffix}"


@settings(max_examples=150, deadline=None)
@given(mode=st.sampled_from(["boxed", "last_number", "marker"]), gold=NUMBERS, other=NUMBERS, form=FORMS,
       prefix=PREFIX, suffix=SUFFIX)
def test_no_mode_scores_a_completion_whose_number_differs_from_the_gold(mode, gold, other, form, prefix, suffix):
    scale = max(abs(gold), abs(other), Fraction(1))
    assume(abs(gold - other) > scale / 1000)  # nearer numbers go to math-verify's float rounding, on purpose
    if mode != "last_number":
        assume(suffix not in (" km/h^2", " m^2", " apples", " (final)"))  # units inside a box or after a marker
    extraction = AnswerExtraction.of(mode, None)
    gold_text = _written(gold, 0)
    wrong = _state(mode, prefix, gold_text, _written(other, form), suffix)  # the gold appears earlier: no credit
    right = _state(mode, prefix, _written(other, 0), _written(gold, form), suffix)
    assert extraction.score(wrong, gold_text, T) == 0.0
    assert extraction.score(right, gold_text, T) == 1.0
