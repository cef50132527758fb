"""One evaluation's counts as JSON (``{"n", "c"}`` sampled, ``{"n", "p", "mass"}`` exact) and back, checked:
the form :mod:`grae.compare.results` (the study table) and :mod:`grae.compare.frontier` (the curves) both write."""

from __future__ import annotations

from typing import Any

import numpy as np

from grae.eval.stats import ProblemCounts


def counts_to_json(counts: ProblemCounts, problems: list[str]) -> dict[str, Any]:
    """``{"n", "c"}`` (sampled) or ``{"n", "p", "mass"}`` (exact); ``n`` one integer when every problem has
    the same; ``q`` the question ids where they differ from the table's ``problems``."""
    n = [int(v) for v in counts.n]
    out: dict[str, Any] = {} if list(counts.question_ids) == problems else {"q": list(counts.question_ids)}
    out["n"] = n[0] if n and all(v == n[0] for v in n) else n
    if counts.exact:
        out |= {"p": [float(v) for v in counts.p], "mass": [float(v) for v in counts.mass]}
    else:
        out["c"] = [int(v) for v in counts.c]
    return out


def counts_from_json(record: dict[str, Any], problems: list[str], where: str = "counts") -> ProblemCounts:
    """The counts :func:`counts_to_json` wrote, checked: a record that no evaluation can have written (a NaN or
    out-of-range ``p``, ``c`` above ``n``, lengths that differ) raises ``ValueError`` naming ``where``."""
    if not isinstance(record, dict) or "n" not in record or not ("c" in record or "p" in record and "mass" in record):
        raise ValueError(f"{where}: expected {{n, c}} (sampled) or {{n, p, mass}} (exact), got {_short(record)}")
    ids = record.get("q", problems)
    if not isinstance(ids, list) or not all(isinstance(q, str) for q in ids):
        raise ValueError(f"{where}.q: expected a list of question ids, got {_short(ids)}")
    n = _numbers(where, "n", [record["n"]] * len(ids) if _is_int(record["n"]) else record["n"], len(ids), integer=True)
    if (n < 1).any():
        raise ValueError(f"{where}.n: every problem has at least one sample, got {int(n.min())}")
    if "p" in record:
        p, mass = (_numbers(where, key, record[key], len(ids)) for key in ("p", "mass"))
        for key, values in (("p", p), ("mass", mass)):
            if ((values < 0) | (values > 1 + 1e-9)).any():
                outside = values[(values < 0) | (values > 1 + 1e-9)]
                raise ValueError(f"{where}.{key}: a probability is in [0, 1], got {float(outside[0])!r}")
        return ProblemCounts(list(ids), n, p * n, p=p, mass=mass)
    c = _numbers(where, "c", record["c"], len(ids), integer=True)
    if ((c < 0) | (c > n)).any():
        raise ValueError(f"{where}.c: correct samples are in [0, n], got c = {int(c[(c < 0) | (c > n)][0])}")
    return ProblemCounts(list(ids), n, c)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _numbers(where: str, key: str, values: Any, length: int, *, integer: bool = False) -> np.ndarray:
    """``values`` as an array of ``length`` finite numbers (integers with ``integer``), or ``ValueError``."""
    ok = isinstance(values, list) and all((_is_int(v) if integer else isinstance(v, (int, float)) and not isinstance(v, bool))
                                          for v in values)
    if not ok:
        raise ValueError(f"{where}.{key}: expected a list of {'integers' if integer else 'numbers'}, got {_short(values)}")
    if len(values) != length:
        raise ValueError(f"{where}.{key}: {len(values)} values for {length} problems")
    array = np.asarray(values, dtype=np.int64 if integer else float)
    if not integer and not np.isfinite(array).all():
        raise ValueError(f"{where}.{key}: expected finite numbers, got {float(array[~np.isfinite(array)][0])!r}")
    return array
