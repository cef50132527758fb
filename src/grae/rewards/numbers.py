"""Numbers as completions write them: one grammar for every answer-extraction mode.

A *number* is one of (each optionally signed, ``-``/``+``/U+2212 ``−``):

* an integer or decimal, a leading-dot decimal (``.5``), with digit groups of three apart by one of the
  :data:`THOUSANDS_SEPARATORS`, ``,`` or LaTeX's thin space ``\\,`` (``1,000``, ``1\\,000``, ``-1,234.5``; the
  first group has one to three digits). Any other split of a digit run — a space, a no-break or thin space
  (U+00A0, U+2009, U+202F), an apostrophe, a zero-width character, ``\\;`` — makes the digits two numbers, never
  one, and never the last group alone (``1 000`` is no number; nor is ``1'000``);
* scientific notation: ``1.5e-3``, ``1.5E+3``, ``1.5 \\times 10^{-3}``, ``1.5×10^-3``, ``1.5 \\cdot 10^{3}``,
  ``1.5×10³``;
* an integer power ``2^{10}``, ``5²`` (exponent at most :data:`MAX_POWER`);
* a fraction ``3/2``, ``\\frac{1}{2}``, ``\\dfrac{1}{2}``, ``\\frac12``;
* any of these followed by ``%`` / ``\\%`` — a percent reads as the number written (``50%`` is 50, as math-verify
  reads ``50\\%``, and as GSM8K-style golds hold it).

:func:`read_number` reads a whole string as one number. :func:`last_number` finds the last number of a text
(``answer_extraction: last_number``) and refuses — returns None — when that number is not the text's answer
but part of something larger:

* an operand of an expression: ``10-12`` (a range or a difference, never −12), ``3 * 4``, ``12:30``, ``2^x``,
  ``x/2``, ``3\\sqrt{2}``, ``2\\pi``, a number inside ``\\sqrt{…}`` or one argument of a ``\\frac`` that is not a
  number;
* followed by an operator that changes it: ``5!``, ``5½`` (a vulgar fraction), ``0x10`` (a letter then digits);
  inside parentheses after an operator: ``-(-5)``;
* a *hedge* or a *list*: ``4 or 5``, ``5, not 6``, ``5 (not 6)``, ``5 vs 6``, ``5 or more``, ``3, 5``, ``3; 5``,
  ``5 dollars and 50 cents`` (``and`` after another number of the same sentence) — a final answer is one number,
  and a policy that pays the last of several learns to hedge. A list refuses ``In 2023, 5 came`` too: the
  completion's last number right after another number and a comma is never read as its answer;
* a digit that belongs to a name is skipped instead (``CO2``, ``x_1``, the exponent of a unit ``km/h^2``), so
  ``Answer: 12 km/h^2`` reads 12.

Two numbers are equal when their exact values are (a decimal is the rational it writes: ``0.30000000000000004``
is not 0.3, ``3.1415926`` is not 3.14159265): :func:`grae.rewards.verify.fast_compare` decides every pair of
numbers of this grammar, and math-verify's path (an expression such as ``\\sqrt{2}``) compares decimals as the
rationals they write too (:mod:`grae.rewards._math_worker`), never at math-verify's 6-decimal rounding.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: largest exponent of an integer power ``a^b`` read as a number (``2^{10}``); larger ones are refused
MAX_POWER = 64
#: largest exponent of scientific notation read (``1e400`` is refused)
MAX_EXPONENT = 400

#: what may stand between groups of three digits of one number (``1,000``, ``1\\,000``)
THOUSANDS_SEPARATORS = (",", "\\,")

_MINUS = "-\u2212"
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUP_DIGITS = str.maketrans(_SUPERSCRIPTS + "⁻", "0123456789-")
_MANTISSA = r"(?:\d{1,3}(?:(?:,|\\,)\d{3}(?!\d))+(?:\.\d{1,40})?|\d{1,40}(?:\.\d{1,40})?|\.\d{1,40})"
_EXP = rf"[+{_MINUS}]?\d{{1,3}}"
_SUP_EXP = rf"⁻?[{_SUPERSCRIPTS}]{{1,3}}"
_ATOM_RE = re.compile(
    rf"""
    (?:(?P<frac>\\[dt]?frac(?:\s*\{{\s*(?P<fnum>[+{_MINUS}]?{_MANTISSA})\s*\}}\s*\{{\s*(?P<fden>{_MANTISSA})\s*\}}
                         |(?P<fnum1>\d)(?P<fden1>\d)))
    |(?P<mant>{_MANTISSA})
     (?:/(?P<den>{_MANTISSA})
       |[eE](?P<e>{_EXP})(?![A-Za-z0-9])
       |\s*(?:\\times|\\cdot|×|·|\*)\s*10\s*(?:\^\s*(?:\{{\s*(?P<sci>{_EXP})\s*\}}|(?P<sci_bare>{_EXP}))
                                           |(?P<sci_sup>{_SUP_EXP}))
       |\s*\^\s*(?:\{{\s*(?P<pow>{_EXP})\s*\}}|(?P<pow_bare>{_EXP}))
       |(?P<pow_sup>{_SUP_EXP})
     )?)
    (?P<pct>\s*\\?%)?
    """,
    re.VERBOSE,
)
#: LaTeX that may wrap a number without changing it (``\boxed{12}``, ``\text{12}``)
_WRAPPERS = frozenset({"boxed", "fbox", "text", "textbf", "textrm", "mathrm", "mathbf", "mathit", "displaystyle",
                       "left", "right", "bigl", "bigr", "big", "Big", "underline"})
#: LaTeX that may follow a number without making it part of an expression: wrappers, units, spacing, ends
_AFTER_OK = _WRAPPERS | {"end", "quad", "qquad", "rangle", "rbrace", "newline", "mbox", "operatorname", "degree",
                         "dots", "ldots", "cdots"}
#: a degree sign written as an exponent: ``90^\circ``, ``90^{\circ}``
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ(?![A-Za-z])")
_OPERATORS = "+*/×·÷^_:" + _MINUS
_MACRO_BEFORE_RE = re.compile(r"\\([A-Za-z]+)\s*$")
_OPERATOR_MACRO_BEFORE_RE = re.compile(r"\\(?:times|cdot|div|pm|mp)\s*$")
_SCRIPT_BEFORE_RE = re.compile(r"[_^]\s*\{?\s*$")
#: a digit run split by what is not a thousands separator: spaces of any width, an apostrophe, zero-width
#: characters, LaTeX spacing (``\\,`` between groups of three is read as one number before this is asked)
_SPLIT_BEFORE_RE = re.compile(r"\d(?:[ \t\u00a0\u2007\u2009\u202f'\u2019\u200b\u200c\u200d\u2060\ufeff~]|\\[,;:! ])+$")
#: a hedge word right before a number: ``4 or 5``, ``5, not 6``, ``5 (not 6)``, ``5 vs 6``
_HEDGE_BEFORE_RE = re.compile(r"(?i)(?<![A-Za-z\\])(?:or|nor|not|vs|versus)\.?[\s(\[$*]*$")
#: ``and`` right before a number (a list when another number precedes it in the sentence: ``5 dollars and 50 cents``)
_AND_BEFORE_RE = re.compile(r"(?i)(?<![A-Za-z\\])and[\s(\[$*]*$")
#: a number (not a name's digit: ``CO2, 3``), a comma or semicolon, then the number: ``3, 5``, ``\\frac{1}{2}; 3``
_LIST_BEFORE_RE = re.compile(r"(?<![A-Za-z0-9_^.])\.?\d[\d.]*[\s$*)\]}]*[,;][\s$*(\[{]*$")
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s)|\n")
#: a hedge right after a number: ``5 or 6``, ``5, or so``, ``5 or more``
_HEDGE_AFTER_RE = re.compile(r"(?i)[\s$*)\]}]*,?\s*(?:or|nor)(?![A-Za-z])")
#: what makes the number before it part of something else: a factorial, a vulgar fraction (``5½``), a superscript
#: exponent past :data:`MAX_POWER`'s three digits, a zero-width character or apostrophe before more digits
_CHANGES_AFTER = "!¼½¾⅐⅑⅒⅓⅔⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞" + _SUPERSCRIPTS + "⁻"
#: a number joined to letters and digits: ``0x10``, ``0xff``, ``5x3``
_JOINED_AFTER_RE = re.compile(r"[A-Za-z]+\d|[xX][0-9A-Fa-f]|[\u200b\u200c\u200d\u2060\ufeff'\u2019]\d")


def _mantissa(text: str) -> Fraction:
    return Fraction(text.replace("\\,", "").replace(",", "").replace("\u2212", "-"))


def _int(text: str) -> int:
    return int(text.replace("\u2212", "-").translate(_SUP_DIGITS))


def atom_value(m: re.Match[str]) -> Fraction | None:
    """The value of one :data:`_ATOM_RE` match (unsigned), None when it is not a finite number (``1/0``, a power or
    exponent past its bound)."""
    if m.group("frac"):
        num, den = (m.group("fnum"), m.group("fden")) if m.group("fnum") else (m.group("fnum1"), m.group("fden1"))
        d = _mantissa(den)
        return _mantissa(num) / d if d else None
    value = _mantissa(m.group("mant"))
    if m.group("den"):
        d = _mantissa(m.group("den"))
        return value / d if d else None
    exponent = m.group("e") or m.group("sci") or m.group("sci_bare") or m.group("sci_sup")
    if exponent is not None:
        k = _int(exponent)
        return value * Fraction(10) ** k if abs(k) <= MAX_EXPONENT else None
    power = m.group("pow") or m.group("pow_bare") or m.group("pow_sup")
    if power is not None:
        k = _int(power)
        if abs(k) > MAX_POWER or (value == 0 and k < 0):
            return None
        return value**k
    return value


def _sign_before(text: str, start: int) -> tuple[int, int]:
    """``(sign, start of the signed number)``: the sign written right before ``text[start]`` when it is a sign
    (``-12``, ``x = -12``, ``is -12``, ``**-12**``) and not a binary minus (``10-12``, ``x - 12``)."""
    if start == 0 or text[start - 1] not in "+" + _MINUS:
        return 1, start
    before = text[start - 2] if start >= 2 else " "
    if before.isalnum() or before in ")]}!%.'":
        return 1, start  # 10-12, x-12: an operator
    return (-1 if text[start - 1] in _MINUS else 1), start - 1


def _operand_ending(ch: str) -> bool:
    return len(ch) == 1 and (ch.isalnum() or ch in ")]}!%")


def _context_before(before: str) -> str:
    """``_context`` from the text before the (signed) number."""
    if _SPLIT_BEFORE_RE.search(before) or _hedge_before(before):
        return "expression"  # 1 000, 1'000, 4 or 5, 3, 5
    if before[-1:].isalpha():
        return "expression" if _MACRO_BEFORE_RE.search(before) else "name"  # \sqrt2 vs CO2, h2
    script = _SCRIPT_BEFORE_RE.search(before)
    if script:  # an exponent or subscript: of a name or unit (km/h^2, x_1), or of an expression ((a+b)^2, \pi^2)
        base = before[:script.start()]
        return "name" if base[-1:].isalpha() and not _MACRO_BEFORE_RE.search(base) else "expression"
    stripped = before.rstrip()
    if stripped.endswith("{"):
        head = stripped[:-1].rstrip()
        macro = _MACRO_BEFORE_RE.search(head)
        if head.endswith("}") or (macro and macro.group(1) not in _WRAPPERS):
            return "expression"  # \frac{a}{2}, \sqrt{2}
        return "number"
    if before.endswith(",") and before[-2:-1].isdigit():
        return "expression"  # 1,2345 or 1,2,3: not one number
    if _OPERATOR_MACRO_BEFORE_RE.search(stripped):
        return "expression"  # 3 \times 4
    if stripped.endswith("("):
        head = stripped[:-1]
        left = head.rstrip()
        if (left[-1:] in _OPERATORS and left[-1:] and not left.endswith("**")) or _operand_ending(head[-1:]):
            return "expression"  # -(-5), 2(5), f(5)
    op, left = stripped[-1:], stripped[:-1].rstrip()
    if op and op in _OPERATORS and _operand_ending(left[-1:]):
        if op == ":" and not left[-1].isdigit():
            return "number"  # "Answer: 12" (12:30 and 3:2 are not)
        if op == "*" and left.endswith("*"):
            return "number"  # markdown bold "**12**"
        return "expression"  # 10 - 12, 3 * 4, x/2
    return "number"


def _context_after(after: str) -> str:
    """``_context`` from the text after the number."""
    if after[:1] in _CHANGES_AFTER and after[:1] or _JOINED_AFTER_RE.match(after) or _HEDGE_AFTER_RE.match(after):
        return "expression"  # 5!, 5½, 0x10, 5 or 6
    rest = after.lstrip()
    if _DEGREE_RE.match(rest):
        return "number"  # 90^\circ
    if rest[:1] in ("^", "√", "π", "/", "×", "·", "÷") or (rest[:1] == "*" and rest[:2] != "**"):
        return "expression"  # 2^x, 2π, 12/x, 3 * x
    macro = re.match(r"\\([A-Za-z]+)", rest)
    if macro and macro.group(1) not in _AFTER_OK:
        return "expression"  # 3\sqrt{2}, 2\pi, 2 \times x
    return "number"


def _hedge_before(before: str) -> bool:
    """Whether the text before a number makes it one item of a hedge or a list (see the module docstring)."""
    if _HEDGE_BEFORE_RE.search(before) or _LIST_BEFORE_RE.search(before):
        return True
    if not _AND_BEFORE_RE.search(before):
        return False
    sentence = _SENTENCE_END_RE.split(before)[-1]
    return any(ch.isdigit() for ch in sentence)


def _context(text: str, start: int, end: int) -> str:
    """How the number at ``text[start:end]`` (its sign included) stands in ``text``: ``"number"`` (the answer may be
    it), ``"name"`` (a digit of a name or a unit's exponent: skip it), ``"expression"`` (part of a larger
    expression: the text's last number is not its answer)."""
    before = _context_before(text[max(0, start - 64):start])
    return before if before != "number" else _context_after(text[end:end + 64])


def read_number(s: str) -> Fraction | None:
    """The value of ``s`` when the whole of it (outer whitespace aside) is one number of the grammar above
    (``"-1.5e-3"``, ``"\\frac{1}{2}"``, ``"50\\%"``, ``"1,234"``); None otherwise."""
    s = s.strip()
    sign = 1
    if s and s[0] in "+" + _MINUS:
        sign, s = (-1 if s[0] in _MINUS else 1), s[1:].lstrip()
    m = _ATOM_RE.fullmatch(s)
    if m is None:
        return None
    value = atom_value(m)
    return None if value is None else sign * value


def last_number(text: str) -> str | None:
    """The last number of ``text`` as written (sign included, thousands separators dropped, ``−`` as ``-``), or
    None when the text has none or its last number is part of an expression (see the module docstring)."""
    matches = list(_ATOM_RE.finditer(text))
    for m in reversed(matches):
        if m.start() > 0 and text[m.start() - 1] in ".0123456789" and not m.group("frac"):
            return None  # the tail of a token no number is: 1.2.3, more than 40 digits
        sign, start = _sign_before(text, m.start())
        kind = _context(text, start, m.end())
        if kind == "name":
            continue
        if kind == "expression" or atom_value(m) is None:
            return None
        written = m.group().replace("\\,", "").replace(",", "") if not m.group("frac") else m.group()
        return ("-" if sign < 0 else "") + written.strip()
    return None
