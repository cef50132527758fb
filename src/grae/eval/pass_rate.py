"""A base model's pass rate on each problem of a pool of training problems, and the competence band they fall in
(``grae data band``; the file and its task: :mod:`grae.data.band`).

Two ways to measure it:

* **exact** (tasks whose correct answer is one completion: ``chain_trace``, answer-set tasks such as ``chain_sum``):
  the teacher-forced probability of the gold completion at temperature T, top_p (:func:`grae.eval.gold.gold_probs`);
  no sampling variance;
* **sampled** (any task): ``n`` samples per problem at T, top_p, scored by the task's verifier; the pass rate is
  ``correct / n`` and the file carries its 95 % Wilson interval.

A problem is kept when its pass rate lies in ``[lo, hi]``. The pool is the first ``pool`` problems of the task's
training stream for ``pool_seed`` (``task.train(pool, seed)``), never its held-out split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BandSettings:
    """How a band is scored: ``n`` None = exact."""

    lo: float = 0.15
    hi: float = 0.85
    n: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    seed: int = 0
    batch_size: int = 64

    @property
    def method(self) -> str:
        return "exact" if self.n is None else "sampled"


def pool_pass_rates(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any, settings: BandSettings,
                    ) -> tuple[list[float], list[int] | None]:
    """``(rates, correct)``: each example's pass rate (rounded, :func:`grae.data.band.rounded`) and, sampled, its
    number of correct samples of ``settings.n`` (None when exact)."""
    from grae.data.band import rounded

    if settings.n is None:
        from .gold import gold_probs

        p = gold_probs(model, tokenizer, examples, task, temperature=settings.temperature, top_p=settings.top_p,
                       max_tokens=settings.max_tokens, batch=settings.batch_size)
        return [rounded(float(v)) for v in p], None
    from .runner import evaluate

    result = evaluate(model, tokenizer, examples, task, n=settings.n, temperature=settings.temperature,
                      top_p=settings.top_p, max_tokens=settings.max_tokens, batch_size=max(settings.batch_size,
                                                                                            settings.n),
                      seed=settings.seed)
    by_id = dict(zip(result.counts.question_ids, result.counts.c))
    correct = [int(round(float(by_id[str(e["question_id"])]))) for e in examples]
    return [rounded(c / settings.n) for c in correct], correct


def score_band(model_name: str, task_name: str, params: Mapping[str, Any], *, pool: int, pool_seed: int,
               settings: BandSettings, device: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, rows)`` of the band file of ``model_name`` on the first ``pool`` training problems of the task
    for ``pool_seed`` (module docstring; :func:`grae.data.band.write_band` writes them)."""
    from grae.data import get_task
    from grae.data.band import band_counts, band_rows, check_band, rounded

    from .backends import load_hf, resolve_model_path
    from .gold import check_gold_task
    from .identity import model_identity

    check_band(settings.lo, settings.hi)
    if pool < 1:
        raise ValueError(f"--pool: must be >= 1, got {pool}")
    if settings.n is not None and settings.n < 1:
        raise ValueError(f"--n: must be >= 1 samples per problem, got {settings.n}")
    task = get_task(task_name, **params)
    if settings.n is None:
        check_gold_task(task)
    examples = task.train(pool, seed=pool_seed)
    if any(e.get("image") is not None for e in examples):
        raise ValueError(f"task {task_name!r} has images: grae data band scores text tasks only for now")
    model, tokenizer, _ = load_hf(model_name, device=device, dtype="float32")
    rates, correct = pool_pass_rates(model, tokenizer, examples, task, settings)
    path = resolve_model_path(model_name)
    header = {"task": task_name, "params": dict(params), "pool": pool, "pool_seed": pool_seed,
              "model": model_name, "model_identity": model_identity(model_name, path, model),
              "method": settings.method, "n": settings.n, "temperature": settings.temperature,
              "top_p": settings.top_p, "max_tokens": settings.max_tokens, "sample_seed": settings.seed,
              "lo": settings.lo, "hi": settings.hi, "counts": band_counts(rates, settings.lo, settings.hi),
              "mean_pass_rate": rounded(float(np.mean(rates)))}
    rows = band_rows(examples, rates, settings.lo, settings.hi, correct, settings.n)
    header["informative_groups_g8"] = {"pool": rounded(informative_share(rates)),
                                       "kept": rounded(informative_share([r["pass_rate"] for r in rows])) if rows else None}
    return header, rows


def informative_share(rates: Sequence[float], group: int = 8) -> float:
    """Expected share of groups of ``group`` samples with reward variance (not all alike), the mean of
    ``1 − p^G − (1 − p)^G`` over ``rates``: what a GRPO step at G = ``group`` would see (nan for no rates)."""
    p = np.asarray(rates, dtype=float)
    return float(np.mean(1 - p**group - (1 - p) ** group)) if len(p) else float("nan")


def band_summary(header: Mapping[str, Any], path: str | Path) -> str:
    """One line for the console: what was kept and how it was measured."""
    c = header["counts"]
    how = "exact (teacher-forced gold)" if header["method"] == "exact" else f"sampled, n = {header['n']} (Wilson 95 %)"
    return (f"kept {c['kept']} of {c['pool']} problems with pass rate in [{header['lo']:g}, {header['hi']:g}] "
            f"({c['below']} below, {c['above']} above; {how}, T = {header['temperature']:g}) -> {path}")
