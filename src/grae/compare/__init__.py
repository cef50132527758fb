"""``grae compare``: grids of ``grae train`` jobs (methods × seeds), multi-seed statistics, a report.

* :mod:`grae.compare.grid` — the compare config and its expansion into jobs.
* :mod:`grae.compare.runner` — runs jobs as ``grae train`` subprocesses, skipping finished ones.
* :mod:`grae.compare.stats` — the crossed seeds × problems interval, paired differences, Holm.
* :mod:`grae.compare.results` — a study's results gathered once into one table (``summary.json`` → ``results``).
* :mod:`grae.compare.report` — report.md, summary.json and PNG plots rendered from that table
  (its sections: :mod:`grae.compare.report_header`, :mod:`grae.compare.report_budget`,
  :mod:`grae.compare.report_tables`, :mod:`grae.compare.training` for the training logs and
  :mod:`grae.compare.frontier` for the frontier).
"""

from grae.compare.grid import CompareConfig, Job, load_compare_config
from grae.compare.runner import run_jobs
from grae.compare.stats import method_passk, paired_vs_baseline

__all__ = ["CompareConfig", "Job", "load_compare_config", "method_passk", "paired_vs_baseline", "run_jobs"]
