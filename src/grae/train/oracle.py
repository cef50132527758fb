"""The base's format-only oracle in ``grae train``'s held-out table, and the line under the table that weighs
the trained model against it.

A gain in held-out pass@1 can be RL teaching the task, or RL deleting a wrong output mode the base already had
(the shipped tiny model's ``~`` guess mode on chain_sum). The **format-only oracle** (:func:`grae.eval.exact.
reference_counts`) is the base with every answer outside the task's enumerated answer format removed and the rest
renormalised, ``p / mass`` per problem: what deleting the format alone would give, with no training. A trained
model that does not beat it has learnt the format fix, not the task.

It is computed from the base's exact rows (:func:`grae.eval.runner.evaluate_exact`, the code path of
``grae eval --exact``) on the run's held-out problems at its ``eval.temperature``, ``top_p`` and
``max_tokens``, pass@k up to ``eval.n``: once, before training, into ``eval/before_exact.jsonl`` with its sidecar
(what the rows are of: the base's weights and those settings). A ``--resume`` reuses rows of the same weights and
settings. Only where the task has a finite answer set (:func:`grae.eval.exact.exact_by` is ``answer_set``:
chain_sum, count_shapes, bar_value) with text prompts: a one-gold task (chain_trace) has no format to renormalise
to. ``eval.oracle: false`` turns it off; an evaluation estimated above ``eval.oracle_max_seconds`` is skipped
with one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grae.eval.stats import Estimate, ProblemCounts

#: the base's exact rows, beside ``before.jsonl``
ORACLE_FILE = "before_exact.jsonl"
#: the held-out table's name for the oracle (the name of :func:`grae.eval.exact.reference_counts`)
ORACLE = "format-only oracle"
#: the sidecar settings two row files must share for the oracle to stand beside the base's sampled rows
SHARED_SETTINGS = ("identity", "temperature", "top_p", "max_tokens")


class _TooSlow(Exception):
    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds


def skip_reason(cfg, task: Any, heldout: Sequence[dict[str, Any]]) -> str | None:
    """Why the run gets no format-only oracle: ``""`` where there is none to compute (``eval.oracle: false``, no
    held-out problems, a task without a finite answer set), a note where the task has one but it cannot be
    computed here; None: it is computed."""
    from grae.eval.exact import BY_ANSWER_SET, DEFAULT_EXACT_MAX_CANDIDATES, ExactError, exact_by

    if not (cfg.eval.enabled and cfg.eval.oracle and heldout):
        return ""
    try:
        if exact_by(task) != BY_ANSWER_SET:
            return ""
    except ExactError:
        return ""
    if any(example.get("image") is not None for example in heldout):
        return "the exact evaluation supports text prompts only"
    if cfg.eval.temperature <= 0:
        return "eval.temperature 0 (greedy) has no sampling distribution to enumerate"
    candidates = len(task.answer_set())
    if candidates > DEFAULT_EXACT_MAX_CANDIDATES:
        return (f"{candidates:,} candidate answers per problem, more than grae eval --exact takes "
                f"({DEFAULT_EXACT_MAX_CANDIDATES:,})")
    return None


def exact_settings(cfg, identity: str) -> dict[str, Any]:
    """What the base's exact rows are of (their sidecar), as :func:`grae.train.run.evaluate_heldout` records an
    exact evaluation."""
    e = cfg.eval
    return {"identity": identity, "temperature": e.temperature, "top_p": e.top_p, "max_tokens": e.max_tokens,
            "seed": e.seed, "exact": True, "backend": "hf"}


def _reusable(path: Path, settings: dict[str, Any], heldout: Sequence[dict[str, Any]], k_max: int) -> bool:
    """``path`` holds exact rows of ``settings`` for every problem of ``heldout``, up to pass@``k_max``."""
    from grae.eval.records import RecordsError, iter_rows
    from grae.eval.runner import settings_path, stale_reason
    from grae.eval.stats import count_problems

    if not (path.is_file() and settings_path(path).is_file()) or stale_reason(path, settings):
        return False
    try:
        counts = count_problems(iter_rows(path), question_ids=[str(e["question_id"]) for e in heldout])
    except (OSError, RecordsError, ValueError):
        return False
    return counts.exact and not counts.dropped and int(counts.n.min()) >= k_max


def base_oracle(cfg, model, processing, heldout: Sequence[dict[str, Any]], task: Any, out: Path,
                log: Callable[[str], None], identity: Callable[[], str], progress=None) -> Path | None:
    """The base's exact rows in ``out/eval/``:data:`ORACLE_FILE` (computed, or reused from an earlier process of
    the run), or None where the run has no oracle (:func:`skip_reason`; rows left there by another
    configuration are removed, so the table shows what this one asks). Says what it computed in one line."""
    from grae.eval.exact import ExactError, reference_counts
    from grae.eval.records import read_rows
    from grae.eval.runner import discard_rows, evaluate_exact
    from grae.eval.stats import count_problems, passk_estimates
    from grae.metrics import powers_of_two

    path = out / "eval" / ORACLE_FILE
    reason = skip_reason(cfg, task, heldout)
    if reason is not None:
        discard_rows(path)
        if reason:
            log(f"format-only oracle: not computed ({reason})")
        return None
    settings = exact_settings(cfg, identity())
    reused = _reusable(path, settings, heldout, cfg.eval.n)
    seconds = None
    if not reused:
        limit = cfg.eval.oracle_max_seconds

        def guard(expected: float) -> None:
            if limit is not None and expected > limit:
                raise _TooSlow(expected)

        try:
            result = evaluate_exact(model, processing, heldout, task, k_max=cfg.eval.n, output_path=path,
                                    seed=cfg.eval.seed, progress=progress, settings=settings, estimate=guard)
        except _TooSlow as slow:
            discard_rows(path)
            log(f"format-only oracle: not computed (the base's exact evaluation would take about {slow.seconds:.0f} s, "
                f"more than eval.oracle_max_seconds = {limit:g}; null lifts the limit)")
            return None
        except ExactError as err:  # a task's answer set the base cannot be scored on: the run trains without it
            discard_rows(path)
            log(f"format-only oracle: not computed ({err})")
            return None
        seconds = result.seconds
    rows = read_rows(path)
    oracle = reference_counts(count_problems(rows, question_ids=[str(e["question_id"]) for e in heldout]), rows)[ORACLE]
    values = passk_estimates(oracle, powers_of_two(cfg.eval.n), bootstrap=0)
    log(f"{ORACLE} (the base's exact rows, {path.name}{', reused' if reused else ''}): "
        + "  ".join(f"pass@{k}={e.value:.3f}" for k, e in values.items())
        + (f"  ({seconds:.0f}s)" if seconds is not None else ""))
    return path


def oracle_counts(out: Path, base: ProblemCounts) -> ProblemCounts | None:
    """The format-only oracle of the run in ``out`` on ``base``'s problems (in their order), from its exact rows;
    None where there are none, they are a one-gold task's, or they are not of the weights and settings of the
    base's sampled rows (``eval/before.jsonl``'s sidecar) or miss one of its problems."""
    import json

    from grae.eval.exact import reference_counts
    from grae.eval.records import RecordsError, read_rows
    from grae.eval.runner import settings_path
    from grae.eval.stats import count_problems

    path, sampled = out / "eval" / ORACLE_FILE, out / "eval" / "before.jsonl"
    if not (path.is_file() and sampled.is_file()):
        return None
    try:
        exact, before = (json.loads(settings_path(p).read_text()) for p in (path, sampled))
        if any(exact.get(key) != before.get(key) for key in SHARED_SETTINGS):
            return None
        rows = read_rows(path)
        oracle = reference_counts(count_problems(rows), rows).get(ORACLE)
        if oracle is None or not set(base.question_ids) <= set(oracle.question_ids):
            return None
        return oracle.subset(base.question_ids)
    except (OSError, RecordsError, ValueError, AttributeError):
        return None


def _pct(value: float, signed: bool = False) -> str:
    return ("{:+.1f}" if signed else "{:.1f}").format(100 * value)


def cell(estimate: Estimate, signed: bool = False) -> str:
    """``12.5 [0.0, 37.5]``, ``+12.5 [-12.5, +37.5]`` for a change, ``0.0 [0.0, 31.2] (n=8)`` where the interval
    rests on n alone; the bare value where no interval is known."""
    fmt = "{:+.1f}" if signed else "{:.1f}"
    value = fmt.format(100 * estimate.value)
    if estimate.lo != estimate.lo:  # NaN: no rows on disk
        return value
    interval = f"{value} [{fmt.format(100 * estimate.lo)}, {fmt.format(100 * estimate.hi)}]"
    return interval + (f" (n={estimate.n_eff})" if estimate.n_eff is not None else "")


def oracle_sentence(trained: Estimate, oracle: Estimate, versus: Estimate | None = None, *,
                    base: Estimate | None = None, k: int = 1) -> str:
    """The line under the held-out table: the trained model's pass@``k`` against the format-only oracle's.

    Within the oracle's interval or below it: the gain is the format fix, said plainly with the oracle's score
    (and, where the trained model is no better than the ``base``, that there is no gain). Above it: by how much
    it exceeds the oracle, with ``versus`` (trained − oracle paired by problem) where given."""
    top = oracle.hi if oracle.hi == oracle.hi else oracle.value  # NaN: no interval, the value itself
    low = oracle.lo if oracle.lo == oracle.lo else oracle.value
    theirs = f"the trained model's pass@{k} {_pct(trained.value)}"
    if trained.value <= top:
        where = "lies below" if trained.value < low else "lies within"
        gained = base is None or trained.value > base.value
        fix = ("this gain is the format fix: the base with its wrong output mode removed already scores "
               if gained else f"there is no gain over the base ({_pct(base.value)}), and the base with its wrong "
                                "output mode removed already scores ")
        return (f"Format-only oracle: {theirs} {where} the oracle's interval ({cell(oracle)}): {fix}"
                f"{_pct(oracle.value)}, with no training.")
    by = _pct(trained.value - oracle.value, signed=True) if versus is None else cell(versus, signed=True)
    paired = "" if versus is None else ", paired by problem"
    return (f"Format-only oracle: {theirs} exceeds the oracle's {cell(oracle)} (the base with its wrong output mode "
            f"removed, no training) by {by} points{paired}: more than the format fix.")
