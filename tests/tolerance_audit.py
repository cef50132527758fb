"""Finds the float comparisons in test sources whose absolute tolerance is fixed and unexplained.

A fixed absolute tolerance means the same thing on every CPU and thread count only when the compared values
have a known, small scale (probabilities in float64, exact rationals, order-1 closed forms, rounded values). Any
other comparison must scale with the values compared. :func:`audit_source` reports every comparison that does
neither, so ``tests/test_tolerance_audit.py`` fails listing each ``file:line``.

What counts as a comparison with a fixed absolute tolerance (a *hit*):

* a call given ``atol=`` / ``abs=`` / ``abs_tol=`` whose value is a literal, a name or any expression that does
  not multiply by a magnitude (``torch.allclose``, ``torch.testing.assert_close``, ``np.allclose``,
  ``np.testing.assert_allclose``, ``pytest.approx``, ``math.isclose``, or any helper taking those keywords).
  ``atol=0`` is no tolerance (the comparison is rtol-only or exact);
* a call whose *default* atol is fixed and nonzero, given none: ``torch.allclose`` / ``torch.isclose`` /
  ``np.allclose`` / ``np.isclose`` (atol 1e-8) and ``torch.testing.assert_close`` (1e-5 in float32, 1e-7 in
  float64). Defaults that are 0 or only a floor at exactly 0 are rtol-only and not hits:
  ``np.testing.assert_allclose`` (atol 0), ``math.isclose`` (abs_tol 0), ``pytest.approx`` (rel 1e-6; its
  1e-12 abs only matters where the expected value is 0, where it asks for exactness);
* inside an ``assert``, an order comparison (``<``, ``<=``, or mirrored ``>``, ``>=``) of an absolute
  difference with a bound: ``abs(a - b) < 1e-6``, ``(a - b).abs().max() < tol``, ``torch.norm(a - b) <= eps``,
  ``np.max(np.abs(a - b)) < 1e-9`` (an ``abs``/``fabs``/``norm`` of an expression containing a subtraction).

A hit is *scale-relative*, hence fine, when its tolerance multiplies by a magnitude: the tolerance expression
contains a ``*`` one of whose operands is neither a number nor an ALL_CAPS constant (``atol=1e-6 * scale``,
``abs=1e-9 * max(1.0, abs(x))``, ``< 1e-5 * ref.abs().max()``). Calls of ``assert_close_scaled`` are never hits.

Otherwise a hit needs a reason comment ``# tol: <why this fixed tolerance means the same on every CPU>``:

* on any line of the comparison itself (a multi-line call may carry it on any of its lines), or
* on a comment-only line directly above the statement holding it; such a comment covers the block of
  consecutive non-blank lines below it, so one comment explains a run of comparisons, or
* on the line assigning the name used as the tolerance (``ATOL = 1e-9  # tol: ...`` then ``atol=ATOL``; the
  assignment must be in the same file).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

TOL_COMMENT = re.compile(r"#\s*tol:\s*\S")
TOLERANCE_KEYWORDS = ("atol", "abs", "abs_tol")
# Callees (the last attribute name) whose default atol is fixed and nonzero.
DEFAULT_FIXED_ATOL = {"allclose": ("torch", "np", "numpy"), "isclose": ("torch", "np", "numpy"),
                      "assert_close": ("testing",)}
ABS_FUNCTIONS = {"abs", "fabs", "norm"}
SCALED_HELPERS = {"assert_close_scaled"}


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _callee(call: ast.Call) -> tuple[str, str]:
    """(the callee's last name, the name right before it): ``torch.testing.assert_close`` -> ("assert_close",
    "testing")."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id, ""
    if isinstance(func, ast.Attribute):
        owner = func.value
        before = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        return func.attr, before
    return "", ""


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand)
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def _is_constant_name(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(name) and name.upper() == name and any(c.isalpha() for c in name)


def is_scaled(tolerance: ast.AST) -> bool:
    """The tolerance multiplies by something that is neither a number nor an ALL_CAPS constant."""
    for node in ast.walk(tolerance):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if any(not _is_number(side) and not _is_constant_name(side) for side in (node.left, node.right)):
                return True
    return False


def _is_absolute_value(node: ast.AST) -> bool:
    """``node`` contains an ``abs``/``fabs``/``norm`` of something: ``abs(a - b)``, ``(a - b).abs().max()``,
    ``np.abs(x).max()``, ``torch.linalg.norm(a - b)`` (a deviation from 0 is a difference from 0)."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and _callee(call)[0] in ABS_FUNCTIONS:
            if call.args or isinstance(call.func, ast.Attribute) and not isinstance(call.func.value, ast.Name):
                return True
    return False


def _is_range_bound(node: ast.AST) -> bool:
    """A constant bound of 1 or more (``abs(x) < 2 ** 63``) checks a range, not a float tolerance."""
    if not all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)) for n in ast.walk(node)):
        return False
    try:
        return abs(eval(compile(ast.Expression(node), "<bound>", "eval"), {"__builtins__": {}})) >= 1
    except Exception:  # noqa: BLE001 - not a number: not a range bound
        return False


def _tolerance_hits(tree: ast.AST) -> list[tuple[ast.AST, ast.AST | None, str]]:
    """(the comparison node, its tolerance expression or None for a default, a description) for every hit
    before the scaled/commented check."""
    found: list[tuple[ast.AST, ast.AST | None, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name, before = _callee(node)
            if name in SCALED_HELPERS:
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            given = [k for k in TOLERANCE_KEYWORDS if k in keywords]
            for key in given:
                if not _is_zero(keywords[key]):
                    found.append((node, keywords[key], f"{name}({key}={ast.unparse(keywords[key])})"))
            passes_kwargs = any(k.arg is None for k in node.keywords)  # **options: can't tell
            if not given and not passes_kwargs and before in DEFAULT_FIXED_ATOL.get(name, ()):
                found.append((node, None, f"{before}.{name} with its default (fixed) atol"))
        elif isinstance(node, ast.Assert):
            for compare in ast.walk(node.test):
                if not isinstance(compare, ast.Compare):
                    continue
                left = compare.left
                for op, right in zip(compare.ops, compare.comparators):
                    if isinstance(op, (ast.Lt, ast.LtE)) and _is_absolute_value(left) and not _is_range_bound(right):
                        found.append((compare, right, f"{ast.unparse(left)} bounded by {ast.unparse(right)}"))
                    elif isinstance(op, (ast.Gt, ast.GtE)) and _is_absolute_value(right) and not _is_range_bound(left):
                        found.append((compare, left, f"{ast.unparse(right)} bounded by {ast.unparse(left)}"))
                    left = right
    return found


def _statement_starts(tree: ast.AST) -> dict[int, int]:
    """Each line of a simple statement -> the statement's first line (compound statements map their header)."""
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            end = node.end_lineno or node.lineno
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If,
                                 ast.With, ast.Try)):
                end = node.body[0].lineno - 1 if node.body else end
            for line in range(node.lineno, end + 1):
                starts[line] = max(starts.get(line, 0), node.lineno)  # the innermost statement wins
    return starts


