"""Evaluation: sample n completions per problem, verify, write resumable JSONL, report pass@k.

* :func:`evaluate` — an in-memory HF model on a list of examples (``grae train`` uses it).
* :func:`evaluate_tasks` — ``grae eval``: a model on several tasks into one directory, resumable.
* :func:`run_samples` — the same for any :class:`Sampler` (HF ``generate`` or vLLM).
* :func:`count_problems`, :func:`passk_estimates`, :func:`paired_difference` — pass@k tables with
  bootstrap intervals from rows on disk (``grae passk``).
* :func:`plot_passk_curves`, :func:`markdown_table`, :func:`write_report` — figures and tables
  (``grae report``).
* :mod:`grae.eval.benchmarks` — MATH, MATH-500, AIME 2024/2025, AMC23, GSM8K, Minerva, OlympiadBench.

pass@k itself is :mod:`grae.metrics`. Commands and file formats: ``docs/eval.md``.
"""

from .backends import HFSampler, Sampler, SamplingSettings, VLLMSampler, load_hf, make_sampler, select_backend
from .jobs import EvalError, TasksResult, evaluate_tasks
from .records import ROW_FIELDS, RecordsError, atomic_write_json, iter_rows, read_rows, repair_tail
from .report import load_curves, markdown_table, plot_passk_curves, write_report
from .runner import EvalResult, evaluate, plan_calls, run_samples
from .stats import Estimate, ProblemCounts, count_problems, paired_difference, passk_estimates

__all__ = [
    "EvalError", "EvalResult", "Estimate", "HFSampler", "ProblemCounts", "ROW_FIELDS", "RecordsError", "Sampler",
    "SamplingSettings", "TasksResult", "VLLMSampler", "atomic_write_json", "count_problems", "evaluate",
    "evaluate_tasks", "load_curves",
    "load_hf", "make_sampler", "markdown_table", "paired_difference", "passk_estimates", "plan_calls",
    "plot_passk_curves", "iter_rows", "read_rows", "repair_tail", "run_samples", "select_backend", "write_report",
]
