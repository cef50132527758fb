"""Extra tables for the R2 gate report (studies/reports/gate): per-stratum pass@k, the format mass, and
the near-miss guesser, from a finished `grae compare studies/gate_cpu.yaml`.

    python studies/gate_extras.py runs/studies/gate_cpu > /tmp/gate_extras.md

- pass@1 / pass@256 per difficulty stratum (num_terms, num_digits) for the base and each method (mean over
  seeds; sampled n = 256, unbiased estimator);
- the share of samples outside the answer format (not a plain integer): the mass a format-only oracle
  would delete (the base's, and each method's);
- the near-miss guesser, uniform on answer ± w (2w + 1 integers, no arithmetic): exact closed form
  pass@k = 1 − (1 − 1/(2w + 1))^k for every problem.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from grae.data import get_task
from grae.eval.records import read_rows
from grae.eval.stats import count_problems, per_problem_passk
from grae.yaml_io import load_yaml

PLAIN = re.compile(r"^\s*-?\d+\s*$")


def strata_table(task, runs: dict[str, list[Path]], ks=(1, 256)) -> list[str]:
    heldout = {e["question_id"]: task.stratum(e) for e in task.heldout()}
    strata = sorted(set(heldout.values()))
    lines = ["| model | " + " | ".join(f"{t} terms × {d} digit{'s' * (d > 1)}" for t, d in strata) + " |",
             "|---|" + "---|" * len(strata)]
    for name, paths in runs.items():
        per = defaultdict(list)  # stratum -> [seeds x problems, ks]
        for path in paths:
            counts = count_problems(read_rows(path))
            values = per_problem_passk(counts, ks)
            for q, v in zip(counts.question_ids, values):
                per[heldout[q]].append(v)
        cells = [" / ".join(f"{100 * np.mean([v[i] for v in per[s]]):.1f}" for i in range(len(ks))) for s in strata]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def format_mass(paths: list[Path]) -> float:
    total = plain = 0
    for path in paths:
        for row in read_rows(path):
            total += 1
            plain += bool(PLAIN.match(row.get("response", "")))
    return 1 - plain / total


def main(out: str) -> None:
    out = Path(out)
    jobs = sorted(out.glob("jobs/*/seed*"))
    job_cfg = load_yaml((jobs[0] / "job.yaml").read_text())
    task = get_task(job_cfg["task"]["name"], **job_cfg["task"]["params"])
    runs: dict[str, list[Path]] = {"base model": [out / "base" / "before.jsonl"]}
    for job in jobs:
        if (job / "eval" / "summary.json").exists():
            runs.setdefault(job.parent.name, []).append(job / "eval" / "after.jsonl")
    print("### pass@1 / pass@256 by difficulty stratum (%, mean over seeds; sampled n = 256)\n")
    print("\n".join(strata_table(task, runs)) + "\n")
    print("### Mass outside the answer format (share of samples that are not a plain integer)\n")
    print("| model | outside the format |\n|---|---|")
    for name, paths in runs.items():
        print(f"| {name} | {100 * format_mass(paths):.2f}% |")
    print("\n### Near-miss guesser, uniform on answer ± w (exact, closed form)\n")
    print("| w | pass@1 | pass@16 | pass@64 | pass@256 |\n|---|---|---|---|---|")
    for w in (5, 10, 20, 40):
        p = 1 / (2 * w + 1)
        print(f"| {w} | " + " | ".join(f"{100 * (1 - (1 - p) ** k):.1f}" for k in (1, 16, 64, 256)) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