def _commented_names(tree: ast.AST, lines: list[str]) -> set[str]:
    """Names assigned on a line carrying a ``# tol:`` comment."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                TOL_COMMENT.search(lines[i - 1]) for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _block_comment_covers(lines: list[str], statement_line: int) -> bool:
    """A comment-only ``# tol:`` line sits above ``statement_line`` with only non-blank lines between."""
    i = statement_line - 1  # the line above, 1-based
    while i >= 1 and lines[i - 1].strip():
        text = lines[i - 1].strip()
        if text.startswith("#") and TOL_COMMENT.search(text):
            return True
        i -= 1
    return False


def audit_source(source: str, path: str = "<string>") -> list[Hit]:
    """Every unexplained fixed absolute tolerance in ``source``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    starts = _statement_starts(tree)
    commented = _commented_names(tree, lines)
    hits = []
    for node, tolerance, what in _tolerance_hits(tree):
        if tolerance is not None and is_scaled(tolerance):
            continue
        if isinstance(tolerance, ast.Name) and tolerance.id in commented:
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        if any(TOL_COMMENT.search(lines[i - 1]) for i in range(first, last + 1)):
            continue
        statement = starts.get(first, first)
        if any(TOL_COMMENT.search(lines[i - 1]) for i in range(statement, first)):
            continue
        if _block_comment_covers(lines, statement):
            continue
        hits.append(Hit(path, node.lineno, what))
    return sorted(set(hits), key=lambda h: h.line)


def audit_tree(root: Path) -> list[Hit]:
    """Every unexplained fixed absolute tolerance in the ``*.py`` files under ``root``."""
    hits: list[Hit] = []
    for file in sorted(root.rglob("*.py")):
        hits.extend(audit_source(file.read_text(), str(file.relative_to(root.parent))))
    return hits
